//! `wasmspy serve`: a wasi:http/proxy component served on loopback, real requests in
//! parallel, the profile read back.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::child::{process_cpu_seconds, sockets_at, thread_states, StderrLines};
use common::*;

/// A `wasmspy serve --addr 127.0.0.1:0 …` running, with the address it serves at.
struct Server {
    child: Child,
    stderr: StderrLines,
    base: String,
    /// Its working directory, where a profile without `-o` goes (and the temporary file a
    /// killed server leaves): not the package's, the tests' own.
    dir: std::sync::Arc<tempfile::TempDir>,
}

/// The WASI 0.2 handler (`wasi:http/incoming-handler`).
const P2: &str = "rust/http.wasm";
/// The WASI 0.3 handler (`wasi:http/handler`): the same routes, its `/spin` yielding to the
/// host after every round, so that requests an instance answers at once take turns.
const P3: &str = "rust/http-p3.wasm";

impl Server {
    /// `wasmspy serve --addr 127.0.0.1:0 -S cli EXTRA… -- http.wasm`.
    fn start(extra: &[&str]) -> Server {
        Server::wasmspy(P2, extra)
    }

    fn wasmspy(component: &str, extra: &[&str]) -> Server {
        let mut command = wasmspy();
        command
            .args(["serve", "--addr", "127.0.0.1:0", "-S", "cli"])
            .args(extra)
            .arg("--");
        Server::spawn(command, &fixture(component))
    }

    /// `wasmtime serve --addr 127.0.0.1:0 -S cli EXTRA… COMPONENT`.
    fn wasmtime(component: &str, extra: &[&str]) -> Server {
        let mut command = std::process::Command::new(wasmtime_cli());
        command
            .args(["serve", "--addr", "127.0.0.1:0", "-S", "cli"])
            .args(extra);
        Server::spawn(command, &fixture(component))
    }

    /// Runs `command` on `component`, until it serves.
    fn spawn(mut command: std::process::Command, component: &Path) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut child = command
            .current_dir(dir.path())
            .arg(component)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = StderrLines::of(&mut child);
        let line = stderr.wait_for("Serving HTTP on ");
        let url = line.split("Serving HTTP on ").nth(1).unwrap();
        Server {
            base: url.trim_end_matches('/').to_string(),
            child,
            stderr,
            dir: std::sync::Arc::new(dir),
        }
    }

    fn cpu_seconds(&self) -> f64 {
        process_cpu_seconds(self.child.id())
    }

    fn get(&self, path: &str) -> (u16, String) {
        get(&self.base, path)
    }

    /// With `--pprof-addr`: the live server's URL, `http://…/debug/pprof/`.
    fn live_url(&mut self) -> String {
        let line = self.stderr.wait_for("serving profiles at ");
        line.split("serving profiles at ")
            .nth(1)
            .unwrap()
            .to_string()
    }

    /// Stops the server with `signal`; its exit code and all it wrote on stderr.
    fn stop(mut self, signal: i32) -> (Option<i32>, String) {
        // SAFETY: plain kill(2) of our own child.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
        let err = self.stderr.all();
        let status = self.child.wait().unwrap();
        (status.code(), err)
    }
}

/// A test that fails leaves no server running behind it (one answering a request that spins
/// for minutes slows every test after it).
impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// As `wasmtime serve`: each instance's lines on stdout and stderr prefixed with its number,
/// `-H`'s headers on every request, `--no-logging-prefix` the lines as written.
#[test]
fn instances_log_and_take_headers_as_under_wasmtime_serve() {
    let headers = ["-H", "x-tenant: a", "-H", "x-tenant: b"];
    let served = |mut server: Server| {
        assert_eq!(server.get("/log"), (200, "logged\n".to_string()));
        assert_eq!(server.get("/log"), (200, "logged\n".to_string()));
        let mut stdout = server.child.stdout.take().unwrap();
        let (_, err) = server.stop(libc::SIGTERM);
        let mut out = String::new();
        stdout.read_to_string(&mut out).unwrap();
        let err: Vec<String> = err
            .lines()
            .filter(|l| l.starts_with("stderr ["))
            .map(String::from)
            .collect();
        (out, err)
    };
    let expected = served(Server::wasmtime(P2, &headers));
    let got = served(Server::start(&headers));
    assert_eq!(got, expected);
    assert_eq!(
        got.0,
        "stdout [0] :: tenants [\"a\", \"b\"]\nstdout [0] :: first line\nstdout [0] :: second line\n\
         stdout [1] :: tenants [\"a\", \"b\"]\nstdout [1] :: first line\nstdout [1] :: second line\n"
    );
    assert_eq!(
        got.1,
        ["stderr [0] :: an error line", "stderr [1] :: an error line"]
    );

    let (out, _) = served(Server::start(&["--no-logging-prefix"]));
    assert_eq!(
        out,
        "tenants []\nfirst line\nsecond line\ntenants []\nfirst line\nsecond line\n"
    );
}

/// The instance numbers of the `/log` requests' `first line`s on stdout, in order.
fn instances_that_logged(out: &str) -> Vec<u64> {
    out.lines()
        .filter_map(|l| l.strip_suffix("] :: first line"))
        .map(|l| l.strip_prefix("stdout [").unwrap().parse().unwrap())
        .collect()
}

/// As `wasmtime serve`: a WASI 0.2 instance answers one request, a WASI 0.3 one up to 128, or
/// as many as `--max-instance-reuse-count` says (the log prefix tells which instance answered).
/// Whether a request finds the last instance free again, or gets a new one, is up to the
/// scheduler: what is checked is each instance's count, and that reuse happens at all.
#[test]
fn instances_are_reused_as_under_wasmtime_serve() {
    let served = |server: Server| {
        let mut server = server;
        let mut stdout = server.child.stdout.take().unwrap();
        for _ in 0..12 {
            assert_eq!(server.get("/log"), (200, "logged\n".to_string()));
            // Time for the instance to be free again before the next request (else a new
            // one answers it, as `wasmtime serve` does too).
            std::thread::sleep(Duration::from_millis(20));
        }
        server.stop(libc::SIGTERM);
        let mut out = String::new();
        stdout.read_to_string(&mut out).unwrap();
        let mut answered = BTreeMap::<u64, usize>::new();
        for instance in instances_that_logged(&out) {
            *answered.entry(instance).or_default() += 1;
        }
        answered.into_values().collect::<Vec<usize>>()
    };
    for (component, extra, most) in [
        (P2, &[][..], 1),
        (P2, &["--max-instance-reuse-count", "3"][..], 3),
        (P3, &[][..], 128),
        (P3, &["--max-instance-reuse-count", "2"][..], 2),
    ] {
        for server in [
            Server::wasmtime(component, extra),
            Server::wasmspy(component, extra),
        ] {
            let counts = served(server);
            assert_eq!(counts.iter().sum::<usize>(), 12, "{component} {extra:?}");
            assert!(
                counts.iter().all(|&n| n <= most),
                "{component} {extra:?}: {counts:?}"
            );
            assert_eq!(
                counts.iter().any(|&n| n > 1),
                most > 1,
                "{component} {extra:?}: {counts:?}"
            );
        }
    }
}

