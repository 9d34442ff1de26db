//! `wasmspy serve` against what users run instead, `wasmtime serve` (the CLI's own code, built
//! from its crate at the same version: `benches/baseline/wasmtime.rs`), on `tests/fixtures/rust/http.wasm`.
//!
//! `cargo bench --profile dev --features internals --bench serve [-- --reps N --seconds S]`
//!
//! 1. Coverage: 100 requests, 4 at a time, each `/spin?rounds=20` (about 25 ms of CPU): the
//!    CPU time in the profile against the CPU time the server process used (all its threads)
//!    while serving them, and the share of the requests' samples under their own label.
//! 2. Throughput at saturation: a closed-loop load generator (8 keep-alive connections, each
//!    sending its next request when the last is answered, in this process on the same cores)
//!    against five servers started together and kept up, each from a fresh copy of its
//!    executable (see `fresh_copy`): `wasmtime serve`, a second `wasmtime serve` (from another
//!    copy: how far apart two servers that should be equal land in this run), then `wasmspy
//!    serve` at 1 Hz (what attaching a store per request costs, sampling aside), at its default
//!    100 Hz and at 1 kHz; each loaded in turn for S seconds (1 by default; 3 at least for the
//!    30 ms handler), N rounds (15), the order rotating; the medians of the per-round ratios of
//!    requests per second to `wasmtime serve`'s, for a tiny handler (`/hello`), a busy one
//!    (`/spin?rounds=1`, about 1.3 ms) and one of about 30 ms (`/spin?rounds=24`); then
//!    whether issue 49's targets are met: `/hello` ≥ ×0.97 at the default rate and ≥ ×0.95 at
//!    1 kHz, the 30 ms handler ≥ ×0.99 at the default rate. Beside the ratios, each server's
//!    CPU time per request (all its threads, from `/proc`, the median of its turns): what a
//!    request costs the server, apart from the load generator's share of the cores. A sixth
//!    server, where Linux `perf` is installed: `wasmtime serve` under `perf record -e cpu-clock
//!    -F 1000 -g`, what the 1 kHz column costs with the kernel taking the samples (no signal,
//!    no timer armed from user space): the floor this machine sets for sampling at that rate.
//!    `-- --path /hello` measures one handler alone. Short turns, with the servers up:
//!    on these virtual machines a server's throughput on `/hello` drifts by a third over
//!    minutes: whole-server rounds of 5 s (a server started for each) put, in one run, the
//!    1 Hz column at ×0.81 below the 100 Hz one at ×0.93; 15 pairs of 1 s turns gave one build
//!    ×0.82 to ×0.86 run after run.
//!
//! `-- --soak S` instead: `wasmspy serve` (default rate, its live endpoint on) and, beside it,
//! `wasmtime serve`, each under steady load for S seconds, `/hello` and `/spin?rounds=1` in
//! turn on each connection (a store and labels made and dropped per request; `--no-baseline`
//! leaves `wasmtime serve` out, for more requests): every 10 s each server's resident memory
//! (RSS) and requests answered, and a 1 s profile from the live endpoint; at the end the drift
//! of each server's RSS after the first minute (its warm-up) and, for `wasmspy serve`, after its
//! recorder's budget of label sets filled (the first live profile whose requests come without
//! their request number): a store's labels are kept for 10,000 distinct sets, then the
//! many-valued keys are dropped; requests that failed, and samples whose labels name the other
//! handler (a `/hello` sample with `/spin`'s `hot_handler` or `cold_handler` on its stack).

#[path = "../tests/common/child.rs"]
#[allow(dead_code)] // the benchmark reads the CPU time alone
mod child;
mod common;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{median, option, paired, rss_kib, wasmtime_cli};

const CONNECTIONS: usize = 8;

/// The perf column's cells where Linux `perf` cannot record.
const NO_PERF: &str = "(no perf)";

