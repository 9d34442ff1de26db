//! Memory of a long recording: `wasmspy record --rate 10000` on an endless guest, its resident
//! memory (RSS) after 10 s and after 10 minutes, with a pprof output (samples kept as totals
//! by stack) and with a speedscope output (samples kept in time order, within the timeline's
//! budget), beside `wasmtime run` of the same guest, all three at once.
//!
//! `cargo bench --profile dev --bench long_run [-- --seconds N]` (600 unless given)
//!
//! Each recording is then ended with SIGTERM, as `timeout` would: the table also shows the
//! samples its profile holds.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasmspy::record::SAMPLES;

const EARLY: Duration = Duration::from_secs(10);

fn main() {
    let seconds: u64 = common::option("--seconds", 600);
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let guest = manifest.join("tests/fixtures/c/cprog.wasm");
    // About 150 rounds a second: this runs for hours.
    let guest_args = ["spin", "10000000"];
    let dir = tempfile::tempdir().unwrap();
    let outputs = [
        ("wasmspy, pprof", Some(dir.path().join("long.pb.gz"))),
        (
            "wasmspy, speedscope",
            Some(dir.path().join("long.speedscope.json")),
        ),
        ("wasmtime run", None),
    ];
    let mut runs: Vec<(&str, Option<PathBuf>, Child)> = outputs
        .into_iter()
        .map(|(name, output)| {
            let mut cmd = match &output {
                Some(path) => {
                    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wasmspy"));
                    cmd.args(["record", "--rate", "10000", "-o"]).arg(path);
                    cmd
                }
                None => {
                    let mut cmd = Command::new(common::wasmtime_cli());
                    cmd.arg("run");
                    cmd
                }
            };
            let child = cmd
                .arg(&guest)
                .args(guest_args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            (name, output, child)
        })
        .collect();
    let start = Instant::now();
    std::thread::sleep(EARLY);
    let early: Vec<u64> = runs.iter().map(|(_, _, c)| rss_kib(c)).collect();
    std::thread::sleep(Duration::from_secs(seconds).saturating_sub(start.elapsed()));
    let late: Vec<u64> = runs.iter().map(|(_, _, c)| rss_kib(c)).collect();
    let elapsed = start.elapsed().as_secs();
    println!(
        "\nRSS at 10 kHz on an endless guest, after {}s and after {elapsed}s (MiB):\n",
        EARLY.as_secs()
    );
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>12}",
        "", "10 s", "end", "growth", "samples"
    );
    for (i, (name, output, child)) in runs.iter_mut().enumerate() {
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        child.wait().unwrap();
        let samples = output.as_ref().map_or(String::new(), |path| {
            let profile = wasmspy::export::read(&std::fs::read(path).unwrap()).unwrap();
            profile.total(SAMPLES).to_string()
        });
        let mib = |kib: u64| kib as f64 / 1024.0;
        println!(
            "{name:<22} {:>9.1} {:>9.1} {:>+9.1} {samples:>12}",
            mib(early[i]),
            mib(late[i]),
            mib(late[i]) - mib(early[i])
        );
    }
}

/// A running process's resident memory.
fn rss_kib(child: &Child) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}
