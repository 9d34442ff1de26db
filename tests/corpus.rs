//! Every Sightglass program committed in `tests/fixtures/sightglass` (its README.md says where
//! they come from and what each is kept for), modules and components, runs under `wasmspy
//! record`, its allocators rewritten for a memory profile, with its expected output, and leaves
//! both profiles; in those that carry DWARF, most samples of the guest's code have a source line.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// The committed subset of Sightglass's `benchmarks/` folder, one folder per program.
fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sightglass")
}

/// The corpus's programs, modules and components, sorted.
fn programs(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in std::fs::read_dir(root).unwrap() {
        let dir = dir.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&dir).unwrap() {
            let file = file.unwrap().path();
            if file.extension().is_some_and(|e| e == "wasm") {
                found.push(file);
            }
        }
    }
    found.sort();
    found
}

/// Whether the module carries DWARF debug info.
fn has_dwarf(module: &Path) -> bool {
    let bytes = std::fs::read(module).unwrap();
    let found = wasmparser::Parser::new(0).parse_all(&bytes).any(
        |p| matches!(p, Ok(wasmparser::Payload::CustomSection(r)) if r.name() == ".debug_info"),
    );
    found
}

/// `<name>.<stream>.expected` next to the module, else `default.<stream>.expected`. Like
/// Sightglass, trailing white space does not count (some files lack the final newline).
fn expected(module: &Path, stream: &str) -> Option<String> {
    let dir = module.parent().unwrap();
    let stem = module.file_stem().unwrap().to_str().unwrap();
    [stem, "default"]
        .iter()
        .map(|name| dir.join(format!("{name}.{stream}.expected")))
        .find(|p| p.exists())
        .map(|p| std::fs::read_to_string(p).unwrap().trim_end().to_string())
}

