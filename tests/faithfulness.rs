//! Faithfulness against a profiler nobody here wrote: Linux perf (`perf record -e cpu-clock`)
//! sampling the very run wasmspy samples (`perf record -- wasmspy record --perfmap …`: perf
//! names the guest's compiled code from the perf map wasmspy writes), on an I/O-heavy program
//! reading a file line by line with fgets, and on a compute-heavy one. Both see one execution,
//! so the program's own drift from run to run (38 to 54 % for `hash_words` between runs here)
//! cannot part them: what is left is sampling noise, bounded below. Each top guest function's
//! share of the samples in the guest's code (each compiled Wasm function with what is inlined
//! into it, as perf sees them; functions the host's libc also has, such as `fgets` or `memcpy`,
//! left out) agrees within 4 points, and no host call holds a share that perf does not see
//! outside the guest's code. Skipped, saying so, where perf cannot record.

mod common;

use std::collections::HashMap;
use std::ffi::CString;
use std::path::Path;
use std::process::Command;

use common::{fixture, lines_input, skip, stderr, Decoded};

const TOLERANCE: f64 = 0.04;
/// Functions with less than this share, in both profiles, are not compared.
const TOP: f64 = 0.03;
/// Both profilers sample at this rate.
const RATE: &str = "10000";
/// How far apart the two profilers' shares of a function may be beyond sampling noise: what
/// the timing of their interrupts alone moves (perf's hrtimer, the thread's CPU timer). The
/// mean difference over 15 runs under two CPU-bound processes was 0.3 points or less for each
/// function (the largest single one 1.4, noise included).
const BIAS: f64 = 0.01;
/// Standard deviations of sampling noise the tolerance must cover after [`BIAS`]: a normal
/// variable is beyond 4.4 σ with probability 1.1e-5, so with at most 4 functions compared, chance
/// fails a run less than once in 20,000.
const Z: f64 = 4.4;

/// Where a profile puts the guest thread's CPU time during the run: each guest function's
/// share of the samples in the guest's code, and the share of all outside it (host calls,
/// Wasmtime itself, and for perf wasmspy's own sampling).
#[derive(Debug)]
struct Shares {
    functions: HashMap<String, f64>,
    outside: f64,
    /// wasmspy's leaves outside the guest's code (host calls, runtime), by name.
    host_leaves: HashMap<String, f64>,
    /// Samples in the guest's code: each share's binomial noise is √(p(1 − p)/n).
    guest_samples: f64,
}

#[test]
fn io_heavy_program_matches_perf() {
    let dir = tempfile::tempdir().unwrap();
    lines_input::write(&dir.path().join("input.txt"), 128 << 20);
    let module = dir.path().join("lines.wasm");
    std::fs::copy(fixture("c/lines.wasm"), &module).unwrap();
    compare(dir.path(), &module, &["input.txt"]);
}

#[test]
fn compute_heavy_program_matches_perf() {
    let dir = tempfile::tempdir().unwrap();
    compare(dir.path(), &fixture("c/cprog.wasm"), &["spin", "200"]);
}

