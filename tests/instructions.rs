//! `--clock instructions`: samples every so many executed Wasm instructions (Wasmtime's fuel),
//! at intervals from a fixed seed. The same run gives the same profile, on native code and on
//! Pulley alike; a known split of instructions is measured to within a point; `wasmspy diff`
//! of two real runs names the function that grew and fails the limit; every stack reader
//! (DWARF, Go, Python, QuickJS, components) still names the frames.

mod common;

use std::path::Path;

use common::*;

/// `examples/hotspots.wasm`: C with DWARF.
fn hotspots() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hotspots.wasm")
}

/// Records `module` under the instructions clock with `extra` flags, as folded stacks and
/// pprof: the folded file's text and the decoded profile.
fn counted(
    dir: &Path,
    name: &str,
    extra: &[&str],
    module: &Path,
    args: &[&str],
) -> (String, Decoded) {
    let (folded, pprof) = (
        dir.join(format!("{name}.folded")),
        dir.join(format!("{name}.pb.gz")),
    );
    let out = wasmspy()
        .args(["record", "--clock", "instructions", "-o"])
        .arg(&folded)
        .arg("-o")
        .arg(&pprof)
        .args(extra)
        .arg("--")
        .arg(module)
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
    (
        std::fs::read_to_string(&folded).unwrap(),
        Decoded::load(&pprof),
    )
}

