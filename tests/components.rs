//! Components (WASI preview 2) under `wasmspy record`: run as `wasmtime run` runs them, and
//! profiled as modules are, each core module a mapping of its own, host calls named by the WIT
//! function called. The fixture is `tests/fixtures/rust/component.rs` (wasm32-wasip2).

mod common;

use std::collections::HashSet;
use std::process::Command;

use common::*;

const COMPONENT: &str = "rust/component.wasm";

/// A warm start registers the component by the build ids its cache entry kept and reads its
/// core modules on the profiler's thread while the guest runs: the profile is the first run's,
/// its functions, lines and mappings, and a profile with no sample at all is written whole.
#[test]
fn a_warm_start_reads_the_component_while_the_guest_runs_and_profiles_it_as_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cache_config) = common::own_cache::own_cache(dir.path());
    let flags = ["-C", cache_config.as_str(), "--verbose"];
    let shown = |run: &str, args: &[&str]| {
        let run_dir = dir.path().join(run);
        std::fs::create_dir(&run_dir).unwrap();
        let (out, p) = record_ok(&run_dir, &flags, &fixture(COMPONENT), args);
        let cached = stderr(&out).contains("(found in wasmspy's cache)");
        let mappings: Vec<(String, String)> =
            p.0.mapping
                .iter()
                .map(|m| (p.str(m.filename).to_string(), p.str(m.build_id).to_string()))
                .collect();
        let lines: HashSet<(String, String, i64)> =
            p.0.location
                .iter()
                .flat_map(|l| p.source_frames(l.id))
                .filter(|(f, ..)| f.starts_with("component::engine::"))
                .map(|(f, file, line, _)| (f, file, line))
                .collect();
        (cached, mappings, lines, p.0.sample.len())
    };
    // The first run compiles (and keeps the build ids), the second starts from the entry.
    let compiled = shown("compiling", &["hot", "60"]);
    let warm = shown("warm", &["hot", "60"]);
    assert!(!compiled.0 && warm.0, "{compiled:?} {warm:?}");
    assert_eq!(warm.1, compiled.1);
    assert_eq!(warm.1.len(), 3, "{:?}", warm.1);
    let hot = (
        "component::engine::hot_path".to_string(),
        "tests/fixtures/rust/component.rs".to_string(),
        21,
    );
    assert!(
        compiled.2.contains(&hot) && warm.2.contains(&hot),
        "{warm:?}"
    );
    let idle = shown("exit", &["exit", "0"]);
    assert!(idle.0, "{idle:?}");
    assert_eq!(idle.1, compiled.1);
}

#[test]
fn hot_path_of_a_rust_component_has_its_known_share_and_source_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(dir.path(), &[], &fixture(COMPONENT), &["hot", "120"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("component done: 120 rounds"));
    let p = Decoded::load(&path);
    let top = p.top_self_compiled("cpu");
    assert_eq!(top[0].0, "component::engine::hot_path", "top: {top:?}");
    let hot = p.self_share_compiled("cpu", "component::engine::hot_path");
    let warm = p.self_share_compiled("cpu", "component::engine::warm_path");
    assert!((0.67..=0.83).contains(&hot), "hot {hot:.3}, top: {top:?}");
    assert!(
        (0.17..=0.33).contains(&warm),
        "warm {warm:.3}, top: {top:?}"
    );
    for (names, _) in p.stacks() {
        let in_run = names.iter().any(|n| n == "component::run");
        if names.iter().any(|n| n.starts_with("component::engine::")) {
            assert!(in_run, "{names:?}");
            assert!(names.iter().any(|n| n == "component::main"), "{names:?}");
            assert_eq!(names.last().unwrap(), "_start", "{names:?}");
        }
    }

    // DWARF of the main core module: the hot loop's line, with core's inlined arithmetic.
    let hot_lines: HashSet<(String, i64)> =
        p.0.location
            .iter()
            .flat_map(|l| p.source_frames(l.id))
            .filter(|(f, ..)| f == "component::engine::hot_path")
            .map(|(_, file, line, _)| (file, line))
            .collect();
    assert!(
        hot_lines.contains(&("tests/fixtures/rust/component.rs".to_string(), 21)),
        "{hot_lines:?}"
    );

    // Each core module is a mapping: the main module, wit-component's shim and its fixups.
    let mappings: Vec<(String, String)> =
        p.0.mapping
            .iter()
            .map(|m| (p.str(m.filename).to_string(), p.str(m.build_id).to_string()))
            .collect();
    let names: Vec<&str> = mappings.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "component.wasm/component.wasm",
            "component.wasm/wit-component:shim",
            "component.wasm/module2"
        ]
    );
    let ids: HashSet<&str> = mappings.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids.len(), 3, "{mappings:?}");
    let hot_location =
        p.0.location
            .iter()
            .find(|l| {
                p.source_frames(l.id)
                    .iter()
                    .any(|f| f.0.contains("hot_path"))
            })
            .unwrap();
    assert_eq!(hot_location.mapping_id, p.0.mapping[0].id);
}

