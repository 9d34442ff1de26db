//! Source lines from source maps (v3), for modules built without DWARF: AssemblyScript's,
//! Emscripten's `-gsource-map` and clang's code carried through wasm-opt, built by
//! `tests/fixtures/sourcemaps/build.sh` (scripts/test.sh runs it). Each line wasmspy gives a
//! sample is checked against Mozilla's npm `source-map` reading the same map at the sample's
//! address (`tests/fixtures/sourcemaps/oracle.mjs`); every way a map is found, and each kind
//! of bad map, on Emscripten's module.

mod common;

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::child::{Killed, StderrLines};
use common::*;

fn built_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/sourcemaps")
}

/// A module build.sh built, if it is there.
fn built(test: &str, name: &str) -> Option<PathBuf> {
    let path = built_dir().join(name);
    if path.exists() && built_dir().join("node_modules/source-map").exists() {
        return Some(path);
    }
    skip(
        test,
        &format!(
            "{} is missing: tests/fixtures/sourcemaps/build.sh builds it",
            path.display()
        ),
    );
    None
}

/// What npm's `source-map` says of each offset of the module `map` maps (the module is beside
/// it, named as the map less `.map`): every `file:line` at the mapped column that covers it,
/// `-` for code without a line. A column in the body of another function does not cover an
/// offset (wasmspy's rule, `ModuleMap::segment`: a function the map gives no segment of has no
/// lines, not the last ones of the function before it): none there.
fn oracle(map: &Path, offsets: &[u64]) -> HashMap<u64, Vec<String>> {
    let out = Command::new("node")
        .arg(fixture("sourcemaps/oracle.mjs"))
        .arg(built_dir().join("node_modules"))
        .arg(map)
        .args(offsets.iter().map(u64::to_string))
        .output()
        .expect("run node");
    assert!(out.status.success(), "{}", stderr(&out));
    let module = map.with_extension("");
    let bodies = function_bodies(&std::fs::read(&module).unwrap());
    let body_of = |offset: u64| bodies.iter().find(|b| b.contains(&offset));
    stdout(&out)
        .lines()
        .map(|line| {
            let mut fields = line.split('\t');
            let (offset, column, lines) = (fields.next(), fields.next(), fields.next());
            let offset: u64 = offset.unwrap().parse().unwrap();
            let column = column.unwrap().parse::<u64>().ok();
            let lines = lines.unwrap().split(' ').filter(|l| !l.is_empty());
            let covers = column.is_some_and(|c| body_of(c) == body_of(offset));
            let lines = lines.filter(|_| covers).map(String::from).collect();
            (offset, lines)
        })
        .collect()
}

/// The byte ranges of the bodies of the functions `wasm` defines.
fn function_bodies(wasm: &[u8]) -> Vec<std::ops::Range<u64>> {
    wasmparser::Parser::new(0)
        .parse_all(wasm)
        .filter_map(|p| match p.unwrap() {
            wasmparser::Payload::CodeSectionEntry(body) => {
                let range = body.range();
                Some(range.start as u64..range.end as u64)
            }
            _ => None,
        })
        .collect()
}

/// `file`'s last component.
fn base(file: &str) -> &str {
    file.rsplit('/').next().unwrap()
}

/// The profile's default sample type: CPU time, or instructions on their clock.
fn default_kind(p: &Decoded) -> &str {
    p.str(p.0.default_sample_type)
}

/// Each sample's leaf: (address, function, `file:line` or `-`), with its value of the
/// default sample type.
fn leaves(p: &Decoded) -> Vec<(u64, String, String, i64)> {
    let cpu = p.value_index(default_kind(p));
    p.0.sample
        .iter()
        .map(|s| {
            let id = s.location_id[0];
            let (function, file, line, _) = p.source_frames(id).remove(0);
            let at = if line == 0 {
                "-".to_string()
            } else {
                format!("{}:{line}", base(&file))
            };
            (p.location(id).address, function, at, s.value[cpu])
        })
        .collect()
}

