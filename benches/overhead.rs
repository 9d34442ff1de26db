//! Sampling overhead on the Sightglass programs committed for the tests
//! (`tests/fixtures/sightglass`), side by side in one run, against what users run instead: a
//! default Wasmtime engine (`Config::new()`, as `wasmtime run` builds it, no epoch
//! interruption, no call hook). The columns: wasmspy's signal sampler at 1 kHz and at 10 kHz
//! (whose cost per sample stands ten times further above this machine's noise, extrapolated to
//! 1 kHz as `1 + (ratio − 1) / 10`), its epoch sampler at 1 kHz, and Wasmtime's own
//! `GuestProfiler` at 1 kHz, set up as `wasmtime run --profile=guest` sets it up (epoch
//! interruption, sampling at epoch ticks and host calls). Each profiler's engine is configured
//! with what it needs and nothing more (`Profiler::configure`). The last column is the floor
//! of any timer-signal sampler on this machine: the same timer at 10 kHz with a handler that
//! does nothing (extrapolated to 1 kHz), on a default engine. Then the instructions clock
//! (`--clock instructions` at its default interval, a sample every 10^6 instructions), and, to
//! tell its parts apart, fuel alone: an engine that counts fuel (`Config::consume_fuel`) and a
//! store given more than it uses, no profiler: what the counting compiled into the guest's code
//! costs. The corpus's components
//! (`cm-online-stats`, `kotlin-richards`) are run as `wasmtime run` runs them, and profiled
//! with `Profiler::add_component` and `GuestProfiler::new_component`; their inputs make them
//! shorter than the programs timed here, so each runs from a copy whose `default.input`
//! count (the last number in it: iterations) is ten times larger. Programs built by Go (whose
//! goroutine stacks the signal sampler reads from linear memory) follow: the test fixture
//! `go/stacks.wasm`, and gofmt formatting a copy of `net/http` when `go` is at hand to build it.
//! Then CPython (whose Python stacks it reads): componentize-py's component of
//! `tests/fixtures/interpreters/timed_run.py` (CPython 3.14 inside a component, as
//! `tests/fixtures/interpreters/build.sh` builds it, its runtime probed as `wasmspy record`
//! probes it), and 3.12 and 3.11 as `tests/fixtures/cpython/fetch.sh` fetches them, running the
//! test script `python/timed.py` (mounted at `/app`; 3.11's standard library at `/usr`).
//! Then QuickJS (whose JavaScript stacks it reads): componentize-qjs's components of
//! `tests/fixtures/interpreters/timed.js` in its two ABIs, `run(3000)` called as `wasmtime run
//! --invoke` calls it (an argument `--invoke=CALL` of a program says so). Then StarlingMonkey
//! (SpiderMonkey, whose JavaScript stacks it reads too): ComponentizeJS's components of
//! `tests/fixtures/interpreters/timed_sm.js` in its release engine (the script's default
//! rounds) and, where built, its weval engine (`2000 4200`, build.sh's arguments), both about
//! 3 s, given `wasi:http` as `wasmtime run -S http` gives it (the engine imports it; an argument
//! `-S=http` of a program says so). The bar for these: the walk at most 1 % above the
//! floor, the `(10k → 1 kHz)` column against the `floor (→ 1 kHz)` one.
//!
//! `cargo bench --profile dev --features internals --bench overhead [-- --reps N] [-- NAME-FILTER]`
//!
//! Each measurement is a fresh process of this binary (`--run CONFIG MODULE`) that compiles the
//! module, then times instantiation, the guest's run and the profiler's stop; compilation is
//! outside the timed part, as it is the same in every configuration. The machines here drift by
//! several percent from one run to the next, so measurements are paired: within a repetition
//! every configuration runs right after the others, each is divided by that repetition's plain
//! time, and the table shows the median of those ratios.