fn main() {
    let reps: usize = option("--reps", 15);
    let seconds: f64 = option("--seconds", 1.0);
    let component = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rust/http.wasm");
    let wasmspy = Path::new(env!("CARGO_BIN_EXE_wasmspy"));
    let soak_seconds: u64 = option("--soak", 0);
    if soak_seconds > 0 {
        return soak(wasmspy, &component, Duration::from_secs(soak_seconds));
    }

    println!("## Coverage: 100 requests, 4 at a time, /spin?rounds=20");
    coverage(wasmspy, &component);

    println!("\n## Requests per second, {CONNECTIONS} connections, {seconds} s x {reps} rounds");
    println!(
        "| handler | wasmtime serve req/s | wasmtime serve, another copy | wasmspy serve, 1 Hz | 100 Hz (default) | 1 kHz | wasmtime serve under perf, 1 kHz |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut targets = Vec::new();
    let mut cpu_rows = Vec::new();
    // `--path P`: that handler alone.
    let only: String = option("--path", String::new());
    let paths = ["/hello", "/spin?rounds=1", "/spin?rounds=24"];
    assert!(
        only.is_empty() || paths.contains(&only.as_str()),
        "--path {only}: one of {paths:?}"
    );
    for path in paths.into_iter().filter(|p| only.is_empty() || only == *p) {
        let mut servers = vec![
            Server::wasmtime(&component),
            Server::wasmtime(&component),
            Server::wasmspy(wasmspy, &component, &["--rate", "1"]),
            Server::wasmspy(wasmspy, &component, &[]),
            Server::wasmspy(wasmspy, &component, &["--rate", "1000"]),
        ];
        servers.extend(Server::under_perf(&component));
        let perf_installed = servers.len() == 6;
        // Enough of a 30 ms handler's requests for a turn's count to mean something.
        let turn = match path {
            "/spin?rounds=24" => seconds.max(3.0),
            _ => seconds,
        };
        let mut cpu_per_request = vec![Vec::new(); servers.len()];
        let (base, ratios) = paired(servers.len(), reps, |config| {
            let server = &servers[config];
            let cpu = server.cpu_seconds();
            let (per_second, answered) = load(&server.base, path, Duration::from_secs_f64(turn));
            cpu_per_request[config].push((server.cpu_seconds() - cpu) / answered as f64);
            // Times, for `paired`: seconds per request.
            1.0 / per_second
        });
        drop(servers);
        let mut cpu: Vec<String> = cpu_per_request
            .iter_mut()
            .map(|cpu| format!("{:.1}", 1e6 * median(cpu)))
            .collect();
        let mut ratio: Vec<String> = ratios[1..]
            .iter()
            .map(|r| format!("x{:.3}", 1.0 / r))
            .collect();
        if !perf_installed {
            cpu.push(NO_PERF.into());
            ratio.push(NO_PERF.into());
        }
        cpu_rows.push(format!("| `{path}` | {} |", cpu.join(" | ")));
        println!("| `{path}` | {:.0} | {} |", 1.0 / base, ratio.join(" | "));
        match path {
            "/hello" => targets.extend([
                (path, "100 Hz", 1.0 / ratios[3], 0.97, None),
                (
                    path,
                    "1 kHz",
                    1.0 / ratios[4],
                    0.95,
                    ratios.get(5).map(|r| 1.0 / r),
                ),
            ]),
            "/spin?rounds=24" => targets.push((path, "100 Hz", 1.0 / ratios[3], 0.99, None)),
            _ => {}
        }
    }
    println!("\n## The server's CPU per request, µs (all its threads; medians of the turns)");
    println!(
        "| handler | wasmtime serve | wasmtime serve, another copy | wasmspy serve, 1 Hz | 100 Hz (default) | 1 kHz | wasmtime serve under perf, 1 kHz |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in cpu_rows {
        println!("{row}");
    }
    for (path, rate, ratio, at_least, under_perf) in targets {
        let met = if ratio >= at_least { "met" } else { "NOT met" };
        let perf = match under_perf {
            Some(r) => format!("; `wasmtime serve` under perf at {rate}: x{r:.3}"),
            None => String::new(),
        };
        println!("target: `{path}` at {rate} x{at_least} at least: {met} (x{ratio:.3}{perf})");
    }
}

struct Server {
    child: Child,
    base: String,
    /// Its executable's copy, and where a `wasmspy serve` writes its profile when it stops, or
    /// `perf` its data.
    dir: Option<tempfile::TempDir>,
    /// `perf record`, sampling the server.
    perf: Option<Child>,
}

impl Server {
    fn wasmtime(component: &Path) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(fresh_copy(&wasmtime_cli(), dir.path()));
        cmd.args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "-S",
            "cli",
            "-C",
            "cache=n",
        ])
        .args(std::env::var("XW").unwrap_or_default().split_whitespace())
        .arg(component);
        let mut server = Server::start(cmd);
        server.dir = Some(dir);
        server
    }

    /// `wasmtime serve` sampled at 1 kHz of its threads' CPU time by Linux perf, with call
    /// chains (frame pointers), as `perf record -F 1000 -g` would; `None` where perf is missing
    /// or may not record (`perf_event_paranoid`).
    fn under_perf(component: &Path) -> Option<Server> {
        let mut server = Server::wasmtime(component);
        let data = server.dir.as_ref()?.path().join("perf.data");
        let mut perf = Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-F", "1000", "-g", "-p"])
            .arg(server.child.id().to_string())
            .arg("-o")
            .arg(data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        // Attached once it is still recording after a moment; one that cannot has exited.
        std::thread::sleep(Duration::from_millis(500));
        if perf.try_wait().ok()?.is_some() {
            return None;
        }
        server.perf = Some(perf);
        Some(server)
    }

    /// Its profile goes to `extra`'s `-o`, else to a temporary directory.
    fn wasmspy(wasmspy: &Path, component: &Path, extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(fresh_copy(wasmspy, dir.path()));
        cmd.args(["serve", "--addr", "127.0.0.1:0", "-S", "cli"])
            .args(extra);
        if !extra.contains(&"-o") {
            cmd.arg("-o").arg(dir.path().join("serve.pb.gz"));
        }
        cmd.arg("--").arg(component);
        let mut server = Server::start(cmd);
        server.dir = Some(dir);
        server
    }

    fn start(mut cmd: Command) -> Server {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        while !line.contains("Serving HTTP on ") {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "no address");
        }
        let base = line
            .trim_end()
            .split("Serving HTTP on ")
            .nth(1)
            .unwrap()
            .trim_end_matches('/')
            .to_string();
        // Keep reading stderr, so that the server never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        Server {
            child,
            base,
            dir: None,
            perf: None,
        }
    }

    fn cpu_seconds(&self) -> f64 {
        child::process_cpu_seconds(self.child.id())
    }
}