/// `-W timeout` as `wasmtime serve` has it: a request still computing when the time is up
/// (a WASI 0.2 guest that never yields, at 100,000 rounds: minutes of work) is answered 500,
/// its instance dropped, and the server goes on; with either sampler.
#[test]
fn a_request_past_the_timeout_is_answered_500() {
    let timeout = ["-W", "timeout=500ms"];
    for server in [
        Server::wasmtime(P2, &timeout),
        Server::start(&timeout),
        Server::start(&[&timeout[..], &["--sampler", "epoch", "--clock", "wall"]].concat()),
    ] {
        assert_eq!(server.get("/spin?rounds=100000").0, 500);
        assert_eq!(server.get("/hello"), (200, "hello\n".to_string()));
        let (_, err) = server.stop(libc::SIGTERM);
        assert!(err.contains("guest timed out"), "{err}");
    }
}

/// The epoch sampler on the CPU clock ticks by one thread's CPU time, which says nothing of
/// the requests on the server's other threads: refused in one line that says what to use.
#[test]
fn the_epoch_sampler_on_one_threads_clock_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = wasmspy()
        .args(["serve", "--addr", "127.0.0.1:0", "--sampler", "epoch", "--"])
        .arg(fixture(P2))
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_one_line_error(
        &out,
        "--sampler epoch with --clock cpu cannot profile a server: its ticks follow one \
         thread's CPU time, and requests run on all the server's threads; use the signal \
         sampler (the default), or --clock wall",
        &"serve --sampler epoch",
    );
    // Refused before anything is written.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// `--max-concurrent-requests 1`: a request that arrives while another is being answered
