//! `tests/fixtures/python/timed.py`, which times its own two loops, checked against its
//! profile: the Python tests run it as a program on CPython modules, the interpreter tests
//! from a componentize-py component.

use std::path::Path;

use super::self_timed::{assert_split_as_measured, measured_shares};
use super::{stdout, Decoded};

/// How deep the stacks of the loops' samples are: the caller → `main` → the loop, or under
/// more frames that run the script.
#[derive(PartialEq)]
pub enum Depth {
    Exactly,
    AtLeast,
}

/// Where `timed.py` is, as its code objects name it, and the frame that calls its `main`.
pub struct Run<'a> {
    pub file: &'a str,
    /// Name, file and line.
    pub caller: (&'a str, &'a str, i64),
}

/// The flags and the rounds `timed.py` is recorded with. The script times itself by the wall
/// clock (`time.perf_counter`), so the profile is taken by it too, as the JavaScript tests'
/// are: a thread descheduled on a loaded machine adds the same time to both, where CPU time
/// would part them. At 4 kHz, 80 rounds give some 2,000 samples in the loops: a binomial share
/// near 0.72 has a standard deviation of 1 point, so the 5 points allowed are 5 of them (at the
/// default 1 kHz and the CPU clock, 250 samples made them 1.8, and CI failed on 0.764 against
/// 0.712).
pub const FLAGS: [&str; 4] = ["--clock", "wall", "--rate", "4000"];
pub const ROUNDS: &str = "80";

/// `timed.py` run as the program, from `/app`: `main` called by the script's `<module>`.
pub const AS_PROGRAM: Run<'static> = Run {
    file: "/app/timed.py",
    caller: ("<module> (timed.py:1)", "/app/timed.py", 37),
};

/// `timed.py`'s run (with [`FLAGS`]) checked against its profile at `path`: each loop's share
/// of the wall time within 5 points of the share the script measured, the loops 70 % of the
/// guest's CPU at least (CPU, not wall time: on a loaded machine the interpreter's start-up
/// waits on wasmspy's own start-up threads, and CPython 3.15's took 38 % of the wall time once
/// beside three busy processes, 14 % idle), and each of their samples innermost the loop (at
/// one of its lines) → `main` (at the call's line) → `run`'s caller.
pub fn assert_split_as_timed(
    what: &str,
    out: &std::process::Output,
    path: &Path,
    run: &Run<'_>,
    depth: Depth,
) {
    let measured = measured_shares(
        &stdout(out),
        &[
            ("squares", "squares (timed.py:8)"),
            ("remainders", "remainders (timed.py:15)"),
        ],
    );
    assert_eq!(measured.len(), 2, "{what}: {}", stdout(out));
    let p = Decoded::load(path);
    let (cpu, wall) = (p.value_index("cpu"), p.value_index("wall"));
    let mut in_loops = [0i64; 2];
    let (mut loops_cpu, mut total_cpu) = (0, 0);
    for s in &p.0.sample {
        total_cpu += s.value[cpu];
        let frames = p.sample_frames(s);
        let leaf = frames.first().map(|f| &f.0);
        let Some(i) = measured.iter().position(|(name, _)| Some(name) == leaf) else {
            continue;
        };
        in_loops[i] += s.value[wall];
        loops_cpu += s.value[cpu];
        // From the `def` line (called, its first instruction not run yet) to `return`.
        let (lines, call_line) = match i {
            0 => (8..=12, 26),
            _ => (15..=19, 28),
        };
        let (caller, caller_file, caller_line) = run.caller;
        let deep = match depth {
            Depth::Exactly => frames.len() == 3,
            Depth::AtLeast => frames.len() >= 3,
        };
        assert!(
            deep && lines.contains(&frames[0].2)
                && frames[1] == ("main (timed.py:22)".into(), run.file.into(), call_line)
                && frames[2] == (caller.into(), caller_file.into(), caller_line),
            "{what}: {frames:?}"
        );
    }
    assert!(
        loops_cpu * 10 >= total_cpu * 7,
        "{what}: the loops have {loops_cpu} of {total_cpu} ns of the guest's CPU"
    );
    assert_split_as_measured(what, &measured, &in_loops);
}
