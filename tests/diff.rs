//! `wasmspy diff BASE NEW`: the table (totals first, the largest change first), the verdict
//! of `--fail-above` and `--fail-above-function` and its exit code, and the difference written
//! as pprof (BASE negated) and as a differential flame graph. Profiles of instructions are
//! compared as they are, profiles of time by share.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use wasmspy::export::{self, Format};
use wasmspy::profile::ValueType;

/// A profile of `kind` (`instructions` or `samples`) with these folded stacks, written as
/// pprof in `dir`.
fn profile(dir: &Path, name: &str, kind: &str, stacks: &str) -> PathBuf {
    let mut p = export::read(stacks.as_bytes()).unwrap();
    p.sample_types = vec![ValueType::new(kind, "count")];
    let mut bytes = Vec::new();
    Format::Pprof.write(&p, &mut bytes).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `main` runs `work` and `other`, each 1000 instructions; in NEW `work` does twice as much.
const BASE: &str = "main;work 1000\nmain;other 1000\n";
const NEW: &str = "main;work 2000\nmain;other 1000\n";

fn diff(base: &Path, new: &Path, flags: &[&str]) -> std::process::Output {
    wasmspy()
        .arg("diff")
        .arg(base)
        .arg(new)
        .args(flags)
        .output()
        .unwrap()
}

#[test]
fn a_function_doing_twice_the_work_leads_the_table_and_fails_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let base = profile(dir.path(), "base.pb.gz", "instructions", BASE);
    let new = profile(dir.path(), "new.pb.gz", "instructions", NEW);
    let out = diff(&base, &new, &["--fail-above", "10"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.contains(&"Total: 2000 → 3000 (+1000 +50.00%)"),
        "{text}"
    );
    // The first row after the header: `work`, +1000 flat, +100 %.
    let header = lines.iter().position(|l| l.ends_with("  name")).unwrap();
    let first: Vec<&str> = lines[header + 1].split_whitespace().collect();
    assert_eq!(
        first,
        ["1000", "2000", "+1000", "+100.0", "1000", "2000", "+100.0", "work"]
    );
    assert_eq!(
        lines.last().unwrap(),
        &"FAIL: total instructions grew +50.00 % (limit 10 %): 2000 → 3000"
    );
    // Per function: `work` (and `main` under it) grew; `work` is named.
    let out = diff(&base, &new, &["--fail-above-function", "60"]);
    assert_eq!(out.status.code(), Some(1));
    let verdict = stdout(&out).lines().last().unwrap().to_string();
    assert!(
        verdict.starts_with("FAIL: work grew +100.00 %"),
        "{verdict}"
    );
    // Under the limits: passes.
    let out = diff(
        &base,
        &new,
        &["--fail-above", "60", "--fail-above-function", "100"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out)
        .lines()
        .last()
        .unwrap()
        .starts_with("ok: total instructions +50.00 %"));
}

#[test]
fn identical_profiles_pass() {
    let dir = tempfile::tempdir().unwrap();
    let base = profile(dir.path(), "base.pb.gz", "instructions", BASE);
    let again = profile(dir.path(), "again.pb.gz", "instructions", BASE);
    let out = diff(
        &base,
        &again,
        &["--fail-above", "0", "--fail-above-function", "0"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("Total: 2000 → 2000 (+0 +0.00%)"));
}

/// Of time, NEW is scaled to BASE's total and said so: twice the time overall, with the same
/// split, is no change; a split that moved is.
#[test]
fn profiles_of_time_are_compared_by_share() {
    let dir = tempfile::tempdir().unwrap();
    let base = profile(dir.path(), "base.pb.gz", "samples", BASE);
    let slower = profile(
        dir.path(),
        "slower.pb.gz",
        "samples",
        "main;work 2000\nmain;other 2000\n",
    );
    let out = diff(
        &base,
        &slower,
        &["--fail-above", "1", "--fail-above-function", "1"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("scaled to BASE's total"), "{text}");
    assert!(text.contains("Total: 2000 → 2000 (+0 +0.00%)"), "{text}");
    assert!(
        stderr(&out).contains("--fail-above can only pass"),
        "{}",
        stderr(&out)
    );
    let new = profile(dir.path(), "new.pb.gz", "samples", NEW);
    let out = diff(&base, &new, &["--fail-above-function", "10"]);
    assert_eq!(out.status.code(), Some(1));
    // `work`: 1000 of 2000 → 2000 of 3000, scaled: 1333, +33 %.
    let verdict = stdout(&out).lines().last().unwrap().to_string();
    assert!(verdict.starts_with("FAIL: work grew +33.33 %"), "{verdict}");
}

/// The difference as pprof: NEW's samples and BASE's negated, so that its total is the change
/// and `work` alone is left; as a flame graph: `work` drawn in red (grew), `other` unchanged,
/// as Chromium renders it.
#[test]
fn the_difference_is_written_as_pprof_and_as_a_flame_graph() {
    let dir = tempfile::tempdir().unwrap();
    let base = profile(dir.path(), "base.pb.gz", "instructions", BASE);
    let new = profile(dir.path(), "new.pb.gz", "instructions", NEW);
    let (pb, svg) = (dir.path().join("d.pb.gz"), dir.path().join("d.svg"));
    let (pb_arg, svg_arg) = (pb.to_str().unwrap(), svg.to_str().unwrap());
    let out = diff(&base, &new, &["-o", pb_arg, "-o", svg_arg]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = Decoded::load(&pb);
    assert_eq!(p.total("instructions"), 1000);
    let by_leaf: std::collections::BTreeMap<String, i64> =
        p.stacks()
            .into_iter()
            .fold(Default::default(), |mut m, (names, values)| {
                *m.entry(names[0].clone()).or_default() += values[0];
                m
            });
    assert_eq!(by_leaf["work"], 1000);
    assert_eq!(by_leaf["other"], 0);
    let svg = std::fs::read_to_string(&svg).unwrap();
    let fill_of = |name: &str| {
        let at = svg.find(&format!("<title>{name} (")).unwrap();
        let g = &svg[at..];
        let fill = g.find("fill=\"").unwrap() + 6;
        g[fill..fill + g[fill..].find('"').unwrap()].to_string()
    };
    // inferno's differential colours: red for growth, near-white for none.
    let work = fill_of("work");
    assert!(work.starts_with("rgb(255,"), "{work}");
    assert_eq!(fill_of("other"), "rgb(250,250,250)");
    assert!(svg.contains("red: grew, blue: shrank"));
    // And so Chromium draws it.
    let shot = dir.path().join("d.png");
    if let Some(said) = browser_check("svg", &dir.path().join("d.svg"), "work", &shot) {
        assert!(said.contains("found work (fill rgb(255, "), "{said}");
    }
}

#[test]
fn a_profile_without_the_compared_sample_type_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let base = profile(dir.path(), "base.pb.gz", "instructions", BASE);
    let new = profile(dir.path(), "new.pb.gz", "samples", NEW);
    let out = diff(&base, &new, &[]);
    assert_one_line_error(
        &out,
        &format!("`{}` has no sample type `instructions`", new.display()),
        &"diff",
    );
}