/// Records `module` (its map found as the toolchain left it): no warning; every sample's line
/// is one the oracle gives at its address; the function of the hot line spends at least 90 %
/// of the time it has a line on it, and, unless `unmapped` allows, of all its time. Returns
/// the hot function's name.
fn check_hot_line(test: &str, module: &str, hot: &str, unmapped_allowed: bool) -> Option<String> {
    let module = built(test, module)?;
    let dir = tempfile::tempdir().unwrap();
    let (out, p) = record_ok(dir.path(), &[], &module, &[]);
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let leaves = leaves(&p);
    let offsets: Vec<u64> = leaves.iter().map(|l| l.0).collect();
    let map = PathBuf::from(format!("{}.map", module.display()));
    let expected = oracle(&map, &offsets);
    for (address, function, at, _) in &leaves {
        let lines = &expected[address];
        // Code the map gives no line: no mapping before it, or one without a source.
        let none = lines.is_empty() || lines == &["-"];
        assert!(
            lines.contains(at) || (none && at == "-"),
            "{function} at {address:#x}: wasmspy says {at}, source-map {lines:?}"
        );
    }
    let hot_function = leaves
        .iter()
        .find(|l| l.2 == hot)
        .unwrap_or_else(|| panic!("no sample on {hot}"))
        .1
        .clone();
    let of_hot = || leaves.iter().filter(|l| l.1 == hot_function);
    let on_hot: i64 = of_hot().filter(|l| l.2 == hot).map(|l| l.3).sum();
    let with_line: i64 = of_hot().filter(|l| l.2 != "-").map(|l| l.3).sum();
    let all: i64 = of_hot().map(|l| l.3).sum();
    let (share, of_all) = (on_hot as f64 / with_line as f64, on_hot as f64 / all as f64);
    assert!(
        share >= 0.9,
        "{hot} has {share:.3} of {hot_function}'s lined time"
    );
    assert!(
        unmapped_allowed || of_all >= 0.9,
        "{hot} has {of_all:.3} of {hot_function}'s time"
    );
    eprintln!(
        "{test}: {hot} has {share:.3} of {hot_function}'s time with a line, {of_all:.3} of all"
    );
    Some(hot_function)
}

/// AssemblyScript maps some instructions of the loop to no line (one-field segments): those
/// samples have none.
#[test]
fn assemblyscript_lines() {
    if let Some(hot) = check_hot_line("assemblyscript_lines", "as/hot.wasm", "hot.ts:5", true) {
        // No name section: the function is named where the map says it starts.
        assert!(hot.starts_with("hot.ts:"), "{hot}");
    }
}

#[test]
fn assemblyscript_optimized_lines() {
    check_hot_line(
        "assemblyscript_optimized_lines",
        "as/hot.O3.wasm",
        "hot.ts:5",
        true,
    );
}

#[test]
fn assemblyscript_debug_lines() {
    let hot = check_hot_line(
        "assemblyscript_debug_lines",
        "as/hot.debug.wasm",
        "hot.ts:5",
        true,
    );
    // --debug writes a name section.
    assert!(hot.as_ref().is_none_or(|h| h.ends_with("hot")), "{hot:?}");
}

#[test]
fn emscripten_lines() {
    check_hot_line("emscripten_lines", "emcc/hot.wasm", "hot.c:9", false);
}

#[test]
fn clang_through_wasm_opt_lines() {
    check_hot_line(
        "clang_through_wasm_opt_lines",
        "clang/hot.wasm",
        "hot.c:9",
        false,
    );
}

/// Emscripten's module without its `sourceMappingURL` section, or with `url` in it, written
/// to `dir`: the code stays where it was (the section is the module's last).
fn emscripten_module(dir: &Path, url: Option<&str>) -> PathBuf {
    let wasm = std::fs::read(built_dir().join("emcc/hot.wasm")).unwrap();
    let mut out = wasm[..8].to_vec();
    let mut reader = wasmparser::BinaryReader::new(&wasm[8..], 8);
    let mut after_code = false;
    while !reader.eof() {
        let start = reader.original_position();
        let id = reader.read_u8().unwrap();
        let size = reader.read_var_u32().unwrap() as usize;
        let content = reader.read_bytes(size).unwrap();
        let custom_name = (id == 0).then(|| {
            wasmparser::BinaryReader::new(content, 0)
                .read_string()
                .unwrap()
                .to_string()
        });
        if custom_name.as_deref() == Some("sourceMappingURL") {
            assert!(after_code, "the section comes before the code");
            continue;
        }
        after_code |= id == 10;
        out.extend_from_slice(&wasm[start..reader.original_position()]);
    }
    if let Some(url) = url {
        let mut data = Vec::new();
        wasm_encoder::Encode::encode(url, &mut data);
        let section = wasm_encoder::CustomSection {
            name: "sourceMappingURL".into(),
            data: data.into(),
        };
        wasm_encoder::Section::append_to(&section, &mut out);
    }
    let path = dir.join("hot.wasm");
    std::fs::write(&path, out).unwrap();
    path
}

