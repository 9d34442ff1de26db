//! The live server (`record --pprof-addr`): real HTTP requests on loopback to a running guest.

mod common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::child::{process_cpu_seconds, StderrLines};
use common::*;

/// A `wasmspy record --pprof-addr 127.0.0.1:0 …` running, with the address it serves at.
struct Live {
    child: Child,
    stderr: StderrLines,
    base: String,
}

impl Live {
    /// Serves at a port of the system's choosing on 127.0.0.1, unless `extra` says where.
    fn start(extra: &[&str], module: &str, args: &[&str]) -> Live {
        let mut cmd = wasmspy();
        cmd.arg("record");
        if !extra.contains(&"--pprof-addr") {
            cmd.args(["--pprof-addr", "127.0.0.1:0"]);
        }
        let mut child = cmd
            .args(extra)
            .arg("--")
            .arg(fixture(module))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut live = Live {
            stderr: StderrLines::of(&mut child),
            child,
            base: String::new(),
        };
        let line = live.wait_for("serving profiles at ");
        let url = line.split("serving profiles at ").nth(1).unwrap();
        live.base = url.trim_end_matches("/debug/pprof/").to_string();
        live
    }

    fn wait_for(&mut self, text: &str) -> String {
        self.stderr.wait_for(text)
    }

    fn cpu_seconds(&self) -> f64 {
        process_cpu_seconds(self.child.id())
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Waits for the process; its exit code, stdout and the rest of stderr.
    fn finish(mut self) -> (Option<i32>, String, String) {
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let err = self.stderr.all();
        let status = self.child.wait().unwrap();
        (status.code(), out, err)
    }
}

/// A test that fails leaves no guest running behind it (one spinning for minutes slows every
/// test after it).
impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `url`: the status, the `Content-Type` and the body.
fn get(url: &str) -> (u16, String, Vec<u8>) {
    let response = match ureq::get(url).timeout(Duration::from_secs(60)).call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {url}: {e}"),
    };
    let status = response.status();
    let kind = response.content_type().to_string();
    let mut body = Vec::new();
    response.into_reader().read_to_end(&mut body).unwrap();
    (status, kind, body)
}

fn decode(bytes: &[u8]) -> Decoded {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.pb.gz");
    std::fs::write(&path, bytes).unwrap();
    Decoded::load(&path)
}

