//! Memory profiles (`--mem-profile`): allocation sites with their four values, as Go's heap
//! profiles have them.

mod common;

use std::collections::BTreeMap;

use common::*;

/// Records `module` with `--mem-profile` at `rate` and returns the heap profile's values
/// summed by (allocator, function, file, line): the first frame up the stack, inlined or not,
/// in the program's own source (`tests/fixtures/...`), however deep the library code in
/// between (Rust's `Vec` grows in `RawVecInner::finish_grow`).
/// (allocator, function, file, line) → alloc_objects, alloc_space, inuse_objects, inuse_space.
type Sites = BTreeMap<(String, String, String, i64), [i64; 4]>;

fn heap_by_site(module: &str, args: &[&str], rate: &str) -> Sites {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap.pb.gz");
    let out = wasmspy()
        .current_dir(dir.path())
        .args(["record", "--mem-rate", rate, "--mem-profile"])
        .arg(&heap)
        .arg("--")
        .arg(fixture(module))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // In the working directory, where `-o`'s default would have gone.
    assert!(
        !dir.path().join("wasmspy.pb.gz").exists(),
        "--mem-profile alone writes no CPU profile"
    );
    let p = Decoded::load(&heap);
    assert_eq!(p.str(p.0.default_sample_type), "inuse_space");
    let kinds: Vec<&str> = p.0.sample_type.iter().map(|t| p.str(t.r#type)).collect();
    assert_eq!(
        kinds,
        [
            "alloc_objects",
            "alloc_space",
            "inuse_objects",
            "inuse_space"
        ]
    );
    let mut sites: BTreeMap<_, [i64; 4]> = BTreeMap::new();
    for sample in &p.0.sample {
        let leaf = p.source_frames(sample.location_id[0]);
        let caller = p.source_frames(sample.location_id[1]);
        // The allocator shows once, as the leaf: its caller is another function.
        assert_ne!(leaf[0].0, caller[0].0);
        let own = sample.location_id[1..]
            .iter()
            .flat_map(|&l| p.source_frames(l))
            .find(|(_, file, _, _)| file.starts_with("tests/fixtures/"));
        let (function, file, line, _) = own.unwrap_or_default();
        let values = sites
            .entry((leaf[0].0.clone(), function, file, line))
            .or_default();
        for (total, v) in values.iter_mut().zip(&sample.value) {
            *total += v;
        }
    }
    sites
}

/// The values of one site; a missing site fails the test.
fn site(sites: &Sites, allocator: &str, function: &str, file: &str, line: i64) -> [i64; 4] {
    let key = (allocator.into(), function.into(), file.into(), line);
    sites
        .get(&key)
        .copied()
        .unwrap_or_else(|| panic!("no {allocator} from {function}:{line} in {sites:#?}"))
}

#[test]
fn c_allocation_sites_with_exact_values() {
    let sites = heap_by_site("c/alloc.wasm", &[], "1");
    let site = |allocator: &str, function: &str, line| {
        site(
            &sites,
            allocator,
            function,
            "tests/fixtures/c/alloc.c",
            line,
        )
    };
    // alloc_objects, alloc_space, inuse_objects, inuse_space. wasi-libc's `calloc` and
    // `realloc` are dlmalloc's `dlcalloc` and `dlrealloc` under another symbol: DWARF names
    // them so.
    assert_eq!(site("malloc", "make_small", 9), [10, 240, 5, 120]);
    assert_eq!(site("dlcalloc", "make_table", 13), [1, 400, 1, 400]);
    // 64 + 128 + ... + 4096 bytes; each realloc frees the block before it.
    assert_eq!(site("dlrealloc", "grow", 17), [7, 8128, 1, 4096]);
    assert_eq!(
        sites.len(),
        3,
        "only the program's own allocations: {sites:?}"
    );
}

#[test]
fn rust_allocation_sites_with_exact_values() {
    let sites = heap_by_site("rust/alloc.wasm", &[], "1");
    let site = |allocator: &str, function: &str, line| {
        site(
            &sites,
            allocator,
            function,
            "tests/fixtures/rust/alloc.rs",
            line,
        )
    };
    let expected = [
        // The vector of eight box pointers, emptied and dropped.
        (
            "__rustc::__rust_alloc",
            "alloc::make_boxes",
            8,
            [1, 32, 0, 0],
        ),
        // Box::new([i; 100]): the first, all zeros, comes zeroed; every other one is dropped.
        (
            "__rustc::__rust_alloc_zeroed",
            "alloc::make_boxes",
            10,
            [1, 100, 1, 100],
        ),
        (
            "__rustc::__rust_alloc",
            "alloc::make_boxes",
            10,
            [7, 700, 3, 300],
        ),
        // Vec growth: 4 elements (32 bytes), then doubled by realloc up to 1024 (8192 bytes).
        (
            "__rustc::__rust_alloc",
            "alloc::grow_vec",
            19,
            [1, 32, 0, 0],
        ),
        (
            "__rustc::__rust_realloc",
            "alloc::grow_vec",
            19,
            [8, 16320, 1, 8192],
        ),
    ];
    for (allocator, function, line, values) in expected {
        assert_eq!(
            site(allocator, function, line),
            values,
            "{allocator} {function}:{line}"
        );
    }
}

#[test]
fn cpu_and_memory_profiles_from_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let (cpu, heap) = (dir.path().join("cpu.pb.gz"), dir.path().join("heap.pb.gz"));
    let out = wasmspy()
        .args(["record", "--mem-rate", "4096", "-o"])
        .arg(&cpu)
        .arg("--mem-profile")
        .arg(&heap)
        .arg("--")
        .arg(fixture("rust/iter.wasm"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("iter done: 1000 rounds"));
    let err = stderr(&out);
    assert_eq!(err.matches("wasmspy: wrote ").count(), 2, "{err}");

    // The CPU profile of the rewritten module, in the original's terms.
    let cpu = Decoded::load(&cpu);
    assert_eq!(cpu.top_self_compiled("cpu")[0].0, "iter::checksum", "{err}");

    // The 800 000-byte vector `main` collects is sampled (a block of more than 195 times the
    // mean interval is sampled with probability 1 − e^−195), counts as itself, and is freed
    // when `main` returns.
    let heap = Decoded::load(&heap);
    assert_eq!(heap.0.period, 4096);
    let (space, inuse) = (
        heap.value_index("alloc_space"),
        heap.value_index("inuse_space"),
    );
    let vector = heap
        .0
        .sample
        .iter()
        .find(|s| {
            s.location_id[1..]
                .iter()
                .flat_map(|&l| heap.source_frames(l))
                .any(|(f, _, line, _)| f == "iter::main" && line == 18)
        })
        .expect("the vector's allocation");
    assert_eq!(vector.value[space], 800_000);
    assert_eq!(vector.value[inuse], 0);
}

/// The README's memory profile of the bundled example: its one block of 160 000 bytes, sampled
/// at `--mem-rate 4096` (with probability 1 − e^−39), allocated under `sort_random` and freed.
/// `report` opens on the in-use bytes, none, and says which types have samples.
#[test]
fn bundled_example_shows_its_allocation_and_report_names_the_types_with_samples() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap.pb.gz");
    let out = wasmspy()
        .args(["record", "--mem-rate", "4096", "--mem-profile"])
        .arg(&heap)
        .arg("--")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hotspots.wasm"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let p = Decoded::load(&heap);
    let stacks = p.stacks();
    assert_eq!(stacks.len(), 1, "{stacks:?}");
    let (names, values) = &stacks[0];
    assert_eq!(names[..2], ["malloc", "sort_random"], "{names:?}");
    assert_eq!(values, &[1, 160_000, 0, 0]);

    let report = |flags: &[&str]| {
        let out = wasmspy()
            .arg("report")
            .args(flags)
            .arg(&heap)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        (stdout(&out), stderr(&out))
    };
    let (table, said) = report(&[]);
    assert!(table.starts_with("Type: inuse_space\n"), "{table}");
    assert_eq!(
        said,
        format!(
            "wasmspy: `{}` has no samples of inuse_space; alloc_objects has 1, alloc_space has 1 (--sample-index TYPE shows one)\n",
            heap.display()
        )
    );
    let (table, said) = report(&["--sample-index", "alloc_space"]);
    assert!(table.contains("sort_random"), "{table}");
    assert_eq!(said, "");
}

#[test]
fn ctrl_c_writes_both_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let (cpu, heap) = (dir.path().join("cpu.pb.gz"), dir.path().join("heap.pb.gz"));
    let result = ctrl_c_while_reading_stdin(&[
        "-o".as_ref(),
        cpu.as_ref(),
        "--mem-profile".as_ref(),
        heap.as_ref(),
    ]);
    assert_eq!(result.status.code(), Some(130), "{}", stderr(&result));
    assert_eq!(
        stderr(&result).matches("wasmspy: wrote ").count(),
        2,
        "{}",
        stderr(&result)
    );
    Decoded::load(&cpu);
    assert_eq!(Decoded::load(&heap).0.sample_type.len(), 4);
}