fn emscripten_map() -> Vec<u8> {
    std::fs::read(built_dir().join("emcc/hot.wasm.map")).unwrap()
}

/// Records Emscripten's module (a shorter run) with `extra` options: its stderr, and the
/// share of the CPU time (or of the instructions, on their clock) on `hot.c:9`.
fn run(dir: &Path, module: &Path, extra: &[&str]) -> (String, f64) {
    let (out, p) = record_ok(dir, extra, module, &["100000000"]);
    let leaves = leaves(&p);
    let on_hot: i64 = leaves
        .iter()
        .filter(|l| l.2 == "hot.c:9")
        .map(|l| l.3)
        .sum();
    (
        stderr(&out),
        on_hot as f64 / p.total(default_kind(&p)) as f64,
    )
}

/// The map is found, and gives the hot line (no warning); `url`: what the section says, given
/// the test's directory and the map's path.
fn check_found(test: &str, url: impl Fn(&Path, &Path) -> String) {
    if built(test, "emcc/hot.wasm").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("maps")).unwrap();
    let map = dir.path().join("maps/hot.map");
    std::fs::write(&map, emscripten_map()).unwrap();
    let module = emscripten_module(dir.path(), Some(&url(dir.path(), &map)));
    let (stderr, share) = run(dir.path(), &module, &[]);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(share >= 0.9, "{share}: {stderr}");
}

#[test]
fn map_named_by_a_relative_path() {
    check_found("map_named_by_a_relative_path", |_, _| "maps/hot.map".into());
}

#[test]
fn map_named_by_an_absolute_path() {
    check_found("map_named_by_an_absolute_path", |_, map| {
        map.display().to_string()
    });
}

#[test]
fn map_named_by_a_file_url() {
    check_found("map_named_by_a_file_url", |_, map| {
        format!("file://{}", map.display())
    });
}

#[test]
fn map_in_a_data_url() {
    use base64::Engine as _;
    check_found("map_in_a_data_url", |_, _| {
        let encoded = base64::engine::general_purpose::STANDARD.encode(emscripten_map());
        format!("data:application/json;base64,{encoded}")
    });
}

#[test]
fn map_beside_the_module() {
    if built("map_beside_the_module", "emcc/hot.wasm").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let module = emscripten_module(dir.path(), None);
    std::fs::write(dir.path().join("hot.wasm.map"), emscripten_map()).unwrap();
    let (stderr, share) = run(dir.path(), &module, &[]);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(share >= 0.9, "{share}: {stderr}");
}

/// `--source-map`: the module's own is picked by its offsets among others' maps.
#[test]
fn map_given_on_the_command_line() {
    if built("map_given_on_the_command_line", "emcc/hot.wasm").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let module = emscripten_module(dir.path(), None);
    let map = dir.path().join("other-name.map");
    std::fs::write(&map, emscripten_map()).unwrap();
    let others = [
        built_dir().join("clang/hot.wasm.map"),
        built_dir().join("as/hot.wasm.map"),
    ];
    let mut extra = vec!["--source-map", others[0].to_str().unwrap()];
    extra.extend(["--source-map", map.to_str().unwrap()]);
    extra.extend(["--source-map", others[1].to_str().unwrap()]);
    let (stderr, share) = run(dir.path(), &module, &extra);
    assert!(share >= 0.9, "{share}: {stderr}");
    // The two maps of other modules are said to be unused, nothing else.
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(warnings.iter().all(|w| w.contains("not used")), "{stderr}");
}

/// One warning (`expect` in it, not the one about DWARF), and names without lines.
fn check_bad(test: &str, url: Option<&str>, beside: Option<Vec<u8>>, expect: &str) {
    if built(test, "emcc/hot.wasm").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let module = emscripten_module(dir.path(), url);
    if let Some(map) = beside {
        std::fs::write(dir.path().join("hot.wasm.map"), map).unwrap();
    }
    let (out, p) = record_ok(dir.path(), &[], &module, &["100000000"]);
    let stderr = stderr(&out);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(warnings[0].contains(expect), "{stderr}");
    let leaves = leaves(&p);
    assert!(leaves.iter().all(|l| l.2 == "-"), "a line: {leaves:?}");
    assert!(leaves.iter().any(|l| l.1 == "_start"), "{leaves:?}");
}