/// Ctrl-C, as a user ends either server (`wasmspy serve` writes its profile then).
impl Drop for Server {
    fn drop(&mut self) {
        for child in self.perf.iter_mut().chain([&mut self.child]) {
            // SAFETY: plain kill(2) of our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let _ = child.wait();
        }
    }
}

/// `executable` copied into `dir`, for one server. Each server runs a fresh copy: on these
/// virtual machines the same executable serves `/hello` up to 3 % faster or slower depending
/// on how its file's pages came into the page cache (as the linker wrote them, copied at once,
/// read back after they were dropped); a user runs a copy too (`cargo install` copies it).
/// Two copies of `wasmtime serve` are measured against each other: how far this run's ratios
/// can be trusted.
fn fresh_copy(executable: &Path, dir: &Path) -> PathBuf {
    let copy = dir.join(executable.file_name().unwrap());
    std::fs::copy(executable, &copy).unwrap();
    copy
}

fn get(agent: &ureq::Agent, url: &str) {
    let response = agent.get(url).call().expect("request");
    let mut body = Vec::new();
    response.into_reader().read_to_end(&mut body).unwrap();
}

/// Requests per second over `duration`, from `CONNECTIONS` keep-alive clients, and the
/// requests answered.
fn load(base: &str, path: &str, duration: Duration) -> (f64, u64) {
    let url = format!("{base}{path}");
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    // Connections opened and warmed before the clock starts.
    let agents: Vec<ureq::Agent> = (0..CONNECTIONS)
        .map(|_| {
            let agent = ureq::AgentBuilder::new().max_idle_connections(1).build();
            get(&agent, &url);
            agent
        })
        .collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        for agent in &agents {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    get(agent, &url);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
    });
    let done = done.load(Ordering::Relaxed);
    (done as f64 / start.elapsed().as_secs_f64(), done)
}