mod common;
#[path = "../tests/common/gofmt.rs"]
mod gofmt;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::{
    check, geometric_mean, paired, report_seconds_with_stdout_silenced, seconds_in_child,
};
use wasmspy::probe_runtimes;
use wasmspy::wasi_host::{self, DirMount, Program, UnknownImports, WasiConfig};
use wasmspy::Clock;
use wasmspy::SamplerKind;
use wasmspy::{Profiler, ProfilerOptions};
use wasmtime::{Engine, GuestProfiler, UpdateDeadline};

const CONFIGS: [&str; 8] = [
    "default",
    "signal",
    "signal-10k",
    "epoch",
    "guest-profiler",
    "empty-handler-10k",
    "instructions",
    "fuel",
];
const RATE_HZ: u32 = 1000;
/// Programs faster than this on a default engine are too short to time reliably here.
const MIN_SECONDS: f64 = 0.2;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--run") {
        let (config, module) = (args[1].clone(), PathBuf::from(&args[2]));
        report_seconds_with_stdout_silenced(|| run_one(&config, &module, &args[3..]));
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
    let scratch = tempfile::tempdir().unwrap();
    let mut programs: Vec<(String, PathBuf, Vec<String>)> = Vec::new();
    let root = common::corpus();
    for module in corpus_modules(&root) {
        let name = module.strip_prefix(&root).unwrap().display().to_string();
        let module = lengthened(&module, scratch.path()).unwrap_or(module);
        programs.push((name, module, Vec::new()));
    }
    programs.extend(go_programs(scratch.path()));
    programs.extend(python_programs());
    programs.extend(javascript_programs());
    programs.extend(starlingmonkey_programs());
    programs.retain(|(name, _, _)| filter.as_ref().is_none_or(|f| name.contains(f.as_str())));

    println!("sampling overhead: median over {reps} repetitions of the time as a ratio to a default engine's (no profiler)");
    println!(
        "{:<36} {:>9} {:>10} {:>11} {:>14} {:>10} {:>15} {:>16} {:>13} {:>11}",
        "program",
        "default s",
        "signal 1k",
        "signal 10k",
        "(10k → 1 kHz)",
        "epoch 1k",
        "guest-prof. 1k",
        "floor (→ 1 kHz)",
        "instr. 10^6",
        "fuel alone"
    );
    let mut all: Vec<Vec<f64>> = vec![Vec::new(); CONFIGS.len()];
    for (name, module, args) in &programs {
        if seconds_in_child("default", module, args) < MIN_SECONDS {
            println!("{name:<36} (shorter than {MIN_SECONDS} s: skipped)");
            continue;
        }
        let (plain, ratios) = paired(CONFIGS.len(), reps, |c| {
            seconds_in_child(CONFIGS[c], module, args)
        });
        print_row(name, &format!("{plain:.3}"), &ratios);
        for (column, r) in all.iter_mut().zip(&ratios) {
            column.push(*r);
        }
    }
    if !all[0].is_empty() {
        let means: Vec<f64> = all.iter().map(|c| geometric_mean(c)).collect();
        print_row(
            &format!("geometric mean ({} programs)", all[0].len()),
            "",
            &means,
        );
        let highest = |column: &[f64]| column.iter().cloned().fold(f64::MIN, f64::max);
        println!(
            "signal sampler at 1 kHz: highest {:.3}; at 10 kHz extrapolated to 1 kHz: highest {:.4}",
            highest(&all[1]),
            1.0 + (highest(&all[2]) - 1.0) / 10.0
        );
        println!(
            "instructions clock: highest {:.3}; fuel alone: highest {:.3}",
            highest(&all[6]),
            highest(&all[7])
        );
    }
}

fn print_row(name: &str, seconds: &str, ratios: &[f64]) {
    println!(
        "{name:<36} {seconds:>9} {:>10.3} {:>11.3} {:>14.4} {:>10.3} {:>15.3} {:>16.4} {:>13.3} {:>11.3}",
        ratios[1],
        ratios[2],
        1.0 + (ratios[2] - 1.0) / 10.0,
        ratios[3],
        ratios[4],
        1.0 + (ratios[5] - 1.0) / 10.0,
        ratios[6],
        ratios[7]
    );
}