#[test]
fn malformed_map() {
    let mut map = emscripten_map();
    map.truncate(map.len() / 2);
    check_bad("malformed_map", None, Some(map), "is malformed");
}

#[test]
fn map_of_another_build() {
    let other = built_dir().join("clang/hot.wasm.map");
    check_bad(
        "map_of_another_build",
        None,
        std::fs::read(other).ok(),
        "is not of this build",
    );
}

#[test]
fn url_pointing_nowhere() {
    check_bad(
        "url_pointing_nowhere",
        Some("gone/hot.wasm.map"),
        None,
        "cannot be read",
    );
}

/// A module with both DWARF and a map: DWARF's lines, the map's with --prefer-source-map.
#[test]
fn dwarf_first_unless_the_map_is_preferred() {
    let Some(module) = built(
        "dwarf_first_unless_the_map_is_preferred",
        "clang/hot.dwarf.wasm",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("hot.wasm");
    std::fs::copy(&module, &copy).unwrap();
    // The map's source renamed, to tell its lines from DWARF's.
    let map = std::fs::read_to_string(format!("{}.map", module.display())).unwrap();
    let map = map.replace("\"hot.c\"", "\"mapped.c\"");
    std::fs::write(dir.path().join("hot.wasm.map"), map).unwrap();
    let files = |extra: &[&str]| {
        let (out, p) = record_ok(dir.path(), extra, &copy, &["100000000"]);
        assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
        let leaves = leaves(&p);
        let hot: Vec<String> = leaves
            .iter()
            .filter(|l| l.2.ends_with(":9"))
            .map(|l| l.2.clone())
            .collect();
        assert!(!hot.is_empty(), "{leaves:?}");
        hot[0].clone()
    };
    assert_eq!(files(&[]), "hot.c:9");
    assert_eq!(files(&["--prefer-source-map"]), "mapped.c:9");
}

/// The Rust component `fixture` (of tests/fixtures), and a source map of its main core module
/// made from the module's own DWARF by Emscripten's `wasm-sourcemap.py` (as for a toolchain
/// that writes maps, its offsets are the core module's own), each source renamed `mapped/NAME`
/// to tell the map's lines from DWARF's, written to `dir`; `None` (skipped) without the
/// source-map setup.
fn core_module_map(test: &str, dir: &Path, fixture: &str) -> Option<(PathBuf, PathBuf)> {
    // The oracle's setup, and Emscripten's script with it.
    built(test, "emcc/hot.wasm")?;
    let component = common::fixture(fixture);
    let script = Path::new("/usr/share/emscripten/tools/wasm-sourcemap.py");
    let dwarfdump = std::fs::read_dir("/usr/bin").ok().and_then(|entries| {
        entries
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("llvm-dwarfdump"))
    });
    let (true, Some(dwarfdump)) = (script.exists(), dwarfdump) else {
        skip(test, "Emscripten's wasm-sourcemap.py or llvm-dwarfdump is missing (scripts/test.sh installs them)");
        return None;
    };
    let wasm = std::fs::read(&component).unwrap();
    let range = wasmparser::Parser::new(0)
        .parse_all(&wasm)
        .find_map(|p| match p.unwrap() {
            wasmparser::Payload::ModuleSection {
                unchecked_range, ..
            } => Some(unchecked_range),
            _ => None,
        })
        .unwrap();
    let core = dir.join("core.wasm");
    std::fs::write(&core, &wasm[range]).unwrap();
    let map = dir.join("core.wasm.map");
    let made = Command::new("python3")
        .arg(script)
        .arg(&core)
        .arg(format!("--dwarfdump={}", dwarfdump.display()))
        .arg("-o")
        .arg(&map)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&map).unwrap()).unwrap();
    for source in json["sources"].as_array_mut().unwrap() {
        let renamed = format!("mapped/{}", base(source.as_str().unwrap()));
        *source = renamed.into();
    }
    std::fs::write(&map, json.to_string()).unwrap();
    Some((component, map))
}