#[test]
fn every_sightglass_module_runs_and_profiles() {
    let root = corpus();
    let modules = programs(&root);
    // Every one committed: one missing would leave what it is kept for untested.
    assert_eq!(modules.len(), 13, "{modules:?}");
    let mut components = 0;
    let out_dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let (mut dwarf_samples, mut dwarf_samples_with_line) = (0, 0);
    let mut stale_dwarf = Vec::new();
    // Each warning that a module has no DWARF, and the program it is of.
    let mut no_dwarf = Vec::new();
    for module in &modules {
        let name = module.strip_prefix(&root).unwrap().display().to_string();
        let out = out_dir
            .path()
            .join(format!("{}.pb.gz", name.replace('/', "_")));
        let heap = out.with_extension("heap.pb.gz");
        let component = wasmparser::Parser::is_component(&std::fs::read(module).unwrap());
        components += usize::from(component);
        // Its allocators rewritten: the output must not change.
        let result = wasmspy()
            .current_dir(module.parent().unwrap())
            // 10 kHz, so that the programs that finish within milliseconds are sampled too.
            .args([
                "record",
                "--rate",
                "10000",
                "--default-values-unknown-imports",
                "--dir",
                ".",
                "-o",
            ])
            .arg(&out)
            .arg("--mem-profile")
            .arg(&heap)
            .arg("--")
            .arg(module.file_name().unwrap())
            .output()
            .unwrap();
        let err = stderr(&result);
        let guest_err: String = err
            .lines()
            .filter(|l| !l.starts_with("wasmspy: "))
            .map(|l| format!("{l}\n"))
            .collect();
        if result.status.code() != Some(0) {
            failures.push(format!("{name}: exit {:?}: {err}", result.status.code()));
            continue;
        }
        if let Some(want) = expected(module, "stdout") {
            if stdout(&result).trim_end() != want {
                failures.push(format!("{name}: stdout differs from the expected"));
            }
        }
        if let Some(want) = expected(module, "stderr") {
            if guest_err.trim_end() != want {
                failures.push(format!("{name}: stderr differs: {guest_err:?}"));
            }
        }
        let p = Decoded::load(&out);
        let samples = p.total("samples");
        // A component's core modules are mappings of their own.
        let mappings = p.0.mapping.len();
        assert!(
            if component {
                mappings > 1
            } else {
                mappings == 1
            },
            "{name}: {mappings} mappings"
        );
        // noop does nothing at all; everything else runs long enough to be sampled.
        if samples == 0 && !name.starts_with("noop/") {
            failures.push(format!("{name}: no samples"));
        }
        // Of the samples in the guest's own code, the share that DWARF maps to a line.
        let in_code = p.leaf_value("samples", |l| p.location(l).address != 0);
        let with_line = p.leaf_value("samples", |l| {
            let frames = p.source_frames(l);
            p.location(l).address != 0 && frames[0].2 != 0 && !frames[0].1.is_empty()
        });
        let line_share = with_line as f64 / in_code.max(1) as f64;
        no_dwarf.extend(
            err.lines()
                .filter(|l| l.contains("has no DWARF debug info"))
                .map(|l| (name.clone(), l.to_string())),
        );
        let stale = err.contains("describes almost none of its code");
        if stale {
            stale_dwarf.push(name.clone());
        } else if has_dwarf(module) {
            dwarf_samples += in_code;
            dwarf_samples_with_line += with_line;
        }
        let allocated = Decoded::load(&heap).total("alloc_space");
        eprintln!(
            "{name}: {samples} samples, {:.3} s CPU, {:.0}% of guest samples with a source line, ~{allocated} bytes allocated",
            p.total("cpu") as f64 / 1e9,
            line_share * 100.0
        );
    }
    // Its DWARF's code ranges are tombstones and [0, 1) (checked with llvm-dwarfdump): the
    // module was rewritten after linking (as were Sightglass's meshoptimizer and richards).
    assert_eq!(stale_dwarf, ["quicksort/benchmark.wasm"]);
    assert_eq!(components, 2, "cm-online-stats and kotlin-richards");
    // The advice fits the toolchain the `producers` section names: rustc's for blind-sig;
    // none named in sqlite3 (Emscripten strips the section) and splay (hand-written).
    let advice = |program: &str| {
        let warned: Vec<&String> = no_dwarf
            .iter()
            .filter(|(n, _)| n == program)
            .map(|(_, w)| w)
            .collect();
        assert_eq!(warned.len(), 1, "{program}: {no_dwarf:#?}");
        warned[0].clone()
    };
    let map = "; or give wasmspy its source map: --source-map FILE or a sourceMappingURL section";
    let rust = advice("blind-sig/benchmark.wasm");
    assert!(
        rust.contains(&format!(
            "(built by rustc: set debug = \"line-tables-only\" in its Cargo profile{map}"
        )),
        "{rust}"
    );
    for program in ["sqlite3/sqlite3.wasm", "splay/splay.wasm"] {
        let generic = advice(program);
        assert!(
            generic.contains(&format!("(build with -g{map}")),
            "{generic}"
        );
    }

    let share = dwarf_samples_with_line as f64 / dwarf_samples as f64;
    eprintln!(
        "programs with DWARF: {share:.3} of {dwarf_samples} guest samples have a source line"
    );
    assert!(
        share > 0.5,
        "only {share:.3} of the guest samples of programs with DWARF have a source line"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// TinyGo's DWARF: inlined calls whose functions are declared in other compilation units, and
/// inlined calls whose ranges lie outside their parent's (`os.ReadFile` here). The frames are
/// those `llvm-dwarfdump --lookup` shows for the same address.
#[test]
fn tinygo_inlined_frames_across_units() {
    let root = corpus();
    let wasm = std::fs::read(root.join("tinygo/tinygo-json.wasm")).unwrap();
    let mut symbolizer = wasmspy::internals::resolve::symbolize::ModuleSymbolizer::new(
        "tinygo-json.wasm",
        wasm.into(),
        true,
    )
    .unwrap();
    let frames: Vec<(String, String, u32, u32)> = symbolizer
        .source_frames(0, 0x154d6)
        .iter()
        .map(|f| {
            (
                f.function.name.clone(),
                f.file.clone(),
                f.line,
                f.start_line,
            )
        })
        .collect();
    let tinygo = "/usr/local/tinygo/src";
    let expected = [
        (
            "syscall.Open",
            format!("{tinygo}/syscall/syscall_libc.go"),
            76,
            74,
        ),
        (
            "(os.unixFilesystem).OpenFile",
            format!("{tinygo}/os/file_anyos.go"),
            88,
            87,
        ),
        (
            "(os.unixFilesystem).OpenFile$invoke",
            format!("{tinygo}/os/file_anyos.go"),
            87,
            87,
        ),
        (
            "(Go interface method)",
            "<Go interface method>".to_string(),
            0,
            0,
        ),
        ("os.OpenFile", format!("{tinygo}/os/file.go"), 90, 85),
        ("os.Open", format!("{tinygo}/os/file.go"), 101, 100),
        ("os.ReadFile", format!("{tinygo}/os/file.go"), 463, 462),
        ("main.main", "/usr/src/json/main.go".to_string(), 66, 64),
        (
            "runtime.run$1",
            format!("{tinygo}/runtime/scheduler_cooperative.go"),
            250,
            248,
        ),
    ];
    let expected: Vec<(String, String, u32, u32)> = expected
        .into_iter()
        .map(|(f, file, line, start)| (f.to_string(), file, line, start))
        .collect();
    assert_eq!(frames, expected);
}

/// The allocator rewriting of memory profiles yields a valid module for every corpus program,
/// C, C++, Rust and TinyGo alike, wrapping the allocators it names.
#[test]
fn every_sightglass_module_rewrites_to_a_valid_module() {
    let root = corpus();
    let mut wrapped_somewhere = std::collections::BTreeSet::new();
    for module in programs(&root) {
        let wasm = std::fs::read(&module).unwrap();
        if wasmparser::Parser::is_component(&wasm) {
            // Neither has an allocator wasmspy knows (hand-written WAT; Kotlin's GC).
            let rewritten = wasmspy::memory::component::rewrite_component(&wasm);
            assert!(rewritten.unwrap().is_none(), "{}", module.display());
            continue;
        }
        // `rewrite` validates what it produces.
        match wasmspy::memory::rewrite::rewrite(&wasm) {
            Ok(Some(rewritten)) => {
                for (_, allocator) in rewritten.wrapped {
                    wrapped_somewhere.insert(format!("{allocator:?}"));
                }
            }
            Ok(None) => {}
            Err(e) => panic!("{}: {e:#}", module.display()),
        }
    }
    for expected in [
        "Malloc",
        "Free",
        "Realloc",
        "Calloc",
        "RustAlloc",
        "RustDealloc",
        "TinyGoAlloc",
    ] {
        assert!(
            wrapped_somewhere.contains(expected),
            "{wrapped_somewhere:?}"
        );
    }
}

/// TinyGo's `runtime.alloc`, every call recorded: most of tinygo-json's bytes are allocated
/// while it encodes JSON, under `encoding/json`'s functions; the garbage collector frees them
/// without a call, so the profile opens on `alloc_space`.
#[test]
fn tinygo_allocations_by_go_function() {
    let root = corpus();
    let dir = root.join("tinygo");
    let out_dir = tempfile::tempdir().unwrap();
    let heap = out_dir.path().join("heap.pb.gz");
    let result = wasmspy()
        .current_dir(&dir)
        .args(["record", "--default-values-unknown-imports", "--dir", "."])
        .args(["--mem-rate", "1", "--mem-profile"])
        .arg(&heap)
        .args(["--", "tinygo-json.wasm"])
        .output()
        .unwrap();
    assert!(result.status.success(), "{}", stderr(&result));
    assert_eq!(
        stdout(&result).trim_end(),
        expected(&dir.join("tinygo-json.wasm"), "stdout").unwrap()
    );
    let p = Decoded::load(&heap);
    assert_eq!(p.str(p.0.default_sample_type), "alloc_space");
    let space = p.value_index("alloc_space");
    let (mut total, mut encoding, mut objects) = (0, 0, 0);
    for (names, values) in p.stacks() {
        // TinyGo's `malloc` and `calloc` for C (DWARF names them so) keep their blocks until
        // `free`.
        if names[0].starts_with("runtime.libc_") {
            continue;
        }
        assert_eq!(names[0], "runtime.alloc", "{names:?}");
        total += values[space];
        objects += values[p.value_index("alloc_objects")];
        if names
            .iter()
            .any(|n| n == "(*encoding/json.encodeState).marshal")
        {
            encoding += values[space];
        }
        assert_eq!(values[p.value_index("inuse_space")], 0);
    }
    assert!(objects > 10_000, "{objects} allocations");
    assert!(
        encoding as f64 > 0.5 * total as f64,
        "{encoding} of {total} bytes while encoding"
    );
}

/// With `--trap-unknown-imports` the corpus's components run until their first call to
/// `bench.start`, which fails naming it, as Wasmtime's stubs do. (`wasmtime run -W
/// unknown-imports-trap` stops them earlier, at their first file access: its stubs also
/// replace the WASI interfaces they import at an older compatible version.)
#[test]
fn components_stop_at_their_first_unknown_import() {
    let root = corpus();
    let dir = tempfile::tempdir().unwrap();
    for program in programs(&root) {
        if !wasmparser::Parser::is_component(&std::fs::read(&program).unwrap()) {
            continue;
        }
        let cwd = program.parent().unwrap();
        let name = program.file_name().unwrap();
        let ours = wasmspy()
            .current_dir(cwd)
            .args(["record", "--trap-unknown-imports", "--dir", ".", "-o"])
            .arg(dir.path().join("p.pb.gz"))
            .arg("--")
            .arg(name)
            .output()
            .unwrap();
        let what = program.display();
        assert_eq!(ours.status.code(), Some(1), "{what}");
        assert_eq!(stdout(&ours), "", "{what}");
        let err = stderr(&ours);
        assert!(
            err.contains("unknown import: `bench#start` has not been defined"),
            "{what}: {err}"
        );
    }
}
