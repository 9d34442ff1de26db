//! The samplers against ground truth: where the time goes in programs whose split is known or
//! measured by the program itself; host calls and the runtime attributed under the guest stack.

mod common;

use common::*;

const C: &str = "c/cprog.wasm";

/// The `wasmspy: … sampler …: N guest, N host call, N runtime, N lost samples` line.
fn counts(err: &str) -> [u64; 4] {
    let line = err
        .lines()
        .find(|l| l.contains(" lost samples"))
        .unwrap_or_else(|| panic!("no counts line in {err}"));
    let numbers: Vec<u64> = line
        .rsplit(": ")
        .next()
        .unwrap()
        .split(", ")
        .map(|part| part.split(' ').next().unwrap().parse().unwrap())
        .collect();
    numbers.try_into().unwrap()
}

#[test]
fn signal_sampler_matches_the_programs_own_time_split() {
    // ~3 s of CPU at 2 kHz: ~6,000 samples, so the sampled share's standard deviation is
    // sqrt(0.25 / 6000) = 0.0065 and the bound below 4.6 of them; the program's own split (a
    // median of 12,000 rounds) varied by 0.003 at most over seven runs, loaded or not.
    let (own, signal, after) = split_shares(&["--sampler", "signal"], "12000");
    eprintln!(
        "straight_line: program {own:.4}, signal sampler {signal:.4} (small_after {after:.4})"
    );
    assert!(
        (signal - own).abs() <= 0.03,
        "program {own:.4} vs signal {signal:.4}"
    );

    // The epoch sampler cannot sample inside the loop-free body: it charges it to small_after.
    let (own, epoch, after) = split_shares(&["--sampler", "epoch"], "6000");
    eprintln!("straight_line: program {own:.4}, epoch sampler {epoch:.4} (small_after {after:.4})");
    assert!(
        epoch < 0.05 && after > own - 0.1,
        "epoch {epoch:.4}, small_after {after:.4}"
    );
}

#[test]
fn at_100_hz_the_cpu_clocks_ticks_keep_the_rate_and_the_programs_own_split() {
    // At a period of 10 ms the thread's CPU-clock timer alone ticks, fired by the scheduler's
    // tick (250 Hz here): the rate holds, as a timer armed again from each late tick would
    // not (12 ms a period at 250 Hz: 0.83 of the rate), and the sampled point is unbiased.
    let dir = tempfile::tempdir().unwrap();
    let (own, path, said) =
        split_profile(dir.path(), &["--sampler", "signal", "-v"], "100", "12000");
    let p = Decoded::load(&path);
    let (samples, cpu) = (p.total("samples") as f64, p.total("cpu") as f64 / 1e9);
    assert!(
        said.contains("signal sampler at 100 Hz on the cpu clock"),
        "{said}"
    );
    // Each sample carries the CPU time since the one before: the count is the CPU time in
    // periods, within one late tick's share.
    assert!(
        (samples - cpu / 0.010).abs() <= 0.05 * samples + 2.0,
        "{samples} samples in {cpu:.3} s of CPU"
    );
    // ~3 s of CPU: ~300 samples, so the sampled share's standard deviation is
    // sqrt(0.25 / 300) = 0.029, and the bound 4 of them (the program's own split varies by
    // 0.003).
    let self_of = |f: &str| p.self_share("cpu", f);
    let all = self_of("straight_line") + self_of("small_after") + self_of("looping");
    let sampled = self_of("straight_line") / all;
    assert!(
        (sampled - own).abs() <= 0.12,
        "program {own:.4} vs sampled {sampled:.4} over {samples} samples"
    );
}

#[test]
fn a_caller_is_kept_when_its_callee_is_sampled_in_its_prologue_or_epilogue() {
    let dir = tempfile::tempdir().unwrap();
    // `tiny` is a few instructions between its frame setup and teardown, so many samples land
    // where the frame pointer still (or again) names call_tiny's frame.
    let (_, p) = record_ok(
        dir.path(),
        &["--rate", "5000"],
        &fixture(C),
        &["calls", "200000000"],
    );
    let mut tiny = 0;
    for (names, values) in p.stacks() {
        let expected_parent = match names[0].as_str() {
            "tiny" => "call_tiny",
            "call_tiny" => "main",
            _ => continue,
        };
        assert_eq!(names[1], expected_parent, "{names:?}");
        if names[0] == "tiny" {
            tiny += values[0];
        }
    }
    assert!(tiny > 100, "{tiny} samples in tiny");
}