fn coverage(wasmspy: &Path, component: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.pb.gz");
    let server = Server::wasmspy(wasmspy, component, &["-o", out.to_str().unwrap()]);
    let url = format!("{}/spin?rounds=20", server.base);
    let cpu_before = server.cpu_seconds();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let agent = ureq::Agent::new();
                for _ in 0..25 {
                    get(&agent, &url);
                }
            });
        }
    });
    let used = server.cpu_seconds() - cpu_before;
    drop(server);
    let profile = wasmspy::export::pprof::decode(&std::fs::read(&out).unwrap()).unwrap();
    let string = |i: i64| profile.string_table[i as usize].as_str();
    let cpu_index = profile
        .sample_type
        .iter()
        .position(|t| string(t.r#type) == "cpu")
        .unwrap();
    let (mut cpu, mut labeled) = (0i64, 0i64);
    let mut requests = std::collections::HashSet::new();
    for sample in &profile.sample {
        cpu += sample.value[cpu_index];
        if let Some(label) = sample.label.iter().find(|l| string(l.key) == "request") {
            labeled += sample.value[cpu_index];
            requests.insert(label.str);
        }
    }
    let cpu = cpu as f64 / 1e9;
    println!(
        "server process CPU while serving: {used:.3} s; in the profile: {cpu:.3} s = {:.1} %",
        100.0 * cpu / used
    );
    println!(
        "samples under a request's label: {:.1} % of the profile's CPU; {} requests labeled",
        100.0 * labeled as f64 / 1e9 / cpu,
        requests.len()
    );
}

/// Requests answered and failed by one server in the soak.
#[derive(Default)]
struct Tally {
    answered: AtomicU64,
    failed: AtomicU64,
}

/// One keep-alive connection's steady load on `base` until `stop`: `/hello` and
/// `/spin?rounds=1` in turn.
fn steady_load(base: &str, stop: &AtomicBool, tally: &Tally) {
    let agent = ureq::AgentBuilder::new().max_idle_connections(1).build();
    for path in ["/hello", "/spin?rounds=1"].iter().cycle() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let answered = agent
            .get(&format!("{base}{path}"))
            .call()
            .ok()
            .and_then(|r| {
                let mut body = Vec::new();
                r.into_reader().read_to_end(&mut body).ok()?;
                Some(!body.is_empty())
            });
        let counter = match answered {
            Some(true) => &tally.answered,
            _ => &tally.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// See the module's documentation: `-- --soak S`.
fn soak(wasmspy: &Path, component: &Path, duration: Duration) {
    let baseline = !std::env::args().any(|a| a == "--no-baseline");
    let live = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let live_addr = live.local_addr().unwrap();
    drop(live);
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("soak.pb.gz");
    let profile_arg = profile.display().to_string();
    let live_arg = live_addr.to_string();
    let mut servers = vec![Server::wasmspy(
        wasmspy,
        component,
        &["--pprof-addr", &live_arg, "-o", &profile_arg],
    )];
    if baseline {
        servers.push(Server::wasmtime(component));
    }
    let tallies: Vec<Tally> = servers.iter().map(|_| Tally::default()).collect();
    let stop = AtomicBool::new(false);
    let warm_up = Duration::from_secs(60).min(duration / 4);
    println!(
        "## Soak: {CONNECTIONS} connections to each server, {} s",
        duration.as_secs()
    );
    let mut header =
        "| s | wasmspy serve requests | req/s | RSS MiB | live 1 s profile |".to_string();
    if baseline {
        header += " wasmtime serve requests | req/s | RSS MiB |";
    }
    println!("{header}");
    println!("{}|", "|---".repeat(header.matches('|').count() - 1));
    // Each server's RSS, every 10 s.
    let mut curve: Vec<(Duration, Vec<u64>)> = Vec::new();
    let mut budget_full: Option<Duration> = None;
    let start = Instant::now();
    std::thread::scope(|s| {
        for (server, tally) in servers.iter().zip(&tallies) {
            for _ in 0..CONNECTIONS {
                s.spawn(|| steady_load(&server.base, &stop, tally));
            }
        }
        let live_agent = ureq::AgentBuilder::new()
            .timeout(Duration::from_secs(30))
            .build();
        let mut last = (Duration::ZERO, vec![0; servers.len()]);
        while start.elapsed() < duration {
            std::thread::sleep(
                Duration::from_secs(10).min(duration.saturating_sub(start.elapsed())),
            );
            let url = format!("http://{live_addr}/debug/pprof/profile?seconds=1");
            let live = live_agent.get(&url).call().ok().and_then(|r| {
                let mut body = Vec::new();
                r.into_reader().read_to_end(&mut body).ok()?;
                Some(body).filter(|b| !b.is_empty())
            });
            let live_ok = live.as_ref().map(Vec::len);
            // The recorder's budget of label sets is full once a request's samples come
            // without their request number (the key it drops past the budget).
            if budget_full.is_none()
                && live.is_some_and(|bytes| {
                    wasmspy::export::pprof::read(&bytes).is_ok_and(|p| {
                        p.samples.iter().any(|s| {
                            let has = |key: &str| s.labels.iter().any(|(k, _)| k == key);
                            has("path") && !has("request")
                        })
                    })
                })
            {
                budget_full = Some(start.elapsed());
            }
            let now = start.elapsed();
            let done: Vec<u64> = tallies
                .iter()
                .map(|t| t.answered.load(Ordering::Relaxed))
                .collect();
            let rss: Vec<u64> = servers.iter().map(|s| rss_kib(s.child.id())).collect();
            let mut row = format!("| {:.0} ", now.as_secs_f64());
            for (i, (&done, &rss)) in done.iter().zip(&rss).enumerate() {
                let rate = (done - last.1[i]) as f64 / (now - last.0).as_secs_f64();
                row += &format!("| {done} | {rate:.0} | {:.1} ", rss as f64 / 1024.0);
                if i == 0 {
                    row += &format!(
                        "| {} ",
                        live_ok.map_or("FAILED".to_string(), |n| format!("{n} bytes"))
                    );
                }
            }
            println!("{row}|");
            curve.push((now, rss));
            last = (now, done);
        }
        stop.store(true, Ordering::Relaxed);
    });
    // The largest growth of server `i`'s RSS after `since`.
    let drift = |i: usize, since: Duration| {
        let after: Vec<u64> = curve
            .iter()
            .filter(|(t, _)| *t >= since)
            .map(|(_, rss)| rss[i])
            .collect();
        let base = after.first().copied().unwrap_or(0);
        let largest = after.iter().copied().max().unwrap_or(0);
        (base, largest as f64 / 1024.0 - base as f64 / 1024.0)
    };
    println!();
    for (i, name) in ["wasmspy serve", "wasmtime serve"]
        .iter()
        .take(servers.len())
        .enumerate()
    {
        let (base, largest) = drift(i, warm_up);
        println!(
            "{name}: requests answered {}, failed {}; RSS after the warm-up ({} s) {:.1} MiB, largest drift {largest:+.1} MiB",
            tallies[i].answered.load(Ordering::Relaxed),
            tallies[i].failed.load(Ordering::Relaxed),
            warm_up.as_secs(),
            base as f64 / 1024.0,
        );
    }
    match budget_full {
        Some(at) => {
            let (base, largest) = drift(0, at);
            println!(
                "wasmspy serve: the budget of label sets full at {} s; RSS then {:.1} MiB, largest drift after it {largest:+.1} MiB",
                at.as_secs(),
                base as f64 / 1024.0
            );
        }
        None => println!("wasmspy serve: the budget of label sets never filled"),
    }
    // Ctrl-C, which writes the profile.
    drop(servers);
    let bytes = std::fs::read(&profile).expect("the server's profile");
    let p = wasmspy::export::pprof::read(&bytes).unwrap();
    let mut mislabeled = 0;
    let mut labeled = 0;
    for sample in &p.samples {
        let Some((_, path)) = sample.labels.iter().find(|(k, _)| k == "path") else {
            continue;
        };
        labeled += 1;
        let spins = p.stacks[sample.stack].iter().any(|&f| {
            let name = p.frame_name(f);
            name.contains("hot_handler") || name.contains("cold_handler")
        });
        if spins && path == "/hello" {
            mislabeled += 1;
        }
    }
    println!(
        "wasmspy serve: samples with a path label {labeled}, naming the other handler {mislabeled}"
    );
}
