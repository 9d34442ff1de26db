//! V8's own profiles of Wasm, symbolized: Node runs the bundled example through `node:wasi`
//! under `--cpu-prof`, its module stripped of its `name` section (V8 then names functions
//! `wasm-function[N]`, with nothing but their offsets), and `convert --wasm` names them from
//! the module's DWARF, with files and lines; as well from DWARF split off beside the module
//! (`external_debug_info`, Emscripten's `-gseparate-dwarf`) or given with `--debug-file`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use wasm_encoder::{CustomSection, RawSection, Section};
use wasmparser::{Parser, Payload};

fn hotspots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hotspots.wasm")
}

/// `wasm` without the custom sections `drop` picks, with `extra` appended.
fn rewritten(wasm: &[u8], drop: impl Fn(&str) -> bool, extra: &[CustomSection]) -> Vec<u8> {
    let mut out = wasm[..8].to_vec();
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.unwrap();
        if let Payload::CustomSection(c) = &payload {
            if drop(c.name()) {
                continue;
            }
        }
        if let Some((id, range)) = payload.as_section() {
            RawSection {
                id,
                data: &wasm[range],
            }
            .append_to(&mut out);
        }
    }
    for section in extra {
        section.append_to(&mut out);
    }
    out
}

/// Node's `--cpu-prof` of `module` run through `node:wasi`, sampled every 100 µs: the
/// `.cpuprofile`'s path, or `None` (skipped) where Node is missing.
fn node_profile(dir: &Path, module: &Path) -> Option<PathBuf> {
    if Command::new("node").arg("--version").output().is_err() {
        skip("V8 profiles", "node is missing");
        return None;
    }
    let out_dir = dir.join("v8");
    let out = Command::new("node")
        .args(["--cpu-prof", "--cpu-prof-interval", "100", "--cpu-prof-dir"])
        .arg(&out_dir)
        .arg(fixture("node/wasi-run.mjs"))
        .arg(module)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let profile = std::fs::read_dir(&out_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    Some(profile.path())
}

fn convert(args: &[&std::ffi::OsStr]) -> std::process::Output {
    wasmspy().arg("convert").args(args).output().unwrap()
}

/// `convert --wasm MODULE V8 -o DIR/named.pb.gz`, which must succeed without a warning: the
/// profile written.
fn converted(dir: &Path, module: &Path, v8: &Path) -> Decoded {
    let named = dir.join("named.pb.gz");
    let out = convert(&[
        "--wasm".as_ref(),
        module.as_os_str(),
        v8.as_os_str(),
        "-o".as_ref(),
        named.as_os_str(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(warnings(&out), "", "no warnings");
    Decoded::load(&named)
}

/// What `convert` said on stderr but where it wrote.
fn warnings(out: &std::process::Output) -> String {
    stderr(out)
        .lines()
        .filter(|l| !l.starts_with("wasmspy: wrote"))
        .collect()
}

/// The hot functions of the example, as `report` ranks the converted profile: (name, file
/// of its first source frame, total of that function's self time).
fn hot_functions(p: &Decoded) -> Vec<(String, String)> {
    let mut files = std::collections::HashMap::new();
    for location in &p.0.location {
        for line in &location.line {
            let f = p.function(line.function_id);
            files.insert(p.str(f.name).to_string(), p.str(f.filename).to_string());
        }
    }
    p.top_self("cpu")
        .into_iter()
        .take(3)
        .map(|(name, _)| {
            let file = files[&name].clone();
            (name, file)
        })
        .collect()
}

#[test]
fn a_stripped_modules_v8_profile_is_named_from_its_dwarf() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = std::fs::read(hotspots()).unwrap();
    let stripped = dir.path().join("stripped.wasm");
    std::fs::write(&stripped, rewritten(&wasm, |n| n == "name", &[])).unwrap();
    let Some(v8) = node_profile(dir.path(), &stripped) else {
        return;
    };
    let text = std::fs::read_to_string(&v8).unwrap();
    assert!(
        text.contains("\"functionName\":\"wasm-function["),
        "V8 names the stripped module's functions by index"
    );
    assert!(!text.contains("is_prime"));

    // As V8 named them, read back as they are.
    let plain = dir.path().join("plain.pb.gz");
    let out = convert(&[v8.as_os_str(), "-o".as_ref(), plain.as_os_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let top = Decoded::load(&plain).top_self("cpu");
    assert!(top[0].0.starts_with("wasm-function["), "{top:?}");

    let p = converted(dir.path(), &hotspots(), &v8);
    let hot = hot_functions(&p);
    // is_prime and insertion_sort take nine tenths of the example's time, in either order.
    let mut two: Vec<&str> = hot[..2].iter().map(|(n, _)| n.as_str()).collect();
    two.sort();
    assert_eq!(two, ["insertion_sort", "is_prime"], "{hot:?}");
    assert!(
        hot[..2].iter().all(|(_, f)| f.ends_with("hotspots.c")),
        "{hot:?}"
    );
    assert_eq!(p.mapping_names(), ["hotspots.wasm"]);
    // is_prime's frame: the line of its first instruction, under count_primes and main,
    // under V8's own frames (the script that started it). (A few of V8's samples skip a
    // frame: the heaviest stack is the one to look at.)
    let cpu = p.value_index("cpu");
    let stack = p
        .stacks()
        .into_iter()
        .filter(|(names, _)| names[0] == "is_prime")
        .max_by_key(|(_, values)| values[cpu])
        .unwrap()
        .0;
    assert_eq!(stack[1], "count_primes", "{stack:?}");
    assert!(stack.iter().any(|n| n == "main"), "{stack:?}");
    assert_eq!(stack.last().unwrap(), "(anonymous)", "{stack:?}");
    let is_prime =
        p.0.location
            .iter()
            .find(|l| p.source_frames(l.id)[0].0 == "is_prime")
            .unwrap();
    let (_, file, line, _) = &p.source_frames(is_prime.id)[0];
    assert!(file.ends_with("examples/hotspots.c"), "{file}");
    assert!((8..=9).contains(line), "is_prime's first line: {line}");
}

#[test]
fn dwarf_split_off_is_found_beside_the_module_or_given() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = std::fs::read(hotspots()).unwrap();
    // The module as Emscripten's -gseparate-dwarf leaves it: no DWARF, and the name of the
    // file that has it; the debug file is the module whole.
    let external = CustomSection {
        name: "external_debug_info".into(),
        data: {
            let url = b"http://localhost/app.debug.wasm";
            let mut data = vec![url.len() as u8];
            data.extend_from_slice(url);
            data.into()
        },
    };
    let app = dir.path().join("app.wasm");
    std::fs::write(
        &app,
        rewritten(
            &wasm,
            |n| n.starts_with(".debug_") || n == "name",
            &[external],
        ),
    )
    .unwrap();
    let Some(v8) = node_profile(dir.path(), &app) else {
        return;
    };
    let files = |out: &Path| {
        hot_functions(&Decoded::load(out))
            .into_iter()
            .map(|(_, file)| file)
            .collect::<Vec<_>>()
    };
    let out_path = dir.path().join("out.pb.gz");
    let run = |extra: &[&std::ffi::OsStr]| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["--wasm".as_ref(), app.as_os_str()];
        args.extend_from_slice(extra);
        args.extend([v8.as_os_str(), "-o".as_ref(), out_path.as_os_str()]);
        convert(&args)
    };

    // Not there: said, and functions named by index without lines.
    let out = run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("app.wasm: its DWARF is in `http://localhost/app.debug.wasm`, not found beside it: give it with --debug-file"),
        "{}",
        stderr(&out)
    );
    assert!(files(&out_path).iter().all(String::is_empty));

    // Given.
    let elsewhere = dir.path().join("elsewhere.wasm");
    std::fs::write(&elsewhere, &wasm).unwrap();
    let out = run(&["--debug-file".as_ref(), elsewhere.as_os_str()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(files(&out_path).iter().all(|f| f.ends_with("hotspots.c")));

    // Beside it, under the name it gives.
    std::fs::rename(&elsewhere, dir.path().join("app.debug.wasm")).unwrap();
    let out = run(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(warnings(&out), "");
    let hot = hot_functions(&Decoded::load(&out_path));
    assert!(
        hot.iter().all(|(_, f)| f.ends_with("hotspots.c")),
        "{hot:?}"
    );
    assert!(hot.iter().any(|(n, _)| n == "is_prime"), "{hot:?}");
}

#[test]
fn the_profiles_module_is_found_by_its_code_and_another_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let Some(v8) = node_profile(dir.path(), &hotspots()) else {
        return;
    };
    let other = fixture("wat/counted.wat");
    let other_wasm = dir.path().join("counted.wasm");
    std::fs::write(&other_wasm, wat::parse_file(&other).unwrap()).unwrap();
    let out_path = dir.path().join("out.pb.gz");
    // Of two modules, the profile's is found by its code, whichever comes first.
    let out = convert(&[
        "--wasm".as_ref(),
        other_wasm.as_os_str(),
        "--wasm".as_ref(),
        hotspots().as_os_str(),
        v8.as_os_str(),
        "-o".as_ref(),
        out_path.as_os_str(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(warnings(&out), "");
    let hot = hot_functions(&Decoded::load(&out_path));
    assert!(
        hot[..2].iter().all(|(_, f)| f.ends_with("hotspots.c")),
        "{hot:?}"
    );

    let out = convert(&[
        "--wasm".as_ref(),
        other_wasm.as_os_str(),
        v8.as_os_str(),
        "-o".as_ref(),
        out_path.as_os_str(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(": none of the --wasm modules has function bodies where its frames are: they are kept as V8 named them"),
        "{}",
        stderr(&out)
    );
    // V8 named them from the name section.
    let top = Decoded::load(&out_path).top_self("cpu");
    assert!(top.iter().take(2).any(|(n, _)| n == "is_prime"), "{top:?}");

    // --wasm on a profile that is not V8's.
    let pprof = dir.path().join("p.pb.gz");
    let out = convert(&[v8.as_os_str(), "-o".as_ref(), pprof.as_os_str()]);
    assert!(out.status.success());
    let out = convert(&[
        "--wasm".as_ref(),
        hotspots().as_os_str(),
        pprof.as_os_str(),
        "-o".as_ref(),
        out_path.as_os_str(),
    ]);
    assert_one_line_error(&out, "is not one", &"--wasm on pprof");
}

/// A module without DWARF or a `name` section is named from its source map, found as `record`
/// finds it (here by its `sourceMappingURL` section, `hot.wasm.map`, beside it):
/// AssemblyScript's build of tests/fixtures/sourcemaps/hot.ts (tests/fixtures/sourcemaps/
/// build.sh), whose `hot` V8 calls `wasm-function[N]`, is named where the map says it starts.
#[test]
fn a_modules_source_map_names_v8s_frames() {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/sourcemaps/as");
    if !built.join("hot.wasm.map").exists() {
        skip(
            "a_modules_source_map_names_v8s_frames",
            "target/sourcemaps is missing: tests/fixtures/sourcemaps/build.sh builds it",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("hot.wasm");
    std::fs::copy(built.join("hot.wasm"), &module).unwrap();
    std::fs::copy(built.join("hot.wasm.map"), dir.path().join("hot.wasm.map")).unwrap();
    std::fs::copy(built.join("hot.ts"), dir.path().join("hot.ts")).unwrap();
    let Some(v8) = node_profile(dir.path(), &module) else {
        return;
    };
    let p = converted(dir.path(), &module, &v8);
    let hot = hot_functions(&p);
    // `hot` starts on line 3; its first instruction the map gives a line is on line 4.
    assert_eq!(hot[0].0, "hot.ts:4", "{hot:?}");
    assert_eq!(
        hot[0].1,
        dir.path().join("hot.ts").to_str().unwrap(),
        "{hot:?}"
    );
}