/// waits for it. Without the limit it is answered while the other still runs.
///
/// Which client reads its response first is a race even with the limit (the spin's permit is
/// given back as its response is handed to the connection, and `/hello` is quick), so the test
/// asks the server instead: how much CPU it spent between answering `/hello` and answering the
/// spin. With the limit, none of the spin's work is left by then (a few ms of writing a
/// head); without it, most of it is: the spin costs seconds of CPU and `/hello` is sent after
/// the first second. CPU time does not grow while a loaded machine keeps the server waiting,
/// so the half-second threshold holds under load on both sides.
///
/// Both servers run with `-W timeout`, so that the spin yields to tokio at Wasmtime's epochs.
/// Without it, once in about eight full runs, `/hello` was answered only as the spin ended,
/// with no thread working on it meanwhile: one worker running the spin, the other worker and
/// the accept loop's thread parked. The likely cause is tokio's, as under `wasmtime serve`
/// (the same handler and runtime): a guest computing without yielding holds its worker, and
/// when that worker was the one parked on the I/O driver (woken by the spin's connection and
/// running it itself, the other worker parked on its condition variable before the driver was
/// let go), nothing polls the driver until the spin ends. Yielding at epochs lets the worker
/// poll it between them.
#[test]
fn a_request_limit_makes_requests_wait() {
    for (limit, hello_answered_during_spin) in [
        (&["--max-concurrent-requests", "1"][..], false),
        (&[][..], true),
    ] {
        let server = Server::start(&[limit, &["-W", "timeout=120s"]].concat());
        let cpu_before = server.cpu_seconds();
        let spin_answered = std::sync::Mutex::new(None);
        let waiting = std::sync::Mutex::new(String::new());
        let hello_answered = std::thread::scope(|s| {
            s.spawn(|| {
                let response = ureq::get(&format!("{}/spin?rounds=3000", server.base))
                    .timeout(Duration::from_secs(120))
                    .call()
                    .unwrap();
                *spin_answered.lock().unwrap() = Some(server.cpu_seconds());
                response.into_string().unwrap();
            });
            // The spin (3000 rounds: seconds of CPU) is being answered once the server has
            // used a second of CPU, more than anything else it does after it starts serving.
            while server.cpu_seconds() < cpu_before + 1.0 && spin_answered.lock().unwrap().is_none()
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(
                spin_answered.lock().unwrap().is_none(),
                "{limit:?}: the spin was answered before /hello was sent"
            );
            // Where the server's threads are, should `/hello` still wait a second later.
            let hello = s.spawn(|| {
                get(&server.base, "/hello");
                server.cpu_seconds()
            });
            for _ in 0..100 {
                if hello.is_finished() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if !hello.is_finished() {
                let port = server.base.rsplit(':').next().unwrap().parse().unwrap();
                *waiting.lock().unwrap() = format!(
                    "{}; its sockets: {}",
                    thread_states(server.child.id()),
                    sockets_at(port)
                );
            }
            hello.join().unwrap()
        });
        let spin_answered = spin_answered.into_inner().unwrap().unwrap();
        let cpu_between = spin_answered - hello_answered;
        assert_eq!(
            cpu_between > 0.5,
            hello_answered_during_spin,
            "{limit:?}: {cpu_between:.2} s of CPU between /hello's answer and the spin's; \
             the server's threads a second after /hello was sent: {}",
            waiting.into_inner().unwrap()
        );
        server.stop(libc::SIGTERM);
    }
}

/// A connection to `--shutdown-addr` ends the server: the profile written, exit 0.
#[test]
fn a_connection_to_the_shutdown_address_ends_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("shutdown.pb.gz");
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let shutdown = free.local_addr().unwrap().to_string();
    drop(free);
    let mut server = Server::start(&[
        "--shutdown-addr",
        &shutdown,
        "--rate",
        "1000",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(server.get("/spin?rounds=20").0, 200);
    std::net::TcpStream::connect(&shutdown).unwrap();
    let status = server.child.wait().unwrap();
    let err = server.stderr.all();
    assert_eq!(status.code(), Some(0), "{err}");
    let p = Decoded::load(&out);
    assert!(cumulative(&p, "cpu", "hot_handler") > 0, "{err}");
}

/// GET `base` + `path`: the status and body.
fn get(base: &str, path: &str) -> (u16, String) {
    let response = match ureq::get(&format!("{base}{path}"))
        .timeout(Duration::from_secs(120))
        .call()
    {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {path}: {e}"),
    };
    let status = response.status();
    let mut body = String::new();
    response.into_reader().read_to_string(&mut body).unwrap();
    (status, body)
}

/// The rounds of work request `i` (from 0) asks for: 10 to 40, each a known cost.
fn rounds(i: usize) -> u64 {
    10 + 10 * (i % 4) as u64
}

/// Sends 100 `/spin` requests, 4 at a time; checks every answer, and returns them.
fn hundred_requests(server: &Server) -> Vec<String> {
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|worker| {
                s.spawn(move || {
                    let mut answers = Vec::new();
                    for i in (worker..100).step_by(4) {
                        let (status, body) = server.get(&format!("/spin/{}", rounds(i)));
                        assert_eq!(status, 200, "{body}");
                        assert!(
                            body.starts_with(&format!("spun {} rounds", rounds(i))),
                            "{body}"
                        );
                        answers.push(body);
                    }
                    answers
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    })
}

/// `kind` summed by the value of the samples' label `key` ("" for none).
fn by_label(p: &Decoded, kind: &str, key: &str) -> BTreeMap<String, i64> {
    let i = p.value_index(kind);
    let mut totals = BTreeMap::new();
    for sample in &p.0.sample {
        let value = sample
            .label
            .iter()
            .find(|l| p.str(l.key) == key)
            .map_or("", |l| p.str(l.str));
        *totals.entry(value.to_string()).or_default() += sample.value[i];
    }
    totals
}

/// `kind` summed over the samples whose stack holds `function`.
fn cumulative(p: &Decoded, kind: &str, function: &str) -> i64 {
    let i = p.value_index(kind);
    p.stacks()
        .iter()
        .filter(|(names, _)| names.iter().any(|n| n == function))
        .map(|(_, v)| v[i])
        .sum()
}

/// [`hundred_requests`] to a server started with `flags`, stopped by Ctrl-C: its profile, its
/// Firefox Profiler file, and the CPU seconds the server used while serving them.
fn hundred_requests_profiled(flags: &[&str]) -> (Decoded, serde_json::Value, f64) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.pb.gz");
    let firefox = dir.path().join("serve.json");
    let outputs = ["-o", out.to_str().unwrap(), "-o", firefox.to_str().unwrap()];
    let server = Server::start(&[flags, &outputs[..]].concat());
    let cpu_before = server.cpu_seconds();
    let _ = hundred_requests(&server);
    let cpu_used = server.cpu_seconds() - cpu_before;
    let (code, err) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("wasmspy: wrote"), "{err}");
    let fx = serde_json::from_slice(&std::fs::read(&firefox).unwrap()).unwrap();
    (Decoded::load(&out), fx, cpu_used)
}

/// 100 requests, 4 at a time, on two cores: the profile holds the CPU the server used
/// while serving them (every worker thread's), the known split between the handler's two
/// functions, and each request's samples under its own label, in proportion to its work.
#[test]
fn every_request_on_every_thread_under_its_own_label() {
    // At 1 kHz rather than serve's 100 Hz: enough samples for the split within its bounds.
    let (p, fx, cpu_used) = hundred_requests_profiled(&["--rate", "1000"]);

    let cpu = p.total("cpu") as f64 / 1e9;
    assert!(
        cpu >= 0.9 * cpu_used - 0.02 && cpu <= cpu_used + 0.02,
        "{cpu} s of CPU in the profile, {cpu_used} s used by the server"
    );
    // hot_handler does four times cold_handler's rounds.
    let (hot, cold) = (
        cumulative(&p, "cpu", "hot_handler"),
        cumulative(&p, "cpu", "cold_handler"),
    );
    let ratio = hot as f64 / cold as f64;
    assert!((3.2..4.8).contains(&ratio), "hot/cold {ratio}");
    assert!(
        hot as f64 > 0.7 * p.total("cpu") as f64,
        "{hot} of {}",
        p.total("cpu")
    );

    // Every request's samples carry its number (1 to 100, in arrival order), method and
    // path; the work each did shows in its share.
    let (labeled, _) = assert_requests_labeled(&p, hot + cold);
    assert_eq!(
        by_label(&p, "cpu", "method").get("GET"),
        Some(&labeled),
        "{:?}",
        by_label(&p, "cpu", "method")
    );
    // The Firefox Profiler's file has a track per worker thread that ran requests (two
    // cores, four requests at a time: both did).
    let threads = fx["threads"].as_array().unwrap();
    assert!(threads.len() >= 2, "{} threads", threads.len());
    let mut tids = std::collections::BTreeSet::new();
    for thread in threads {
        let name = thread["name"].as_str().unwrap();
        let tid = thread["tid"].to_string().trim_matches('"').to_string();
        // The first is the main thread, which the Firefox Profiler names after the process.
        if thread["isMainThread"] != true {
            assert_eq!(name, format!("guest thread {tid}"));
        }
        assert!(thread["samples"]["length"].as_u64().unwrap() > 0, "{name}");
        tids.insert(tid);
    }
    assert_eq!(tids.len(), threads.len());

    assert_cpu_follows_rounds(&p, labeled);
}

/// The epoch sampler on the wall clock (the one it takes under `serve`: on the CPU clock it is
/// refused, above) samples the requests on every worker thread, the engine's epoch being every
/// store's: 100 requests, 4 at a time on two cores, each under its own label, sampled on at
/// least two threads.
#[test]
fn the_epoch_sampler_on_the_wall_clock_samples_requests_on_every_thread() {
    let (p, fx, _) =
        hundred_requests_profiled(&["--sampler", "epoch", "--clock", "wall", "--rate", "1000"]);
    let guest = cumulative(&p, "wall", "hot_handler") + cumulative(&p, "wall", "cold_handler");
    assert!(guest > 0, "{:?}", p.top_self("wall"));
    assert_requests_labeled_in(&p, "wall", guest);
    let sampled = fx["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["samples"]["length"].as_u64().unwrap() > 0)
        .count();
    assert!(sampled >= 2, "requests sampled on {sampled} thread(s)");
}

/// The path tells each request's work (10 to 40 rounds, 25 requests each, interleaved in
/// time, so that a busier machine slows every kind alike): each kind's CPU is in proportion to
/// its rounds. The `labeled` CPU is all under some path.
fn assert_cpu_follows_rounds(p: &Decoded, labeled: i64) {
    let paths = by_label(p, "cpu", "path");
    assert_eq!(
        paths.values().sum::<i64>() - paths.get("").unwrap_or(&0),
        labeled
    );
    let ten = paths["/spin/10"] as f64;
    for n in [20, 30, 40] {
        let ratio = paths[&format!("/spin/{n}")] as f64 / ten;
        let expected = n as f64 / 10.0;
        // 25 requests of 10 rounds (about 0.4 s of CPU, 400 samples at 1 kHz): sampling's
        // own error is a few percent; the rest is each round's cost varying.
        assert!(
            (ratio / expected - 1.0).abs() < 0.25,
            "/spin/{n}: {ratio} times /spin/10's CPU, not {expected}: {paths:?}"
        );
    }
}

/// Of 100 requests, at least 95 have samples under their own `request` label (1 to 100),
/// which hold ≥ 97 % of the `guest`'s CPU; the CPU under a request label, and that under none.
fn assert_requests_labeled(p: &Decoded, guest: i64) -> (i64, i64) {
    assert_requests_labeled_in(p, "cpu", guest)
}

/// As [`assert_requests_labeled`], of `kind`.
fn assert_requests_labeled_in(p: &Decoded, kind: &str, guest: i64) -> (i64, i64) {
    let requests = by_label(p, kind, "request");
    let labeled: i64 = requests
        .iter()
        .filter(|(r, _)| !r.is_empty())
        .map(|(_, v)| v)
        .sum();
    assert!(
        labeled as f64 >= 0.97 * guest as f64,
        "{labeled} of {guest}"
    );
    let numbers = numbers(&requests);
    assert!(
        numbers.len() >= 95 && numbers.iter().all(|n| (1..=100).contains(n)),
        "{numbers:?}"
    );
    (labeled, requests.get("").copied().unwrap_or(0))
}

/// `labels`' values of `key`, as numbers.
fn numbers(labels: &BTreeMap<String, i64>) -> Vec<u64> {
    labels
        .keys()
        .filter(|r| !r.is_empty())
        .map(|r| r.parse().unwrap())
        .collect()
}

/// A WASI 0.3 instance answers up to 16 requests at once, their tasks taking turns on its
/// thread at every round (the guest says how many others it saw spinning beside it): each
/// request's samples are still under its own label (the store is relabeled as each task
/// enters Wasm), each kind's CPU in proportion to its work, as when every request has an
/// instance of its own.
#[test]
fn requests_answered_at_once_by_one_instance_each_under_its_own_label() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.pb.gz");
    let server = Server::wasmspy(P3, &["--rate", "1000", "-o", out.to_str().unwrap()]);
    let answers = hundred_requests(&server);
    let (code, err) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(130), "{err}");
    let shared = answers
        .iter()
        .filter(|a| !a.ends_with(", alongside 0\n"))
        .count();
    assert!(shared >= 10, "{shared} of 100 requests shared an instance");
    let p = Decoded::load(&out);
    let guest = cumulative(&p, "cpu", "hot_handler") + cumulative(&p, "cpu", "cold_handler");
    let (labeled, requests_unlabeled) = assert_requests_labeled(&p, guest);
    // Fewer instances than requests; every sample of a request names its instance (those
    // of neither are the server's own work, outside any instance).
    let instances = by_label(&p, "cpu", "instance");
    assert!(numbers(&instances).len() < 50, "{instances:?}");
    let no_instance = instances.get("").copied().unwrap_or(0);
    assert!(no_instance <= requests_unlabeled, "{instances:?}");
    assert_cpu_follows_rounds(&p, labeled);
}

