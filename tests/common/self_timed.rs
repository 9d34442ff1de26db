//! Programs that time their own hot functions and give each one's share of the time spent in
//! them as `NAME SHARE` lines (`timed.py`, `timed.js`): the shares read, and checked against
//! the shares their profiles give those functions.

/// The shares in `text`, each function named as the profile names it (`profile_names`: the
/// script's name, the profile's, `NAME (FILE:LINE)`).
pub fn measured_shares(text: &str, profile_names: &[(&str, &str)]) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|l| {
            let (name, share) = l.split_once(' ')?;
            let (_, named) = profile_names.iter().find(|(n, _)| *n == name)?;
            Some((named.to_string(), share.parse().ok()?))
        })
        .collect()
}

/// The profile's time in each measured function (`spent`, in `measured`'s order) against the
/// shares measured: each within 5 points of its measure, and the functions together at least
/// `tenths` tenths of the profile's `total`.
pub fn assert_shares_as_measured(
    what: &str,
    measured: &[(String, f64)],
    spent: &[i64],
    total: i64,
    tenths: i64,
) {
    let both: i64 = spent.iter().sum();
    assert!(
        both * 10 >= total * tenths,
        "{what}: the timed functions have {both} of {total} ns"
    );
    assert_split_as_measured(what, measured, spent);
}

/// Each measured function's share of the profile's time in them all (`spent`, in `measured`'s
/// order) within 5 points of its measure.
pub fn assert_split_as_measured(what: &str, measured: &[(String, f64)], spent: &[i64]) {
    let both: i64 = spent.iter().sum();
    for ((name, share), spent) in measured.iter().zip(spent) {
        let profiled = *spent as f64 / both as f64;
        assert!(
            (profiled - share).abs() <= 0.05,
            "{what}: {name}: {profiled:.3} of the timed functions' time in the profile, {share} timed by the program"
        );
    }
}