#[test]
fn a_cpu_profile_of_the_next_seconds() {
    // Far more CPU in `hot_function` than the window, however fast the machine: the guest
    // must still run when the window closes (an exit inside it ends the profile early).
    let live = Live::start(&[], "c/cprog.wasm", &["spin", "100000"]);
    let (status, kind, body) = get(&live.url("/debug/pprof/"));
    assert_eq!(status, 200);
    assert!(kind.starts_with("text/html"), "{kind}");
    let index = String::from_utf8(body).unwrap();
    for link in ["profile?seconds=30", "cmdline"] {
        assert!(index.contains(&format!("href=\"{link}\"")), "{index}");
    }
    assert!(index.contains("--mem-profile"), "heap is off: {index}");
    let (status, _, body) = get(&live.url("/debug/pprof/cmdline"));
    assert_eq!(
        (status, body.as_slice()),
        (200, &b"cprog.wasm\x00spin\x00100000"[..])
    );

    let asked = Instant::now();
    let cpu_before = live.cpu_seconds();
    let (status, kind, body) = get(&live.url("/debug/pprof/profile?seconds=2"));
    let cpu_used = live.cpu_seconds() - cpu_before;
    let took = asked.elapsed();
    assert_eq!(status, 200);
    assert_eq!(kind, "application/octet-stream");
    assert!(took >= Duration::from_secs(2), "{took:?}");
    let profile = decode(&body);
    let duration = profile.0.duration_nanos as f64 / 1e9;
    assert!(
        duration >= 2.0 && duration <= took.as_secs_f64(),
        "{duration} s"
    );
    // The guest was busy all along: the profile holds the CPU time the process used in its
    // window (however much the machine let it have), most of it in hot_function. The
    // process's time is measured over the whole request, which on a loaded machine ran well
    // past the window (the profile built, the answer sent) while the guest went on: its
    // share in the window is taken as the window's share of the request. The kernel counts
    // the process's time in 10 ms ticks.
    let cpu = profile.total("cpu") as f64 / 1e9;
    let in_window = cpu_used * duration / took.as_secs_f64();
    assert!(
        cpu > 0.8 * in_window - 0.02 && cpu < cpu_used + 0.02,
        "{cpu} s of CPU in the profile, {cpu_used} s used by the process in {took:?}"
    );
    assert_eq!(profile.top_self("cpu")[0].0, "hot_function");

    // The same, as a .cpuprofile.
    let (status, _, body) = get(&live.url("/debug/pprof/profile?seconds=1&format=cpuprofile"));
    assert_eq!(status, 200);
    assert!(body.starts_with(b"{\"nodes\":[{\"id\":1,"), "a .cpuprofile");
    let read = wasmspy::export::read(&body).unwrap();
    let cpu = read.sample_index("cpu").unwrap();
    let hot = read
        .samples
        .iter()
        .filter(|s| read.frame_name(read.stacks[s.stack][0]) == "hot_function")
        .map(|s| s.values[cpu])
        .sum::<i64>();
    assert!(hot * 2 > read.total(cpu), "hot_function leads");
    let (status, _, body) = get(&live.url("/debug/pprof/profile?seconds=1&format=xml"));
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains("unknown format `xml`"));

    sigint(&live.child);
    let (code, _, err) = live.finish();
    assert_eq!(code, Some(130), "{err}");
    // No -o: the live server alone writes no file.
    assert!(!err.contains("wasmspy: wrote"), "{err}");
}

