//! `wasmspy record FLAGS -- PROGRAM` as a drop-in for `wasmtime run FLAGS PROGRAM`: the same
//! programs and flag sets under both (the `wasmtime` built from the `wasmtime-cli` crate of
//! the same Wasmtime), the same stdout and exit code, and a profile written each time; Winch
//! code profiled as Cranelift code is; profiles of cached compilations the same as fresh ones.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::own_cache::own_cache;
use common::*;

const C: &str = "c/cprog.wasm";
const COMPONENT: &str = "rust/component.wasm";

/// A program run under both, with what it must print and exit with.
struct Case<'a> {
    flags: &'a [&'a str],
    program: PathBuf,
    args: &'a [&'a str],
    /// Set in both processes' environment.
    env: &'a [(&'a str, &'a str)],
    code: i32,
    /// What stdout must contain (beyond being the same under both).
    prints: &'a str,
}

impl<'a> Case<'a> {
    /// `program` run with `flags` and `args`, nothing set in the environment.
    fn new(
        flags: &'a [&'a str],
        program: PathBuf,
        args: &'a [&'a str],
        code: i32,
        prints: &'a str,
    ) -> Self {
        Case {
            flags,
            program,
            args,
            env: &[],
            code,
            prints,
        }
    }
}

fn run(mut command: Command, case: &Case) -> Output {
    for (name, value) in case.env {
        command.env(name, value);
    }
    command.output().expect("run the command")
}

/// Runs `case` under `wasmtime run` and `wasmspy record`; checks that both print the same and
/// exit alike, as `case` says, and that wasmspy wrote a profile. Returns wasmspy's run and its
/// profile's path.
fn same_as_wasmtime(dir: &Path, case: &Case) -> (Output, PathBuf) {
    let mut wasmtime = Command::new(wasmtime_cli());
    wasmtime
        .arg("run")
        .args(case.flags)
        .arg(&case.program)
        .args(case.args);
    let expected = run(wasmtime, case);
    // A file of its own for every run, so that one that writes none is not read for another's.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run_number = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let profile = dir.join(format!("out-{run_number}.pb.gz"));
    let mut wasmspy = wasmspy();
    wasmspy
        .args(["record", "-o"])
        .arg(&profile)
        .args(case.flags)
        .arg("--")
        .arg(&case.program)
        .args(case.args);
    let got = run(wasmspy, case);
    let what = format!(
        "{:?} {} {:?}",
        case.flags,
        case.program.display(),
        case.args
    );
    assert_eq!(
        expected.status.code(),
        Some(case.code),
        "{what}: wasmtime run: {}",
        stderr(&expected)
    );
    assert_eq!(
        got.status.code(),
        Some(case.code),
        "{what}: wasmspy record: {}",
        stderr(&got)
    );
    assert_eq!(stdout(&got), stdout(&expected), "{what}: stdout");
    assert!(
        stdout(&got).contains(case.prints),
        "{what}: expected `{}` in {}",
        case.prints,
        stdout(&got)
    );
    assert!(!stderr(&got).contains("panicked"), "{}", stderr(&got));
    // The profile is written whatever way the guest ended; it reads back.
    let _ = Decoded::load(&profile);
    (got, profile)
}

#[test]
fn everyday_flag_sets_behave_as_under_wasmtime_run() {
    let dir = tempfile::tempdir().unwrap();
    let c = fixture(C);
    let cases = [
        // cprog's memory is larger than 64 KiB: it cannot be instantiated.
        Case::new(
            &["-W", "max-memory-size=65536"],
            c.clone(),
            &["spin", "1"],
            1,
            "",
        ),
        // Out of fuel: a trap, which exits as an abort does.
        Case::new(&["-W", "fuel=100000"], c.clone(), &["spin", "80"], 134, ""),
        Case::new(
            &["-O", "opt-level=0"],
            c.clone(),
            &["spin", "2"],
            0,
            "spin done: 2 rounds",
        ),
        // The profile keeps its lines: the address map is kept, and said so.
        Case::new(
            &["-D", "address-map=n"],
            c.clone(),
            &["spin", "2"],
            0,
            "spin done: 2 rounds",
        ),
        Case::new(
            &["-C", "compiler=winch"],
            c.clone(),
            &["spin", "2"],
            0,
            "spin done: 2 rounds",
        ),
        Case::new(&["-C", "cache=n"], c.clone(), &["exit", "3"], 3, ""),
        Case {
            env: &[("WASMSPY_GREETING", "hello from the host")],
            ..Case::new(
                &["-S", "inherit-env"],
                c.clone(),
                &["env", "WASMSPY_GREETING"],
                0,
                "hello from the host",
            )
        },
        // Without it, the guest sees no host variable.
        Case {
            env: &[("WASMSPY_GREETING", "hello from the host")],
            ..Case::new(&[], c.clone(), &["env", "WASMSPY_GREETING"], 0, "(unset)")
        },
        // `-S p3` links WASI 0.3 beside 0.2; a 0.2 command runs as before.
        Case::new(
            &["-S", "p3", "--env", "GREETING=hi", "--dir", "."],
            fixture(COMPONENT),
            &["io", "Cargo.toml"],
            0,
            "GREETING=hi; first line: [package]",
        ),
        // WASI 0.2's exit carries success or failure alone: `exit(5)` exits with 1.
        Case::new(&["-S", "p3=n"], fixture(COMPONENT), &["exit", "5"], 1, ""),
    ];
    for case in &cases {
        same_as_wasmtime(dir.path(), case);
    }
}