/// Host calls are named by the WIT function called, also those wit-component routes through
/// its shim's table; the shim's stubs are named as wit-component names them.
#[test]
fn host_calls_are_named_by_the_wit_function() {
    let dir = tempfile::tempdir().unwrap();
    let (out, p) = record_ok(
        dir.path(),
        &["--rate", "5000"],
        &fixture(COMPONENT),
        &["write", "100000"],
    );
    assert_eq!(stdout(&out).lines().count(), 100_000);
    let write = "wasi:io/streams@0.2.6#[method]output-stream.write";
    let mut calls = 0;
    let mut unknown = 0;
    for (names, values) in p.stacks() {
        if names[0] == "[host call]" {
            eprintln!("a host call not named: {names:?}");
            unknown += values[0];
        }
        if names[0] == write {
            calls += values[0];
            assert_eq!(
                names[1], "indirect-wasi:io/streams@0.2.6-[method]output-stream.write",
                "{names:?}"
            );
            assert!(names.iter().any(|n| n == "component::main"), "{names:?}");
        }
    }
    let total = p.total("samples");
    assert!(calls * 10 > total, "{calls} of {total} samples in {write}");
    // Once in a CI run (not reproduced in 40 runs here), one sample's exit from Wasm was at an
    // instruction of `__wasilibc_write_stream` that names no import (an indirect call through a
    // table is one, shown as `[host call]`): tolerated when rare.
    assert!(
        unknown * 100 <= total,
        "{unknown} of {total} samples in unnamed host calls"
    );
    assert!(!stderr(&out).contains("wit-component:shim has no DWARF"));
}

/// Arguments, environment, directories, stdout and exit codes as `wasmtime run` gives them.
#[test]
fn runs_as_wasmtime_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("f.txt"), "first line\nsecond\n").unwrap();
    let mount = format!("{}::/d", data.display());
    let flags = ["--dir", &mount, "--env", "GREETING=hi"];
    for args in [
        &["io", "/d/f.txt", "a b", "-x"][..],
        &["exit", "7"],
        &["exit", "0"],
        &["trap"],
    ] {
        let (ours, profile) = record(dir.path(), &flags, &fixture(COMPONENT), args);
        let theirs = Command::new(wasmtime_cli())
            .arg("run")
            .args(flags)
            .arg(fixture(COMPONENT))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(ours.status.code(), theirs.status.code(), "{args:?}");
        assert_eq!(stdout(&ours), stdout(&theirs), "{args:?}");
        assert!(profile.exists(), "{args:?}");
        std::fs::remove_file(&profile).unwrap();
        if args[0] == "trap" {
            assert_eq!(ours.status.code(), Some(134));
            let err = stderr(&ours);
            assert!(
                err.contains("failed to run main module `component.wasm`"),
                "{err}"
            );
            assert!(err.contains("component::crash"), "{err}");
        }
    }
    let (out, _) = record(
        dir.path(),
        &flags,
        &fixture(COMPONENT),
        &["io", "/d/f.txt", "z"],
    );
    assert_eq!(
        stdout(&out),
        "args [\"/d/f.txt\", \"z\"]; GREETING=hi; first line: first line\n"
    );
}

