//! `tests/fixtures/python/allocs.py`, which allocates known sizes on known lines, checked
//! against its memory profile.

use std::collections::BTreeMap;
use std::path::Path;

use super::Decoded;

/// The bytes `allocate` allocates per round on each of its lines.
const PER_ROUND: [(i64, i64); 3] = [(13, 1_000_000), (14, 3_000_000), (15, 500_000)];

/// The heap profile at `path`, of `rounds` rounds of `allocate` called by `caller` (its name):
/// each line's `alloc_space` under `allocate`'s frame at that line, innermost (Python's view:
/// no allocator's or C frame above), within 10 % of what the line allocates (the objects'
/// headers are a few dozen bytes; a pymalloc arena that a line's small allocations happen to
/// open is 256 KiB, 2.6 % of the smallest line's 10 MB at 20 rounds).
pub fn assert_allocated_by_line(what: &str, path: &Path, rounds: i64, caller: &str) {
    let p = Decoded::load(path);
    let space = p.value_index("alloc_space");
    let mut by_line: BTreeMap<i64, i64> = BTreeMap::new();
    for sample in &p.0.sample {
        let frames = p.sample_frames(sample);
        if frames
            .first()
            .is_some_and(|f| f.0 == "allocate (allocs.py:8)")
        {
            assert_eq!(
                frames.get(1).map(|f| f.0.as_str()),
                Some(caller),
                "{what}: {frames:?}"
            );
            *by_line.entry(frames[0].2).or_default() += sample.value[space];
        }
    }
    for (line, size) in PER_ROUND {
        let expected = rounds * size;
        let allocated = by_line.get(&line).copied().unwrap_or(0);
        assert!(
            (allocated as f64 / expected as f64 - 1.0).abs() <= 0.10,
            "{what}: line {line}: {allocated} bytes allocated in the profile, {expected} by the script: {by_line:?}"
        );
    }
}