/// A profile from the live server annotates as a written one does: its frames carry their
/// instructions' offsets and its modules' build ids (`tests/annotate.rs` has the listing's
/// details). `divide.c`'s loop: the division, or the instruction after it (skid), is hottest.
#[test]
fn a_live_profile_is_annotated() {
    let live = Live::start(&["--rate", "1000"], "c/divide.wasm", &["7", "4000000000"]);
    let (status, _, body) = get(&live.url("/debug/pprof/profile?seconds=1"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("live.pb.gz");
    std::fs::write(&profile, body).unwrap();
    let out = wasmspy()
        .arg("annotate")
        .arg(&profile)
        .arg("spin")
        .arg("--native")
        .arg("--wasm")
        .arg(fixture("c/divide.wasm"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let (heading, rows) = common::annotated::parse(&text).remove(0);
    assert!(heading.starts_with("spin in divide.wasm"), "{text}");
    let (code, division) = common::annotated::division_hottest(&rows, &text);
    // The window's samples, and no older ones, on the machine code.
    common::annotated::native_adds_up(&code, &text);
    assert!(
        code[division]
            .native
            .iter()
            .any(|(_, i)| i.contains(":  div ") || i.contains(":  udiv ")),
        "{text}"
    );
}

#[test]
fn bad_requests_get_the_status_and_text_go_gives() {
    let live = Live::start(
        &["--pprof-max-seconds", "60"],
        "c/cprog.wasm",
        &["spin", "100000"],
    );
    let bad_seconds = r#"invalid value for "seconds" - must be a positive integer"#;
    for (path, status, text) in [
        ("/debug/pprof/profile?seconds=abc", 400, bad_seconds),
        ("/debug/pprof/profile?seconds=-1", 400, bad_seconds),
        ("/debug/pprof/profile?seconds=0", 400, bad_seconds),
        (
            "/debug/pprof/profile?seconds=61",
            400,
            "profile duration exceeds the server's limit of 60 seconds",
        ),
        ("/debug/pprof/threadcreate", 404, "Unknown profile"),
        (
            "/debug/pprof/heap",
            404,
            "memory profiling is off: run wasmspy record with --mem-profile",
        ),
    ] {
        let (got, kind, body) = get(&live.url(path));
        assert_eq!(got, status, "{path}");
        assert_eq!(kind, "text/plain", "{path}");
        assert_eq!(
            String::from_utf8(body).unwrap(),
            format!("{text}\n"),
            "{path}"
        );
    }

    // A second CPU profile while one is running: refused, and the first one is unharmed.
    let first = {
        let url = live.url("/debug/pprof/profile?seconds=2");
        std::thread::spawn(move || get(&url))
    };
    std::thread::sleep(Duration::from_millis(500));
    let (status, _, body) = get(&live.url("/debug/pprof/profile?seconds=1"));
    assert_eq!(status, 409);
    assert_eq!(
        String::from_utf8(body).unwrap(),
        "Could not enable CPU profiling: cpu profiling already in use\n"
    );
    let (status, _, body) = first.join().unwrap();
    assert_eq!(status, 200);
    assert!(decode(&body).total("samples") > 0);
    // Free again.
    let (status, _, _) = get(&live.url("/debug/pprof/profile?seconds=1"));
    assert_eq!(status, 200);
    sigint(&live.child);
    let (code, _, err) = live.finish();
    assert_eq!(code, Some(130), "{err}");
}

/// A profile asked for longer than the guest has left ends when the guest exits, with the
/// samples up to there; without --serve-after-exit the server then stops.
#[test]
fn a_request_racing_the_guests_exit() {
    let live = Live::start(&[], "c/cprog.wasm", &["spin", "150"]);
    let asked = Instant::now();
    let (status, _, body) = get(&live.url("/debug/pprof/profile?seconds=30"));
    assert_eq!(status, 200);
    // Answered when the guest exited (about a second of CPU in), not after the 30 s asked.
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "{:?}",
        asked.elapsed()
    );
    let profile = decode(&body);
    assert!(profile.total("samples") > 0);
    assert!((profile.0.duration_nanos as f64) < 30e9);
    let base = live.base.clone();
    let (code, _, err) = live.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        ureq::get(&format!("{base}/debug/pprof/")).call().is_err(),
        "still serving"
    );
}

/// The heap endpoint after the guest's exit (`--serve-after-exit`) gives the memory profile
/// the run wrote; Ctrl-C then ends wasmspy with the guest's exit code.
#[test]
fn heap_after_exit_matches_the_written_profile() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap.pb.gz");
    let mut live = Live::start(
        &[
            "--serve-after-exit",
            "--mem-rate",
            "1",
            "--mem-profile",
            heap.to_str().unwrap(),
        ],
        "c/churn.wasm",
        &["300"],
    );
    live.wait_for("still serving");
    let written = Decoded::load(&heap);
    for (path, default) in [("heap", "inuse_space"), ("allocs", "alloc_space")] {
        let (status, _, body) = get(&live.url(&format!("/debug/pprof/{path}")));
        assert_eq!(status, 200, "{path}");
        let served = decode(&body);
        assert_eq!(served.str(served.0.default_sample_type), default);
        let mut ours = served.stacks();
        let mut theirs = written.stacks();
        ours.sort();
        theirs.sort();
        assert_eq!(ours, theirs, "{path}");
    }
    // 300 000 blocks from make_block, 64 of them live at the end.
    let (objects, inuse) = (
        written.value_index("alloc_objects"),
        written.value_index("inuse_objects"),
    );
    let from_make_block: Vec<[i64; 2]> = written
        .stacks()
        .into_iter()
        .filter(|(names, _)| names.iter().any(|n| n == "make_block"))
        .map(|(_, v)| [v[objects], v[inuse]])
        .collect();
    assert_eq!(
        from_make_block
            .iter()
            .fold([0, 0], |a, v| [a[0] + v[0], a[1] + v[1]]),
        [300_000, 64]
    );
    sigint(&live.child);
    let (code, out, err) = live.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "churn done: 300 rounds, checksum 300000\n");
}