/// Go's allocations, through `runtime.mallocgc` and the size-specialized entry points the
/// compiler calls for `new`, under the Go functions that made them. Go's collector frees
/// without a call: in-use values leave them out, and the profile opens on `alloc_space`.
#[test]
fn go_allocations_are_attributed_to_go_functions() {
    let dir = tempfile::tempdir().unwrap();
    let (out, heap) = record_every_allocation(dir.path(), &fixture("go/alloc.wasm"), &["10"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "2047 100\n");
    let p = Decoded::load(&heap);
    assert_eq!(p.str(p.0.default_sample_type), "alloc_space");
    // (allocator, its caller, the first `main.` function) → values.
    let mut sites: BTreeMap<(String, String, String), [i64; 4]> = BTreeMap::new();
    for (names, values) in p.stacks() {
        let Some(main) = names.iter().find(|n| n.starts_with("main.")) else {
            continue;
        };
        let key = (names[0].clone(), names[1].clone(), main.clone());
        let total = sites.entry(key).or_default();
        for (t, v) in total.iter_mut().zip(values) {
            *t += v;
        }
    }
    let site = |allocator: &str, caller: &str, main: &str| {
        sites
            .get(&(allocator.into(), caller.into(), main.into()))
            .copied()
            .unwrap_or_else(|| panic!("no {allocator} under {caller} in {sites:#?}"))
    };
    // 2^11 − 1 nodes of 24 bytes, each a direct call to a size-specialized mallocgc.
    assert_eq!(
        site(
            "runtime.mallocgcSmallScanNoHeaderSC3",
            "main.build",
            "main.build"
        ),
        [2047, 2047 * 24, 0, 0]
    );
    // The slice of 100 slice headers (2400 bytes) and its 100 buffers of 4096 bytes.
    assert_eq!(
        site("runtime.mallocgc", "runtime.makeslice", "main.buffers"),
        [101, 100 * 24 + 100 * 4096, 0, 0]
    );
    // Named by Go's own symbol table, with the file and line where each function starts.
    let function = |name: &str| {
        p.sampled_functions()
            .into_iter()
            .find(|f| p.str(f.name) == name)
            .unwrap_or_else(|| panic!("no {name}"))
    };
    let build = function("main.build");
    assert_eq!(
        (p.str(build.filename), build.start_line),
        ("./alloc.go", 17)
    );
    assert!(p
        .str(function("runtime.mallocgc").filename)
        .ends_with("runtime/malloc.go"));
}

/// A component's allocators (`tests/fixtures/rust/component.rs`, `alloc`, the same program as
/// `alloc.rs`): its core module rewritten inside the component gives each site its exact
/// values, as for the module. Allocations the host makes through `cabi_realloc`, to pass the arguments
/// in, are not reported (see `Allocator::HostCalled`).
#[test]
fn component_allocation_sites_with_exact_values() {
    let sites = heap_by_site("rust/component.wasm", &["alloc"], "1");
    let file = "tests/fixtures/rust/component.rs";
    let expected = [
        (
            "__rustc::__rust_alloc",
            "component::make_boxes",
            53,
            [1, 32, 0, 0],
        ),
        // Here the first box is no special case: all eight through `__rust_alloc`.
        (
            "__rustc::__rust_alloc",
            "component::make_boxes",
            55,
            [8, 800, 4, 400],
        ),
        (
            "__rustc::__rust_alloc",
            "component::grow_vec",
            64,
            [1, 32, 0, 0],
        ),
        (
            "__rustc::__rust_realloc",
            "component::grow_vec",
            64,
            [8, 16320, 1, 8192],
        ),
    ];
    for (allocator, function, line, values) in expected {
        assert_eq!(
            site(&sites, allocator, function, file, line),
            values,
            "{allocator} {function}:{line}"
        );
    }
}

/// `tests/fixtures/interpreters/allocs.js` run by a componentize-qjs component, every
/// allocation recorded: QuickJS's engine, a module without names inside a component nested in
/// the one run, has its C allocator found from its `cabi_realloc`, and each JavaScript line
/// gets what it asked that allocator for, under its JavaScript frames (`fill` at the line,
/// `run` at its call of `fill`). An ArrayBuffer of N bytes is one block of N + 8: QuickJS's
/// 8-byte block header (`JSMallocBlockHeader`, quickjs-ng 0.16) before its data. The
/// buffer's 32-byte record comes from QuickJS's own arenas of 40-byte blocks, which the C
/// allocator sees once per arena: 4064 bytes (24 of header, 101 blocks), at the line that
/// found the last one full, once at most in 20 rounds.
#[test]
fn a_quickjs_component_allocates_by_javascript_line() {
    const ROUNDS: i64 = 20;
    const HEADER: i64 = 8;
    const ARENA: i64 = 4064;
    let Some(qjs) = built_component("allocs-qjs.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap.pb.gz");
    let out = wasmspy()
        .args(["record", "--mem-rate", "1", "--mem-profile"])
        .arg(&heap)
        .args(["--invoke", &format!("run({ROUNDS})"), "--"])
        .arg(&qjs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "\"20000060 20\"");
    assert!(!stderr(&out).contains("memory profile"), "{}", stderr(&out));
    let p = Decoded::load(&heap);
    // By line of `fill`: alloc_objects, alloc_space, inuse_objects, inuse_space.
    let mut by_line: BTreeMap<i64, [i64; 4]> = BTreeMap::new();
    for sample in &p.0.sample {
        let frames = p.sample_frames(sample);
        let Some((_, file, line)) = frames.first() else {
            continue;
        };
        if !file.ends_with("allocs.js") {
            continue;
        }
        let caller = frames.get(1).map(|(_, file, line)| (file.as_str(), *line));
        assert!(
            caller.is_some_and(|(file, line)| file.ends_with("allocs.js") && line == 17),
            "{frames:?}"
        );
        let values = by_line.entry(*line).or_default();
        for (total, v) in values.iter_mut().zip(&sample.value) {
            *total += v;
        }
    }
    assert_eq!(
        by_line.keys().copied().collect::<Vec<_>>(),
        [10, 11],
        "{by_line:?}"
    );
    // (line, the buffer's size, how many of them are kept).
    for (line, size, kept) in [(10, 1_000_003, 0), (11, 2_000_017, ROUNDS)] {
        let [objects, space, inuse_objects, inuse_space] = by_line[&line];
        let arenas = objects - ROUNDS;
        assert!(
            (0..=1).contains(&arenas),
            "line {line}: {:?}",
            by_line[&line]
        );
        assert_eq!(
            space,
            ROUNDS * (size + HEADER) + arenas * ARENA,
            "line {line}"
        );
        let arenas_in_use = inuse_objects - kept;
        assert!(
            (0..=arenas).contains(&arenas_in_use),
            "line {line}: {:?}",
            by_line[&line]
        );
        assert_eq!(
            inuse_space,
            kept * (size + HEADER) + arenas_in_use * ARENA,
            "line {line}"
        );
    }
}

/// What a StarlingMonkey component's memory profile measures (docs/javascript.md): what
/// SpiderMonkey asks of its C allocator, under the JavaScript stack that was running. The
/// engine's garbage collector takes its cells from chunks of 1 MiB (`posix_memalign`, in
/// `js::gc::GCRuntime::getOrAllocChunk`) when its nursery grows or a minor collection needs
/// tenured space, so a chunk shows at the line whose allocation needed it; each string or
/// object the script makes does not. `timed_sm.js`'s `build` makes a string a round with
/// `text += …` (line 26), which needs chunks there; `fib` allocates nothing (its numbers are
/// not cells). Every allocation recorded, 100 rounds: all the bytes but the WASI adapter's
/// state and stack (64 KiB each, allocated as the export first reads the clock, before any
/// JavaScript runs) are under the script's JavaScript frames (96 % to 98 % measured);
/// `build`'s are all at line 26, under `measure` at its call (37) and `run` (56), whole chunks
/// but for a few small blocks (3 to 5 chunks measured); under `fib`, at most `fib_at_most`
/// bytes (none in the C++ interpreter).
fn gc_chunks_at_javascript_lines(component: &std::path::Path, native: bool, fib_at_most: i64) {
    const MIB: i64 = 1 << 20;
    let what = component.display();
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap.pb.gz");
    let out = wasmspy()
        .args(["record", "-S", "http", "--mem-rate", "1", "--mem-profile"])
        .arg(&heap)
        .args(native.then_some("--native"))
        .arg("--")
        .arg(component)
        .arg("100")
        .output()
        .unwrap();
    assert!(out.status.success(), "{what}: {}", stderr(&out));
    // Its allocator recognised: no "the memory profile leaves out…" or "will be empty".
    assert!(
        !stderr(&out).contains("memory profile"),
        "{what}: {}",
        stderr(&out)
    );
    let p = Decoded::load(&heap);
    let (objects, space) = (p.value_index("alloc_objects"), p.value_index("alloc_space"));
    let (mut total, mut in_javascript, mut in_fib) = (0, 0, 0);
    let (mut chunks, mut chunk_bytes, mut at_build) = (0, 0, 0);
    for s in &p.0.sample {
        let frames = p.sample_frames(s);
        total += s.value[space];
        if frames.iter().any(|(_, file, _)| file.ends_with(".js")) {
            in_javascript += s.value[space];
        }
        if frames
            .iter()
            .any(|(name, ..)| name == "fib (timed_sm.js:16:13)")
        {
            in_fib += s.value[space];
        }
        let Some(build) = frames
            .iter()
            .position(|(name, ..)| name == "build (timed_sm.js:23:15)")
        else {
            continue;
        };
        let at = |i: usize| frames.get(i).map(|(name, _, line)| (name.as_str(), *line));
        assert_eq!(
            [at(build), at(build + 1), at(build + 2)],
            [
                Some(("build (timed_sm.js:23:15)", 26)),
                Some(("measure (timed_sm.js:31:17)", 37)),
                Some(("run (timed_sm.js:46:6)", 56))
            ],
            "{what}: {frames:?}"
        );
        at_build += s.value[space];
        // With --native, the engine's frames above: a chunk is posix_memalign's, for the GC.
        let chunk = frames[0].0 == "posix_memalign"
            && frames[..build]
                .iter()
                .any(|(name, ..)| name.starts_with("js::gc::GCRuntime::getOrAllocChunk("));
        if chunk {
            assert_eq!(s.value[space], s.value[objects] * MIB, "{what}: {frames:?}");
            chunks += s.value[objects];
            chunk_bytes += s.value[space];
        }
    }
    // The adapter's state and stack are 64 KiB each; nothing else is outside.
    assert!(
        total - in_javascript <= 192 << 10,
        "{what}: {in_javascript} of {total} bytes under JavaScript frames"
    );
    assert!(in_fib <= fib_at_most, "{what}: {in_fib} bytes under fib");
    assert!(
        at_build >= MIB && at_build % MIB < 64 << 10,
        "{what}: {at_build} bytes at build's line 26"
    );
    if native {
        assert!(
            chunks >= 1 && chunk_bytes == at_build / MIB * MIB,
            "{what}: {chunks} chunks, {chunk_bytes} of {at_build} bytes at line 26"
        );
    }
}

/// The release engine, without names: its C allocator found from its `cabi_realloc`, which
/// calls `realloc`, `free` and (when they fail) `api::Engine::abort`.
#[test]
fn a_starlingmonkey_component_allocates_gc_chunks_at_javascript_lines() {
    if let Some(component) = built_component("timed-sm.wasm") {
        gc_chunks_at_javascript_lines(&component, false, 0);
    }
}

/// The weval engine, without names either: its `cabi_realloc` calls `JS_realloc` and
/// `JS_free`, not inlined there, which forward to `realloc` and `free`. Its portable baseline
/// interpreter runs on inline caches, whose data the engine allocates for each function as it
/// warms up: `fib`'s, once, at its first line (6.4 KiB measured, in 5 blocks).
#[test]
fn a_starlingmonkey_weval_component_allocates_gc_chunks_at_javascript_lines() {
    if let Some(component) = built_component("timed-sm-weval.wasm") {
        gc_chunks_at_javascript_lines(&component, false, 16 << 10);
    }
}

/// The debug engine, its allocators by name; with `--native`, the chunks at `build`'s line are
/// `posix_memalign`'s for `js::gc::GCRuntime::getOrAllocChunk`, 1 MiB each.
#[test]
fn a_starlingmonkey_debug_engines_chunks_are_the_gcs() {
    if let Some(component) = built_component("timed-sm-debug.wasm") {
        gc_chunks_at_javascript_lines(&component, false, 0);
        gc_chunks_at_javascript_lines(&component, true, 0);
    }
}
