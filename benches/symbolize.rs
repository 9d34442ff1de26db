//! What symbolization costs on large modules, next to what Wasmtime needs to compile them:
//! the time from the guest's end to the encoded profile, and the heap it takes on top of what
//! the process holds when the guest ends, with DWARF and with names only (`--no-dwarf`).
//!
//! `cargo bench --profile dev --features internals --bench symbolize`
//!
//! Modules: ripgrep built for wasm32-wasip1 with debug info (`benches/baseline/build-ripgrep.sh`; ~38 MB,
//! 16 MB of `.debug_info`), searching a generated 16 MiB text, and the two largest of the
//! committed Sightglass programs that carry DWARF (`tests/fixtures/sightglass`): TinyGo's
//! `tinygo-json` and C++'s `hashset`. Each is sampled at 10 kHz so that its profile shows many
//! distinct addresses.
//! Targets: DWARF symbolization under 1 s and under 1× the module's size in memory. The heap
//! columns include the profile itself (both runs build one); the last column is what DWARF
//! adds, as a share of the module's size.
//!
//! Then a source map against DWARF: a generated C program with DWARF and a ~10 MB map made of
//! that DWARF (`benches/baseline/build-sourcemap.sh`, which the bench runs), the same
//! addresses symbolized each way, from the module's bytes (and the map's file) to their
//! frames. Target: the map costs no more than DWARF.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use wasmspy::export::pprof;
use wasmspy::internals::resolve::symbolize::source_map::SourceMap;
use wasmspy::internals::resolve::symbolize::ModuleSymbolizer;
use wasmspy::internals::wasm::module_bytes::ModuleBytes;
use wasmspy::wasi_host::{self, DirMount, Exit, UnknownImports, WasiConfig};
use wasmspy::SamplerKind;
use wasmspy::{Profiler, ProfilerOptions};
use wasmtime::{Engine, Module};

/// The system allocator, counting the bytes in use and their high-water mark.
struct CountingAlloc;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator as is; the counts are atomics.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static HEAP: CountingAlloc = CountingAlloc;

const RATE_HZ: u32 = 10_000;
const MIB: f64 = 1024.0 * 1024.0;

struct Program {
    name: String,
    wasm: PathBuf,
    args: Vec<String>,
    /// The guest's working directory, preopened as `.`.
    dir: PathBuf,
}

/// Time and extra heap of one profile's symbolization and encoding.
struct Cost {
    seconds: f64,
    heap_bytes: usize,
    locations: usize,
}

fn main() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut programs = Vec::new();
    let rg = manifest.join("target/bench-programs/bin/rg.wasm");
    let scratch = tempfile::tempdir().unwrap();
    if rg.exists() {
        write_text(&scratch.path().join("text.txt"), 16 << 20);
        programs.push(Program {
            name: "ripgrep".into(),
            wasm: rg,
            args: [
                "-c",
                "-i",
                r"\b[a-z]+_[a-z]+\s*\(|error|[0-9]{3}-[0-9]{2}",
                "text.txt",
            ]
            .map(String::from)
            .to_vec(),
            dir: scratch.path().to_path_buf(),
        });
    } else {
        println!(
            "{} is absent: build it with benches/baseline/build-ripgrep.sh (measuring the corpus only)",
            rg.display()
        );
    }
    let corpus = manifest.join("tests/fixtures/sightglass");
    for rel in ["tinygo/tinygo-json.wasm", "hashset/benchmark.wasm"] {
        let wasm = corpus.join(rel);
        programs.push(Program {
            name: rel.to_string(),
            dir: wasm.parent().unwrap().to_path_buf(),
            wasm,
            args: Vec::new(),
        });
    }

    println!(
        "symbolization at the end of a {RATE_HZ} Hz profile, next to Wasmtime's compile time; heap on top of the process's at the guest's end"
    );
    println!(
        "{:<28} {:>7} {:>9} {:>6} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9}",
        "program",
        "MiB",
        "compile s",
        "locs",
        "names s",
        "DWARF s",
        "÷compile",
        "names MiB",
        "DWARF MiB",
        "+MiB÷size"
    );
    for program in &programs {
        let bytes: Arc<[u8]> = std::fs::read(&program.wasm).unwrap().into();
        let mut config = wasi_host::engine_config();
        Profiler::configure(&mut config, &ProfilerOptions::default());
        let engine = Engine::new(&config).unwrap();
        let start = Instant::now();
        let module = Module::new(&engine, &bytes).unwrap();
        let compile = start.elapsed().as_secs_f64();
        let names = profile_cost(&engine, &module, &bytes, program, false);
        let dwarf = profile_cost(&engine, &module, &bytes, program, true);
        println!(
            "{:<28} {:>7.1} {:>9.3} {:>6} {:>9.3} {:>9.3} {:>9.3} {:>10.1} {:>10.1} {:>9.3}",
            program.name,
            bytes.len() as f64 / MIB,
            compile,
            dwarf.locations,
            names.seconds,
            dwarf.seconds,
            dwarf.seconds / compile,
            names.heap_bytes as f64 / MIB,
            dwarf.heap_bytes as f64 / MIB,
            dwarf.heap_bytes.saturating_sub(names.heap_bytes) as f64 / bytes.len() as f64,
        );
    }
    source_map_against_dwarf(manifest);
}