#[test]
fn go_tool_pprof_reads_the_live_profile() {
    let live = Live::start(&[], "c/cprog.wasm", &["spin", "100000"]);
    let out = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .arg(live.url("/debug/pprof/profile?seconds=1"))
        .output()
        .expect("go: scripts/test.sh installs it");
    let text = stdout(&out);
    assert!(out.status.success(), "{}{text}", stderr(&out));
    assert!(text.contains("hot_function"), "{text}");
    assert!(text.contains("Type: cpu"), "{text}");
    sigint(&live.child);
    let (code, _, err) = live.finish();
    assert_eq!(code, Some(130), "{err}");
}

/// 200 heap requests one after another while the guest allocates: every one answered, and
/// the guest's output as without the server.
#[test]
fn heap_requests_under_load_leave_the_guest_alone() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap.pb.gz");
    let live = Live::start(
        &["--mem-profile", heap.to_str().unwrap()],
        "c/churn.wasm",
        &["20000"],
    );
    // Each profile counts at least the allocations of the one before.
    let mut allocations = 0;
    for _ in 0..200 {
        let (status, _, body) = get(&live.url("/debug/pprof/heap"));
        assert_eq!(status, 200);
        let served = decode(&body);
        assert_eq!(served.0.sample_type.len(), 4);
        let now = served.total("alloc_objects");
        assert!(now >= allocations, "{now} allocations after {allocations}");
        allocations = now;
    }
    let (code, out, err) = live.finish();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "churn done: 20000 rounds, checksum 20000000\n");
    assert!(Decoded::load(&heap).total("alloc_objects") >= allocations);
}

#[test]
fn a_port_alone_is_on_loopback() {
    let live = Live::start(&["--pprof-addr", ":0"], "c/cprog.wasm", &["spin", "10"]);
    assert!(live.base.starts_with("http://127.0.0.1:"), "{}", live.base);
    let (code, _, err) = live.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("reveal"), "{err}");
}

#[test]
fn a_non_loopback_address_is_warned_about() {
    let live = Live::start(
        &["--pprof-addr", "0.0.0.0:0"],
        "c/cprog.wasm",
        &["spin", "10"],
    );
    let (code, _, err) = live.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("profiles reveal the guest's code structure"),
        "{err}"
    );
}

/// A component's live profile: a CPU profile of one second and the heap, both of its core
/// module's code, while it runs.
#[test]
fn a_components_live_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap.pb.gz");
    // Served after the guest's exit, however soon it comes.
    let mut live = Live::start(
        &[
            "--serve-after-exit",
            "--mem-profile",
            heap.to_str().unwrap(),
            "--mem-rate",
            "1",
        ],
        "rust/component.wasm",
        &["hot", "400"],
    );
    let (status, _, body) = get(&live.url("/debug/pprof/profile?seconds=1"));
    assert_eq!(status, 200);
    let profile = decode(&body);
    let top = profile.top_self_compiled("cpu");
    assert_eq!(top[0].0, "component::engine::hot_path", "{top:?}");
    let (status, _, body) = get(&live.url("/debug/pprof/allocs"));
    assert_eq!(status, 200);
    let heap = decode(&body);
    assert!(
        heap.stacks()
            .iter()
            .any(|(names, _)| names.iter().any(|n| n == "component::main")),
        "the arguments' strings, allocated in main"
    );
    live.wait_for("still serving");
    sigint(&live.child);
    let (code, out, err) = live.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("component done: 400 rounds"), "{out}");
}

