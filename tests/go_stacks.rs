//! Go programs as Go sees them: whole goroutine stacks read from Go's stack in linear memory,
//! Go's names and Go's file:line (from its `pclntab`), for CPU and memory profiles.

mod common;

use std::collections::BTreeMap;

use common::{
    fixture, gofmt, record, record_every_allocation, skip, stderr, stdout, wasmspy, Decoded,
};

/// Each sample's stack, leaf first, as (function, line) of every source frame (inlined calls
/// included), with its value of `kind`.
fn stacks_with_lines(p: &Decoded, kind: &str) -> Vec<(Vec<(String, i64)>, i64)> {
    let value = p.value_index(kind);
    p.0.sample
        .iter()
        .map(|s| {
            let frames = s
                .location_id
                .iter()
                .flat_map(|&l| p.source_frames(l))
                .map(|(name, _, line, _)| (name, line))
                .collect();
            (frames, s.value[value])
        })
        .collect()
}

/// `tests/fixtures/go/stacks.go`: a producer goroutine computes values 301 frames deep in a
/// recursion that outgrows its first stack (Go copies it) and hands them to main over a
/// channel (each value a goroutine switch, `runtime.Gosched` another); main works on each.
/// Go unwinds the Wasm stack at every switch, so the Wasm stack alone shows neither chain
/// whole. `main.handle` is inlined into `main.consumer`: Go's inline tree names it. Built by
/// Go 1.27 and by Go 1.21 (another layout of the runtime's structures and of its symbol
/// table). Both samplers: the signal handler walks Go's stack wherever the guest is, the epoch
/// sampler at function entries and loop headers.
#[test]
fn goroutine_stacks_are_whole_across_switches_and_stack_growth() {
    for (module, wrapper, sampler) in [
        ("go/stacks.wasm", "main.main.gowrap1", "signal"),
        ("go/stacks-go1.21.wasm", "main.main.func1", "signal"),
        ("go/stacks.wasm", "main.main.gowrap1", "epoch"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let args = ["--sampler", sampler];
        let (out, path) = record(dir.path(), &args, &fixture(module), &["3000"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{module} {sampler}: {}",
            stderr(&out)
        );
        let p = Decoded::load(&path);
        let consumer: Vec<(&str, i64)> = vec![
            ("main.spin", 17),
            ("main.consume", 49),
            // Inlined into main.consumer.
            ("main.handle", 54),
            ("main.consumer", 61),
            ("main.main", 70),
            ("runtime.main", -1),
            ("runtime.goexit", -1),
        ];
        let mut producer: Vec<(&str, i64)> = vec![("main.spin", 17), ("main.recurse", 28)];
        producer.extend(std::iter::repeat_n(("main.recurse", 30), 300));
        producer.extend([
            ("main.produce", 35),
            ("main.producer", 41),
            (wrapper, 69),
            ("runtime.goexit", -1),
        ]);
        // Lines of Go's runtime vary by release: not compared (-1).
        let matches = |stack: &[(String, i64)], expected: &[(&str, i64)]| {
            stack.len() == expected.len()
                && stack
                    .iter()
                    .zip(expected)
                    .all(|((name, line), (want, want_line))| {
                        name == want && (*want_line < 0 || line == want_line)
                    })
        };
        let (mut spin, mut whole_consumer, mut whole_producer) = (0, 0, 0);
        for (stack, cpu) in stacks_with_lines(&p, "cpu") {
            if stack.first().is_none_or(|(name, _)| name != "main.spin") {
                continue;
            }
            spin += cpu;
            if matches(&stack, &consumer) {
                whole_consumer += cpu;
            } else if matches(&stack, &producer) {
                whole_producer += cpu;
            }
        }
        let total = p.total("cpu");
        assert!(
            spin * 10 > total * 8,
            "{module} {sampler}: main.spin is the hot loop"
        );
        let whole = (whole_consumer + whole_producer) as f64 / spin as f64;
        assert!(
            whole >= 0.95,
            "{module} {sampler}: {:.1} % of main.spin's CPU has a whole stack ({whole_consumer} ns under \
             main.consume, {whole_producer} ns under main.produce)",
            100.0 * whole
        );
        // The two chains do the same work.
        for (chain, cpu) in [("consumer", whole_consumer), ("producer", whole_producer)] {
            let share = cpu as f64 / spin as f64;
            assert!(
                (0.3..0.7).contains(&share),
                "{module} {sampler}: {chain} has {share:.2} of main.spin"
            );
        }
    }
}

/// Memory profiles get the same stacks: `tests/fixtures/go/alloc.go` builds a binary tree
/// of depth 10 recursively, one 24-byte node per call; every node is sampled (`--mem-rate
/// 1`), under its whole goroutine stack: the 2^(k-1) nodes made k calls deep have exactly k
/// `main.build` frames (the leaves at `alloc.go:19`, the rest at `:21`), then `main.main`,
/// `runtime.main`, `runtime.goexit`.
#[test]
fn allocations_have_whole_goroutine_stacks() {
    for module in ["go/alloc.wasm", "go/alloc-go1.21.wasm"] {
        let dir = tempfile::tempdir().unwrap();
        let (out, heap) = record_every_allocation(dir.path(), &fixture(module), &["10"]);
        assert!(out.status.success(), "{module}: {}", stderr(&out));
        assert_eq!(stdout(&out), "2047 100\n");
        let p = Decoded::load(&heap);
        // (depth, line of the innermost main.build) → objects.
        let mut by_depth: BTreeMap<(usize, i64), i64> = BTreeMap::new();
        for (frames, objects) in stacks_with_lines(&p, "alloc_objects") {
            let Some(first) = frames.iter().position(|(n, _)| n == "main.build") else {
                continue;
            };
            let builds = frames[first..]
                .iter()
                .take_while(|(n, _)| n == "main.build")
                .count();
            let rest: Vec<&str> = frames[first + builds..]
                .iter()
                .map(|(n, _)| n.as_str())
                .collect();
            assert_eq!(
                rest,
                ["main.main", "runtime.main", "runtime.goexit"],
                "{module}: {frames:?}"
            );
            assert!(
                frames[first + 1..first + builds]
                    .iter()
                    .all(|(_, line)| *line == 21),
                "{module}: {frames:?}"
            );
            *by_depth.entry((builds, frames[first].1)).or_default() += objects;
        }
        let mut expected = BTreeMap::new();
        for k in 1..=10 {
            expected.insert((k, 21), 1 << (k - 1));
        }
        expected.insert((11, 19), 1024);
        assert_eq!(by_depth, expected, "{module}");
    }
}

/// Each `main.*` caller's frames above the hot loop, the first six, with their lines, for the
/// chains that have a tenth of the loop's samples at least.
fn chains_above_spin(p: &Decoded) -> BTreeMap<Vec<(String, i64)>, i64> {
    let mut chains: BTreeMap<Vec<(String, i64)>, i64> = BTreeMap::new();
    let mut spin = 0;
    for (frames, samples) in stacks_with_lines(p, "samples") {
        if frames.first().is_none_or(|(name, _)| name != "main.spin") {
            continue;
        }
        spin += samples;
        let chain = frames[1..]
            .iter()
            .take_while(|(name, _)| name.starts_with("main."))
            .take(6)
            .cloned()
            .collect();
        *chains.entry(chain).or_default() += samples;
    }
    chains.retain(|_, n| *n * 10 >= spin);
    chains
}

/// As `go tool pprof -lines` shows the same program built natively, profiled by Go's own
/// `runtime/pprof` (`tests/fixtures/go/stacks_native.go`, built by the Go at hand): the same
/// chains of Go functions, inlined ones included, at the same lines, above the hot loop. (The
/// hot loop's own line differs: Go's table for Wasm gives the loop's body the line of its
/// `for`, where the native table tells the two apart.)
#[test]
fn stacks_are_those_of_the_native_build() {
    if gofmt::goroot().is_none() {
        skip(
            "stacks_are_those_of_the_native_build",
            "no `go` (scripts/test.sh installs it)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let native = dir.path().join("stacks");
    let go = fixture("go");
    let built = std::process::Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(&native)
        .args([go.join("stacks.go"), go.join("stacks_native.go")])
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", stderr(&built));
    let native_profile = dir.path().join("native.pb.gz");
    // Go's own profiler samples at 100 Hz: a longer run for as many samples.
    let ran = std::process::Command::new(&native)
        .arg("10000")
        .env("STACKS_CPU_PROFILE", &native_profile)
        .output()
        .unwrap();
    assert!(ran.status.success(), "{}", stderr(&ran));
    let (out, ours) = record(dir.path(), &[], &fixture("go/stacks.wasm"), &["3000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let native = chains_above_spin(&Decoded::load_whole(&native_profile));
    let wasm = chains_above_spin(&Decoded::load(&ours));
    assert_eq!(
        native.keys().collect::<Vec<_>>(),
        wasm.keys().collect::<Vec<_>>(),
        "native {native:#?}, Wasm {wasm:#?}"
    );
    assert_eq!(native.len(), 2, "{native:#?}");
}

/// gofmt, built by the Go toolchain at hand for WASI, formatting `net/http` (the issue's
/// example: with the Wasm stack alone, 99 % of the samples had `wasm_pc_f_loop` right above
/// `go/parser.(*parser).parseFile`). Targets: ≥ 95 % of the samples in `parseFile` have
/// `main.processFile` above it; ≥ 80 % of the CPU has a `.go` file and line at its leaf.
#[test]
fn gofmt_stacks_reach_main_and_have_lines() {
    let Some(goroot) = gofmt::goroot() else {
        skip(
            "gofmt_stacks_reach_main_and_have_lines",
            "no `go` (scripts/test.sh installs it)",
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let gofmt = dir.path().join("gofmt.wasm");
    gofmt::build(&gofmt);
    let profile = dir.path().join("gofmt.pb.gz");
    let out = wasmspy()
        .args(["record", "-o"])
        .arg(&profile)
        .arg("--dir")
        .arg(format!("{}::/src", goroot.join("src").display()))
        .arg("--")
        .arg(&gofmt)
        .arg("/src/net/http")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let p = Decoded::load(&profile);
    let (mut parse, mut parse_under_main) = (0, 0);
    for (stack, cpu) in stacks_with_lines(&p, "cpu") {
        if let Some(at) = stack
            .iter()
            .rposition(|(name, _)| name == "go/parser.(*parser).parseFile")
        {
            parse += cpu;
            if stack[at..]
                .iter()
                .any(|(name, _)| name == "main.processFile")
            {
                parse_under_main += cpu;
            }
        }
    }
    let cpu = p.value_index("cpu");
    let mut with_line = 0;
    for s in &p.0.sample {
        let leaf = p.source_frames(s.location_id[0]);
        let (_, file, line, _) = &leaf[0];
        if file.ends_with(".go") && *line > 0 {
            with_line += s.value[cpu];
        }
    }
    let total = p.total("cpu");
    assert!(
        parse * 10 > total,
        "parseFile is a tenth of the run at least"
    );
    let under_main = parse_under_main as f64 / parse as f64;
    let lines = with_line as f64 / total as f64;
    eprintln!(
        "gofmt: {:.1} % of parseFile's CPU under main.processFile, {:.1} % of the CPU at a .go line",
        100.0 * under_main,
        100.0 * lines
    );
    assert!(under_main >= 0.95, "{:.1} %", 100.0 * under_main);
    assert!(lines >= 0.80, "{:.1} %", 100.0 * lines);
}
