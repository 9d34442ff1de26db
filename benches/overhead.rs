//! Sampling overhead on the Sightglass corpus, side by side in one run:
//! plain Wasmtime (same engine settings, no profiler), wasmspy's signal sampler, its epoch
//! sampler, and Wasmtime's own `GuestProfiler`, all at 1 kHz; and the signal sampler at 10 kHz,
//! whose cost per sample stands ten times further above this machine's noise, extrapolated to
//! 1 kHz (`1 + (ratio − 1) / 10`).
//!
//! `cargo bench --bench overhead [-- --reps N] [-- NAME-FILTER]`
//!
//! Each measurement is a fresh process of this binary (`--run CONFIG MODULE`) that compiles the
//! module, then times instantiation, the guest's run and the profiler's stop; compilation is
//! outside the timed part, as it is the same in every configuration. The machines here drift by
//! several percent from one run to the next, so measurements are paired: within a repetition
//! every configuration runs right after the others, each is divided by that repetition's plain
//! time, and the table shows the median of those ratios.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::{check, median};
use wasmspy::sampler::SamplerKind;
use wasmspy::wasi_host::{self, DirMount, UnknownImports, WasiConfig};
use wasmspy::{Profiler, ProfilerOptions};
use wasmtime::{Engine, GuestProfiler, Module, UpdateDeadline};

const CONFIGS: [&str; 5] = ["plain", "signal", "epoch", "guest-profiler", "signal-10k"];
const RATE_HZ: u32 = 1000;
/// Programs faster than this in plain Wasmtime are too short to time reliably here.
const MIN_SECONDS: f64 = 0.2;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--run") {
        let seconds = run_one(&args[1], Path::new(&args[2]));
        println!("{seconds}");
        return;
    }
    let mut reps = 5;
    let mut filter = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--reps" => {
                reps = args[i + 1].parse().expect("--reps N");
                i += 1;
            }
            "--bench" => {}
            other => filter = Some(other.to_string()),
        }
        i += 1;
    }
    let Some(root) = common::corpus() else {
        return;
    };
    let modules: Vec<PathBuf> = corpus_modules(&root)
        .into_iter()
        .filter(|m| {
            filter
                .as_ref()
                .is_none_or(|f| m.to_string_lossy().contains(f.as_str()))
        })
        .collect();

    println!("sampling overhead at {RATE_HZ} Hz: median over {reps} repetitions of the time as a ratio to plain Wasmtime's");
    println!(
        "{:<34} {:>9} {:>8} {:>8} {:>15} {:>11} {:>15}",
        "program", "plain s", "signal", "epoch", "guest-profiler", "signal 10k", "(10k → 1 kHz)"
    );
    let mut log_sums = [0f64; CONFIGS.len()];
    let mut counted = 0;
    for module in &modules {
        let name = module.strip_prefix(&root).unwrap().display().to_string();
        if measure("plain", module) < MIN_SECONDS {
            println!("{name:<34} (shorter than {MIN_SECONDS} s: skipped)");
            continue;
        }
        let mut plain = Vec::new();
        let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); CONFIGS.len()];
        for rep in 0..reps {
            let mut times = [0f64; CONFIGS.len()];
            for k in 0..CONFIGS.len() {
                let c = (k + rep) % CONFIGS.len();
                times[c] = measure(CONFIGS[c], module);
            }
            plain.push(times[0]);
            for (r, t) in ratios.iter_mut().zip(times) {
                r.push(t / times[0]);
            }
        }
        let ratios: Vec<f64> = ratios.iter_mut().map(|r| median(r)).collect();
        println!(
            "{name:<34} {:>9.3} {:>8.3} {:>8.3} {:>15.3} {:>11.3} {:>15.4}",
            median(&mut plain),
            ratios[1],
            ratios[2],
            ratios[3],
            ratios[4],
            1.0 + (ratios[4] - 1.0) / 10.0
        );
        for (sum, r) in log_sums.iter_mut().zip(&ratios) {
            *sum += r.ln();
        }
        counted += 1;
    }
    if counted > 0 {
        let g: Vec<f64> = log_sums
            .iter()
            .map(|s| (s / counted as f64).exp())
            .collect();
        println!(
            "{:<34} {:>9} {:>8.3} {:>8.3} {:>15.3} {:>11.3} {:>15.4}",
            format!("geometric mean ({counted} programs)"),
            "",
            g[1],
            g[2],
            g[3],
            g[4],
            1.0 + (g[4] - 1.0) / 10.0
        );
    }
}

