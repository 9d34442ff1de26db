//! Memory-profiling overhead on the corpus's allocation-heavy programs, side by side in one
//! run: the plain module, then its allocator rewrite recording a heap profile at the default
//! rate (512 KiB) and at every allocation (`--mem-rate 1`), as ratios of the plain time.
//!
//! `cargo bench --profile dev --bench memory [-- --reps N]`
//!
//! Everything runs in this process (compilation outside the timed part); repetitions alternate
//! the configurations and the table shows medians of per-repetition ratios. The CPU sampler is
//! the epoch one at 1 Hz, so what is measured is the memory profile's cost. The guests' own
//! output goes to this process's stdout; the table comes last.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use common::{check, median};
use wasmspy::memory::rewrite::{rewrite, Rewritten, HOOK_TABLE};
use wasmspy::sampler::SamplerKind;
use wasmspy::wasi_host::{self, DirMount, UnknownImports, WasiConfig};
use wasmspy::{Profiler, ProfilerOptions};
use wasmtime::{Engine, Module, Ref};

/// The corpus programs that allocate the most (bytes allocated, from the corpus test's log).
const PROGRAMS: [&str; 6] = [
    "rust-compression/benchmark.wasm",
    "hashset/benchmark.wasm",
    "rust-json/benchmark.wasm",
    "rust-html-rewriter/benchmark.wasm",
    "bz2/benchmark.wasm",
    "pulldown-cmark/benchmark.wasm",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps: usize = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .map_or(7, |n| n.parse().expect("--reps N"));
    let Some(root) = common::corpus() else {
        return;
    };
    let mut config = wasi_host::engine_config();
    Profiler::configure(&mut config);
    let engine = Engine::new(&config).unwrap();
    let mut rows = Vec::new();
    for program in PROGRAMS {
        let path = root.join(program);
        let wasm: Arc<[u8]> = std::fs::read(&path).unwrap().into();
        let rewritten = Arc::new(rewrite(&wasm).unwrap().expect("the program has allocators"));
        let plain = Module::new(&engine, &wasm).unwrap();
        let instrumented = Module::new(&engine, &rewritten.wasm).unwrap();
        let dir = path.parent().unwrap();
        let mut ratios = [Vec::new(), Vec::new()];
        let mut plain_times = Vec::new();
        for _ in 0..reps {
            let base = run(&engine, dir, &plain, None);
            plain_times.push(base);
            for (ratio, rate) in ratios.iter_mut().zip([512 * 1024, 1]) {
                let setup = (&wasm, &rewritten, rate);
                ratio.push(run(&engine, dir, &instrumented, Some(setup)) / base);
            }
        }
        rows.push((
            program,
            median(&mut plain_times),
            ratios.map(|mut r| median(&mut r)),
        ));
    }
    println!("\nmemory-profiling overhead: median over {reps} repetitions of the time as a ratio to the plain module's");
    println!(
        "{:<36} {:>9} {:>14} {:>14}",
        "program", "plain s", "512 KiB rate", "every alloc"
    );
    let mut logs = [0f64; 2];
    for (program, plain, ratios) in &rows {
        println!(
            "{program:<36} {plain:>9.3} {:>14.3} {:>14.3}",
            ratios[0], ratios[1]
        );
        for (sum, r) in logs.iter_mut().zip(ratios) {
            *sum += r.ln();
        }
    }
    let n = rows.len() as f64;
    println!(
        "{:<36} {:>9} {:>14.3} {:>14.3}",
        "geometric mean",
        "",
        (logs[0] / n).exp(),
        (logs[1] / n).exp()
    );
}

/// The original module, its rewrite, and the sampling rate.
type MemorySetup<'a> = (&'a Arc<[u8]>, &'a Arc<Rewritten>, u64);

/// Seconds one run takes: the plain module, or (with `memory`) the rewritten one under a
/// profiler recording its heap at the given rate.
fn run(engine: &Engine, dir: &Path, module: &Module, memory: Option<MemorySetup<'_>>) -> f64 {
    let wasi = WasiConfig {
        argv: vec!["benchmark.wasm".into()],
        env: Vec::new(),
        dirs: vec![format!("{}::.", dir.display()).parse::<DirMount>().unwrap()],
        unknown_imports: UnknownImports::DefaultValues,
    };
    let mut store = wasi_host::new_store(engine, &wasi).unwrap();
    let Some((original, rewritten, rate)) = memory else {
        // Epoch interruption is compiled in, as with the profiler, but never fires.
        store.set_epoch_deadline(1 << 40);
        let start = Instant::now();
        check(wasi_host::run(&mut store, module, wasi.unknown_imports));
        return start.elapsed().as_secs_f64();
    };
    let options = ProfilerOptions {
        rate_hz: 1,
        sampler: SamplerKind::Epoch,
        mem_rate: Some(rate),
        ..Default::default()
    };
    let mut profiler = Profiler::new(engine, options).unwrap();
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
    let exit = wasi_host::run_with(
        &mut store,
        module,
        wasi.unknown_imports,
        |store, instance| {
            let hook = profiler.allocator_hook(&mut *store);
            let table = instance.get_table(&mut *store, HOOK_TABLE).unwrap();
            table.set(&mut *store, 0, Ref::Func(Some(hook)))
        },
    );
    check(exit);
    std::hint::black_box(profiler.handle().heap_profile());
    profiler.stop();
    start.elapsed().as_secs_f64()
}
