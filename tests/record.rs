//! `wasmspy record` end to end: the guest runs as under `wasmtime run`, and the profile shows
//! the hot path the fixtures are known to have.

mod common;

use std::io::Read as _;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

const C: &str = "c/cprog.wasm";
const RUST: &str = "rust/hotspot.wasm";

#[test]
fn c_hot_function_has_its_known_share() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(dir.path(), &[], &fixture(C), &["spin", "80"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("spin done: 80 rounds"),
        "{}",
        stdout(&out)
    );
    let p = Decoded::load(&path);

    // hot_function runs 4x the iterations of cold_function: 80% / 20% of the guest's time.
    let top = p.top_self("cpu");
    assert_eq!(top[0].0, "hot_function", "top: {top:?}");
    let hot = p.self_share("cpu", "hot_function");
    let cold = p.self_share("cpu", "cold_function");
    assert!(
        (0.72..=0.88).contains(&hot),
        "hot share {hot:.3}, top: {top:?}"
    );
    assert!(
        (0.12..=0.28).contains(&cold),
        "cold share {cold:.3}, top: {top:?}"
    );

    let stacks = p.stacks();
    assert!(stacks.len() >= 2);
    for (names, _) in &stacks {
        assert_rooted_at_start(names);
    }
    assert_spin_stack(&p);
}

#[test]
fn rust_hot_path_is_demangled_and_has_its_known_share() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(dir.path(), &[], &fixture(RUST), &["120"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("hotspot done: 120 rounds"),
        "{}",
        stdout(&out)
    );
    let p = Decoded::load(&path);
    // Integer arithmetic from `core` is inlined into both paths: count it as theirs.
    let top = p.top_self_compiled("cpu");
    assert_eq!(top[0].0, "hotspot::engine::hot_path", "top: {top:?}");
    let hot = p.self_share_compiled("cpu", "hotspot::engine::hot_path");
    let warm = p.self_share_compiled("cpu", "hotspot::engine::warm_path");
    assert!(
        (0.67..=0.83).contains(&hot),
        "hot share {hot:.3}, top: {top:?}"
    );
    assert!(
        (0.17..=0.33).contains(&warm),
        "warm share {warm:.3}, top: {top:?}"
    );

    let hot_fn = p
        .sampled_functions()
        .into_iter()
        .find(|f| p.str(f.name) == "hotspot::engine::hot_path")
        .unwrap();
    let mangled = p.str(hot_fn.system_name);
    assert!(
        mangled.starts_with("_ZN7hotspot6engine8hot_path17h"),
        "{mangled}"
    );
    for (names, _) in p.stacks() {
        assert_rooted_at_start(&names);
        assert!(
            names == ["[wasmtime]"]
                || names == ["[host]"]
                || names.iter().any(|n| n == "hotspot::main"),
            "{names:?}"
        );
    }
}

/// The root is the exported `_start`; wasm-ld names the export wrapper it generates for C
/// programs `_start.command_export`, and that wrapper calls the constructors (wasi-libc's
/// finding its preopened directories, a host call a sample can land in), then wasi-libc's
/// `_start`, then the destructors. A sample in Wasmtime's own code before or after the guest
/// runs (instantiating it, creating its fiber) has no guest stack at all: `[host]` (its host
/// frames left out by `Decoded::load`), `[wasmtime]` without host frames.
fn assert_rooted_at_start(names: &[String]) {
    match names.last().unwrap().as_str() {
        "_start" => {}
        "[wasmtime]" | "[host]" if names.len() == 1 => {}
        "_start.command_export" => assert!(
            ["_start", "__wasm_call_ctors", "__wasm_call_dtors"]
                .contains(&names[names.len() - 2].as_str()),
            "{names:?}"
        ),
        _ => panic!("stack not rooted at _start: {names:?}"),
    }
}