/// The tests take turns: perf's samples of one would see the other's load.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn compare(dir: &Path, module: &Path, args: &[&str]) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((perf, ours)) = one_run(dir, module, args) else {
        return;
    };
    eprintln!(
        "{:<32} {:>8} {:>8}   (samples in the guest's code: {} and {})",
        "function", "perf", "wasmspy", perf.guest_samples, ours.guest_samples
    );
    let mut names: Vec<&String> = perf.functions.keys().chain(ours.functions.keys()).collect();
    names.sort();
    names.dedup();
    let mut compared = 0;
    for name in names {
        let (p, w) = (share(&perf.functions, name), share(&ours.functions, name));
        if p < TOP && w < TOP {
            continue;
        }
        let in_host_libc = host_libc_has(name);
        eprintln!(
            "{name:<32} {p:>8.4} {w:>8.4}{}",
            if in_host_libc {
                "  (host libc has it: not compared)"
            } else {
                ""
            }
        );
        if in_host_libc {
            continue;
        }
        compared += 1;
        // The two shares are independent estimates of one split (the same execution): their
        // difference's noise is √(p(1 − p)(1/n₁ + 1/n₂)). The run must be long enough that
        // Z of it and BIAS fit in the tolerance, else its verdict would be chance's.
        let noise = (p * (1.0 - p) * (1.0 / perf.guest_samples + 1.0 / ours.guest_samples)).sqrt();
        assert!(
            BIAS + Z * noise <= TOLERANCE,
            "{name}: too few samples to tell ({} and {}: noise {noise:.4})",
            perf.guest_samples,
            ours.guest_samples
        );
        assert!(
            (w - p).abs() <= TOLERANCE,
            "{name}: wasmspy {w:.4}, perf {p:.4} (noise {noise:.4})\nperf: {perf:?}\nwasmspy: {ours:?}"
        );
    }
    eprintln!(
        "{:<32} {:>8.4} {:>8.4}",
        "(outside the guest's code)", perf.outside, ours.outside
    );
    assert!(
        compared >= 2,
        "too few functions to compare: {perf:?} {ours:?}"
    );
    for (leaf, w) in &ours.host_leaves {
        assert!(
            *w <= perf.outside + TOLERANCE,
            "{leaf} holds {w:.4} of wasmspy's profile; perf sees {:.4} outside the guest's code",
            perf.outside
        );
    }
    assert!(
        ours.outside <= perf.outside + TOLERANCE,
        "wasmspy has {:.4} outside the guest's code, perf {:.4}",
        ours.outside,
        perf.outside
    );
}

fn share(shares: &HashMap<String, f64>, name: &str) -> f64 {
    shares.get(name).copied().unwrap_or(0.0)
}

/// Whether the host's C library (or anything this process loaded) defines `name`.
fn host_libc_has(name: &str) -> bool {
    let Ok(symbol) = CString::new(name) else {
        return false;
    };
    // SAFETY: dlsym with the default handle only looks the name up.
    !unsafe { libc::dlsym(libc::RTLD_DEFAULT, symbol.as_ptr()) }.is_null()
}

/// perf sampling `wasmspy record --perfmap` of `module`: perf's shares and wasmspy's. `None`,
/// said on stderr, where perf cannot record; a missing `perf` fails under CI, where
/// `scripts/test.sh` installs it.
fn one_run(dir: &Path, module: &Path, args: &[&str]) -> Option<(Shares, Shares)> {
    if Command::new("perf").arg("--version").output().is_err() {
        skip("faithfulness", "perf is not installed (Debian linux-perf)");
        return None;
    }
    let data = dir.join("perf.data");
    let out = dir.join("wasmspy.pb.gz");
    let record = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", RATE, "-o"])
        .arg(&data)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_wasmspy"))
        .args(["record", "--perfmap", "--rate", RATE, "--dir", ".", "-o"])
        .arg(&out)
        .arg("--")
        .arg(module)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    // No perf.data: perf itself could not record (wasmspy's failures are asserted below).
    if !record.status.success() && !data.exists() {
        let why = format!(
            "perf cannot record here: {}",
            String::from_utf8_lossy(&record.stderr).trim()
        );
        skip("faithfulness", &why);
        return None;
    }
    assert!(record.status.success(), "{}", stderr(&record));
    Some((perf_shares(&data), wasmspy_shares(&out)))
}

fn wasmspy_shares(out: &Path) -> Shares {
    let p = Decoded::load(out);
    let total = p.total("cpu") as f64;
    let in_guest: HashMap<String, bool> =
        p.0.sample
            .iter()
            .map(|s| {
                let leaf = p.location(s.location_id[0]);
                let name = p.str(p.function(leaf.line.last().unwrap().function_id).name);
                // A host call's frame carries the module's mapping (the import is the module's),
                // but no code address.
                (name.to_string(), leaf.mapping_id != 0 && leaf.address != 0)
            })
            .collect();
    let mut shares = Shares {
        functions: HashMap::new(),
        outside: 0.0,
        host_leaves: HashMap::new(),
        guest_samples: 0.0,
    };
    let mut guest_cpu = 0.0;
    for (name, cpu) in p.top_self_compiled("cpu") {
        if in_guest[&name] {
            guest_cpu += cpu as f64;
            shares.functions.insert(name, cpu as f64);
        } else {
            shares.outside += cpu as f64 / total;
            shares.host_leaves.insert(name, cpu as f64 / total);
        }
    }
    for cpu in shares.functions.values_mut() {
        *cpu /= guest_cpu;
    }
    shares.guest_samples = p
        .top_self_compiled("samples")
        .into_iter()
        .filter(|(name, _)| in_guest[name])
        .map(|(_, n)| n as f64)
        .sum();
    shares
}

