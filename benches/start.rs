//! Warm-cache start: `wasmspy record --rate 1` against `wasmtime run` (built from its crate at
//! the same version: `benches/baseline/wasmtime.rs`) on large components whose compilation the
//! cache saves: ComponentizeJS's StarlingMonkey builds and componentize-py's CPython (by
//! `tests/fixtures/interpreters/build.sh`, into `target/interpreters`), the debug engine's of
//! `fib.js` (16.4 MB), the release engine's of `timed_sm.js` run for one round of one character
//! (`1 1`), `timed.py` for one round (`1`), and the Rust wasip2 fixture
//! `tests/fixtures/rust/component.wasm` exiting at once (`exit 0`): their programs' work is next
//! to nothing, so the difference is what wasmspy adds to a start, recognising and probing the
//! runtimes included. Both tools run from copies in the bench's directory, as installed (see
//! `installed`), and use one cache directory of the bench's own, filled by a first
//! run of each (wasmspy keeps entries of its own there: a component compiled uncompressed,
//! probed where it has runtimes to probe, `src/commands/probed_cache.rs`); then whole
//! processes, wall time, paired repetitions, the medians of the per-repetition ratios and
//! differences; and, once, the same with `-C cache=n` (what every run cost before wasmspy had
//! the cache).
//!
//! `cargo bench --profile dev --features internals --bench start [-- --reps N]`. Targets: ×1.2
//! at most for `fib.js`'s debug engine; issue 49's ×1.05 at most for the other three.

mod common;
#[path = "../tests/common/own_cache.rs"]
mod own_cache;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{median, paired, wasmtime_cli};
use own_cache::own_cache;

/// A component to start (its path in the repository), its program's arguments, and the most
/// its warm start may take, in times `wasmtime run`'s.
struct Case {
    file: &'static str,
    args: &'static [&'static str],
    at_most: f64,
}

const CASES: [Case; 4] = [
    Case {
        file: "target/interpreters/fib-js.wasm",
        args: &[],
        at_most: 1.2,
    },
    // Issue 49's three: at most ×1.05, each with next to no work of its own.
    Case {
        file: "target/interpreters/timed-sm.wasm",
        args: &["1", "1"],
        at_most: 1.05,
    },
    Case {
        file: "target/interpreters/timed-py.wasm",
        args: &["1"],
        at_most: 1.05,
    },
    Case {
        file: "tests/fixtures/rust/component.wasm",
        args: &["exit", "0"],
        at_most: 1.05,
    },
];

fn main() {
    let reps: usize = common::option("--reps", 7);
    let scratch = tempfile::tempdir().unwrap();
    let (_, cache_config) = own_cache(scratch.path());
    let tools = [
        installed(&wasmtime_cli(), scratch.path()),
        installed(Path::new(env!("CARGO_BIN_EXE_wasmspy")), scratch.path()),
    ];
    for case in &CASES {
        start(case, reps, scratch.path(), &tools, &cache_config);
    }
}

/// `binary` copied into `dir`, as `cargo install` or an unpacked release puts a program: what
/// a user starts. The linker's own file starts slower: it writes its output through a
/// mapping, which leaves the file's cached pages small, and a start faults its code in a page
/// at a time (wasmspy's 138 MB debug build, the Rust fixture: 1,107 page faults against 978
/// for a copy, 1.3 to 2.4 ms of a 12 ms start here; the baseline gains less, being smaller).
fn installed(binary: &Path, dir: &Path) -> PathBuf {
    let copy = dir.join(binary.file_name().unwrap());
    std::fs::copy(binary, &copy).unwrap();
    copy
}

/// Measures and prints `case`'s warm start, and whether it meets its target.
fn start(case: &Case, reps: usize, scratch: &Path, tools: &[PathBuf; 2], cache_config: &str) {
    let component = Path::new(env!("CARGO_MANIFEST_DIR")).join(case.file);
    if !component.exists() {
        println!(
            "skipped: {} is missing: run tests/fixtures/interpreters/build.sh",
            component.display()
        );
        return;
    }
    let size_mb = std::fs::metadata(&component).unwrap().len() as f64 / 1e6;
    let profile = scratch.join("profile.pb.gz");
    let [wasmtime, wasmspy] = tools;
    let command = |tool: usize, cache: &str| -> Command {
        let mut command = match tool {
            0 => {
                let mut c = Command::new(wasmtime);
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
            .args(case.args)
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
    // The first runs fill the cache, one for each tool: wasmspy's entries are its own.
    let filling = [seconds(0, cache_config), seconds(1, cache_config)];
    // Each repetition's times, by tool, for the median of its differences.
    let mut times = Vec::new();
    let (base, ratios) = paired(2, reps, |tool| {
        let t = seconds(tool, cache_config);
        times.push((tool, t));
        t
    });
    let mut differences: Vec<f64> = times
        .chunks(2)
        .map(|rep| {
            let of = |tool| rep.iter().find(|(t, _)| *t == tool).unwrap().1;
            of(1) - of(0)
        })
        .collect();
    let difference = median(&mut differences);
    let uncached = [seconds(0, "cache=n"), seconds(1, "cache=n")];
    let args: String = case.args.iter().map(|a| format!(" {a}")).collect();
    println!(
        "warm-cache start on {}{args} ({size_mb:.1} MB), whole processes, median of {reps} paired repetitions",
        component.display()
    );
    println!(
        "{:<28} {:>12} {:>12} {:>14}",
        "", "wasmtime s", "wasmspy ×", "wasmspy − s"
    );
    println!(
        "{:<28} {:>12.3} {:>12.3} {:>14.3}",
        "warm cache (--rate 1)", base, ratios[1], difference
    );
    println!(
        "{:<28} {:>12.3} {:>12.3} {:>14.3}",
        "-C cache=n (once)",
        uncached[0],
        uncached[1] / uncached[0],
        uncached[1] - uncached[0]
    );
    println!(
        "(the runs that filled the cache: wasmtime {:.3} s, wasmspy {:.3} s)",
        filling[0], filling[1]
    );
    let met = ratios[1] <= case.at_most;
    println!(
        "target: ×{} at most with a warm cache: {}",
        case.at_most,
        if met { "met" } else { "NOT met" }
    );
}