/// `--clock instructions` serves every request under its own label, and the same requests
/// give the same profile: the WASI 0.2 handler (an instance per request) twice, each path's
/// instructions and `hot_handler`'s the same to the instruction; the WASI 0.3 handler, whose
/// instances answer several requests at once (relabeled by a call hook shared with the
/// instructions clock), the same to within 0.5 % (its instances run the same code, and its
/// requests take turns in them, so that a sample's interval may span two requests; measured:
/// within 0.07 %).
#[test]
fn requests_are_profiled_by_instructions_under_their_labels() {
    let serve = |component: &str| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("serve.pb.gz");
        let out_arg = out.to_str().unwrap();
        let flags = [
            "--clock",
            "instructions",
            "--interval",
            "100000",
            "-o",
            out_arg,
        ];
        let server = Server::wasmspy(component, &flags);
        let _ = hundred_requests(&server);
        let (code, err) = server.stop(libc::SIGINT);
        assert_eq!(code, Some(130), "{component}: {err}");
        let p = Decoded::load(&out);
        let hot = cumulative(&p, "instructions", "hot_handler");
        let guest = hot + cumulative(&p, "instructions", "cold_handler");
        assert!(hot * 10 > guest * 7, "{component}: {hot} of {guest}");
        let _ = assert_requests_labeled_in(&p, "instructions", guest);
        (hot, by_label(&p, "instructions", "path"))
    };
    let (hot, paths) = serve(P2);
    assert_eq!(paths.len(), 4, "{paths:?}");
    assert_eq!(serve(P2), (hot, paths.clone()));
    let (p3_hot, p3_paths) = serve(P3);
    let near = |a: i64, b: i64| (a as f64 / b as f64 - 1.0).abs() < 0.005;
    assert!(near(p3_hot, hot), "hot_handler: {p3_hot}, {hot}");
    for (path, instructions) in &paths {
        assert!(
            near(p3_paths[path], *instructions),
            "{p3_paths:?} {paths:?}"
        );
    }
}

/// A trap answers 500 and the server goes on; SIGTERM writes the profile and exits 143; the
/// guest's own error goes to stderr. Sampled at serve's default rate, 100 Hz.
#[test]
fn a_trapping_request_gets_500_and_sigterm_keeps_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.pb.gz");
    let server = Server::start(&["-v", "-o", out.to_str().unwrap()]);
    assert_eq!(server.get("/hello"), (200, "hello\n".to_string()));
    let (status, _) = server.get("/trap");
    assert_eq!(status, 500);
    assert_eq!(server.get("/nowhere").0, 404);
    let (status, body) = server.get("/spin?rounds=200");
    assert_eq!(status, 200, "{body}");
    let (code, err) = server.stop(libc::SIGTERM);
    assert_eq!(code, Some(143), "{err}");
    assert!(
        err.contains("wasm `unreachable` instruction executed"),
        "{err}"
    );
    assert!(err.contains("http_handler::trap"), "{err}");
    assert!(err.contains("sampler at 100 Hz"), "{err}");
    let p = Decoded::load(&out);
    assert!(cumulative(&p, "cpu", "hot_handler") > 0);
    // The fourth request spun; the server went on after the trap.
    let requests = by_label(&p, "cpu", "request");
    assert!(
        requests.get("4").is_some_and(|&cpu| cpu > 0),
        "{requests:?}"
    );
}

/// Sends `count` requests for `path`, 4 at a time; checks every answer.
fn requests(server: &Server, path: &str, count: usize) {
    std::thread::scope(|s| {
        for worker in 0..4 {
            s.spawn(move || {
                for _ in (worker..count).step_by(4) {
                    let (status, body) = server.get(path);
                    assert_eq!(status, 200, "{body}");
                }
            });
        }
    });
}

/// The allocations whose stack holds `alloc_handler`, by request label: (objects, bytes).
fn allocations_by_request(p: &Decoded) -> BTreeMap<String, (i64, i64)> {
    let (objects, space) = (p.value_index("alloc_objects"), p.value_index("alloc_space"));
    let mut by_request = BTreeMap::new();
    for (sample, (names, _)) in p.0.sample.iter().zip(p.stacks()) {
        if !names.iter().any(|n| n == "alloc_handler") {
            continue;
        }
        let request = sample
            .label
            .iter()
            .find(|l| p.str(l.key) == "request")
            .map_or("", |l| p.str(l.str));
        let entry: &mut (i64, i64) = by_request.entry(request.to_string()).or_default();
        entry.0 += sample.value[objects];
        entry.1 += sample.value[space];
    }
    by_request
}