/// Seconds one configuration takes on one module, in a fresh process.
fn measure(config: &str, module: &Path) -> f64 {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--run", config])
        .arg(module.file_name().unwrap())
        .current_dir(module.parent().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run a measurement");
    assert!(
        out.status.success(),
        "{config} {} failed: {}",
        module.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .last()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("{config} {}: no time in its output", module.display()))
}

fn corpus_modules(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in std::fs::read_dir(root).unwrap().flatten() {
        for file in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = file.path();
            if path.extension().is_some_and(|e| e == "wasm")
                && !wasmparser::Parser::is_component(&std::fs::read(&path).unwrap())
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The child: compile, then time the run under `config`. The guest's stdout goes nowhere
/// (the parent reads only the last line, the time).
fn run_one(config: &str, module_path: &Path) -> f64 {
    let mut engine_config = wasi_host::engine_config();
    Profiler::configure(&mut engine_config);
    let engine = Engine::new(&engine_config).unwrap();
    let wasm = std::fs::read(module_path).unwrap();
    let module = Module::new(&engine, &wasm).unwrap();
    let name = module_path.display().to_string();
    let wasi = WasiConfig {
        argv: vec![name.clone()],
        env: Vec::new(),
        dirs: vec![".".parse::<DirMount>().unwrap()],
        unknown_imports: UnknownImports::DefaultValues,
    };
    // The parent reads the time from stdout: the guest's output goes to /dev/null.
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    // SAFETY: dup and dup2 of descriptors we own.
    let saved_stdout = unsafe { libc::dup(1) };
    unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1) };
    let mut store = wasi_host::new_store(&engine, &wasi).unwrap();
    let elapsed = match config {
        "plain" => {
            // Epoch interruption is compiled in, as in the other configurations, but never fires.
            store.set_epoch_deadline(1 << 40);
            let start = Instant::now();
            check(wasi_host::run(&mut store, &module, wasi.unknown_imports));
            start.elapsed()
        }
        "signal" | "signal-10k" | "epoch" => {
            let (sampler, rate_hz) = match config {
                "signal" => (SamplerKind::Signal, RATE_HZ),
                "signal-10k" => (SamplerKind::Signal, 10 * RATE_HZ),
                _ => (SamplerKind::Epoch, RATE_HZ),
            };
            let options = ProfilerOptions {
                rate_hz,
                sampler,
                ..Default::default()
            };
            let mut profiler = Profiler::new(&engine, options).unwrap();
            profiler
                .add_module(&name, &module, wasm.as_slice())
                .unwrap();
            profiler.attach(&mut store).unwrap();
            let start = Instant::now();
            profiler.start().unwrap();
            check(wasi_host::run(&mut store, &module, wasi.unknown_imports));
            std::hint::black_box(profiler.stop());
            start.elapsed()
        }
        "guest-profiler" => {
            let period = wasmspy::clock::sampling_period(RATE_HZ);
            let profiler =
                GuestProfiler::new(&engine, &name, period, [(name.clone(), module.clone())])
                    .unwrap();
            let profiler = Arc::new(Mutex::new(profiler));
            // As `wasmtime run --profile guest` does: sample at epoch ticks and at host calls.
            store.set_epoch_deadline(1);
            let sampling = profiler.clone();
            let mut last = Instant::now();
            store.epoch_deadline_callback(move |ctx| {
                let now = Instant::now();
                sampling.lock().unwrap().sample(&ctx, now - last);
                last = now;
                Ok(UpdateDeadline::Continue(1))
            });
            let hooks = profiler.clone();
            store.call_hook(move |ctx, kind| {
                hooks.lock().unwrap().call_hook(&ctx, kind);
                Ok(())
            });
            let ticking = Arc::new(std::sync::atomic::AtomicBool::new(true));
            let ticker = {
                let (engine, ticking) = (engine.clone(), ticking.clone());
                std::thread::spawn(move || {
                    while ticking.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(period);
                        engine.increment_epoch();
                    }
                })
            };
            let start = Instant::now();
            check(wasi_host::run(&mut store, &module, wasi.unknown_imports));
            let elapsed = start.elapsed();
            ticking.store(false, std::sync::atomic::Ordering::Relaxed);
            ticker.join().unwrap();
            elapsed
        }
        other => panic!("unknown configuration {other}"),
    };
    use std::io::Write;
    let _ = std::io::stdout().flush();
    // SAFETY: restores the stdout saved above.
    unsafe { libc::dup2(saved_stdout, 1) };
    elapsed.as_secs_f64()
}
