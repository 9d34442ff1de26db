//! Memory-profiling overhead on the corpus's allocation-heavy programs, side by side in one
//! run: the plain module, then its allocator rewrite recording a heap profile at the default
//! rate (512 KiB) and at every allocation (`--mem-rate 1`), as ratios of the plain time of
//! the guest's run (instantiation to exit). Building the heap profile afterwards
//! (symbolizing its stacks) costs the same whatever the program's length: it is shown apart,
//! in seconds.
//!
//! `cargo bench --profile dev --features internals --bench memory [-- --reps N]`
//!
//! Everything runs in this process (compilation outside the timed part); repetitions alternate
//! the configurations and the table shows medians of per-repetition ratios. The plain module
//! runs on a default engine, as `wasmtime run` builds it; the CPU sampler is the signal one at
//! 1 Hz, so what is measured is the memory profile's cost. The guests' own output goes to this
//! process's stdout; the table comes last.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use common::{check, median};
use wasmspy::memory::rewrite::{rewrite, Rewritten};
use wasmspy::wasi_host::{self, DirMount, UnknownImports, WasiConfig};
use wasmspy::SamplerKind;
use wasmspy::{Profiler, ProfilerOptions};
use wasmtime::{Engine, Module};

/// The committed corpus programs that allocate the most (bytes allocated, from the corpus
/// test's log: 14 and 10 MB), C++'s `new` on C's `malloc` and C's own, and the Rust one, whose
/// 5,500 allocations (1.7 MiB) go through `__rust_alloc`.
const PROGRAMS: [&str; 3] = [
    "hashset/benchmark.wasm",
    "bz2/benchmark.wasm",
    "blind-sig/benchmark.wasm",
];

fn main() {
    let reps: usize = common::option("--reps", 7);
    let root = common::corpus();
    let plain_engine = Engine::new(&wasi_host::engine_config()).unwrap();
    let mut config = wasi_host::engine_config();
    Profiler::configure(&mut config, &profiler_options(0));
    let engine = Engine::new(&config).unwrap();
    let mut rows = Vec::new();
    for program in PROGRAMS {
        let path = root.join(program);
        let wasm: Arc<[u8]> = std::fs::read(&path).unwrap().into();
        let rewritten = Arc::new(rewrite(&wasm).unwrap().expect("the program has allocators"));
        let plain = Module::new(&plain_engine, &wasm).unwrap();
        let instrumented = Module::new(&engine, &rewritten.wasm).unwrap();
        let dir = path.parent().unwrap();
        let mut ratios = [Vec::new(), Vec::new()];
        let mut profile_times = [Vec::new(), Vec::new()];
        let mut plain_times = Vec::new();
        for _ in 0..reps {
            let (base, _) = run(&plain_engine, dir, &plain, None);
            plain_times.push(base);
            for ((ratio, profile), rate) in ratios
                .iter_mut()
                .zip(&mut profile_times)
                .zip([512 * 1024, 1])
            {
                let setup = (&wasm, &rewritten, rate);
                let (guest, building) = run(&engine, dir, &instrumented, Some(setup));
                ratio.push(guest / base);
                profile.push(building);
            }
        }
        rows.push((
            program,
            median(&mut plain_times),
            ratios.map(|mut r| median(&mut r)),
            profile_times.map(|mut t| median(&mut t)),
        ));
    }
    println!("\nmemory-profiling overhead: median over {reps} repetitions of the guest's time as a ratio to the plain module's,");
    println!("and the seconds to build the heap profile after the guest's exit");
    println!(
        "{:<36} {:>8} {:>12} {:>12} {:>12} {:>12}",
        "program", "plain s", "512 KiB rate", "every alloc", "profile s", "profile s"
    );
    let mut logs = [0f64; 2];
    for (program, plain, ratios, profile) in &rows {
        println!(
            "{program:<36} {plain:>8.3} {:>12.3} {:>12.3} {:>12.3} {:>12.3}",
            ratios[0], ratios[1], profile[0], profile[1]
        );
        for (sum, r) in logs.iter_mut().zip(ratios) {
            *sum += r.ln();
        }
    }
    let n = rows.len() as f64;
    println!(
        "{:<36} {:>8} {:>12.3} {:>12.3}",
        "geometric mean",
        "",
        (logs[0] / n).exp(),
        (logs[1] / n).exp()
    );
}

/// The original module, its rewrite, and the sampling rate.
type MemorySetup<'a> = (&'a Arc<[u8]>, &'a Arc<Rewritten>, u64);

/// Seconds the guest runs, and then to build its heap profile: the plain module (no profile),
/// or (with `memory`) the rewritten one under a profiler recording its heap at the given rate.
fn run(
    engine: &Engine,
    dir: &Path,
    module: &Module,
    memory: Option<MemorySetup<'_>>,
) -> (f64, f64) {
    let wasi = WasiConfig {
        argv: vec!["benchmark.wasm".into()],
        env: Vec::new(),
        dirs: vec![format!("{}::.", dir.display()).parse::<DirMount>().unwrap()],
        unknown_imports: UnknownImports::DefaultValues,
        ..Default::default()
    };
    let mut store = wasi_host::new_store(engine, &wasi).unwrap();
    let Some((original, rewritten, rate)) = memory else {
        let start = Instant::now();
        check(wasi_host::run(&mut store, module));
        return (start.elapsed().as_secs_f64(), 0.0);
    };
    let mut profiler = Profiler::new(engine, profiler_options(rate)).unwrap();
    profiler
        .add_rewritten_module(
            "benchmark.wasm",
            module,
            original.clone(),
            rewritten.clone(),
        )
        .unwrap();
    profiler.attach(&mut store).unwrap();
    let start = Instant::now();
    profiler.start().unwrap();
    let exit = wasi_host::run_with(&mut store, module, |store, instance| {
        profiler.install_allocator_hook(&mut *store, instance)
    });
    check(exit);
    let guest = start.elapsed().as_secs_f64();
    let start = Instant::now();
    profiler.stop();
    std::hint::black_box(profiler.handle().heap_profile());
    (guest, start.elapsed().as_secs_f64())
}

/// Memory profiling at `rate`, with CPU samples once a second: the memory profile's cost alone.
fn profiler_options(rate: u64) -> ProfilerOptions {
    ProfilerOptions {
        rate_hz: 1,
        sampler: SamplerKind::Signal,
        mem_rate: Some(rate),
        ..Default::default()
    }
}