/// For a component: a copy of it beside a `default.input` whose last number is ten times
/// larger.
fn lengthened(program: &Path, scratch: &Path) -> Option<PathBuf> {
    if !wasmparser::Parser::is_component(&std::fs::read(program).unwrap()) {
        return None;
    }
    let input = std::fs::read_to_string(program.with_file_name("default.input")).ok()?;
    let (head, count) = input
        .trim_end()
        .rsplit_once(',')
        .unwrap_or(("", input.trim_end()));
    let count: u64 = count.parse().ok()?;
    let separator = if head.is_empty() { "" } else { "," };
    let dir = scratch.join(program.parent()?.file_name()?);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("default.input"),
        format!("{head}{separator}{}\n", count * 10),
    )
    .unwrap();
    let copy = dir.join(program.file_name()?);
    std::fs::copy(program, &copy).unwrap();
    Some(copy)
}

/// Programs built by Go (whose stacks the signal sampler reads from linear memory): the test
/// fixture `go/stacks.wasm`, and gofmt formatting a copy of `net/http` when the Go toolchain
/// the test command installs (`go`) is at hand to build it.
fn go_programs(scratch: &Path) -> Vec<(String, PathBuf, Vec<String>)> {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/go/stacks.wasm");
    let mut programs = vec![("go/stacks.wasm".to_string(), fixture, vec!["20000".into()])];
    let Some(goroot) = gofmt::goroot() else {
        println!("go/gofmt.wasm: no `go` to build it (scripts/test.sh installs it): skipped");
        return programs;
    };
    let dir = scratch.join("gofmt");
    let http = dir.join("http");
    std::fs::create_dir_all(&http).unwrap();
    for file in std::fs::read_dir(goroot.join("src/net/http"))
        .unwrap()
        .flatten()
    {
        if file.path().extension().is_some_and(|e| e == "go") {
            std::fs::copy(file.path(), http.join(file.file_name())).unwrap();
        }
    }
    let wasm = dir.join("gofmt.wasm");
    gofmt::build(&wasm);
    programs.push(("go/gofmt.wasm net/http".into(), wasm, vec!["/http".into()]));
    programs
}

/// CPython 3.12 and 3.11 running `tests/fixtures/python/timed.py`, where fetched, and
/// componentize-py's component running its `main` (CPython 3.14), where built.
fn python_programs() -> Vec<(String, PathBuf, Vec<String>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut programs = Vec::new();
    let component = root.join("target/interpreters/timed-py.wasm");
    let name = "componentize-py timed-py.wasm".to_string();
    match component.exists() {
        true => programs.push((name, component, vec!["450".into()])),
        false => println!("{name}: not built (tests/fixtures/interpreters/build.sh): skipped"),
    }
    for version in ["3.12.0", "3.11.1"] {
        let wasm = root.join(format!("target/cpython/python-{version}.wasm"));
        let name = format!("python-{version} timed.py");
        if !wasm.exists() {
            println!("{name}: not fetched (tests/fixtures/cpython/fetch.sh): skipped");
            continue;
        }
        let args = vec!["/app/timed.py".into(), "150".into()];
        programs.push((name, wasm, args));
    }
    programs
}

/// componentize-qjs's components of `timed.js` (QuickJS), where built: `run(3000)`.
fn javascript_programs() -> Vec<(String, PathBuf, Vec<String>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut programs = Vec::new();
    for build in ["timed-qjs.wasm", "timed-qjs-sync.wasm"] {
        let component = root.join("target/interpreters").join(build);
        let name = format!("componentize-qjs {build}");
        match component.exists() {
            true => programs.push((name, component, vec![format!("{INVOKE}run(3000)")])),
            false => println!("{name}: not built (tests/fixtures/interpreters/build.sh): skipped"),
        }
    }
    programs
}