#[test]
fn bad_options_and_missing_imports_get_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = record(dir.path(), &["-S", "no-such"], &fixture(COMPONENT), &[]);
    assert_one_line_error(&out, "unknown -S / --wasi option: no-such", &"-S no-such");
    let (out, _) = record(dir.path(), &["-S", "http=maybe"], &fixture(COMPONENT), &[]);
    assert_one_line_error(&out, "unknown boolean flag `maybe`", &"-S http=maybe");
    let (out, _) = record(dir.path(), &["-S", "http"], &fixture("c/cprog.wasm"), &[]);
    assert_one_line_error(&out, "wasi-http for core wasm modules", &"-S http, module");
    assert!(stdout(&out).is_empty(), "the guest must not run");

    // A component that needs outgoing HTTP: refused without `-S http`, naming the import as
    // Wasmtime does; with it, it runs.
    let http = dir.path().join("http.wat");
    std::fs::write(
        &http,
        r#"(component
            (import "wasi:http/types@0.2.0" (instance
                (export "fields" (type (sub resource)))))
            (core module $m (func (export "run") (result i32) i32.const 0))
            (core instance $i (instantiate $m))
            (func $run (result (result)) (canon lift (core func $i "run")))
            (instance $r (export "run" (func $run)))
            (export "wasi:cli/run@0.2.0" (instance $r)))"#,
    )
    .unwrap();
    let (out, _) = record(dir.path(), &[], &http, &[]);
    assert_one_line_error(&out, "wasi:http/types@0.2.0", &"no -S http");
    let (out, _) = record(dir.path(), &["-S", "http"], &http, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (out, _) = record(dir.path(), &["-S", "cli=n"], &fixture(COMPONENT), &[]);
    assert_one_line_error(&out, "wasi:", &"-S cli=n");
}

/// Every output format, and `report`, read a component's profile.
#[test]
fn every_format_takes_a_component_profile() {
    let dir = tempfile::tempdir().unwrap();
    let outputs = [
        "p.pb.gz",
        "p.json",
        "p.speedscope.json",
        "p.svg",
        "p.folded",
    ];
    let mut cmd = wasmspy();
    cmd.arg("record");
    for o in outputs {
        cmd.arg("-o").arg(dir.path().join(o));
    }
    let out = cmd
        .arg("--")
        .arg(fixture(COMPONENT))
        .args(["hot", "40"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let folded = std::fs::read_to_string(dir.path().join("p.folded")).unwrap();
    assert!(
        folded
            .lines()
            .any(|l| l.contains("component::run;component::engine::hot_path")),
        "{folded}"
    );
    let svg = std::fs::read_to_string(dir.path().join("p.svg")).unwrap();
    assert!(svg.contains("component::engine::hot_path"));
    for o in ["p.pb.gz", "p.speedscope.json", "p.folded"] {
        let report = wasmspy()
            .arg("report")
            .arg(dir.path().join(o))
            .output()
            .unwrap();
        assert_eq!(report.status.code(), Some(0), "{o}: {}", stderr(&report));
        assert!(
            stdout(&report).contains("component::engine::hot_path"),
            "{o}"
        );
    }
    let firefox = std::fs::read_to_string(dir.path().join("p.json")).unwrap();
    assert!(firefox.contains("component::engine::hot_path"));
    let converted = dir.path().join("converted.folded");
    let out = wasmspy()
        .arg("convert")
        .arg(dir.path().join("p.pb.gz"))
        .arg("-o")
        .arg(&converted)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let converted = std::fs::read_to_string(converted).unwrap();
    assert!(converted.contains("component::engine::hot_path"));
}

/// `-S inherit-network` gives the component the host's network, and `-S allow-ip-name-lookup`
/// name lookups: a TCP connection to a listener on loopback, by address and by name.
#[test]
fn network_options_give_the_guest_the_network() {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = std::thread::spawn(move || {
        let mut greetings = Vec::new();
        for _ in 0..2 {
            let (mut stream, _) = listener.accept().unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).unwrap();
            greetings.push(text);
        }
        greetings
    });
    let dir = tempfile::tempdir().unwrap();
    let by_address = format!("127.0.0.1:{port}");
    let by_name = format!("localhost:{port}");
    let cases = [
        (&[][..], &by_address, false),
        (&["-S", "inherit-network"][..], &by_address, true),
        (&["-S", "inherit-network"][..], &by_name, false),
        (
            &["-S", "inherit-network,allow-ip-name-lookup"][..],
            &by_name,
            true,
        ),
    ];
    for (flags, address, connects) in cases {
        let (out, _) = record(
            dir.path(),
            flags,
            &fixture(COMPONENT),
            &["connect", address],
        );
        let what = format!("{flags:?} {address}");
        assert_eq!(
            out.status.code(),
            Some(if connects { 0 } else { 1 }),
            "{what}"
        );
        let expected = if connects {
            "connected\n"
        } else {
            "cannot connect"
        };
        assert!(
            stdout(&out).starts_with(expected),
            "{what}: {}",
            stdout(&out)
        );
    }
    assert_eq!(received.join().unwrap(), ["hello", "hello"]);
}