/// `/debug/pprof/goroutine?debug=2` and `wasmspy dump`: a guest asleep in a host call (where
/// the CPU clock takes no sample) shows the call under the guest's frames; a busy one, where
/// it runs; after the guest exits, none.
#[test]
fn a_dump_shows_where_a_guest_is_now() {
    let live = Live::start(&[], "c/cprog.wasm", &["sleep", "4000"]);
    // Asleep once its host call shows: the server answers from before the guest starts, and a
    // dump can catch it in `usleep`'s own code, before the call (once, under a loaded run).
    let text = dump_showing(&live, "\nwasi_snapshot_preview1::poll_oneoff\n");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("guest 1 [host call, "), "{text}");
    assert!(
        lines[0].ends_with(&format!(" thread={}", live.child.id())),
        "{text}"
    );
    let frames: Vec<(&str, &str)> = lines[1..]
        .chunks(2)
        .take_while(|c| c.len() == 2 && c[1].starts_with('\t'))
        .map(|c| (c[0], c[1].trim()))
        .collect();
    // The host's frames in the call first (`clock_nanosleep`, in libc, its place `host: `
    // and the object), then the call's.
    let call = frames
        .iter()
        .position(|(f, _)| *f == "wasi_snapshot_preview1::poll_oneoff")
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(frames[call].1, "[host]", "{text}");
    assert!(
        frames[..call]
            .iter()
            .all(|(_, place)| place.starts_with("host: "))
            && frames[..call]
                .iter()
                .any(|(f, place)| f.contains("nanosleep") && place.contains("libc")),
        "{text}"
    );
    let nap = frames.iter().position(|(f, _)| *f == "nap").unwrap();
    assert!(frames[nap].1.ends_with("cprog.c:57"), "{text}");
    assert!(frames[nap..].iter().any(|(f, _)| *f == "main"), "{text}");
    assert!(text.contains("# 1 guest running, 0 threads idle"), "{text}");
    let out = wasmspy().arg("dump").arg(&live.base).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("\nnap\n\t"), "{}", stdout(&out));
    sigint(&live.child);
    let _ = live.finish();

    let live = Live::start(&[], "c/cprog.wasm", &["spin", "100000"]);
    let text = dump_showing(&live, "\nrun_spin\n");
    assert!(text.starts_with("guest 1 [running, "), "{text}");
    let leaf = text.lines().nth(1).unwrap();
    assert!(
        ["hot_function", "cold_function", "run_spin"].contains(&leaf),
        "{text}"
    );
    let (status, _, body) = get(&live.url("/debug/pprof/goroutine?debug=3"));
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    // Dumps leave the sampling as it was: a dump's signal may take the place of a timer's
    // (SIGPROF does not queue), and the handler then arms the timer again.
    for _ in 0..50 {
        assert_eq!(get(&live.url("/debug/pprof/goroutine?debug=1")).0, 200);
    }
    let cpu_before = live.cpu_seconds();
    let asked = Instant::now();
    let (status, _, body) = get(&live.url("/debug/pprof/profile?seconds=1"));
    let took = asked.elapsed();
    let cpu_used = live.cpu_seconds() - cpu_before;
    assert_eq!(status, 200);
    // As in a_cpu_profile_of_the_next_seconds: the profile holds most of the process's CPU
    // in its window.
    let profile = decode(&body);
    let duration = profile.0.duration_nanos as f64 / 1e9;
    let cpu = profile.total("cpu") as f64 / 1e9;
    let in_window = cpu_used * duration / took.as_secs_f64();
    assert!(
        cpu > 0.8 * in_window - 0.02,
        "{cpu} s sampled of {cpu_used} s in {took:?}"
    );
    sigint(&live.child);
    let _ = live.finish();
}

/// The first dump of `live` whose text has `what` (the guest starts after its server): polled,
/// a minute at most, so that a dump that never shows it fails rather than hangs.
fn dump_showing(live: &Live, what: &str) -> String {
    let mut text = String::new();
    for _ in 0..3000 {
        let (status, kind, body) = get(&live.url("/debug/pprof/goroutine?debug=2"));
        assert_eq!((status, kind.as_str()), (200, "text/plain"));
        text = String::from_utf8(body).unwrap();
        if text.contains(what) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no dump showed {what:?}; the last:\n{text}");
}

/// Without the signal sampler there is nothing to dump with: said, with the status.
#[test]
fn a_dump_needs_the_signal_sampler() {
    let live = Live::start(&["--sampler", "epoch"], "c/cprog.wasm", &["sleep", "3000"]);
    let (status, _, body) = get(&live.url("/debug/pprof/goroutine?debug=2"));
    assert_eq!(status, 501);
    assert!(
        String::from_utf8_lossy(&body).contains("stacks are dumped by the signal sampler"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    sigint(&live.child);
    let _ = live.finish();
}
