//! Profiling on Pulley: `wasmspy record --target pulley64` against what users run instead,
//! `wasmtime run --target pulley64` (the CLI's own code, built from its crate at the same
//! version: `benches/baseline/wasmtime.rs`).
//!
//! `cargo bench --profile dev --features internals --bench pulley [-- --reps N]`
//!
//! Whole processes, CPU time (user + system, of every thread: the sampler's included):
//! `wasmtime run`; `wasmspy record` at the default 1 kHz (the signal sampler); at 1 Hz, where
//! sampling costs nothing and what remains is wasmspy's process (its engine, host and
//! binary); and with the epoch sampler at 1 kHz. Then the guest's run alone, in a fresh process
//! of this binary (`--run`): Pulley on a default engine with wasmspy's host, no profiler, the
//! same interpreter in a third binary. Runs are paired: each repetition runs every
//! configuration one after the other, and the table shows medians of the per-repetition ratios.
//!
//! The programs: `cprog.c`'s two loops (`spin`), `split.c` (a loop-free function and a loop),
//! `lines.c` reading a 4 MB file with fgets (a host call per 4 KB read), and Sightglass
//! `shootout-heapsort`.

mod common;
#[path = "../tests/common/lines_input.rs"]
mod lines_input;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{check, geometric_mean, paired, wasmtime_cli};
use wasmspy::wasi_host::{self, DirMount, UnknownImports, WasiConfig};
use wasmtime::{Engine, Module};

struct Program {
    name: &'static str,
    module: PathBuf,
    args: Vec<&'static str>,
}

const COLUMNS: [&str; 5] = [
    "wasmtime",
    "wasmspy 1 kHz",
    "wasmspy 1 Hz",
    "epoch 1 kHz",
    "in-process",
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--run") {
        run_in_process(Path::new(&args[1]), &args[2..]);
        return;
    }
    let reps: usize = common::option("--reps", 5);
    let wasmtime = wasmtime_cli();
    let scratch = tempfile::tempdir().unwrap();
    let programs = programs(scratch.path());
    let profile = scratch.path().join("profile.pb.gz");
    println!(
        "wasmspy record --target pulley64 vs `wasmtime run --target pulley64` ({}): median over {reps} repetitions of the CPU time as a ratio to wasmtime's",
        wasmtime.display()
    );
    print!("{:<10} {:>11}", "program", "wasmtime s");
    for c in &COLUMNS[1..] {
        print!(" {c:>14}");
    }
    println!();
    let mut columns: Vec<Vec<f64>> = vec![Vec::new(); COLUMNS.len() - 1];
    for p in &programs {
        let dir = p.module.parent().unwrap();
        let record = |extra: &[&str]| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_wasmspy"));
            c.args(["record", "--target", "pulley64", "--dir", "."])
                .arg("--default-values-unknown-imports")
                .args(extra)
                .arg("-o")
                .arg(&profile)
                .arg("--");
            c
        };
        let mut cli = Command::new(&wasmtime);
        cli.args(["run", "--target", "pulley64", "--dir", "."])
            .args(["-W", "unknown-imports-default=y"]);
        let mut in_process = Command::new(std::env::current_exe().unwrap());
        in_process.arg("--run");
        let mut commands = [
            cli,
            record(&[]),
            record(&["--rate", "1"]),
            record(&["--sampler", "epoch"]),
            in_process,
        ];
        for c in &mut commands {
            c.arg(&p.module).args(&p.args).current_dir(dir);
        }
        let (base, ratios) = paired(commands.len(), reps, |c| cpu_seconds(&mut commands[c]));
        print!("{:<10} {base:>11.3}", p.name);
        for (column, r) in columns.iter_mut().zip(&ratios[1..]) {
            print!(" {r:>14.3}");
            column.push(*r);
        }
        println!();
    }
    print!("{:<10} {:>11}", "geo. mean", "");
    for column in &columns {
        print!(" {:>14.3}", geometric_mean(column));
    }
    println!();
    let sampling: Vec<f64> = columns[0]
        .iter()
        .zip(&columns[1])
        .map(|(khz, hz)| khz / hz)
        .collect();
    println!(
        "sampling at 1 kHz, as a ratio to the same process at 1 Hz: geo. mean {:.3}",
        geometric_mean(&sampling)
    );
}

fn programs(scratch: &Path) -> Vec<Program> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/c");
    lines_input::write(&scratch.join("input.txt"), 4 << 20);
    let lines = scratch.join("lines.wasm");
    std::fs::copy(fixtures.join("lines.wasm"), &lines).unwrap();
    vec![
        Program {
            name: "spin",
            module: fixtures.join("cprog.wasm"),
            args: vec!["spin", "10"],
        },
        Program {
            name: "split",
            module: fixtures.join("split.wasm"),
            args: vec!["600"],
        },
        Program {
            name: "lines",
            module: lines,
            args: vec!["input.txt"],
        },
        Program {
            name: "heapsort",
            module: common::corpus().join("shootout/shootout-heapsort.wasm"),
            args: Vec::new(),
        },
    ]
}

/// The CPU time of the command's process and its threads, which must succeed.
fn cpu_seconds(command: &mut Command) -> f64 {
    // SAFETY: a zeroed rusage is valid; getrusage only writes it.
    let children = || unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        seconds(usage.ru_utime) + seconds(usage.ru_stime)
    };
    let before = children();
    let out = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run a program");
    assert!(
        out.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    children() - before
}

/// Pulley on a default engine with wasmspy's host, in this process.
fn run_in_process(module: &Path, args: &[String]) {
    let mut config = wasi_host::engine_config();
    config.target("pulley64").unwrap();
    let engine = Engine::new(&config).unwrap();
    let module = Module::from_file(&engine, module).unwrap();
    let wasi = WasiConfig {
        argv: std::iter::once("benchmark.wasm".to_string())
            .chain(args.iter().cloned())
            .collect(),
        dirs: vec![".".parse::<DirMount>().unwrap()],
        unknown_imports: UnknownImports::DefaultValues,
        ..Default::default()
    };
    let mut store = wasi_host::new_store(&engine, &wasi).unwrap();
    check(wasi_host::run(&mut store, &module));
}
