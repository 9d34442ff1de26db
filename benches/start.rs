//! Warm-cache start: `wasmspy record --rate 1` against `wasmtime run` (built from its crate at
//! the same version: `benches/baseline/wasmtime.rs`) on a large component whose compilation the cache
//! saves, ComponentizeJS's StarlingMonkey build of `tests/fixtures/interpreters/fib.js` (built
//! by `tests/fixtures/interpreters/build.sh` into `target/interpreters`). Both use one cache
//! directory of the bench's own, filled by a first run of each; then whole processes, wall
//! time, paired repetitions, the median of the per-repetition ratios; and, once, the same with
//! `-C cache=n` (what every run cost before wasmspy had the cache).
//!
//! `cargo bench --profile dev --features internals --bench start [-- --reps N]`. Target: ×1.2 at most.

mod common;
#[path = "../tests/common/own_cache.rs"]
mod own_cache;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{paired, wasmtime_cli};
use own_cache::own_cache;

fn main() {
    let reps: usize = common::option("--reps", 7);
    let component = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/interpreters/fib-js.wasm");
    if !component.exists() {
        println!(
            "skipped: {} is missing: run tests/fixtures/interpreters/build.sh",
            component.display()
        );
        return;
    }
    let size_mb = std::fs::metadata(&component).unwrap().len() as f64 / 1e6;
    let scratch = tempfile::tempdir().unwrap();
    let (_, cache_config) = own_cache(scratch.path());
    let profile = scratch.path().join("profile.pb.gz");
    let wasmtime = wasmtime_cli();
    let wasmspy = Path::new(env!("CARGO_BIN_EXE_wasmspy"));
    let command = |tool: usize, cache: &str| -> Command {
        let mut command = match tool {
            0 => {
                let mut c = Command::new(&wasmtime);
                c.arg("run");
                c
            }
            _ => {
                let mut c = Command::new(wasmspy);
                c.args(["record", "--rate", "1", "-o"]).arg(&profile);
                c
            }
        };
        // StarlingMonkey imports `wasi:http` (for `fetch`).
        command.args(["-C", cache, "-S", "http"]);
        if tool == 1 {
            command.arg("--");
        }
        command
            .arg(&component)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    };
    let seconds = |tool: usize, cache: &str| {
        let start = Instant::now();
        let status = command(tool, cache).status().unwrap();
        assert!(status.success(), "{:?}", command(tool, cache));
        start.elapsed().as_secs_f64()
    };
    // The first run fills the cache (either tool's serves the other: the same Wasmtime, the
    // same compilation settings).
    let filling = seconds(0, &cache_config);
    let (base, ratios) = paired(2, reps, |tool| seconds(tool, &cache_config));
    let uncached = [seconds(0, "cache=n"), seconds(1, "cache=n")];
    println!(
        "warm-cache start on {} ({size_mb:.1} MB), whole processes, median of {reps} paired repetitions",
        component.display()
    );
    println!("{:<28} {:>12} {:>12}", "", "wasmtime s", "wasmspy ×");
    println!(
        "{:<28} {:>12.3} {:>12.3}",
        "warm cache (--rate 1)", base, ratios[1]
    );
    println!(
        "{:<28} {:>12.3} {:>12.3}",
        "-C cache=n (once)",
        uncached[0],
        uncached[1] / uncached[0]
    );
    println!("(the run that filled the cache: {filling:.3} s)");
    println!(
        "target: ×1.2 at most with a warm cache: {}",
        if ratios[1] <= 1.2 { "met" } else { "NOT met" }
    );
}
