//! What the benchmarks share.
#![allow(dead_code)] // each benchmark uses its own subset

#[cfg(not(feature = "internals"))]
compile_error!("the benchmarks reach wasmspy's internals: `cargo bench --profile dev --features internals --bench NAME`");

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use wasmspy::wasi_host::Exit;

/// Stops the benchmark when a guest fails: its time would mean nothing.
pub fn check(exit: Exit) {
    if !matches!(exit, Exit::Code(0)) {
        panic!("the guest did not succeed: {exit:?}");
    }
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

pub fn geometric_mean(values: &[f64]) -> f64 {
    (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp()
}

/// Paired measurements: `reps` repetitions, each running every one of `configs`
/// configurations (`measure(c)` gives its time) right after the others, in an order that
/// rotates; returns the median time of configuration 0 and, for each configuration, the median
/// of its per-repetition ratios to configuration 0.
pub fn paired(
    configs: usize,
    reps: usize,
    mut measure: impl FnMut(usize) -> f64,
) -> (f64, Vec<f64>) {
    let mut base = Vec::new();
    let mut ratios = vec![Vec::new(); configs];
    for rep in 0..reps {
        let mut times = vec![0f64; configs];
        for k in 0..configs {
            let c = (k + rep) % configs;
            times[c] = measure(c);
        }
        base.push(times[0]);
        for (r, t) in ratios.iter_mut().zip(&times) {
            r.push(t / times[0]);
        }
    }
    (
        median(&mut base),
        ratios.iter_mut().map(|r| median(r)).collect(),
    )
}

/// The Sightglass programs committed for the tests (`tests/fixtures/sightglass`), one folder
/// per program, as in Sightglass's `benchmarks/`.
pub fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sightglass")
}

/// Seconds that configuration `config` of this benchmark takes on `module` run with `args`, in
/// a fresh process of this binary (`--run CONFIG MODULE ARGS...`, in the module's folder),
/// which prints them on its last line.
pub fn seconds_in_child(config: &str, module: &Path, args: &[String]) -> f64 {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--run", config])
        .arg(module.file_name().unwrap())
        .args(args)
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

/// Runs `f` with this process's stdout on /dev/null (the guest's output), then prints
/// `seconds`, what `f` returned, for [`seconds_in_child`] to read.
pub fn report_seconds_with_stdout_silenced(f: impl FnOnce() -> f64) {
    use std::io::Write;
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    // SAFETY: dup and dup2 of descriptors this process owns.
    let saved = unsafe { libc::dup(1) };
    // SAFETY: as above.
    unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), 1) };
    let seconds = f();
    let _ = std::io::stdout().flush();
    // SAFETY: restores the stdout saved above.
    unsafe { libc::dup2(saved, 1) };
    println!("{seconds}");
}

/// `wasmtime run`: the example built beside this benchmark.
pub fn wasmtime_cli() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/wasmtime-baseline");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build --profile dev --features internals --example wasmtime-baseline`",
        path.display()
    );
    path
}

/// The value after `--NAME` on this benchmark's command line (`-- --reps 3`), else `default`.
pub fn option<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: expected a number, got `{v}`"))
        })
}

/// The resident memory of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