/// `--mem-profile` at `--mem-rate 1`: every request's allocations under its own label, at the
/// line that made them; a request's store, dropped with it, takes the blocks it leaked out of
/// the in-use memory (four requests at a time allocate at the same addresses of their own
/// memories).
#[test]
fn every_requests_allocations_under_its_own_label() {
    let dir = tempfile::tempdir().unwrap();
    let mem = dir.path().join("mem.pb.gz");
    let server = Server::start(&["--mem-profile", mem.to_str().unwrap(), "--mem-rate", "1"]);
    requests(&server, "/alloc?kb=16", 20);
    requests(&server, "/alloc?kb=64&leak", 20);
    // In the server's working directory (kept past the server), where `-o`'s default would
    // have gone.
    let working_dir = server.dir.clone();
    let (code, err) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(130), "{err}");
    assert!(
        !working_dir.path().join("wasmspy.pb.gz").exists(),
        "--mem-profile alone writes no CPU profile"
    );
    let p = Decoded::load(&mem);
    let by_request = allocations_by_request(&p);
    assert_eq!(by_request.len(), 40, "{by_request:?}");
    let mut sizes: Vec<(i64, i64)> = by_request.values().copied().collect();
    sizes.sort();
    sizes.dedup();
    assert_eq!(sizes, [(16, 16 * 1024), (64, 64 * 1024)]);
    // Every request's store is gone, leaks and all.
    assert_eq!(p.total("inuse_space"), 0);
    assert_eq!(p.total("inuse_objects"), 0);
    // The allocation's line, in `alloc_handler`.
    let lines: Vec<(String, i64)> =
        p.0.sample
            .iter()
            .flat_map(|s| &s.location_id)
            .flat_map(|&l| p.source_frames(l))
            .filter(|(f, ..)| f == "alloc_handler")
            .map(|(_, file, line, _)| (file, line))
            .collect();
    let source = std::fs::read_to_string(fixture("rust/http/src/lib.rs")).unwrap();
    let allocating = source
        .lines()
        .position(|l| l.contains("blocks.push(black_box(vec!["))
        .unwrap() as i64
        + 1;
    assert!(
        lines.contains(&(
            "tests/fixtures/rust/http/src/lib.rs".to_string(),
            allocating
        )),
        "line {allocating} expected in {lines:?}"
    );
}

/// At a rate above what one request allocates (64 KiB each at one sample per 64 KiB), the
/// estimate over many requests is still right: each request's instance starts counting at a
/// point of its own (a start compiled into the component would sample the same allocation of
/// every request, or none).
#[test]
fn sampled_allocations_over_many_requests_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let mem = dir.path().join("mem.pb.gz");
    let server = Server::start(&[
        "--mem-profile",
        mem.to_str().unwrap(),
        "--mem-rate",
        "65536",
    ]);
    requests(&server, "/alloc?kb=64", 200);
    let (code, err) = server.stop(libc::SIGTERM);
    assert_eq!(code, Some(143), "{err}");
    let p = Decoded::load(&mem);
    let bytes: i64 = allocations_by_request(&p).values().map(|&(_, b)| b).sum();
    let truth = 200.0 * 64.0 * 1024.0;
    // About 200 samples: one standard deviation is 7 %.
    assert!(
        (bytes as f64 / truth - 1.0).abs() < 0.25,
        "{bytes} bytes estimated for {truth}"
    );
}

/// `--pprof-addr`: a CPU profile of the next seconds holds the requests served in them.
#[test]
fn the_live_endpoint_profiles_the_whole_server() {
    let mut server = Server::start(&["--pprof-addr", "127.0.0.1:0"]);
    let live = server.live_url();
    let profile = std::thread::scope(|s| {
        let fetch = s.spawn(|| {
            let response = ureq::get(&format!("{live}profile?seconds=3"))
                .timeout(Duration::from_secs(60))
                .call()
                .unwrap();
            let mut bytes = Vec::new();
            response.into_reader().read_to_end(&mut bytes).unwrap();
            bytes
        });
        // Requests all through the window, however late it opens or long it lasts on a busy
        // machine.
        while !fetch.is_finished() {
            assert_eq!(server.get("/spin?rounds=30").0, 200);
        }
        fetch.join().unwrap()
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.pb.gz");
    std::fs::write(&path, profile).unwrap();
    let p = Decoded::load(&path);
    assert!(cumulative(&p, "cpu", "hot_handler") > 0);
    // Several requests, each under its own number.
    let requests = by_label(&p, "cpu", "request");
    let numbered = requests.keys().filter(|r| r.parse::<u64>().is_ok()).count();
    assert!(numbered >= 2, "{requests:?}");
    let (code, err) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(130), "{err}");
}

/// `--flush-every`: the profile of the requests served so far is on disk while the server runs,
/// and stays there when the server is killed without warning.
#[test]
fn a_flushed_profile_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.pb.gz");
    let mut server = Server::start(&["--flush-every", "0.2", "-o", out.to_str().unwrap()]);
    for _ in 0..4 {
        assert_eq!(server.get("/spin/30").0, 200);
    }
    let on_disk = || -> i64 {
        let Ok(bytes) = std::fs::read(&out) else {
            return 0;
        };
        let profile = wasmspy::export::pprof::read(&bytes).expect("a flushed profile is whole");
        profile.total(wasmspy::profile::SAMPLES)
    };
    let flushed = (0..600).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        on_disk() > 0
    });
    assert!(flushed, "no flush with samples after 30 s");
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    let p = Decoded::load(&out);
    assert!(cumulative(&p, "cpu", "hot_handler") > 0);
    assert!(!by_label(&p, "cpu", "request").is_empty());
}

/// `serve -o x.cpuprofile`: every request's samples in one `.cpuprofile`, written when the
/// server stops, which `report` reads back with the handlers under their route.
#[test]
fn serve_writes_a_cpuprofile() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.cpuprofile");
    let server = Server::start(&["-o", out.to_str().unwrap()]);
    for _ in 0..4 {
        assert_eq!(server.get("/spin/30").0, 200);
    }
    let (code, err) = server.stop(libc::SIGTERM);
    assert_eq!(code, Some(143), "{err}");
    let bytes = std::fs::read(&out).unwrap();
    assert!(bytes.starts_with(b"{\"nodes\":"), "a .cpuprofile");
    let p = wasmspy::export::read(&bytes).unwrap();
    let cpu = p.sample_index("cpu").unwrap();
    let under_route = p
        .samples
        .iter()
        .filter(|s| {
            let names: Vec<&str> = p.stacks[s.stack].iter().map(|&f| p.frame_name(f)).collect();
            let handler = names
                .iter()
                .position(|n| *n == "hot_handler" || *n == "cold_handler");
            handler.is_some_and(|h| names[h..].contains(&"route"))
        })
        .map(|s| s.values[cpu])
        .sum::<i64>();
    assert!(under_route > 0, "{err}");
}

/// What cannot be served is refused before listening, in one line: as `wasmtime serve`, a
/// component importing more than the proxy world needs `-S cli`, and `-S http=n` is refused.
#[test]
fn what_is_not_a_proxy_component_is_refused() {
    for (cli, module, expect) in [
        (
            "cli",
            "c/cprog.wasm",
            "is a core module: wasmspy serve takes a wasi:http/proxy component",
        ),
        ("cli", "rust/component.wasm", "is not a wasi:http/proxy"),
        (
            "cli=n",
            "rust/http.wasm",
            "component imports instance `wasi:cli/environment",
        ),
        (
            "http=n",
            "rust/http.wasm",
            "wasi-http is required for the serve command",
        ),
    ] {
        let out = wasmspy()
            .args(["serve", "--addr", "127.0.0.1:0", "-S", cli, "--"])
            .arg(fixture(module))
            .output()
            .unwrap();
        assert_one_line_error(&out, expect, &module);
    }
    // An option not applied to requests is refused, not ignored.
    let out = wasmspy()
        .args(["serve", "--addr", "127.0.0.1:0", "-S", "cli"])
        .args(["-D", "coredump=core", "--"])
        .arg(fixture("rust/http.wasm"))
        .output()
        .unwrap();
    assert_one_line_error(&out, "writes no core dumps", &"-D coredump");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = wasmspy()
        .args(["serve", "--addr", &addr, "-S", "cli", "--"])
        .arg(fixture("rust/http.wasm"))
        .output()
        .unwrap();
    assert_one_line_error(&out, &format!("cannot listen at {addr}"), &addr);
}