/// The profile's leaves in the main core module of a component (its first mapping) agree
/// with what npm's `source-map` reads of `map` at their addresses, have no inlined frames
/// and are the map's sources'; those of `hot` include `hot_line` (any line where `None`).
fn check_core_module_lines(p: &Decoded, map: &Path, hot: &str, hot_line: Option<&str>) {
    let main = p.0.mapping[0].id;
    let cpu = p.value_index("cpu");
    let mut leaves = Vec::new();
    for sample in p.0.sample.iter().filter(|s| s.value[cpu] > 0) {
        let location = p.location(sample.location_id[0]);
        if location.mapping_id != main {
            continue;
        }
        let frames = p.source_frames(location.id);
        let (function, file, line, _) = &frames[0];
        // A map has no inlined calls: the function's own frame is the only one.
        assert!(frames.iter().skip(1).all(|f| f.3), "{frames:?}");
        let at = if *line == 0 {
            "-".to_string()
        } else {
            assert!(file.contains("/mapped/"), "{file}: not the map's");
            format!("{}:{line}", base(file))
        };
        leaves.push((location.address, function.clone(), at));
    }
    let offsets: Vec<u64> = leaves.iter().map(|l| l.0).collect();
    let expected = oracle(map, &offsets);
    for (address, function, at) in &leaves {
        let lines = &expected[address];
        let none = lines.is_empty() || lines == &["-"];
        assert!(
            lines.contains(at) || (none && at == "-"),
            "{function} at {address:#x}: wasmspy says {at}, source-map {lines:?}"
        );
    }
    assert!(
        leaves
            .iter()
            .any(|l| l.1 == hot && l.2 != "-" && hot_line.is_none_or(|h| l.2 == h)),
        "no sample of {hot} on {hot_line:?}: {leaves:?}"
    );
}

/// A component's core module takes the map given with `--source-map` (matched by its
/// offsets, which are the core module's), before its DWARF with `--prefer-source-map`.
#[test]
fn a_components_core_module_takes_its_map() {
    let test = "a_components_core_module_takes_its_map";
    let dir = tempfile::tempdir().unwrap();
    let Some((component, map)) = core_module_map(test, dir.path(), "rust/component.wasm") else {
        return;
    };
    let map_arg = map.to_str().unwrap();
    let extra = ["--source-map", map_arg, "--prefer-source-map"];
    let (out, p) = record_ok(dir.path(), &extra, &component, &["hot", "40"]);
    assert!(!stderr(&out).contains("source map"), "{}", stderr(&out));
    check_core_module_lines(
        &p,
        &map,
        "component::engine::hot_path",
        Some("component.rs:21"),
    );
}

/// `serve` takes maps as `record` does: the handler's core module's lines from its map.
#[test]
fn serve_takes_the_map_of_a_components_core_module() {
    use std::io::{BufRead as _, Read as _, Write as _};
    let test = "serve_takes_the_map_of_a_components_core_module";
    let dir = tempfile::tempdir().unwrap();
    let Some((component, map)) = core_module_map(test, dir.path(), "rust/http.wasm") else {
        return;
    };
    let profile = dir.path().join("serve.pb.gz");
    let mut child = wasmspy()
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "-S",
            "cli",
            "--source-map",
        ])
        .arg(&map)
        .arg("--prefer-source-map")
        .arg("-o")
        .arg(&profile)
        .arg(&component)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr_lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = String::new();
    let address = loop {
        let line = stderr_lines.next().expect("serve ended").unwrap();
        said.push_str(&line);
        said.push('\n');
        if let Some(url) = line.split("Serving HTTP on http://").nth(1) {
            break url.trim_end_matches('/').to_string();
        }
    };
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "GET /spin/300 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    sigint(&child);
    said.extend(stderr_lines.map_while(Result::ok).map(|l| l + "\n"));
    // Stopped by SIGINT, as `wasmtime serve` is: 130.
    assert_eq!(child.wait().unwrap().code(), Some(130), "{said}");
    assert!(said.contains("wasmspy: wrote"), "{said}");
    assert!(!said.contains("source map"), "{said}");
    let p = Decoded::load(&profile);
    // The handler's few samples spread over the lines of its inlined calls.
    check_core_module_lines(&p, &map, "http_handler::work::hot_handler", None);
}