#[test]
fn invoke_calls_an_export_with_arguments_and_prints_its_results() {
    let dir = tempfile::tempdir().unwrap();
    let add = fixture("wat/add.wat");
    for (function, args, prints) in [
        ("add", &["3", "4"][..], "7\n"),
        ("mul64", &["0x10", "3"][..], "48\n"),
        ("half", &["5"][..], "2.5\n"),
    ] {
        let flags = ["--invoke", function];
        let (out, _) =
            same_as_wasmtime(dir.path(), &Case::new(&flags, add.clone(), args, 0, prints));
        assert_eq!(stdout(&out), prints);
    }
    // Too few arguments: the same error, no call.
    same_as_wasmtime(
        dir.path(),
        &Case::new(&["--invoke", "add"], add, &["3"], 1, ""),
    );
}

/// Stack switching: a generator on a continuation of its own yields 1..N to the consumer
/// (`tests/fixtures/wat/switch.wat`); samples on the continuation's stack keep their leaf.
#[test]
fn stack_switching_runs_and_is_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let (_, profile) = same_as_wasmtime(
        dir.path(),
        // 3000000 * 3000001 / 2 modulo 2^32, as an i32.
        &Case::new(
            &["-W", "stack-switching=y", "--invoke", "run"],
            fixture("wat/switch.wat"),
            &["3000000"],
            0,
            "-1124226208\n",
        ),
    );
    let p = Decoded::load(&profile);
    let top = p.top_self("cpu");
    assert!(top.iter().any(|(name, _)| name == "generate"), "{top:?}");
}

#[test]
fn wasm_gc_runs_under_each_collector() {
    let dir = tempfile::tempdir().unwrap();
    // 20 lists of 1000 nodes, each summed: 20 * 500500.
    for collector in ["drc", "copying", "null"] {
        let collector = format!("collector={collector}");
        let flags = ["-W", "gc", "-C", &collector, "--invoke", "run"];
        same_as_wasmtime(
            dir.path(),
            &Case::new(
                &flags,
                fixture("wat/gc.wat"),
                &["20", "1000"],
                0,
                "10010000\n",
            ),
        );
    }
}

/// Winch's code is walked and named as Cranelift's: cprog's 80/20 split, the stack under
/// `_start`, and source lines from the DWARF.
#[test]
fn winch_code_is_sampled_and_symbolized() {
    let dir = tempfile::tempdir().unwrap();
    let (_, p) = record_ok(
        dir.path(),
        &["-C", "compiler=winch"],
        &fixture(C),
        &["spin", "40"],
    );
    let top = p.top_self("cpu");
    assert_eq!(top[0].0, "hot_function", "top: {top:?}");
    // hot_function runs 4x the iterations of cold_function (the program's own split); the
    // window is the one tests/record.rs allows Cranelift's code.
    let hot = p.self_share("cpu", "hot_function");
    assert!((0.72..=0.88).contains(&hot), "hot share {hot:.3}: {top:?}");
    assert_spin_stack(&p);
    let lines: Vec<_> =
        p.0.location
            .iter()
            .flat_map(|l| p.source_frames(l.id))
            .filter(|(name, file, line, _)| {
                name == "hot_function" && file.ends_with("cprog.c") && *line > 0
            })
            .collect();
    assert!(!lines.is_empty(), "no cprog.c lines for hot_function");
}