/// `serve --target pulley64`: requests run on Pulley on the runtime's workers, on fibers of
/// Wasmtime's pooling allocator, and the signal sampler walks them: hot_handler does four times
/// cold_handler's rounds, and each request's samples carry its label.
#[test]
fn pulley_requests_are_sampled_with_their_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.pb.gz");
    let server = Server::start(&[
        "--target",
        "pulley64",
        "--rate",
        "1000",
        "-v",
        "-o",
        out.to_str().unwrap(),
    ]);
    requests(&server, "/spin?rounds=20", 8);
    let (code, err) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(130), "{err}");
    assert!(err.contains("signal sampler"), "{err}");
    let p = Decoded::load(&out);
    let (hot, cold) = (
        cumulative(&p, "cpu", "hot_handler"),
        cumulative(&p, "cpu", "cold_handler"),
    );
    let ratio = hot as f64 / cold as f64;
    eprintln!(
        "hot/cold {ratio:.2}, {} of {} ns in the two",
        hot + cold,
        p.total("cpu")
    );
    assert!((3.2..4.8).contains(&ratio), "hot/cold {ratio}");
    assert!(
        (hot + cold) as f64 > 0.8 * p.total("cpu") as f64,
        "{} of {}",
        hot + cold,
        p.total("cpu")
    );
    let requests = by_label(&p, "cpu", "request");
    assert!(
        requests.keys().filter(|r| !r.is_empty()).count() >= 8,
        "{requests:?}"
    );
}

/// `wasmspy serve` of an interpreter's `wasi:http` component, at 1 kHz with `-S cli` (the
/// interpreters' runtimes import `wasi:cli`, not only the proxy world's part), writing `outs`.
fn serve_interpreted(component: &Path, outs: &[&Path]) -> Server {
    let mut command = wasmspy();
    command.args([
        "serve",
        "--addr",
        "127.0.0.1:0",
        "-S",
        "cli",
        "--rate",
        "1000",
    ]);
    for out in outs {
        command.arg("-o").arg(out);
    }
    command.arg("--");
    Server::spawn(command, component)
}

/// A componentize-py `wasi:http` handler (CPython 3.14 inside the component, a WASI 0.2
/// instance per request): 24 requests, 4 at a time, each running one of two Python loops
/// (`/squares/N` or `/remainders/N`). Each request's samples in a loop carry its own labels
/// (its path names the loop its stack shows), and their stacks are Python's: the loop →
/// `answer` (at the line that calls it) → `IncomingHandler.handle`.
#[test]
fn a_python_handlers_requests_show_their_python_frames_under_their_labels() {
    let Some(component) = built_component("http-py.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.pb.gz");
    // componentize-py's runtime imports all of `wasi:cli`, not only the proxy world's part.
    let server = serve_interpreted(&component, &[&out]);
    let loops = ["squares", "remainders"];
    std::thread::scope(|s| {
        for worker in 0..4 {
            let server = &server;
            s.spawn(move || {
                for i in (worker..24).step_by(4) {
                    let name = loops[i % 2];
                    let (status, body) = server.get(&format!("/{name}/200000"));
                    assert_eq!(status, 200, "{body}");
                    assert!(body.starts_with(&format!("{name}(200000) = ")), "{body}");
                }
            });
        }
    });
    let (code, err) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(130), "{err}");
    let p = Decoded::load(&out);
    let cpu = p.value_index("cpu");
    let (mut in_loops, mut labeled) = (0, 0);
    let mut requests = std::collections::BTreeSet::new();
    for sample in &p.0.sample {
        let names = p.sample_frames(sample);
        let Some(name) = loops.iter().find(|l| {
            names
                .first()
                .is_some_and(|f| f.0.starts_with(&format!("{l} (http_handler.py:")))
        }) else {
            continue;
        };
        in_loops += sample.value[cpu];
        let rest: Vec<(&str, i64)> = names[1..]
            .iter()
            .map(|(n, _, l)| (n.as_str(), *l))
            .collect();
        assert_eq!(
            rest,
            [
                ("answer (http_handler.py:29)", 32),
                ("IncomingHandler.handle (http_handler.py:36)", 37)
            ],
            "{names:?}"
        );
        let label = |key: &str| {
            let label = sample.label.iter().find(|l| p.str(l.key) == key)?;
            Some(p.str(label.str).to_string())
        };
        if let (Some(request), Some(path)) = (label("request"), label("path")) {
            assert_eq!(path, format!("/{name}/200000"), "request {request}");
            labeled += sample.value[cpu];
            requests.insert(request);
        }
    }
    // The instance is made, its store attached and labeled, before the handler runs.
    assert!(
        labeled as f64 >= 0.97 * in_loops as f64 && in_loops > 0,
        "{labeled} of {in_loops} ns in the loops labeled"
    );
    // 30 ms of CPU each: a few requests may get no sample only on a very busy machine.
    assert!(requests.len() >= 20, "{requests:?}");
}

/// A componentize-qjs `wasi:http` handler (QuickJS inside the component, WASI 0.3: an instance
/// answers several requests, one after the other or at once): 48 requests, 4 at a time, each
/// running one of two JavaScript functions (`/fib/N` or `/build/N`). Every request's samples
/// carry its own labels (its path names the function its stack shows), and their stacks are
/// JavaScript's: `fib` (at its own lines) or `build` → `answer` (at the line that calls it) →
/// `handle` (at the line that calls `answer`); no `fib` under a `/build` request, no `build`
/// under a `/fib` one; and the requests ran on more than one of the runtime's threads.
#[test]
fn a_javascript_handlers_requests_show_their_javascript_frames_under_their_labels() {
    handler_requests_show_their_javascript_frames(
        "http-qjs.wasm",
        "http_handler.js",
        "answer(request.getPathWithQuery()",
    );
}

/// The same of a ComponentizeJS `wasi:http` handler (StarlingMonkey's fetch event, WASI 0.2:
/// an instance per request), `http_handler.js`'s twin.
#[test]
fn a_starlingmonkey_handlers_requests_show_their_javascript_frames_under_their_labels() {
    handler_requests_show_their_javascript_frames(
        "http-sm.wasm",
        "http_handler_sm.js",
        "answer(new URL(request.url).pathname)",
    );
}