/// On the instructions clock the lines come from the map too.
#[test]
fn instructions_clock_lines() {
    if built("instructions_clock_lines", "emcc/hot.wasm").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let module = built_dir().join("emcc/hot.wasm");
    let (stderr, share) = run(dir.path(), &module, &["--clock", "instructions"]);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert!(share >= 0.9, "{share}: {stderr}");
}

/// The source lines of a jitdump's debug-info records (`JIT_CODE_DEBUG_INFO`: the code's
/// address, how many entries, then each entry's address, line, discriminator and file name).
fn jitdump_lines(dump: &[u8]) -> Vec<(String, u32)> {
    let u32_at = |at: usize| u32::from_le_bytes(dump[at..at + 4].try_into().unwrap());
    let mut lines = Vec::new();
    let mut at = u32_at(8) as usize;
    while at + 16 <= dump.len() {
        let (id, size) = (u32_at(at), u32_at(at + 4) as usize);
        if id == 2 {
            let entries = u64::from_le_bytes(dump[at + 24..at + 32].try_into().unwrap());
            let mut entry = at + 32;
            for _ in 0..entries {
                let line = u32_at(entry + 8);
                let name = entry + 16;
                let end = name + dump[name..].iter().position(|&b| b == 0).unwrap();
                lines.push((String::from_utf8_lossy(&dump[name..end]).into_owned(), line));
                entry = end + 1;
            }
        }
        at += size;
    }
    lines
}

/// `--jitdump`'s source lines, for perf, come from the map.
#[test]
fn jitdump_lines_come_from_the_map() {
    let Some(module) = built("jitdump_lines_come_from_the_map", "emcc/hot.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = wasmspy()
        .current_dir(dir.path())
        .args(["record", "--jitdump", "-o", "out.pb.gz", "--"])
        .arg(&module)
        .arg("1000")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let dump = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("jit-"))
        .expect("a jitdump");
    let lines = jitdump_lines(&std::fs::read(dump.path()).unwrap());
    let source = built_dir().join("emcc/hot.c").display().to_string();
    assert!(lines.contains(&(source, 9)), "{lines:?}");
}

