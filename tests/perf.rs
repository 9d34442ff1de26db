//! Linux perf names the guest's code from what `record --jitdump` and `--perfmap` write:
//! `perf record -k 1 -e cpu-clock -- wasmspy record --jitdump --perfmap …`, `perf inject -j`,
//! `perf report`. Skipped, saying so, where perf is missing or cannot record (a missing
//! `perf` fails under CI, where `scripts/test.sh` installs it).

mod common;

use std::path::Path;
use std::process::Command;

use common::{fixture, skip, stderr, wasmspy};

/// `perf report --stdio` of `data` sorted by `sort`, as (share in %, the sort keys' columns).
fn report(dir: &Path, data: &str, sort: &str) -> Vec<(f64, Vec<String>)> {
    let out = Command::new("perf")
        .args(["report", "--stdio", "-q", "--sort", sort, "-i", data])
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "perf report: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let share = words.next()?.strip_suffix('%')?.parse().ok()?;
            Some((share, words.map(str::to_string).collect()))
        })
        .collect()
}

/// `tests/fixtures/c/cprog.c` spends 80 % in `hot_function`'s loop (lines 27-28) and 20 % in
/// `cold_function`'s (34-35). After `perf inject -j`, perf's source lines of the guest's code
/// are those lines of `cprog.c` (Wasmtime's own jitdump gives `??:0`); with the perf map
/// alone, perf names the functions.
#[test]
fn perf_names_the_guest_with_its_source_lines() {
    let test = "perf_names_the_guest_with_its_source_lines";
    if Command::new("perf").arg("--version").output().is_err() {
        skip(test, "perf is not installed (Debian linux-perf)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let record = Command::new("perf")
        .args([
            "record",
            "-k",
            "1",
            "-e",
            "cpu-clock",
            "-o",
            "perf.data",
            "--",
        ])
        .arg(wasmspy().get_program())
        .args(["record", "--jitdump", "--perfmap", "-o", "out.pb.gz", "--"])
        .arg(fixture("c/cprog.wasm"))
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .unwrap();
    let said = stderr(&record);
    if !record.status.success() && said.contains("perf_event") {
        skip(test, &format!("perf cannot record here: {}", said.trim()));
        return;
    }
    assert!(record.status.success(), "{said}");
    let pid = said
        .lines()
        .find_map(|l| {
            l.strip_prefix("wasmspy: wrote /tmp/perf-")?
                .split_once(".map")
        })
        .map(|(pid, _)| pid.to_string())
        .unwrap_or_else(|| panic!("no perf map said: {said}"));
    let map = format!("/tmp/perf-{pid}.map");
    assert!(
        said.contains(&format!("wasmspy: wrote jit-{pid}.dump"))
            && dir.join(format!("jit-{pid}.dump")).exists(),
        "{said}"
    );

    // The perf map: perf names the functions from it.
    let text = std::fs::read_to_string(&map).unwrap();
    let by_map = report(dir, "perf.data", "sym");
    let _ = std::fs::remove_file(&map);
    assert!(text.lines().any(|l| l.ends_with(" hot_function")), "{text}");
    let hot: f64 = by_map
        .iter()
        .filter(|(_, keys)| keys.last().is_some_and(|k| k == "hot_function"))
        .map(|(share, _)| share)
        .sum();
    assert!(hot > 50.0, "{by_map:?}");

    // The jitdump: perf's source lines are the guest's.
    let inject = Command::new("perf")
        .args(["inject", "-j", "-i", "perf.data", "-o", "perf.jit.data"])
        .current_dir(dir)
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(inject.status.success(), "perf inject: {}", stderr(&inject));
    let lines = report(dir, "perf.jit.data", "sym,srcline");
    let share_of = |function: &str, source: &[&str]| -> f64 {
        lines
            .iter()
            .filter(|(_, keys)| {
                keys.len() >= 2
                    && keys[keys.len() - 2] == function
                    && source.contains(&keys[keys.len() - 1].as_str())
            })
            .map(|(share, _)| share)
            .sum()
    };
    let hot = share_of("hot_function", &["cprog.c:27", "cprog.c:28"]);
    let cold = share_of("cold_function", &["cprog.c:34", "cprog.c:35"]);
    assert!(hot > 50.0 && cold > 8.0, "{lines:?}");
    // Every sample of the functions has one of their loops' lines.
    let other: f64 = lines
        .iter()
        .filter(|(_, keys)| {
            keys.len() >= 2
                && ["hot_function", "cold_function"].contains(&keys[keys.len() - 2].as_str())
                && !keys[keys.len() - 1].starts_with("cprog.c:")
        })
        .map(|(share, _)| share)
        .sum();
    assert!(other < 1.0, "{lines:?}");
}