/// The requests to `component` (built from `source`, whose handler calls `answer` at the line
/// that holds `handle_call`), as the tests above say.
fn handler_requests_show_their_javascript_frames(component: &str, source: &str, handle_call: &str) {
    let Some(component) = built_component(component) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.pb.gz");
    let firefox = dir.path().join("serve.json");
    // The engines (built for WASI 0.2) import `wasi:cli`.
    let server = serve_interpreted(&component, &[&out, &firefox]);
    // About 20 ms (fib) and 30 ms (build) of CPU each.
    let works = [("fib", "26", "121393"), ("build", "150000", "150000")];
    let sent = 48;
    std::thread::scope(|s| {
        for worker in 0..4 {
            let server = &server;
            s.spawn(move || {
                for i in (worker..sent).step_by(4) {
                    let (name, n, result) = works[i % 2];
                    let (status, body) = server.get(&format!("/{name}/{n}"));
                    assert_eq!(status, 200, "{body}");
                    assert_eq!(body, format!("{name}({n}) = {result}\n"));
                }
            });
        }
    });
    let (code, err) = server.stop(libc::SIGINT);
    assert_eq!(code, Some(130), "{err}");
    let p = Decoded::load(&out);
    let cpu = p.value_index("cpu");

    let file = source;
    let source = std::fs::read_to_string(fixture(&format!("interpreters/{file}"))).unwrap();
    let line_of = |text: &str| {
        source
            .lines()
            .position(|l| l.contains(text))
            .unwrap_or_else(|| panic!("{text} is not in {file}")) as i64
            + 1
    };
    let fib_start = line_of("function fib(");
    // Its closing brace: the first line after it that is one.
    let fib_end = fib_start
        + 1
        + source
            .lines()
            .skip(fib_start as usize)
            .position(|l| l == "}")
            .unwrap() as i64;
    let build_start = line_of("function build(");
    let answer_call = line_of("work(Number(n))");
    let handle_call = line_of(handle_call);
    // A frame of the handler's `function` (named with where it starts: `fib
    // (http_handler.js:7:1)`).
    let is = |frame: &(String, String, i64), function: &str| {
        frame.0.starts_with(&format!("{function} (")) && frame.1.ends_with(file)
    };

    let (mut in_works, mut labeled) = (0, 0);
    let mut paths = BTreeMap::<String, String>::new();
    for sample in &p.0.sample {
        let label = |key: &str| {
            let label = sample.label.iter().find(|l| p.str(l.key) == key)?;
            Some(p.str(label.str).to_string())
        };
        if let (Some(request), Some(path)) = (label("request"), label("path")) {
            let first = paths.entry(request.clone()).or_insert_with(|| path.clone());
            assert_eq!(*first, path, "request {request} under two paths");
        }
        let frames = p.sample_frames(sample);
        let Some((name, _, _)) = works
            .iter()
            .find(|(name, ..)| frames.iter().any(|f| is(f, name)))
        else {
            continue;
        };
        in_works += sample.value[cpu];
        // Leaf first: the work function's frames (or the engine's own, `[wasmtime]`, or a host
        // call it makes, StarlingMonkey's clock, above them), then `answer` and `handle` at
        // their calls.
        let answer = frames
            .iter()
            .position(|f| is(f, "answer"))
            .unwrap_or_else(|| panic!("no answer frame: {frames:?}"));
        for frame in &frames[..answer] {
            assert!(
                is(frame, name) || frame.0.starts_with('[') || frame.0.starts_with("wasi:"),
                "{name}'s sample: {frames:?}"
            );
        }
        let work = frames[..answer]
            .last()
            .filter(|f| is(f, name))
            .unwrap_or_else(|| panic!("{name} does not call answer: {frames:?}"));
        if *name == "fib" {
            for frame in frames[..answer].iter().filter(|f| is(f, "fib")) {
                assert!(
                    (fib_start..=fib_end).contains(&frame.2),
                    "fib at line {}, not {fib_start}..={fib_end}: {frames:?}",
                    frame.2
                );
            }
        } else {
            assert!(work.2 >= build_start, "{frames:?}");
        }
        assert_eq!(frames[answer].2, answer_call, "{frames:?}");
        let handle = &frames[answer + 1];
        assert!(is(handle, "handle"), "{frames:?}");
        assert_eq!(handle.2, handle_call, "{frames:?}");
        if let (Some(request), Some(path)) = (label("request"), label("path")) {
            assert!(
                path.starts_with(&format!("/{name}/")),
                "{name} under request {request}, path {path}: {frames:?}"
            );
            labeled += sample.value[cpu];
        }
    }
    let total = p.total("cpu");
    let per_request = by_label(&p, "samples", "request");
    eprintln!(
        "{} samples, {total} ns of CPU; {in_works} ns in fib and build, {labeled} ns of them \
         labeled; samples by path {:?}, by request {:?}",
        p.total("samples"),
        by_label(&p, "samples", "path"),
        per_request
            .iter()
            .filter(|(r, _)| !r.is_empty())
            .map(|(_, n)| n)
            .collect::<Vec<_>>()
    );
    assert!(
        in_works as f64 >= 0.8 * total as f64,
        "{in_works} of {total} ns in fib and build"
    );
    // The instance is made, its store attached and labeled, before the handler runs; a task
    // entering Wasm relabels it.
    assert!(
        labeled as f64 >= 0.97 * in_works as f64,
        "{labeled} of {in_works} ns in fib and build labeled"
    );
    // Every request labeled, each under its own path: 24 of each.
    let numbers: Vec<u64> = paths.keys().map(|r| r.parse().unwrap()).collect();
    assert_eq!(numbers.len(), sent, "{paths:?}");
    assert!(
        numbers.iter().all(|n| (1..=sent as u64).contains(n)),
        "{paths:?}"
    );
    for (name, n, _) in works {
        let requests = paths
            .values()
            .filter(|p| **p == format!("/{name}/{n}"))
            .count();
        assert_eq!(requests, sent / 2, "{paths:?}");
    }
    let under = |path: &str, function: &str| -> i64 {
        p.0.sample
            .iter()
            .filter(|s| {
                s.label
                    .iter()
                    .any(|l| p.str(l.key) == "path" && p.str(l.str) == path)
            })
            .filter(|s| p.sample_frames(s).iter().any(|f| is(f, function)))
            .map(|s| s.value[cpu])
            .sum()
    };
    assert!(under("/fib/26", "fib") > 0 && under("/build/150000", "build") > 0);
    assert_eq!(under("/build/150000", "fib"), 0);
    assert_eq!(under("/fib/26", "build"), 0);

    // The samples in fib and build were taken on more than one thread (two cores, four
    // requests at a time): the Firefox Profiler's file has a track per thread.
    let fx: serde_json::Value = serde_json::from_slice(&std::fs::read(&firefox).unwrap()).unwrap();
    let threads: Vec<usize> = fx["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|thread| javascript_samples(thread, &["fib (", "build ("]))
        .collect();
    eprintln!("samples in fib and build by thread: {threads:?}");
    assert!(
        threads.iter().filter(|&&n| n > 0).count() >= 2,
        "{threads:?}"
    );
}

/// The samples of one thread of a Firefox Profiler file whose stack holds a function whose
/// name begins with one of `prefixes`.
fn javascript_samples(thread: &serde_json::Value, prefixes: &[&str]) -> usize {
    let column = |table: &str, key: &str| -> Vec<Option<usize>> {
        thread[table][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().map(|i| i as usize))
            .collect()
    };
    let strings = thread["stringArray"].as_array().unwrap();
    let (func_name, frame_func) = (column("funcTable", "name"), column("frameTable", "func"));
    let (prefix, frame) = (
        column("stackTable", "prefix"),
        column("stackTable", "frame"),
    );
    let holds = |mut stack: Option<usize>| {
        while let Some(s) = stack {
            let func = frame_func[frame[s].unwrap()].unwrap();
            let name = strings[func_name[func].unwrap()].as_str().unwrap();
            if prefixes.iter().any(|p| name.starts_with(p)) {
                return true;
            }
            stack = prefix[s];
        }
        false
    };
    column("samples", "stack")
        .into_iter()
        .filter(|&s| holds(s))
        .count()
}

/// `wasmspy dump` (`/debug/pprof/goroutine?debug=2`): with one request spinning for minutes
/// while others come and go, the dump shows that request alone, its labels, how long it has
/// run and where it spins; finished requests and idle workers are not shown.
#[test]
fn a_dump_shows_the_stuck_request_where_it_spins() {
    let mut server = Server::start(&["--pprof-addr", "127.0.0.1:0"]);
    let live = server.live_url();
    let live = live.trim_end_matches("/debug/pprof/");
    let base = server.base.clone();
    // Its answer never comes before the server is stopped.
    std::thread::spawn(move || {
        let _ = ureq::get(&format!("{base}/spin?rounds=100000"))
            .timeout(Duration::from_secs(600))
            .call();
    });
    for _ in 0..3 {
        assert_eq!(server.get("/hello"), (200, "hello\n".to_string()));
    }
    // The spin has begun once the server used a second of CPU (the hellos cost milliseconds).
    let cpu_before = server.cpu_seconds();
    // (Polled for a minute at most: a spin that never starts fails the test, not hangs it.)
    let started = (0..6000).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        server.cpu_seconds() >= cpu_before + 1.0
    });
    assert!(started, "the spin never took a second of CPU");
    let out = wasmspy().args(["dump", live]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let blocks: Vec<&str> = text
        .split("\n\n")
        .filter(|b| b.starts_with("guest "))
        .collect();
    assert_eq!(blocks.len(), 1, "{text}");
    let lines: Vec<&str> = blocks[0].lines().collect();
    // `guest N [running, 1.2 s]: request=4 method=GET path=/spin instance=4 thread=T`
    assert!(lines[0].contains(" [running, "), "{text}");
    assert!(lines[0].contains(" method=GET path=/spin "), "{text}");
    assert!(lines[0].contains(" request="), "{text}");
    let age = lines[0]
        .split(" [running, ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("{text}"));
    let seconds: f64 = match age.split_once(' ') {
        Some((n, "ms")) => n.parse::<f64>().unwrap() / 1000.0,
        Some((n, "s")) => n.parse().unwrap(),
        _ => panic!("{text}"),
    };
    // The server's second of CPU was the spin's but for the little its other threads used
    // (samplers, the live server): the request has run for more than half a second.
    assert!(seconds >= 0.5, "{text}");
    let functions: Vec<&str> = lines[1..].iter().step_by(2).copied().collect();
    let hot = functions
        .iter()
        .position(|f| f.ends_with("hot_handler") || f.ends_with("cold_handler"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        functions[hot..].iter().any(|f| f.ends_with("route")),
        "{text}"
    );
    assert!(
        lines[2].contains(".rs:"),
        "the leaf's file and line: {text}"
    );
    // The workers that answered the hellos, idle now, are counted, not shown.
    assert!(text.contains("# 1 guest running, "), "{text}");

    // The same, as pprof's goroutine profile.
    let response = ureq::get(&format!("{live}/debug/pprof/goroutine"))
        .timeout(Duration::from_secs(60))
        .call()
        .unwrap();
    let mut bytes = Vec::new();
    response.into_reader().read_to_end(&mut bytes).unwrap();
    let p = wasmspy::export::read(&bytes).unwrap();
    assert_eq!(p.sample_types[0].kind, "goroutine");
    assert_eq!(p.total(0), 1);
    server.stop(libc::SIGKILL);
}

/// As `wasmtime serve`: a connection is served with Nagle's algorithm off (`TCP_NODELAY`), so
/// that a guest's small writes (an event stream's chunks) go out at once rather than up to
/// 40 ms later. Read from the servers' own sockets (a duplicate taken with `pidfd_getfd`),
/// `wasmtime serve`'s as the oracle.
#[test]
fn connections_are_served_without_nagles_algorithm() {
    use std::io::Write;
    let test = "connections_are_served_without_nagles_algorithm";
    for server in [Server::wasmtime(P2, &[]), Server::start(&[])] {
        let address = server.base.trim_start_matches("http://").to_string();
        let mut client = std::net::TcpStream::connect(&address).unwrap();
        client
            .write_all(b"GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        // Answered: the server accepted the connection and serves it.
        let mut answer = Vec::new();
        let mut buffer = [0u8; 1024];
        while !answer.windows(6).any(|w| w == b"hello\n") {
            let n = client.read(&mut buffer).unwrap();
            assert!(n > 0, "{}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buffer[..n]);
        }
        let pid = server.child.id() as i32;
        let port = client.local_addr().unwrap().port();
        let Some(nodelay) = server_socket_nodelay(pid, port) else {
            skip(
                test,
                "the server's socket cannot be read here (pidfd_getfd)",
            );
            return;
        };
        assert!(nodelay, "{address}: Nagle's algorithm on");
        drop(client);
        server.stop(libc::SIGTERM);
    }
}

/// Whether the socket of process `pid` connected to local port `peer` has `TCP_NODELAY` set;
/// `None` where it cannot be read.
fn server_socket_nodelay(pid: i32, peer: u16) -> Option<bool> {
    // The server's end is the one whose remote port is the client's: its inode, then its fd.
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).ok()?;
    let inode = table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let remote_port = fields.get(2)?.rsplit(':').next()?;
        (u16::from_str_radix(remote_port, 16).ok()? == peer).then(|| fields.get(9).copied())?
    })?;
    let socket = format!("socket:[{inode}]");
    let fd = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .find(|entry| {
            std::fs::read_link(entry.path()).is_ok_and(|l| l.to_string_lossy() == socket)
        })?
        .file_name()
        .to_str()?
        .parse::<i32>()
        .ok()?;
    // SAFETY: plain system calls on descriptors this function opens and closes.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        if pidfd < 0 {
            return None;
        }
        let own = libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) as i32;
        libc::close(pidfd);
        if own < 0 {
            return None;
        }
        let mut value: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let got = libc::getsockopt(
            own,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        );
        libc::close(own);
        (got == 0).then_some(value != 0)
    }
}
