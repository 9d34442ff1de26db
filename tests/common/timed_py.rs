//! `tests/fixtures/python/timed.py`, which times its own two loops, checked against its
//! profile: the Python tests run it as a program on CPython modules, the interpreter tests
//! from a componentize-py component.

use std::path::Path;

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
    caller: ("<module> (timed.py)", "/app/timed.py", 37),
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
    let measured: Vec<(String, f64)> = stdout(out)
        .lines()
        .filter_map(|l| {
            let (name, share) = l.split_once(' ')?;
            Some((format!("{name} (timed.py)"), share.parse().ok()?))
        })
        .collect();
    assert_eq!(measured.len(), 2, "{what}: {}", stdout(out));
    let p = Decoded::load(path);
    let cpu = p.value_index("cpu");
    let mut in_loops = [0i64; 2];
    let mut total = 0;
    for s in &p.0.sample {
        total += s.value[cpu];
        let frames: Vec<(String, String, i64)> = s
            .location_id
            .iter()
            .flat_map(|&l| p.source_frames(l))
            .map(|(name, file, line, _)| (name, file, line))
            .collect();
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
                && frames[1] == ("main (timed.py)".into(), run.file.into(), call_line)
                && frames[2] == (caller.into(), caller_file.into(), caller_line),
            "{what}: {frames:?}"
        );
    }
    let both: i64 = in_loops.iter().sum();
    assert!(
        both * 10 >= total * 7,
        "{what}: the loops have {both} of {total} ns of CPU"
    );
    for ((name, share), cpu) in measured.iter().zip(&in_loops) {
        let profiled = *cpu as f64 / both as f64;
        assert!(
            (profiled - share).abs() <= 0.05,
            "{what}: {name}: {profiled:.3} of the loops' CPU in the profile, {share} timed by the script"
        );
    }
}