/// Two runs, and a run on Pulley (another instruction set, an interpreter): the same stacks
/// with the same values, sample for sample. The pprof says what it counts.
#[test]
fn the_same_run_gives_the_same_profile_on_native_code_and_on_pulley() {
    let dir = tempfile::tempdir().unwrap();
    let (first, p) = counted(dir.path(), "first", &[], &hotspots(), &[]);
    let (second, _) = counted(dir.path(), "second", &[], &hotspots(), &[]);
    let (pulley, _) = counted(
        dir.path(),
        "pulley",
        &["--target", "pulley64"],
        &hotspots(),
        &[],
    );
    assert!(first.lines().count() > 5, "{first}");
    assert_eq!(first, second);
    assert_eq!(first, pulley);
    let types: Vec<(&str, &str)> =
        p.0.sample_type
            .iter()
            .map(|t| (p.str(t.r#type), p.str(t.unit)))
            .collect();
    assert_eq!(types, [("samples", "count"), ("instructions", "count")]);
    assert_eq!(
        p.str(p.0.period_type.as_ref().unwrap().r#type),
        "instructions"
    );
    assert_eq!(p.0.period, 1_000_000);
    // The hot functions, by file:line from the DWARF; about a sample per million instructions.
    let top = p.top_self("instructions");
    assert_eq!(top[0].0, "insertion_sort", "{top:?}");
    assert_eq!(top[1].0, "is_prime", "{top:?}");
    let (samples, instructions) = (p.total("samples"), p.total("instructions"));
    let per_sample = instructions as f64 / samples as f64;
    assert!(
        (900_000.0..1_100_000.0).contains(&per_sample),
        "{per_sample}"
    );
    let lines = p.source_frames(p.0.sample[0].location_id[0]);
    assert!(
        lines.iter().all(|(_, file, _, _)| file.ends_with(".c")),
        "{lines:?}"
    );
}

/// `tests/fixtures/wat/counted.wat`: `heavy` runs the loop `light` runs, 3 times as often.
/// Its share is 3/4 to within a point: at 10,000 instructions a sample, 22,000 samples.
/// (The result is the same every run; the bound is what sampling allows: the share's
/// standard error is √(0.75 × 0.25 / 22,000) = 0.3 points.)
#[test]
fn a_function_doing_k_times_anothers_instructions_gets_k_over_k_plus_one() {
    let dir = tempfile::tempdir().unwrap();
    let wat = fixture("wat/counted.wat");
    let (_, p) = counted(dir.path(), "split", &["--interval", "10000"], &wat, &[]);
    let top = p.top_self("instructions");
    let own = |name: &str| top.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
    let (heavy, light) = (own("heavy"), own("light"));
    let share = heavy as f64 / (heavy + light) as f64;
    assert!(
        (share - 0.75).abs() < 0.01,
        "heavy {heavy}, light {light}: {share}"
    );
    assert!(p.total("samples") > 20_000);
}

/// Two real runs of `counted.wat`, the second with `heavy` doing twice the work (`run 1`,
/// `run 2`): `diff` puts `heavy` first and `--fail-above 10` fails it; the same run twice
/// passes at 0 %; the flame graph draws `heavy` in the colour of growth.
#[test]
fn diff_of_a_run_whose_function_does_twice_the_work_fails_and_the_same_run_passes() {
    let dir = tempfile::tempdir().unwrap();
    let wat = fixture("wat/counted.wat");
    let run = |name: &str, k: &str| {
        let path = dir.path().join(format!("{name}.pb.gz"));
        let out = wasmspy()
            .args(["record", "--clock", "instructions", "--interval", "10000"])
            .arg("-o")
            .arg(&path)
            .args(["--invoke", "run", "--"])
            .arg(&wat)
            .arg(k)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        path
    };
    let (base, again, new) = (run("base", "1"), run("again", "1"), run("new", "2"));
    let diff = |a: &Path, b: &Path, flags: &[&str]| {
        wasmspy()
            .arg("diff")
            .arg(a)
            .arg(b)
            .args(flags)
            .output()
            .unwrap()
    };
    let out = diff(&base, &new, &["--fail-above", "10"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().position(|l| l.ends_with("  name")).unwrap();
    assert!(lines[header + 1].ends_with(" heavy"), "{text}");
    // heavy: +100 % to within sampling's error (about 5,500 samples in BASE).
    let grew: f64 = lines[header + 1]
        .split_whitespace()
        .nth(3)
        .unwrap()
        .parse()
        .unwrap();
    assert!((grew - 100.0).abs() < 3.0, "{text}");
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("FAIL: total instructions grew +"),
        "{text}"
    );

    let out = diff(
        &base,
        &again,
        &["--fail-above", "0", "--fail-above-function", "0"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).contains("(+0 +0.00%)"), "{}", stdout(&out));

    let svg = dir.path().join("d.svg");
    let out = diff(&base, &new, &["-o", svg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let shot = dir.path().join("d.png");
    if let Some(said) = browser_check("svg", &svg, "heavy", &shot) {
        assert!(said.contains("found heavy (fill rgb(255, "), "{said}");
    }
}

/// Go's goroutine stacks, a component's modules, CPython's, QuickJS's and SpiderMonkey's frames:
/// read at the instructions clock's samples as at the other samplers'.
#[test]
fn every_stack_reader_names_the_frames_it_names_for_time() {
    let dir = tempfile::tempdir().unwrap();
    let (_, go) = counted(dir.path(), "go", &[], &fixture("go/stacks.wasm"), &["3000"]);
    let spin = go
        .stacks()
        .into_iter()
        .filter(|(names, _)| names.first().is_some_and(|n| n == "main.spin"))
        .filter(|(names, _)| names.last().is_some_and(|n| n == "runtime.goexit"))
        .map(|(_, v)| v[1])
        .sum::<i64>();
    assert!(
        spin * 10 > go.total("instructions") * 8,
        "main.spin under runtime.goexit"
    );

    let (first, component) = counted(dir.path(), "c1", &[], &fixture("rust/component.wasm"), &[]);
    let (second, _) = counted(dir.path(), "c2", &[], &fixture("rust/component.wasm"), &[]);
    assert_eq!(first, second);
    assert!(
        component.mapping_names().len() > 1,
        "{:?}",
        component.mapping_names()
    );

    if let Some(py) = built_component("timed-py.wasm") {
        let (_, p) = counted(dir.path(), "py", &[], &py, &["20"]);
        let leaves = p.top_self("instructions");
        assert_eq!(leaves[0].0, "squares (timed.py:8)", "{leaves:?}");
    }
    if let Some(js) = built_component("timed-qjs.wasm") {
        let flags = ["--invoke", "run(300)"];
        let (_, p) = counted(dir.path(), "js", &flags, &js, &[]);
        let top = p.top_self("instructions");
        assert!(
            top.iter()
                .take(2)
                .any(|(name, _)| name == "fib (timed.js:4:1)"),
            "{top:?}"
        );
    }
    // StarlingMonkey: the C++ interpreter's frames (release engine) and the portable baseline
    // interpreter's (weval engine), each walked on the guest's thread at the clock's samples.
    for build in ["timed-sm.wasm", "timed-sm-weval.wasm"] {
        let Some(js) = built_component(build) else {
            continue;
        };
        let (_, p) = counted(dir.path(), build, &["-S", "http"], &js, &["100"]);
        let top = p.top_self("instructions");
        for function in ["fib (timed_sm.js:16:13)", "build (timed_sm.js:23:15)"] {
            assert!(
                top.iter().take(3).any(|(name, _)| name == function),
                "{build}: {function} in {top:?}"
            );
        }
    }
}

/// What does not go with the instructions clock is said in one line.
#[test]
fn flags_of_time_are_refused_with_the_instructions_clock() {
    let module = hotspots();
    for (flags, expect) in [
        (
            &["--clock", "instructions", "--rate", "100"][..],
            "--rate counts samples a second",
        ),
        (
            &["--clock", "instructions", "--sampler", "signal"][..],
            "--sampler does not apply",
        ),
        (
            &["--interval", "1000"][..],
            "--interval is for --clock instructions",
        ),
        (
            &["--clock", "instructions", "-W", "fuel=1000"][..],
            "-W fuel: --clock instructions",
        ),
    ] {
        let out = wasmspy()
            .arg("record")
            .args(flags)
            .arg("--")
            .arg(&module)
            .output()
            .unwrap();
        assert_one_line_error(&out, expect, &flags);
    }
}