/// ComponentizeJS's components of `timed_sm.js` (StarlingMonkey), where built: the release
/// engine at the script's default rounds, the weval engine at the arguments build.sh gives it
/// (it runs `fib` faster and `build` slower), each about 3 s. The debug engine is left out: it
/// runs the same SpiderMonkey, walked the same way, as the release one.
fn starlingmonkey_programs() -> Vec<(String, PathBuf, Vec<String>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut programs = Vec::new();
    for (build, args) in [
        ("timed-sm.wasm", &[][..]),
        ("timed-sm-weval.wasm", &["2000", "4200"][..]),
    ] {
        let component = root.join("target/interpreters").join(build);
        let name = format!("componentize-js {build}");
        let args = std::iter::once(HTTP)
            .chain(args.iter().copied())
            .map(str::to_string)
            .collect();
        match component.exists() {
            true => programs.push((name, component, args)),
            false => println!("{name}: not built (tests/fixtures/interpreters/build.sh): skipped"),
        }
    }
    programs
}

/// A program's argument that names the function to call, as `--invoke` does.
const INVOKE: &str = "--invoke=";
/// A program's argument that gives it `wasi:http`, as `-S http` does: StarlingMonkey imports
/// it (for `fetch`) whatever the component's world, and would not link without it.
const HTTP: &str = "-S=http";

/// What a program gets mounted besides the working directory: CPython's test scripts, and the
/// standard library of CPython 3.11 (beside its module) where there is one.
fn python_mounts(module: &Path) -> Vec<DirMount> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut mounts = vec![format!(
        "{}::/app",
        root.join("tests/fixtures/python").display()
    )];
    let usr = module.with_file_name("python-3.11/usr");
    if usr.exists() {
        mounts.push(format!("{}::/usr", usr.display()));
    }
    mounts.iter().map(|m| m.parse().unwrap()).collect()
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
            if path.extension().is_some_and(|e| e == "wasm") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The child: compile, then time the run under `config` with `args`.