#[test]
fn profile_header_describes_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(dir.path(), &["--rate", "500"], &fixture(C), &["spin", "20"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = Decoded::load(&path);
    let types: Vec<_> =
        p.0.sample_type
            .iter()
            .map(|vt| format!("{}/{}", p.str(vt.r#type), p.str(vt.unit)))
            .collect();
    assert_eq!(types, ["samples/count", "cpu/nanoseconds"]);
    let period_type = p.0.period_type.as_ref().unwrap();
    assert_eq!(
        (
            p.str(period_type.r#type),
            p.str(period_type.unit),
            p.0.period
        ),
        ("cpu", "nanoseconds", 2_000_000)
    );
    assert_eq!(p.str(p.0.default_sample_type), "cpu");
    assert!(p.0.duration_nanos > 0 && p.0.time_nanos > 1_600_000_000_000_000_000);

    assert_eq!(p.0.mapping.len(), 1);
    let m = &p.0.mapping[0];
    let wasm = std::fs::read(fixture(C)).unwrap();
    assert_eq!(p.str(m.filename), "cprog.wasm");
    assert_eq!(p.str(m.build_id).len(), 64);
    assert_eq!(m.memory_limit, wasm.len() as u64);
    assert!(m.has_functions);

    // Every location is a code offset inside the module, but for the imports that host
    // calls sampled, and the runtime's own code when a sample lands there (no mapping:
    // `[wasmtime]`, or the `[host]` root above the host's frames `Decoded::load` left out).
    for loc in &p.0.location {
        let name = p.str(p.function(loc.line[0].function_id).name);
        if ["[wasmtime]", "[host]", "[host call]"].contains(&name) {
            assert_eq!(loc.mapping_id, 0);
            continue;
        }
        assert_eq!(loc.mapping_id, 1);
        if name.starts_with("wasi_snapshot_preview1::") {
            assert_eq!(loc.address, 0);
        } else {
            assert!(
                loc.address > 0 && loc.address < wasm.len() as u64,
                "{loc:?}"
            );
        }
    }
    // The samples and cpu columns agree with the summary line.
    let summary = stderr(&out);
    let samples = p.total("samples");
    assert!(samples > 10, "{summary}");
    assert!(
        summary.contains(&format!("({samples} samples,")),
        "{summary}"
    );
    assert!(summary.contains("go tool pprof"), "{summary}");
}

/// The profile's CPU column adds up to the CPU time the process used, less what Wasmtime
/// spends outside the guest (engine setup, loading the compiled module), measured by a run
/// that does no work. What varies from one run to the next is left out of both:
/// - compiling (70 to 190 ms of CPU on a loaded machine): both read the module compiled by a
///   first run into a cache of the test's own (9 ms);
/// - naming the host's frames, which reads wasmspy's own symbols and DWARF (80 ms) in a run
///   that took a sample outside the guest (3 runs in 30 of the one that does no work, 1 in
///   CI's work run: a ratio of 0.897): `--host-frames=none`.
///
/// Measured so, beside a build: 0.989 to 0.995 in 14 runs of 2 s of work; the bound leaves
/// a loaded machine twice that and more.
#[test]
fn cpu_values_add_up_to_the_cpu_time_used() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pb.gz");
    let cache = dir.path().join("cache.toml");
    let cache_dir = dir.path().join("cache");
    std::fs::write(&cache, format!("[cache]\ndirectory = {:?}\n", cache_dir)).unwrap();
    let run = |rounds: &str| {
        let mut cmd = wasmspy();
        cmd.args(["record", "--host-frames=none", "-C"])
            .arg(format!("cache-config={}", cache.display()))
            .arg("-o")
            .arg(&out)
            .arg("--")
            .arg(fixture(C));
        cmd.args(["spin", rounds])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let (code, cpu_ns, stderr) = run_measuring_cpu(&mut cmd);
        assert_eq!(code, 0, "{stderr}");
        (cpu_ns, stderr)
    };
    run("0");
    assert!(
        cache_dir.join("modules").is_dir(),
        "the compile cache is not used"
    );
    let (fixed_cost_ns, _) = run("0");
    let (process_cpu_ns, said) = run("300");
    let profiled = Decoded::load(&out).total("cpu") as f64;
    let guest_cpu_ns = process_cpu_ns.saturating_sub(fixed_cost_ns) as f64;
    let ratio = profiled / guest_cpu_ns;
    eprintln!(
        "profiled {profiled} ns; process {process_cpu_ns} ns, of which {fixed_cost_ns} ns fixed cost: {ratio:.3}"
    );
    assert!((0.95..=1.03).contains(&ratio), "ratio {ratio:.3}; {said}");
}

/// Waits for the child with wait4, which reports the CPU time of that child alone (tests run
/// concurrently, so RUSAGE_CHILDREN would mix their children), and what it wrote to a piped
/// stderr (a few lines: the pipe holds them until it is read).
#[allow(clippy::zombie_processes)] // reaped by the wait4 below
fn run_measuring_cpu(cmd: &mut Command) -> (i32, u64, String) {
    let mut child = cmd.spawn().unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pid is our unwaited child; status and usage are valid out-pointers.
    let rc = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(rc, child.id() as i32);
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    let mut said = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        stderr.read_to_string(&mut said).unwrap();
    }
    (
        libc::WEXITSTATUS(status),
        ns(usage.ru_utime) + ns(usage.ru_stime),
        said,
    )
}

#[test]
fn guest_exit_code_and_stdout_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(dir.path(), &[], &fixture(C), &["exit", "3"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(stdout(&out), "exiting with 3\n");
    Decoded::load(&path);
    let (out, _) = record(dir.path(), &[], &fixture(C), &["no-such-mode"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(
        stderr(&out).starts_with("unknown mode no-such-mode\n"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn trap_prints_the_guest_backtrace_and_keeps_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(dir.path(), &[], &fixture(C), &["trap"]);
    let err = stderr(&out);
    // As `wasmtime run`: the abort exit code, the trap, and the backtrace with function names.
    assert_eq!(out.status.code(), Some(134), "{err}");
    assert_eq!(stdout(&out), "about to trap\n");
    assert!(
        err.starts_with("Error: failed to run main module `cprog.wasm`"),
        "{err}"
    );
    assert!(
        err.contains("wasm `unreachable` instruction executed"),
        "{err}"
    );
    let inner = err.find("trap_inner").expect("backtrace names trap_inner");
    let outer = err.find("trap_outer").expect("backtrace names trap_outer");
    assert!(inner < outer, "{err}");
    assert!(
        err.lines().last().unwrap().starts_with("wasmspy: wrote "),
        "{err}"
    );
    Decoded::load(&path);
}

#[test]
fn argv_env_and_dirs_as_in_wasmtime_run() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _) = record(dir.path(), &[], &fixture(C), &["args", "a b", "-x", "--y"]);
    assert_eq!(
        stdout(&out),
        "argv[0]=cprog.wasm\nargv[1]=args\nargv[2]=a b\nargv[3]=-x\nargv[4]=--y\n"
    );

    let env_run = |flags: &[&str]| {
        let out = wasmspy()
            .args(["record", "-o"])
            .arg(dir.path().join("env.pb.gz"))
            .args(flags)
            .arg(fixture(C))
            .args(["env", "WASMSPY_TEST_VAR"])
            .env("WASMSPY_TEST_VAR", "from-host")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    assert_eq!(env_run(&[]), "WASMSPY_TEST_VAR=(unset)\n");
    assert_eq!(
        env_run(&["--env", "WASMSPY_TEST_VAR=set"]),
        "WASMSPY_TEST_VAR=set\n"
    );
    assert_eq!(
        env_run(&["--env", "WASMSPY_TEST_VAR"]),
        "WASMSPY_TEST_VAR=from-host\n"
    );
    assert_eq!(env_run(&["--inherit-env"]), "WASMSPY_TEST_VAR=from-host\n");
    assert_eq!(
        env_run(&["--inherit-env", "--env", "WASMSPY_TEST_VAR=over"]),
        "WASMSPY_TEST_VAR=over\n"
    );

    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("hello.txt"), "hello from the host\n").unwrap();
    let mount = format!("{}::/mnt", data.display());
    let (out, _) = record(
        dir.path(),
        &["--dir", &mount],
        &fixture(C),
        &["cat", "/mnt/hello.txt"],
    );
    assert_eq!(stdout(&out), "hello from the host\n", "{}", stderr(&out));
    let (out, _) = record(dir.path(), &[], &fixture(C), &["cat", "/mnt/hello.txt"]);
    assert_eq!(out.status.code(), Some(2), "no --dir, no access");
}

#[test]
fn bad_input_gets_one_line_and_a_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "just some text\n").unwrap();
    let wasm = std::fs::read(fixture(C)).unwrap();
    let truncated = dir.path().join("truncated.wasm");
    std::fs::write(&truncated, &wasm[..wasm.len() / 2]).unwrap();
    let component = dir.path().join("component.wasm");
    std::fs::write(&component, wat::parse_str("(component)").unwrap()).unwrap();
    let missing = dir.path().join("missing.wasm");
    let out_ok = dir.path().join("out.pb.gz");
    // An older profile there is kept by every failed run, and nothing is left beside it.
    std::fs::write(&out_ok, "an older profile").unwrap();
    let unwritable = dir.path().join("no/such/dir/out.pb.gz");

    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec![missing.display().to_string()], "cannot read"),
        (
            vec![text.display().to_string()],
            "is not a WebAssembly module",
        ),
        (vec![truncated.display().to_string()], "cannot compile"),
        (
            vec!["--bogus-flag".into(), fixture(C).display().to_string()],
            "--bogus-flag",
        ),
        (
            vec![
                "--mem-rate".into(),
                "1".into(),
                fixture(C).display().to_string(),
            ],
            "required arguments were not provided: --mem-profile",
        ),
        (
            vec![
                "--rate".into(),
                "0".into(),
                fixture(C).display().to_string(),
            ],
            "--rate",
        ),
    ];
    for (args, expect) in cases {
        let out = wasmspy()
            .args(["record", "-o"])
            .arg(&out_ok)
            .args(&args)
            .output()
            .unwrap();
        assert_one_line_error(&out, expect, &args);
        assert_eq!(
            std::fs::read_to_string(&out_ok).unwrap(),
            "an older profile",
            "{args:?}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".wasmspy-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    let out = wasmspy()
        .args(["record", "-o"])
        .arg(&unwritable)
        .arg(fixture(C))
        .output()
        .unwrap();
    assert_one_line_error(&out, "cannot create output", &["unwritable output"]);
    assert!(stdout(&out).is_empty(), "the guest must not run");

    // A module importing what nobody provides: the error says how to run it anyway.
    let bench = dir.path().join("bench.wat");
    std::fs::write(
        &bench,
        r#"(module (import "bench" "start" (func)) (memory (export "memory") 1) (func (export "_start")))"#,
    )
    .unwrap();
    let (out, _) = record(dir.path(), &[], &bench, &[]);
    assert_one_line_error(&out, "--default-values-unknown-imports", &["bench import"]);
    // A component that is no command: as `wasmtime run` says.
    let (out, _) = record(dir.path(), &[], &component, &[]);
    assert_one_line_error(
        &out,
        "no exported instance named `wasi:cli/run@0.2",
        &["empty component"],
    );
    let (out, _) = record(
        dir.path(),
        &["--default-values-unknown-imports"],
        &bench,
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Runs `record --sampler SAMPLER` on the busy C fixture, sends `signal` after 1.5 s, and
/// returns how it ended, what it wrote on stderr, and the profile.
fn signal_while_spinning(sampler: &str, signal: i32) -> (Option<i32>, String, Decoded) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pb.gz");
    let child = wasmspy()
        .args(["record", "--sampler", sampler, "-o"])
        .arg(&out)
        .arg(fixture(C))
        .args(["spin", "1000000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let result = child.wait_with_output().unwrap();
    (result.status.code(), stderr(&result), Decoded::load(&out))
}

/// With the signal sampler the engine has no epochs: the profile is written while the guest
/// still runs, and the process exits; with the epoch sampler the guest is stopped first.
#[test]
fn ctrl_c_stops_the_guest_and_writes_the_profile() {
    for sampler in ["signal", "epoch"] {
        let (code, err, p) = signal_while_spinning(sampler, libc::SIGINT);
        assert_eq!(code, Some(130), "{sampler}: {err}");
        assert_eq!(err.matches("wasmspy: interrupted").count(), 1, "{err}");
        assert!(p.total("samples") > 100, "{sampler}");
        assert_eq!(p.top_self("cpu")[0].0, "hot_function", "{sampler}");
    }
}

/// SIGTERM and SIGHUP (what `timeout`, `kill`, systemd and terminals send) end the recording
/// as Ctrl-C does, with the status a shell reports for them.
#[test]
fn sigterm_and_sighup_write_the_profile() {
    for (signal, status, said) in [
        (libc::SIGTERM, 143, "wasmspy: terminated (SIGTERM)"),
        (libc::SIGHUP, 129, "wasmspy: hung up (SIGHUP)"),
    ] {
        let (code, err, p) = signal_while_spinning("signal", signal);
        assert_eq!(code, Some(status), "{err}");
        assert!(err.contains(said), "{err}");
        assert_eq!(p.top_self("cpu")[0].0, "hot_function");
    }
}

/// SIGHUP from a terminal that closed, its stderr gone with it: the run still ends (saying
/// what was written fails, which once left the guest running with nobody to stop it), and
/// the profile is written.
#[test]
fn a_hang_up_with_stderr_gone_still_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pb.gz");
    let mut child = wasmspy()
        .args(["record", "--pprof-addr", "127.0.0.1:0", "-o"])
        .arg(&out)
        .arg(fixture(C))
        .args(["spin", "1000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once a second of it has been profiled (asked of its live server), stderr is closed.
    let mut lines = common::child::StderrLines::of(&mut child);
    let line = lines.wait_for("serving profiles at ");
    let live = line.split("serving profiles at ").nth(1).unwrap();
    let window = ureq::get(&format!("{live}profile?seconds=1"))
        .timeout(Duration::from_secs(60))
        .call()
        .unwrap();
    assert_eq!(window.status(), 200);
    drop(lines);
    // SAFETY: plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGHUP) }, 0);
    // Polled so that a run that never ends fails the test instead of hanging it.
    let status = (0..1200).find_map(|_| {
        std::thread::sleep(Duration::from_millis(50));
        child.try_wait().unwrap()
    });
    let Some(status) = status else {
        let _ = child.kill();
        panic!("wasmspy still runs a minute after SIGHUP");
    };
    assert_eq!(status.code(), Some(129));
    assert_eq!(Decoded::load(&out).top_self("cpu")[0].0, "hot_function");
}

#[test]
fn ctrl_c_while_blocked_in_a_host_call_still_writes_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pb.gz");
    let result = ctrl_c_while_reading_stdin(&["-o".as_ref(), out.as_ref()]);
    assert_eq!(result.status.code(), Some(130), "{}", stderr(&result));
    assert!(
        stderr(&result).contains("wasmspy: wrote "),
        "{}",
        stderr(&result)
    );
    Decoded::load(&out);
}

/// A second signal while the first one's profile is being saved ends the process at once and
/// says so; the profile is not written (an older one stays).
#[test]
fn a_second_signal_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pb.gz");
    std::fs::write(&out, "an older profile").unwrap();
    // The epoch sampler waits a second for the guest, blocked reading stdin, to stop.
    let mut child = wasmspy()
        .args(["record", "--sampler", "epoch", "-o"])
        .arg(&out)
        .arg(fixture(C))
        .arg("stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take();
    std::thread::sleep(Duration::from_millis(1000));
    // Two different signals, so that neither is merged into the other while pending.
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: plain kill(2) of our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    }
    let result = child.wait_with_output().unwrap();
    drop(stdin);
    let err = stderr(&result);
    assert!(
        matches!(result.status.code(), Some(130 | 143)),
        "{:?}: {err}",
        result.status
    );
    assert!(err.contains("wasmspy: a second signal: exiting"), "{err}");
    assert!(!err.contains("wasmspy: wrote"), "{err}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "an older profile");
}

/// `--flush-every`: the profile so far is on disk, whole, while the guest runs, and a run
/// killed without warning (SIGKILL) keeps the last one.
#[test]
fn flushed_profiles_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let pprof = dir.path().join("out.pb.gz");
    let speedscope = dir.path().join("out.speedscope.json");
    let mut child = wasmspy()
        .args(["record", "--flush-every", "0.2", "-o"])
        .arg(&pprof)
        .arg("-o")
        .arg(&speedscope)
        .arg(fixture(C))
        .args(["spin", "1000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Samples in the profile on disk, once there is one.
    let samples_on_disk = || -> Option<i64> {
        let bytes = std::fs::read(&pprof).ok()?;
        let profile = wasmspy::export::pprof::read(&bytes).expect("a flushed profile is whole");
        Some(profile.total(wasmspy::profile::SAMPLES))
    };
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        for _ in 0..1200 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no {what} after a minute");
    };
    wait_for("flush with samples", &|| samples_on_disk() > Some(0));
    let first = samples_on_disk().unwrap();
    wait_for("later flush", &|| samples_on_disk() > Some(first));
    child.kill().unwrap();
    let result = child.wait_with_output().unwrap();
    assert_eq!(result.status.signal(), Some(libc::SIGKILL));
    assert!(samples_on_disk().unwrap() > first);
    let p = Decoded::load(&pprof);
    assert_eq!(p.top_self("cpu")[0].0, "hot_function");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&speedscope).unwrap()).unwrap();
    assert!(!json["profiles"][0]["samples"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// A guest too short to be sampled: the flame graph, which cannot draw nothing, is not
/// written, with a warning; the other outputs are, and the exit code is the guest's.
#[test]
fn a_guest_too_short_to_sample_keeps_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("out.svg");
    let pprof = dir.path().join("out.pb.gz");
    let out = wasmspy()
        .args(["record", "--rate", "1", "-o"])
        .arg(&svg)
        .arg("-o")
        .arg(&pprof)
        .arg(fixture(C))
        .args(["exit", "3"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("wasmspy: warning: {} not written", svg.display())),
        "{err}"
    );
    assert!(!svg.exists());
    assert_eq!(Decoded::load(&pprof).total("samples"), 0);
    let left = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(left, 1, "only the pprof file is left");
}
