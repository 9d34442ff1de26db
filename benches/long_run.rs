//! Memory of a long recording: `wasmspy record --rate 10000` on an endless guest, its resident
//! memory (RSS) every minute for 10 minutes, with a pprof output (samples kept as totals by
//! stack), the same writing its profile every 10 s (`--flush-every 10`), and with a speedscope
//! output (samples kept in time order, within the timeline's budget), beside `wasmtime run` of
//! the same guest, all four at once.
//!
//! `cargo bench --profile dev --features internals --bench long_run [-- --seconds N]` (600 unless given)
//!
//! Each recording is then ended with SIGTERM, as `timeout` would: the table also shows the
//! samples its profile holds, and for `--flush-every` those its last flush before the end held.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasmspy::profile::SAMPLES;

const EARLY: Duration = Duration::from_secs(10);
/// How often the curve is read after [`EARLY`].
const EVERY: Duration = Duration::from_secs(60);

fn main() {
    let seconds: u64 = common::option("--seconds", 600);
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let guest = manifest.join("tests/fixtures/c/cprog.wasm");
    // About 150 rounds a second: this runs for hours.
    let guest_args = ["spin", "10000000"];
    let dir = tempfile::tempdir().unwrap();
    let outputs: [(&str, Option<PathBuf>, &[&str]); 4] = [
        ("wasmspy, pprof", Some(dir.path().join("long.pb.gz")), &[]),
        (
            "wasmspy, pprof, flushed",
            Some(dir.path().join("flushed.pb.gz")),
            &["--flush-every", "10"],
        ),
        (
            "wasmspy, speedscope",
            Some(dir.path().join("long.speedscope.json")),
            &[],
        ),
        ("wasmtime run", None, &[]),
    ];
    let mut runs: Vec<(&str, Option<PathBuf>, Child)> = outputs
        .into_iter()
        .map(|(name, output, flags)| {
            let mut cmd = match &output {
                Some(path) => {
                    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wasmspy"));
                    cmd.args(["record", "--rate", "10000"])
                        .args(flags)
                        .arg("-o")
                        .arg(path);
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
    let total = Duration::from_secs(seconds);
    let mut curve: Vec<(u64, Vec<u64>)> = Vec::new();
    let mut next = EARLY;
    loop {
        std::thread::sleep(next.min(total).saturating_sub(start.elapsed()));
        let at = start.elapsed();
        curve.push((
            at.as_secs(),
            runs.iter()
                .map(|(_, _, c)| common::rss_kib(c.id()))
                .collect(),
        ));
        if at >= total {
            break;
        }
        next = (next + EVERY).min(total);
    }
    // What a kill without warning would leave of the flushed recording: its file as it is now.
    let flushed_samples = samples_in(runs[1].1.as_deref().unwrap());
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!("\nRSS (MiB) at 10 kHz on an endless guest:\n");
    print!("{:>6}", "s");
    for (name, _, _) in &runs {
        print!(" {name:>24}");
    }
    println!();
    for (at, rss) in &curve {
        print!("{at:>6}");
        for kib in rss {
            print!(" {:>24.1}", mib(*kib));
        }
        println!();
    }
    let (early, late) = (&curve[0].1, &curve[curve.len() - 1].1);
    println!(
        "\n{:<24} {:>9} {:>9} {:>9} {:>12}",
        "", "10 s", "end", "growth", "samples"
    );
    for (i, (name, output, child)) in runs.iter_mut().enumerate() {
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        child.wait().unwrap();
        let samples = output
            .as_deref()
            .map_or(String::new(), |path| samples_in(path).to_string());
        println!(
            "{name:<24} {:>9.1} {:>9.1} {:>+9.1} {samples:>12}",
            mib(early[i]),
            mib(late[i]),
            mib(late[i]) - mib(early[i])
        );
    }
    println!("\nthe flushed recording's file before SIGTERM: {flushed_samples} samples");
}

/// The samples a profile file holds.
fn samples_in(path: &Path) -> i64 {
    let profile = wasmspy::export::read(&std::fs::read(path).unwrap()).unwrap();
    profile.total(SAMPLES)
}