/// Compiled once into a cache directory of the test's own, then run from the cache: the same
/// functions named in the perf map, the same build id and the same hot line as a run with
/// `-C cache=n`.
#[test]
fn profiles_are_the_same_with_and_without_the_compile_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, cache_config) = own_cache(dir.path());
    let profile = |flags: &[&str], name: &str| {
        let out_path = dir.path().join(name);
        let out = wasmspy()
            .args(["record", "--perfmap", "-o"])
            .arg(&out_path)
            .args(flags)
            .arg("--")
            .arg(fixture(C))
            .args(["spin", "40"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        (Decoded::load(&out_path), perf_map_names(&out))
    };
    let (fresh, fresh_names) = profile(&["-C", "cache=n"], "fresh.pb.gz");
    let _ = profile(&["-C", &cache_config], "filling.pb.gz");
    let entries = std::fs::read_dir(&cache).map(|d| d.count()).unwrap_or(0);
    assert!(entries > 0, "nothing cached in {}", cache.display());
    let (cached, cached_names) = profile(&["-C", &cache_config], "cached.pb.gz");

    assert!(
        fresh_names.contains(&"hot_function".to_string()),
        "{fresh_names:?}"
    );
    assert_eq!(cached_names, fresh_names);
    let build_ids = |p: &Decoded| -> Vec<String> {
        p.0.mapping
            .iter()
            .map(|m| p.str(m.build_id).to_string())
            .collect()
    };
    assert_eq!(build_ids(&cached), build_ids(&fresh));
    let hot_line = |p: &Decoded| {
        let mut lines: Vec<(i64, i64)> = Vec::new();
        for (frames, values) in p.0.sample.iter().map(|s| (s.location_id[0], s.value[1])) {
            let (name, _, line, _) = p.source_frames(frames)[0].clone();
            if name == "hot_function" {
                match lines.iter_mut().find(|(l, _)| *l == line) {
                    Some((_, v)) => *v += values,
                    None => lines.push((line, values)),
                }
            }
        }
        lines.sort_by_key(|&(_, v)| std::cmp::Reverse(v));
        lines.first().map(|&(l, _)| l)
    };
    assert!(hot_line(&fresh).is_some());
    assert_eq!(hot_line(&cached), hot_line(&fresh));
}

/// A component's entry in wasmspy's cache keeps its core modules' build ids once a run has
/// hashed them: a run from the entry gives the ids a run without the cache hashed, and an
/// entry whose ids are damaged is not believed (they are hashed again, and kept anew).
#[test]
fn a_cached_component_keeps_its_build_ids() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, cache_config) = own_cache(dir.path());
    let build_ids = |flags: &[&str]| -> Vec<String> {
        let (out, path) = record(dir.path(), flags, &fixture(COMPONENT), &["exit", "0"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let p = Decoded::load_whole(&path);
        let guest = p.0.mapping.iter().filter(|m| m.memory_start == 0);
        guest.map(|m| p.str(m.build_id).to_string()).collect()
    };
    let fresh = build_ids(&["-C", "cache=n"]);
    assert_eq!(fresh.len(), 3, "{fresh:?}");
    assert!(fresh.iter().all(|id| id.len() == 64), "{fresh:?}");
    let kept = || -> Vec<PathBuf> {
        let entries = std::fs::read_dir(cache.join("modules")).unwrap();
        let ours = entries.map(|e| e.unwrap().path()).filter(|d| {
            let name = d.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("wasmspy-")
        });
        ours.flat_map(|d| std::fs::read_dir(d).unwrap().map(|e| e.unwrap().path()))
            .filter(|f| f.to_string_lossy().ends_with("-ids"))
            .collect()
    };
    assert_eq!(build_ids(&["-C", &cache_config]), fresh);
    let [ids_file] = &kept()[..] else {
        panic!("not one file of build ids: {:?}", kept());
    };
    assert_eq!(std::fs::read_to_string(ids_file).unwrap(), fresh.join("\n"));
    assert_eq!(build_ids(&["-C", &cache_config]), fresh);
    // Taken from the entry, not hashed (trusted as the compiled code beside them is).
    let planted = vec!["ab".repeat(32); 3];
    std::fs::write(ids_file, planted.join("\n")).unwrap();
    assert_eq!(build_ids(&["-C", &cache_config]), planted);

    std::fs::write(ids_file, "not an id\n").unwrap();
    assert_eq!(build_ids(&["-C", &cache_config]), fresh);
    assert_eq!(std::fs::read_to_string(ids_file).unwrap(), fresh.join("\n"));
}

/// The names of the functions `--perfmap` listed, sorted: the file its stderr names.
fn perf_map_names(out: &Output) -> Vec<String> {
    let err = stderr(out);
    let path = err
        .lines()
        .find_map(|l| l.strip_prefix("wasmspy: wrote "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_else(|| panic!("no perf map written: {err}"));
    let map = std::fs::read_to_string(path).unwrap();
    let _ = std::fs::remove_file(path);
    let mut names: Vec<String> = map
        .lines()
        .filter_map(|l| l.splitn(3, ' ').nth(2))
        .map(|n| n.to_string())
        .collect();
    names.sort();
    names
}

#[test]
fn what_wasmspy_cannot_honour_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (flags, expect) in [
        (&["--profile=guest"][..], "wasmspy is the guest profiler"),
        (
            &["--profile=vtune"][..],
            "--profile=perfmap or --profile=jitdump",
        ),
        (&["--allow-precompiled"][..], "--allow-precompiled"),
        (&["-S", "threads"][..], "wasi-threads has been removed"),
        (&["-S", "http"][..], "wasi-http for core wasm modules"),
        (&["-W", "no-such-option"][..], "no-such-option"),
        (
            &["-D", "debugger=dbg.wasm"][..],
            "runs no debugger component",
        ),
    ] {
        let (out, _) = record(dir.path(), flags, &fixture(C), &["spin", "1"]);
        assert!(!out.status.success(), "{flags:?} succeeded");
        let err = stderr(&out);
        assert!(
            err.contains(expect),
            "{flags:?}: expected `{expect}` in {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A WASI 0.3 command (`tests/fixtures/rust/tasks/`, the component model's async ABI) whose
/// two tasks take turns, each yielding to the host after every unit of work and timing its own
/// work: its stdout and exit code are `wasmtime run`'s, and with either sampler the profile
/// splits `light_work` and `heavy_work` as the tasks timed themselves, within 5 points (about
/// 1,300 samples: a 25 % share's sampling error is 1.2 points, so 5 is four of them). The
/// tasks time themselves by the wall clock (all WASI has), so the profile is taken by it too
/// (`--clock wall`): a thread descheduled by a loaded machine adds the same time to both, to
/// the task it was running. (By CPU time, a `yes` beside the suite parted them by 6 points.)
#[test]
fn async_tasks_split_as_they_timed_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = fixture("rust/tasks.wasm");
    let expected = Command::new(wasmtime_cli())
        .args(["run", "--env", "UNITS=20"])
        .arg(&tasks)
        .output()
        .unwrap();
    assert_eq!(expected.status.code(), Some(0), "{}", stderr(&expected));
    assert!(
        stdout(&expected).starts_with("light "),
        "{}",
        stdout(&expected)
    );
    for sampler in ["signal", "epoch"] {
        let (out, path) = record(
            dir.path(),
            &[
                "--sampler",
                sampler,
                "--clock",
                "wall",
                "--env",
                "UNITS=300",
            ],
            &tasks,
            &[],
        );
        assert_eq!(out.status.code(), Some(0), "{sampler}: {}", stderr(&out));
        let printed = stdout(&out);
        assert!(printed.starts_with("light "), "{sampler}: {printed}");
        // `light 0.335 s, heavy 1.005 s`
        let seconds: Vec<f64> = printed
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(seconds.len(), 2, "{printed}");
        let timed = seconds[0] / (seconds[0] + seconds[1]);

        let p = Decoded::load(&path);
        let wall = p.value_index("wall");
        let under = |function: &str| -> i64 {
            p.stacks()
                .iter()
                .filter(|(names, _)| names.iter().any(|n| n == function))
                .map(|(_, values)| values[wall])
                .sum()
        };
        let (light, heavy) = (under("light_work") as f64, under("heavy_work") as f64);
        let profiled = light / (light + heavy);
        eprintln!("{sampler}: light_work {profiled:.3} of the profile, {timed:.3} timed");
        assert!(
            (profiled - timed).abs() <= 0.05,
            "{sampler}: light_work {profiled:.3} of the two tasks' time in the profile, {timed:.3} as they timed themselves"
        );
        // Nearly all the run is the tasks' work.
        assert!((light + heavy) / p.total("wall") as f64 > 0.9, "{sampler}");
    }
}
