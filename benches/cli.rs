//! `wasmspy record` against what users run instead, `wasmtime run` (the CLI's own code, built
//! from its crate at the same version: `benches/baseline/wasmtime.rs`), then what each setting in which
//! wasmspy's engine or host could differ from the CLI's costs.
//!
//! `cargo bench --profile dev --features internals --bench cli [-- --reps N]`
//!
//! Table 1, whole processes (wall time, compilation and writing the profile included):
//! `wasmtime run PROGRAM`, `wasmspy record -o … -- PROGRAM` at the default 1 kHz, and at 1 Hz,
//! where sampling costs nothing and what remains is the engine and the host. Table 2, the
//! guest's run alone (instantiation to exit, in a fresh process of this binary each time), on a
//! default engine with wasmspy's WASI host, then with one setting changed: epoch interruption
//! on; the profiler attached at 1 Hz (its probe instance in the store and deeper backtraces);
//! file reads through tokio's blocking pool (what wasmspy's host did before it blocked the
//! guest's thread, as the CLI does); and the guest called synchronously with WASI's
//! synchronous bindings (as wasmspy's host did before it ran guests as the CLI does, async on a
//! fiber). Runs are paired: each repetition runs every configuration one after the other, and
//! the tables show medians of the per-repetition ratios.
//!
//! The programs: Sightglass `shootout-fib2` (call-heavy), `shootout-heapsort`,
//! `shootout-ed25519`; `lines` (`tests/fixtures/c/lines.c`), reading a 30 MB file with fgets;
//! and `writes`, one `fd_write` per line for two million lines (`cprog.wasm write`).

mod common;
#[path = "../tests/common/lines_input.rs"]
mod lines_input;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{
    check, geometric_mean, paired, report_seconds_with_stdout_silenced, seconds_in_child,
    wasmtime_cli,
};
use wasmspy::wasi_host::{self, DirMount, Exit, Host, UnknownImports, WasiConfig};
use wasmspy::SamplerKind;
use wasmspy::{Profiler, ProfilerOptions};
use wasmtime::{Engine, Linker, Module, Store};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

const SETTINGS: [&str; 5] = [
    "default",
    "epochs",
    "profiler-1hz",
    "blocking-pool",
    "sync-bindings",
];

/// A program to run: its module, in the folder it runs in (preopened as `.`), and arguments.
struct Program {
    name: &'static str,
    module: PathBuf,
    args: Vec<String>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--run") {
        let (setting, module) = (args[1].clone(), PathBuf::from(&args[2]));
        let guest_args = args[3..].to_vec();
        report_seconds_with_stdout_silenced(|| run_setting(&setting, &module, &guest_args));
        return;
    }
    let reps: usize = common::option("--reps", 5);
    let wasmtime = wasmtime_cli();
    let scratch = tempfile::tempdir().unwrap();
    let programs = programs(&common::corpus(), scratch.path());

    println!("wasmspy record vs `wasmtime run` ({}), whole processes: median over {reps} repetitions of the wall time as a ratio to wasmtime's", wasmtime.display());
    println!(
        "{:<12} {:>11} {:>16} {:>16}",
        "program", "wasmtime s", "wasmspy 1 kHz", "wasmspy 1 Hz"
    );
    let profile = scratch.path().join("profile.pb.gz");
    let commands = |p: &Program| -> [Command; 3] {
        let dir = p.module.parent().unwrap();
        let mut cli = Command::new(&wasmtime);
        cli.args(["run", "-W", "unknown-imports-default=y", "--dir", "."]);
        let record = |rate: &str| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_wasmspy"));
            c.args(["record", "--rate", rate, "--default-values-unknown-imports"])
                .args(["--dir", ".", "-o"])
                .arg(&profile)
                .arg("--");
            c
        };
        let mut all = [cli, record("1000"), record("1")];
        for c in &mut all {
            c.arg(&p.module).args(&p.args).current_dir(dir);
        }
        all
    };
    let mut table: Vec<Vec<f64>> = vec![Vec::new(); 2];
    for p in &programs {
        let mut cmds = commands(p);
        let (base, ratios) = paired(3, reps, |c| wall_seconds(&mut cmds[c]));
        println!(
            "{:<12} {base:>11.3} {:>16.3} {:>16.3}",
            p.name, ratios[1], ratios[2]
        );
        for (column, r) in table.iter_mut().zip(&ratios[1..]) {
            column.push(*r);
        }
    }
    println!(
        "{:<12} {:>11} {:>16.3} {:>16.3}\n",
        "geo. mean",
        "",
        geometric_mean(&table[0]),
        geometric_mean(&table[1])
    );

    println!("what each setting costs the guest's run: median over {reps} repetitions of the time as a ratio to a default engine with wasmspy's host");
    println!(
        "{:<12} {:>10} {:>8} {:>14} {:>14} {:>10}",
        "program", "default s", "epochs", "profiler 1 Hz", "blocking pool", "sync WASI"
    );
    for p in &programs {
        let (base, r) = paired(SETTINGS.len(), reps, |s| {
            seconds_in_child(SETTINGS[s], &p.module, &p.args)
        });
        println!(
            "{:<12} {base:>10.3} {:>8.3} {:>14.3} {:>14.3} {:>10.3}",
            p.name, r[1], r[2], r[3], r[4]
        );
    }
}