/// Addresses spread evenly over the module's code: this many, each where an instruction
/// starts, with its function's index.
const MAP_ADDRESSES: usize = 5000;
const MAP_REPS: usize = 5;

/// The same addresses symbolized through the module's DWARF and through the map made of it:
/// the median time of each, and the lines they agree on.
fn source_map_against_dwarf(manifest: &Path) {
    let script = manifest.join("benches/baseline/build-sourcemap.sh");
    if !Command::new(&script).status().is_ok_and(|s| s.success()) {
        println!(
            "{}: failed, no source-map row (it needs clang, wasi-libc and emscripten)",
            script.display()
        );
        return;
    }
    let dir = manifest.join("target/bench-programs/sourcemap");
    let wasm: Arc<[u8]> = std::fs::read(dir.join("gen.wasm")).unwrap().into();
    let map = dir.join("gen.wasm.map");
    let addresses = instructions(&wasm);
    let symbolize = |map: Option<&Path>| {
        let start = Instant::now();
        let mut s =
            ModuleSymbolizer::new("gen.wasm", ModuleBytes::whole(wasm.clone()), true).unwrap();
        if let Some(map) = map {
            let json = std::fs::read(map).unwrap();
            s.use_source_map(true, |_| {
                Some(SourceMap::parse(&json, &dir, "gen.wasm.map"))
            });
        }
        s.symbolize(&addresses);
        let seconds = start.elapsed().as_secs_f64();
        assert!(s.take_warnings().is_empty(), "{map:?}: warned");
        let lines: Vec<_> = addresses
            .iter()
            .map(|&(f, o)| s.source_frames(f, o)[0].line)
            .collect();
        (seconds, lines)
    };
    // DWARF then the map, each repetition.
    let (mut times, mut lines) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for _ in 0..MAP_REPS {
        for (i, map) in [None, Some(map.as_path())].into_iter().enumerate() {
            let (seconds, found) = symbolize(map);
            times[i].push(seconds);
            lines[i] = found;
        }
    }
    // Of the addresses DWARF gives a line (clang's line 0, code of no line, wasm-sourcemap.py
    // leaves out: the map extends the row before over it), those the map gives the same.
    let with_line = lines[0].iter().filter(|&&d| d != 0).count();
    let same = lines[0]
        .iter()
        .zip(&lines[1])
        .filter(|(d, m)| d == m && **d != 0)
        .count();
    let [dwarf_s, map_s] = times.map(|mut t| common::median(&mut t));
    println!();
    println!(
        "a source map against the DWARF it was made of: {} addresses ({with_line} with a DWARF line), median of {MAP_REPS}",
        addresses.len()
    );
    println!(
        "{:<12} {:>10} {:>8} {:>9} {:>9} {:>8} {:>10}",
        "program", "module MiB", "map MiB", "DWARF s", "map s", "map÷DWARF", "same line"
    );
    println!(
        "{:<12} {:>10.1} {:>8.1} {:>9.3} {:>9.3} {:>8.2} {:>9.1}%",
        "gen.wasm",
        wasm.len() as f64 / MIB,
        std::fs::metadata(&map).unwrap().len() as f64 / MIB,
        dwarf_s,
        map_s,
        map_s / dwarf_s,
        100.0 * same as f64 / with_line as f64,
    );
}