/// A memory profile's allocation site is the map's: `main`'s 4096 bytes in hot.c, at a line
/// npm's `source-map` gives the call, under wasi-libc's `malloc`, in clang's module carried
/// through wasm-opt (Emscripten's inlines its `malloc`, which is then no function to hook).
#[test]
fn allocation_site_from_the_map() {
    let Some(module) = built("allocation_site_from_the_map", "clang/hot.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (out, heap) = record_every_allocation(dir.path(), &module, &["1000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    let p = Decoded::load(&heap);
    let space = p.value_index("alloc_space");
    let in_main: Vec<_> =
        p.0.sample
            .iter()
            .filter(|s| p.source_frames(s.location_id[1])[0].0 == "main")
            .collect();
    assert_eq!(in_main.len(), 1, "one allocation in main");
    let sample = in_main[0];
    assert_eq!(sample.value[space], 4096);
    assert_eq!(p.source_frames(sample.location_id[0])[0].0, "malloc");
    let call = p.location(sample.location_id[1]).address;
    let (_, file, line, _) = p.source_frames(sample.location_id[1]).remove(0);
    let expected = oracle(&built_dir().join("clang/hot.wasm.map"), &[call]);
    // wasm-opt may write several lines at one offset (see oracle.mjs): any of them.
    assert!(
        expected[&call].contains(&format!("{}:{line}", base(&file))),
        "the call at {call:#x}: wasmspy says {line}, source-map {:?}",
        expected[&call]
    );
    assert_eq!(base(&file), "hot.c");
}

/// AssemblyScript's module and map copied to `dir` without its source, `source` put beside
/// them as `hot.ts` where given: the module's path.
fn assemblyscript_elsewhere(dir: &Path, source: Option<&str>) -> PathBuf {
    let module = dir.join("hot.wasm");
    std::fs::copy(built_dir().join("as/hot.wasm"), &module).unwrap();
    std::fs::copy(
        built_dir().join("as/hot.wasm.map"),
        dir.join("hot.wasm.map"),
    )
    .unwrap();
    if let Some(source) = source {
        std::fs::write(dir.join("hot.ts"), source).unwrap();
    }
    module
}

/// Sources absent from disk are written from the map's `sourcesContent` beside the profile,
/// where `go tool pprof -list` reads them: the hot line's text, and AssemblyScript's standard
/// library.
#[test]
fn sources_the_map_carries_are_shown_where_absent() {
    if built(
        "sources_the_map_carries_are_shown_where_absent",
        "as/hot.wasm",
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let module = assemblyscript_elsewhere(dir.path(), None);
    let (out, _) = record_ok(dir.path(), &[], &module, &[]);
    let said = stderr(&out);
    let sources = dir.path().join("out.pb.gz.sources");
    assert!(said.contains("sources that source maps carry"), "{said}");
    // The source where the map says it is, under the directory's root.
    let hot = sources.join(dir.path().join("hot/hot.ts").strip_prefix("/").unwrap());
    let text = std::fs::read_to_string(&hot).unwrap();
    assert!(text.contains("HOT LINE 5"), "{text}");
    assert!(sources.join("~lib/rt/itcms.ts").exists());
    let listed = Command::new("go")
        .args(["tool", "pprof", "-source_path"])
        .arg(&sources)
        .args(["-trim_path", "/", "-list", "hot"])
        .arg(dir.path().join("out.pb.gz"))
        .output()
        .expect("go: scripts/test.sh installs it");
    assert!(listed.status.success(), "{}", stderr(&listed));
    let listed = stdout(&listed);
    assert!(
        listed
            .lines()
            .any(|l| l.contains("16777619") && l.contains(" 5:")),
        "{listed}"
    );
}

/// A source edited since the build: one warning, and the lines are still the map's.
#[test]
fn a_source_edited_since_the_build_is_said() {
    if built("a_source_edited_since_the_build_is_said", "as/hot.wasm").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(built_dir().join("as/hot.ts")).unwrap();
    let edited = format!("// a line added since the build\n{original}");
    let module = assemblyscript_elsewhere(dir.path(), Some(&edited));
    let (out, p) = record_ok(dir.path(), &[], &module, &[]);
    let said = stderr(&out);
    let warnings: Vec<&str> = said.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{said}");
    assert!(
        warnings[0].contains("hot.ts differs from the copy its source map carries"),
        "{said}"
    );
    assert!(leaves(&p).iter().any(|l| l.2 == "hot.ts:5"), "{said}");
}

/// `report --lines` shows each hot line's text: from the copy the map carried where the
/// source is absent, from the file on disk where it is there.
#[test]
fn report_lines_show_the_text_of_each_line() {
    if built("report_lines_show_the_text_of_each_line", "as/hot.wasm").is_none() {
        return;
    }
    let hot_row = |dir: &Path| {
        let out = wasmspy()
            .args(["report", "--lines"])
            .arg(dir.join("out.pb.gz"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let table = stdout(&out);
        let row = table.lines().find(|l| l.contains("hot.ts:5"));
        row.unwrap_or_else(|| panic!("no hot.ts:5 row: {table}"))
            .to_string()
    };
    let dir = tempfile::tempdir().unwrap();
    let module = assemblyscript_elsewhere(dir.path(), None);
    record_ok(dir.path(), &[], &module, &[]);
    assert!(dir.path().join("out.pb.gz.sources").exists());
    let row = hot_row(dir.path());
    assert!(
        row.ends_with("| for (let i: u32 = 0; i < n; i++) h = (h ^ i) * 16777619; // HOT LINE 5"),
        "{row}"
    );

    // The source on disk is read where it is: the build's own, in the build's directory.
    let module = built_dir().join("as/hot.wasm");
    let dir = tempfile::tempdir().unwrap();
    record_ok(dir.path(), &[], &module, &[]);
    assert!(!dir
        .path()
        .join("out.pb.gz.sources/")
        .join(built_dir().join("as/hot.ts").strip_prefix("/").unwrap())
        .exists());
    let row = hot_row(dir.path());
    assert!(row.ends_with("// HOT LINE 5"), "{row}");
}

/// What reads a running guest's profiles takes the map too: the live server's CPU profile,
/// `wasmspy top` (the function's start) and `wasmspy dump` (the line it is on now).
#[test]
fn the_live_server_top_and_dump_take_the_map() {
    let Some(module) = built(
        "the_live_server_top_and_dump_take_the_map",
        "clang/hot.wasm",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut guest = Killed(
        wasmspy()
            .args(["record", "--pprof-addr", "127.0.0.1:0", "-o"])
            .arg(dir.path().join("out.pb.gz"))
            .arg("--")
            .arg(&module)
            .arg("4000000000")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Kept open to the end: a guest writing to a closed pipe would fail.
    let mut guest_err = StderrLines::of(&mut guest.0);
    let line = guest_err.wait_for("serving profiles at ");
    let base = line.split("serving profiles at ").nth(1).unwrap();
    let base = base.trim_end_matches("/debug/pprof/").to_string();

    // `top` over a pipe prints a view a second: started now, so that its views come while the
    // guest runs (about 4 s on a fast machine) alongside the dump and the profile below.
    let mut top = Killed(
        wasmspy()
            .arg("top")
            .arg(&base)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    // The stack a dump shows once the guest is in its loop: hot, at line 9.
    let mut dump = String::new();
    for _ in 0..3000 {
        let out = wasmspy().arg("dump").arg(&base).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        dump = stdout(&out);
        if dump.contains("\nhot\n") {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let at = dump.split("\nhot\n\t").nth(1);
    let at = at.unwrap_or_else(|| panic!("no frame of hot: {dump}"));
    let hot_c = built_dir().join("clang/hot.c");
    assert!(at.starts_with(&format!("{}:9", hot_c.display())), "{dump}");

    // A second of CPU profile: hot's time on its line.
    let response = ureq::get(&format!("{base}/debug/pprof/profile?seconds=1"))
        .call()
        .unwrap();
    let mut bytes = Vec::new();
    response.into_reader().read_to_end(&mut bytes).unwrap();
    std::fs::write(dir.path().join("live.pb.gz"), bytes).unwrap();
    let p = Decoded::load(&dir.path().join("live.pb.gz"));
    let of_hot: Vec<_> = leaves(&p).into_iter().filter(|l| l.1 == "hot").collect();
    let on_line: i64 = of_hot
        .iter()
        .filter(|l| l.2 == "hot.c:9")
        .map(|l| l.3)
        .sum();
    let all: i64 = of_hot.iter().map(|l| l.3).sum();
    assert!(
        all > 0 && on_line as f64 >= 0.9 * all as f64,
        "hot.c:9 has {on_line} of hot's {all}"
    );

    // hot's row in a view says where hot starts, in hot.c.
    let mut views = BufReader::new(top.0.stdout.take().unwrap());
    let mut text = String::new();
    while !text.lines().any(|l| l.contains(" hot (")) {
        let n = views.read_line(&mut text).unwrap();
        assert!(n > 0, "top ended: {text}");
    }
    let row = text.lines().find(|l| l.contains(" hot (")).unwrap();
    assert!(
        row.ends_with(&format!(" hot ({}:7)", hot_c.display())),
        "{text}"
    );
}

/// `wasmspy annotate` lists the hottest function of Emscripten's module between the lines its
/// map gives: the hot line's instructions hold at least 90 % of the function's time (as
/// `emscripten_lines` finds of the samples), the line with its text.
#[test]
fn annotate_shows_the_maps_lines_between_the_instructions() {
    let Some(module) = built("annotate_shows_the_maps_lines", "emcc/hot.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (out, profile) = record(dir.path(), &["--rate", "1000"], &module, &["150000000"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = wasmspy()
        .arg("annotate")
        .arg(&profile)
        .args(["--top", "1", "--wasm"])
        .arg(&module)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let functions = common::annotated::parse(&text);
    // hot is inlined into its caller, which the map cannot say: the function holding it.
    let (heading, rows) = &functions[0];
    assert!(heading.contains(" in hot.wasm "), "{text}");
    let mut line = String::new();
    let (mut on_hot_line, mut all) = (0.0, 0.0);
    for row in rows {
        if row.offset.is_none() && !row.text.starts_with(";; hot block") {
            line = row.text.clone();
        } else {
            all += row.flat;
            if line.contains("hot.c:9") {
                on_hot_line += row.flat;
            }
        }
    }
    assert!(
        all > 0.0 && on_hot_line >= 0.9 * all,
        "hot.c:9 holds {on_hot_line} of {all} ns:\n{text}"
    );
    assert!(
        text.contains("hot.c:9  for (uint32_t i = 0; i < n; i++) h = (h ^ i) * 16777619u;"),
        "{text}"
    );
}