#[test]
fn a_host_call_is_the_leaf_under_the_guest_stack_that_made_it() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(
        dir.path(),
        &["--clock", "wall", "-v"],
        &fixture(C),
        &["sleep", "400"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "slept 400 ms\n");
    let [_, host, _, lost] = counts(&stderr(&out));
    // 400 periods of 1 ms: a loaded machine runs the sleeping thread late and merges the
    // timer's expirations into fewer signals (307 seen beside a build), each sample's `wall`
    // value then spanning several periods; the wall time is checked below.
    assert!(host >= 100, "{}", stderr(&out));
    assert_eq!(lost, 0);

    let p = Decoded::load(&path);
    assert_eq!(p.str(p.0.default_sample_type), "wall");
    let sleeping: i64 = p
        .stacks()
        .iter()
        .filter(|(names, _)| names[0] == "wasi_snapshot_preview1::poll_oneoff")
        .map(|(names, values)| {
            let pos = |f: &str| names.iter().position(|n| n == f).unwrap_or(usize::MAX);
            assert!(
                pos("nap") < pos("main") && pos("main") < names.len(),
                "{names:?}"
            );
            values[p.value_index("wall")]
        })
        .sum();
    // The guest slept 400 ms, all of it under its call but for what the period before the
    // first sample and the last signals' delivery (late on a loaded machine: tens of ms at
    // most) give to the code around it.
    assert!(sleeping >= 360_000_000, "{sleeping} ns in poll_oneoff");
    let share = sleeping as f64 / p.total("wall") as f64;
    assert!(share > 0.9, "poll_oneoff has {share:.3} of the wall time");
    // On the CPU clock a sleeping guest is not sampled.
    let (out, path) = record(dir.path(), &[], &fixture(C), &["sleep", "400"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(Decoded::load(&path).total("samples") < 50);
}

#[test]
fn runtime_samples_are_a_wasmtime_leaf_under_the_guest_stack() {
    let dir = tempfile::tempdir().unwrap();
    // memory.copy runs in Wasmtime's libcall, outside compiled Wasm code.
    let (out, path) = record(dir.path(), &["-v"], &fixture(C), &["copy", "64", "40"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let [_, _, runtime, _] = counts(&stderr(&out));
    assert!(runtime > 50, "{}", stderr(&out));
    let p = Decoded::load(&path);
    // The libcalls are `main`'s `memset` (memory.fill) of fresh pages and `copy_blocks`'s first
    // `memcpy` (memory.copy; the later ones copy a block onto itself), about half each.
    let (mut in_copy, mut in_main, mut total) = (0, 0, 0);
    for (names, values) in p.stacks() {
        if names[0] == "[wasmtime]" {
            total += values[0];
            match names.get(1).map(String::as_str) {
                Some("copy_blocks") => in_copy += values[0],
                Some("main") => in_main += values[0],
                _ => {}
            }
        }
    }
    assert!(total as f64 > 0.8 * p.total("samples") as f64);
    assert!(
        (in_copy + in_main) as f64 > 0.95 * total as f64 && in_copy as f64 > 0.25 * total as f64,
        "copy_blocks {in_copy}, main {in_main} of {total}"
    );
}

#[test]
fn sampler_and_clock_flags() {
    let dir = tempfile::tempdir().unwrap();
    for (flags, sampler, types) in [
        (&["--sampler", "epoch"][..], "epoch", "samples cpu"),
        (&["--sampler", "signal"][..], "signal", "samples cpu"),
        (&["--clock", "wall"][..], "signal", "samples cpu wall"),
        (
            &["--sampler", "epoch", "--clock", "wall"][..],
            "epoch",
            "samples cpu wall",
        ),
    ] {
        let mut args = flags.to_vec();
        args.push("-v");
        let (out, path) = record(dir.path(), &args, &fixture(C), &["spin", "20"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("wasmspy: {sampler}")),
            "{}",
            stderr(&out)
        );
        let p = Decoded::load(&path);
        let names: Vec<&str> = p.0.sample_type.iter().map(|t| p.str(t.r#type)).collect();
        assert_eq!(names.join(" "), types);
        assert_eq!(p.top_self("cpu")[0].0, "hot_function", "{flags:?}");
        assert!(p
            .str(p.0.comment[0])
            .contains(&format!("{sampler} sampler")));
    }
    for bad in [["--sampler", "perf"], ["--clock", "cycles"]] {
        let out = wasmspy()
            .arg("record")
            .args(bad)
            .arg(fixture(C))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
}
