//! `tests/fixtures/python/timed.py`, which times its own two loops, checked against its
//! profile: the Python tests run it as a program on CPython modules, the interpreter tests
//! from a componentize-py component.

use std::path::Path;

use super::self_timed::{assert_shares_as_measured, measured_shares};
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

/// `timed.py` run as the program, from `/app`: `main` called by the script's `<module>`.
pub const AS_PROGRAM: Run<'static> = Run {
    file: "/app/timed.py",
    caller: ("<module> (timed.py:1)", "/app/timed.py", 37),
};

/// `timed.py`'s run checked against its profile at `path`: each loop's share of the CPU
/// within 5 points of the share the script measured, the loops 70 % of the CPU at least, and
/// each of their samples innermost the loop (at one of its lines) → `main` (at the call's
/// line) → `run`'s caller.
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
    let cpu = p.value_index("cpu");
    let mut in_loops = [0i64; 2];
    let mut total = 0;
    for s in &p.0.sample {
        total += s.value[cpu];
        let frames = p.sample_frames(s);
        let leaf = frames.first().map(|f| &f.0);
        let Some(i) = measured.iter().position(|(name, _)| Some(name) == leaf) else {
            continue;
        };
        in_loops[i] += s.value[cpu];
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
    assert_shares_as_measured(what, &measured, &in_loops, total, 7);
}