/// The shares perf sees on the thread that runs the guest (the one with most samples in the
/// guest's code), from its first sample in the guest's code on (before it, wasmspy compiles).
fn perf_shares(data: &Path) -> Shares {
    let script = Command::new("perf")
        .args(["script", "-F", "pid,tid,ip,sym,dso", "-i"])
        .arg(data)
        .output()
        .unwrap();
    assert!(script.status.success(), "{}", stderr(&script));
    let text = String::from_utf8_lossy(&script.stdout);
    let mut pid = None;
    // (thread, symbol, whether in the guest's code), in time order.
    let mut samples: Vec<(String, String, bool)> = Vec::new();
    for line in text.lines() {
        let Some((ids, rest)) = line.trim().split_once(char::is_whitespace) else {
            continue;
        };
        let Some((p, tid)) = ids.split_once('/') else {
            continue;
        };
        pid.get_or_insert_with(|| p.to_string());
        // The instruction's address, then its symbol and (its object file).
        let rest = rest
            .trim()
            .split_once(char::is_whitespace)
            .map_or("", |(_, r)| r.trim());
        let (sym, dso) = match rest.rfind(" (") {
            Some(i) => (rest[..i].trim(), &rest[i + 2..rest.len() - 1]),
            None => (rest, ""),
        };
        let guest = dso.starts_with("/tmp/perf-") && dso.ends_with(".map");
        samples.push((tid.to_string(), sym.to_string(), guest));
    }
    if let Some(pid) = pid {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    let mut per_thread: HashMap<&str, usize> = HashMap::new();
    for (tid, _, guest) in &samples {
        *per_thread.entry(tid).or_default() += usize::from(*guest);
    }
    let guest_thread = per_thread
        .into_iter()
        .max_by_key(|&(_, n)| n)
        .filter(|&(_, n)| n > 0)
        .expect("perf saw no sample in the guest's code")
        .0
        .to_string();
    let run: Vec<&(String, String, bool)> = samples
        .iter()
        .filter(|(tid, _, _)| *tid == guest_thread)
        .skip_while(|(_, _, guest)| !guest)
        .collect();
    let total = run.len() as f64;
    let mut shares = Shares {
        functions: HashMap::new(),
        outside: 0.0,
        host_leaves: HashMap::new(),
        guest_samples: 0.0,
    };
    for (_, sym, guest) in run {
        if *guest {
            *shares.functions.entry(sym.clone()).or_default() += 1.0;
            shares.guest_samples += 1.0;
        } else {
            shares.outside += 1.0 / total;
        }
    }
    for n in shares.functions.values_mut() {
        *n /= shares.guest_samples;
    }
    shares
}

/// Host frames against perf on one run: a Wasmtime host (`tests/fixtures/hosts/slow_import.rs`)
/// whose guest alternates its own work (`guest_work`) with calls of a slow host import, whose
/// host function `spin_in_host` wasmspy names from the host's symbols, under the import's
/// frame. Its share of the samples in either (`spin_in_host` against `guest_work`, the rest
/// being trampolines and the host's loop) agrees with perf's within [`HOST_TOLERANCE`]; the
/// host's own work before the guest runs sits under a `[host]` root.
#[test]
fn a_slow_host_import_has_the_share_perf_sees() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if Command::new("perf").arg("--version").output().is_err() {
        skip("host frames", "perf is not installed (Debian linux-perf)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (data, out) = (dir.path().join("perf.data"), dir.path().join("host.pb.gz"));
    let record = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", HOST_RATE, "-o"])
        .arg(&data)
        .arg("--")
        .arg(common::built_example("slow-import-host"))
        .arg(&out)
        .args(["3", HOST_RATE, "all"])
        .output()
        .unwrap();
    if !record.status.success() && !data.exists() {
        let why = format!("perf cannot record here: {}", stderr(&record).trim());
        skip("host frames", &why);
        return;
    }
    assert!(record.status.success(), "{}", stderr(&record));

    let script = Command::new("perf")
        .args(["script", "-F", "tid,ip,sym,dso", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(script.status.success(), "{}", stderr(&script));
    let text = String::from_utf8_lossy(&script.stdout);
    let count = |what: &str| text.lines().filter(|l| l.contains(what)).count() as f64;
    let (perf_host, perf_guest) = (count("spin_in_host"), count("guest_work"));

    let p = Decoded::load_whole(&out);
    let samples = p.value_index("samples");
    let (mut ours_host, mut ours_guest, mut host_alone) = (0.0, 0.0, 0.0);
    for (names, values) in p.stacks() {
        let before_the_guest = "slow_import_host::host_work_before_the_guest";
        if let Some(at) = names
            .iter()
            .position(|n| n == "slow_import_host::spin_in_host")
        {
            // The host function sits in the import's frame, or, called by the host alone
            // before the guest runs, under `[host]` and `main`.
            let called_by = &names[at..];
            if called_by.iter().any(|n| n == before_the_guest) {
                assert_eq!(called_by.last().unwrap(), "[host]", "{names:?}");
                assert!(
                    called_by.iter().any(|n| n == "slow_import_host::main"),
                    "{names:?}"
                );
                host_alone += values[samples] as f64;
            } else {
                assert!(called_by.iter().any(|n| n == "host::spin"), "{names:?}");
            }
            ours_host += values[samples] as f64;
        } else if names[0] == "guest_work" {
            ours_guest += values[samples] as f64;
        }
    }
    let (perf_share, ours) = (
        perf_host / (perf_host + perf_guest),
        ours_host / (ours_host + ours_guest),
    );
    eprintln!(
        "spin_in_host: perf {perf_share:.4} of {} samples, wasmspy {ours:.4} of {}",
        perf_host + perf_guest,
        ours_host + ours_guest
    );
    // 0.2 s of CPU at 2 kHz: some 400 samples.
    assert!(
        host_alone > 100.0,
        "{host_alone} samples before the guest ran"
    );
    assert!(
        perf_host + perf_guest > 2000.0 && ours_host + ours_guest > 2000.0,
        "too few samples: perf {perf_host}/{perf_guest}, wasmspy {ours_host}/{ours_guest}"
    );
    assert!(
        (perf_share - ours).abs() <= HOST_TOLERANCE,
        "spin_in_host: wasmspy {ours:.4}, perf {perf_share:.4}"
    );
}

/// `--host-frames none` in the library (`ProfilerOptions::host_frames`): the import's frame is
/// the leaf, no host function is named, the host's work before the guest is `[wasmtime]`.
#[test]
fn without_host_frames_a_host_import_is_one_frame() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("host.pb.gz");
    let run = Command::new(common::built_example("slow-import-host"))
        .arg(&out)
        .args(["0.5", HOST_RATE, "none"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", stderr(&run));
    let p = Decoded::load(&out);
    let stacks = p.stacks();
    assert!(
        stacks
            .iter()
            .all(|(names, _)| names.iter().all(|n| !n.contains("::main"))),
        "{stacks:?}"
    );
    let import: i64 = stacks
        .iter()
        .filter(|(names, _)| names[0] == "host::spin")
        .map(|(_, values)| values[p.value_index("samples")])
        .sum();
    assert!(
        import as f64 > 0.3 * p.total("samples") as f64,
        "host::spin's samples: {import} of {}",
        p.total("samples")
    );
    let runtime: i64 = stacks
        .iter()
        .filter(|(names, _)| names[..] == ["[wasmtime]"])
        .map(|(_, values)| values[p.value_index("samples")])
        .sum();
    // 0.2 s of CPU at 2 kHz: some 400 samples.
    assert!(runtime > 100, "[wasmtime]'s samples: {runtime}");
}

/// The host-frame test's rate, for both profilers: 3 s of the guest thread's CPU give each some
/// 6,000 samples of the two functions.
const HOST_RATE: &str = "2000";
/// With n = 6,000 samples each and a share near 0.5, each share's binomial noise is
/// √(0.25/n) = 0.65 points, their difference's 0.9 points: 5 points is 5.4 σ of it
/// (chance alone fails one run in 10^7). Measured here over 6 runs: differences of 0.1 to 1.9
/// points.
const HOST_TOLERANCE: f64 = 0.05;