/// [`MAP_ADDRESSES`] (function index, module offset) pairs, evenly spread over the offsets
/// where the module's instructions start.
fn instructions(wasm: &Arc<[u8]>) -> Vec<(u32, u32)> {
    let names_only = ModuleSymbolizer::new("", ModuleBytes::whole(wasm.clone()), false).unwrap();
    let mut function = names_only.imported_function_count();
    let mut all = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        if let wasmparser::Payload::CodeSectionEntry(body) = payload.unwrap() {
            let mut ops = body.get_operators_reader().unwrap();
            while !ops.eof() {
                let (_, offset) = ops.read_with_offset().unwrap();
                all.push((function, offset as u32));
            }
            function += 1;
        }
    }
    let step = (all.len() / MAP_ADDRESSES).max(1);
    all.into_iter().step_by(step).take(MAP_ADDRESSES).collect()
}

/// Runs the program under the profiler, then measures stopping it (which symbolizes) and
/// encoding its profile.
fn profile_cost(
    engine: &Engine,
    module: &Module,
    wasm: &Arc<[u8]>,
    program: &Program,
    dwarf: bool,
) -> Cost {
    let wasi = WasiConfig {
        argv: std::iter::once(program.name.clone())
            .chain(program.args.iter().cloned())
            .collect(),
        env: Vec::new(),
        dirs: vec![format!("{}::.", program.dir.display())
            .parse::<DirMount>()
            .unwrap()],
        unknown_imports: UnknownImports::DefaultValues,
        ..Default::default()
    };
    let options = ProfilerOptions {
        rate_hz: RATE_HZ,
        sampler: SamplerKind::Auto,
        dwarf,
        ..Default::default()
    };
    let mut profiler = Profiler::new(engine, options).unwrap();
    profiler
        .add_module(&program.name, module, wasm.clone())
        .unwrap();
    let mut store = wasi_host::new_store(engine, &wasi).unwrap();
    profiler.attach(&mut store).unwrap();
    profiler.start().unwrap();
    let exit = wasi_host::run(&mut store, module);
    assert!(matches!(exit, Exit::Code(0)), "{}: {exit:?}", program.name);

    // The profile is taken while the sampler still runs: stopping it frees its buffers, which
    // would hide the symbolizer's allocations from the high-water mark.
    let base = IN_USE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let start = Instant::now();
    let profile = profiler.handle().snapshot();
    let encoded = pprof::encode(&profile).unwrap();
    let seconds = start.elapsed().as_secs_f64();
    let heap_bytes = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    std::hint::black_box(encoded);
    profiler.stop();
    Cost {
        seconds,
        heap_bytes,
        locations: profile.frames.len(),
    }
}

/// `bytes` of lines of words, identifiers, calls and numbers, the same on every run.
fn write_text(path: &Path, bytes: usize) {
    const WORDS: [&str; 12] = [
        "the", "profile", "sample", "stack", "Error", "frame", "symbol", "module", "line",
        "inline", "call", "dwarf",
    ];
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut text = String::with_capacity(bytes + 100);
    while text.len() < bytes {
        for _ in 0..(next() % 12 + 3) {
            let r = next();
            let word = WORDS[(r % 12) as usize];
            match r % 7 {
                0 => text.push_str(&format!("{word}_{}(", WORDS[((r >> 8) % 12) as usize])),
                1 => text.push_str(&format!("{:03}-{:02}", r % 1000, (r >> 16) % 100)),
                _ => text.push_str(word),
            }
            text.push(' ');
        }
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}
