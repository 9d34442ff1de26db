//! `record --target pulley64`: the guest on Wasmtime's Pulley interpreter, as `wasmtime run
//! --target pulley64` runs it, profiled with its stacks, names and source lines.

mod common;

use common::*;

/// `tests/fixtures/c/cprog.c` spends 80 % of its loop work in `hot_function` (4 × the work of
/// `cold_function`): under Pulley the program prints what it prints natively, and the profile
/// has that split (epoch samples land at the loops' headers, where the time is), with
/// `run_spin` (at the line of its call) above `hot_function`, down to `_start`. (An epoch
/// sample's leaf is a loop's header, which has no line of its own, compiled or interpreted.)
#[test]
fn pulley_runs_the_guest_and_profiles_it() {
    let dir = tempfile::tempdir().unwrap();
    let module = fixture("c/cprog.wasm");
    let (native, _) = record(dir.path(), &[], &module, &["spin", "20"]);
    let (out, path) = record(
        dir.path(),
        &["--target", "pulley64", "-v"],
        &module,
        &["spin", "20"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), stdout(&native));
    assert!(stderr(&out).contains("epoch sampler"), "{}", stderr(&out));
    let p = Decoded::load(&path);
    let (hot, cold) = (
        p.self_share("cpu", "hot_function"),
        p.self_share("cpu", "cold_function"),
    );
    let share = hot / (hot + cold);
    assert!(
        (share - 0.8).abs() <= 0.05,
        "hot_function {share:.3} of the two"
    );
    assert!(
        hot + cold > 0.8,
        "the loops have {:.3} of the CPU",
        hot + cold
    );
    let cpu = p.value_index("cpu");
    let mut in_hot = 0;
    for s in &p.0.sample {
        let frames: Vec<(String, String, i64, bool)> = s
            .location_id
            .iter()
            .flat_map(|&l| p.source_frames(l))
            .collect();
        if frames[0].0 != "hot_function" {
            continue;
        }
        in_hot += s.value[cpu];
        assert!(frames[0].1.ends_with("cprog.c"), "{frames:?}");
        assert_eq!(
            (&frames[1].0[..], frames[1].2),
            ("run_spin", 41),
            "{frames:?}"
        );
        assert!(frames.iter().any(|f| f.0 == "_start"), "{frames:?}");
    }
    assert!(in_hot > 0);
}

/// The signal sampler cannot read Pulley's stack (yet): asked for, it is refused in one line.
#[test]
fn the_signal_sampler_is_refused_for_pulley() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = record(
        dir.path(),
        &["--target", "pulley64", "--sampler", "signal"],
        &fixture("c/cprog.wasm"),
        &["spin", "1"],
    );
    assert_one_line_error(
        &out,
        "signal sampler",
        &"--target pulley64 --sampler signal",
    );
}

/// perf's files describe compiled code: under Pulley the CPU runs the interpreter, so they are
/// refused in one line rather than written to name bytecode perf never samples.
#[test]
fn perf_files_are_refused_for_pulley() {
    for flag in ["--jitdump", "--perfmap"] {
        let dir = tempfile::tempdir().unwrap();
        let (out, _) = record(
            dir.path(),
            &["--target", "pulley64", flag],
            &fixture("c/cprog.wasm"),
            &["spin", "1"],
        );
        assert_one_line_error(&out, "under Pulley perf sees only the interpreter", &flag);
    }
}