/// The benchmark's programs; `scratch` holds the `lines` program's input.
fn programs(corpus: &Path, scratch: &Path) -> Vec<Program> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/c");
    let shootout = |name: &'static str| Program {
        name,
        module: corpus.join(format!("shootout/shootout-{name}.wasm")),
        args: Vec::new(),
    };
    // The input and a copy of the module side by side: the guest opens the file in `.`.
    lines_input::write(&scratch.join("input.txt"), 30 << 20);
    let lines = scratch.join("lines.wasm");
    std::fs::copy(fixtures.join("lines.wasm"), &lines).unwrap();
    vec![
        shootout("fib2"),
        shootout("heapsort"),
        shootout("ed25519"),
        Program {
            name: "lines",
            module: lines,
            args: vec!["input.txt".into()],
        },
        Program {
            name: "writes",
            module: fixtures.join("cprog.wasm"),
            args: vec!["write".into(), "2000000".into()],
        },
    ]
}

fn wall_seconds(command: &mut Command) -> f64 {
    let start = Instant::now();
    let out = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run a program");
    let seconds = start.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    seconds
}

/// The child: compile, then time the guest's run with `setting`.
fn run_setting(setting: &str, module_path: &Path, args: &[String]) -> f64 {
    let profiler_options = ProfilerOptions {
        rate_hz: 1,
        sampler: SamplerKind::Signal,
        ..Default::default()
    };
    let mut config = wasi_host::engine_config();
    match setting {
        "epochs" => {
            config.epoch_interruption(true);
        }
        "profiler-1hz" => Profiler::configure(&mut config, &profiler_options),
        _ => {}
    }
    let engine = Engine::new(&config).unwrap();
    let wasm = std::fs::read(module_path).unwrap();
    let module = Module::new(&engine, &wasm).unwrap();
    let wasi = WasiConfig {
        argv: std::iter::once("benchmark.wasm".to_string())
            .chain(args.iter().cloned())
            .collect(),
        env: Vec::new(),
        dirs: vec![".".parse::<DirMount>().unwrap()],
        unknown_imports: UnknownImports::DefaultValues,
        ..Default::default()
    };
    match setting {
        "blocking-pool" => {
            let mut store = wasi_host::new_store(&engine, &wasi).unwrap();
            *store.data_mut().wasi() = context_with_blocking_pool(&wasi);
            let start = Instant::now();
            check(wasi_host::run(&mut store, &module));
            start.elapsed().as_secs_f64()
        }
        "sync-bindings" => {
            let mut store = wasi_host::new_store(&engine, &wasi).unwrap();
            run_sync(&mut store, &module)
        }
        _ => {
            let mut store = wasi_host::new_store(&engine, &wasi).unwrap();
            match setting {
                "epochs" => store.set_epoch_deadline(u64::MAX / 2),
                "profiler-1hz" => {
                    let mut profiler = Profiler::new(&engine, profiler_options).unwrap();
                    profiler
                        .add_module("benchmark.wasm", &module, wasm.as_slice())
                        .unwrap();
                    profiler.attach(&mut store).unwrap();
                    profiler.start().unwrap();
                    let start = Instant::now();
                    check(wasi_host::run(&mut store, &module));
                    let seconds = start.elapsed().as_secs_f64();
                    std::hint::black_box(profiler.stop());
                    return seconds;
                }
                _ => {}
            }
            let start = Instant::now();
            check(wasi_host::run(&mut store, &module));
            start.elapsed().as_secs_f64()
        }
    }
}

/// wasmspy's WASI context, but with file operations going through tokio's blocking pool.
fn context_with_blocking_pool(wasi: &WasiConfig) -> WasiP1Ctx {
    let mut builder = WasiCtxBuilder::new();
    builder.allow_blocking_current_thread(false);
    builder.inherit_stdio().args(&wasi.argv);
    for dir in &wasi.dirs {
        builder
            .preopened_dir(&dir.host, &dir.guest, FsPerms::ReadWrite)
            .unwrap();
    }
    builder.build_p1()
}

/// The guest called synchronously, with WASI's synchronous bindings.
fn run_sync(store: &mut Store<Host>, module: &Module) -> f64 {
    let mut linker = Linker::new(module.engine());
    p1::add_to_linker_sync(&mut linker, Host::wasi).unwrap();
    linker
        .define_unknown_imports_as_default_values(&mut *store, module)
        .unwrap();
    let start = Instant::now();
    let instance = linker.instantiate(&mut *store, module).unwrap();
    let main = instance
        .get_typed_func::<(), ()>(&mut *store, "_start")
        .unwrap();
    let result = main.call(&mut *store, ());
    let seconds = start.elapsed().as_secs_f64();
    if let Err(e) = result {
        if !matches!(e.downcast_ref::<I32Exit>(), Some(I32Exit(0))) {
            check(Exit::Error(e.into()));
        }
    }
    seconds
}
