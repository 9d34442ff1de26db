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

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use wasmspy::export::pprof;
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