fn run_one(config: &str, module_path: &Path, args: &[String]) -> f64 {
    let sampler = match config {
        "signal" | "signal-10k" => Some(SamplerKind::Signal),
        "epoch" => Some(SamplerKind::Epoch),
        _ => None,
    };
    let options = ProfilerOptions {
        rate_hz: if config == "signal-10k" {
            10 * RATE_HZ
        } else {
            RATE_HZ
        },
        sampler: sampler.unwrap_or_default(),
        clock: match config {
            "instructions" => Clock::Instructions,
            _ => Clock::Cpu,
        },
        ..Default::default()
    };
    let mut engine_config = wasi_host::engine_config();
    match config {
        "default" => {}
        // As `wasmtime run --profile=guest` configures its engine.
        "guest-profiler" => {
            engine_config.epoch_interruption(true);
        }
        "fuel" => {
            engine_config.consume_fuel(true);
        }
        _ => Profiler::configure(&mut engine_config, &options),
    }
    let engine = Engine::new(&engine_config).unwrap();
    let wasm = std::fs::read(module_path).unwrap();
    // As `wasmspy record` compiles it: a component's language runtimes probed.
    let profiled = sampler.is_some() || config == "instructions";
    let probed = match (profiled, wasmparser::Parser::is_component(&wasm)) {
        (true, true) => probe_runtimes(&wasm).unwrap(),
        _ => None,
    };
    let program = wasi_host::compile(&engine, probed.as_deref().unwrap_or(&wasm)).unwrap();
    let name = module_path.display().to_string();
    let invoke = args
        .iter()
        .find_map(|a| a.strip_prefix(INVOKE).map(str::to_string));
    let http = args.iter().any(|a| a == HTTP);
    let args: Vec<String> = args
        .iter()
        .filter(|a| !a.starts_with(INVOKE) && *a != HTTP)
        .cloned()
        .collect();
    let wasi = WasiConfig {
        invoke,
        argv: std::iter::once(name.clone())
            .chain(args.iter().cloned())
            .collect(),
        env: Vec::new(),
        // Go resolves relative paths from `/`: the directory is there too.
        dirs: [".".parse::<DirMount>().unwrap(), ".::/".parse().unwrap()]
            .into_iter()
            .chain(python_mounts(module_path))
            .collect(),
        unknown_imports: UnknownImports::DefaultValues,
        wasi: wasmtime_cli_flags::WasiOptions {
            http: http.then_some(true),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut store = wasi_host::new_store(&engine, &wasi).unwrap();
    let elapsed = match config {
        "empty-handler-10k" => {
            let _timer = EmptyHandlerTimer::start(10 * RATE_HZ);
            let start = Instant::now();
            check(wasi_host::run_program(&mut store, &program));
            start.elapsed()
        }
        "default" | "fuel" => {
            if config == "fuel" {
                store.set_fuel(u64::MAX).unwrap();
            }
            let start = Instant::now();
            check(wasi_host::run_program(&mut store, &program));
            start.elapsed()
        }
        "guest-profiler" => {
            let period = wasmspy::internals::clock::sampling_period(RATE_HZ);
            let profiler = match &program {
                Program::Module(module) => {
                    GuestProfiler::new(&engine, &name, period, [(name.clone(), module.clone())])
                }
                Program::Component(component) => {
                    GuestProfiler::new_component(&engine, &name, period, component.clone(), [])
                }
            }
            .unwrap();
            let profiler = Arc::new(Mutex::new(profiler));
            // As `wasmtime run --profile=guest` does: sample at epoch ticks and at host calls.
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
            check(wasi_host::run_program(&mut store, &program));
            let elapsed = start.elapsed();
            ticking.store(false, std::sync::atomic::Ordering::Relaxed);
            ticker.join().unwrap();
            elapsed
        }
        _ => {
            let mut profiler = Profiler::new(&engine, options).unwrap();
            match &program {
                Program::Module(module) => profiler.add_module(&name, module, wasm.as_slice()),
                Program::Component(component) => {
                    profiler.add_component(&name, component, wasm.as_slice())
                }
            }
            .unwrap();
            profiler.attach(&mut store).unwrap();
            let start = Instant::now();
            profiler.start().unwrap();
            // As `wasmspy record` runs it: instances shown to the profiler (a Go module's, to
            // read its goroutine stacks; CPython's, inside a component too).
            check(match &program {
                Program::Module(module) => wasi_host::run_with(&mut store, module, |store, i| {
                    profiler
                        .attach_instance(&mut *store, i)
                        .map_err(wasmtime::Error::from)
                }),
                Program::Component(component) => {
                    wasi_host::run_component_with(&mut store, component, |linker| {
                        profiler.define_runtime_probe(linker, component)
                    })
                }
            });
            std::hint::black_box(profiler.stop());
            start.elapsed()
        }
    };
    elapsed.as_secs_f64()
}

/// SIGPROF at `rate_hz` to this thread, from the same kind of timer as the signal sampler's,
/// with a handler that does nothing: what any timer-signal sampler costs at the least.
struct EmptyHandlerTimer(libc::timer_t);

impl EmptyHandlerTimer {
    fn start(rate_hz: u32) -> Self {
        extern "C" fn nothing(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {}
        let period = wasmspy::internals::clock::sampling_period(rate_hz);
        // SAFETY: a handler that touches nothing; zeroed structs filled in before use.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = nothing as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            assert_eq!(
                libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut()),
                0
            );
            let mut event: libc::sigevent = std::mem::zeroed();
            event.sigev_notify = libc::SIGEV_THREAD_ID;
            event.sigev_signo = libc::SIGPROF;
            event.sigev_notify_thread_id = libc::gettid();
            let mut timer: libc::timer_t = std::ptr::null_mut();
            assert_eq!(
                libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut timer),
                0
            );
            let spec = libc::timespec {
                tv_sec: 0,
                tv_nsec: period.subsec_nanos() as libc::c_long,
            };
            let value = libc::itimerspec {
                it_interval: spec,
                it_value: spec,
            };
            assert_eq!(
                libc::timer_settime(timer, 0, &value, std::ptr::null_mut()),
                0
            );
            EmptyHandlerTimer(timer)
        }
    }
}

impl Drop for EmptyHandlerTimer {
    fn drop(&mut self) {
        // SAFETY: the timer created in `start`, deleted once.
        unsafe { libc::timer_delete(self.0) };
    }
}
