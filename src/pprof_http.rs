//! The live profile server: `net/http/pprof`'s endpoints over the running guest's profiler,
//! on its own thread and tokio runtime, so that the guest's thread never runs server code.
//!
//! - `/debug/pprof/`: an HTML index;
//! - `/debug/pprof/profile?seconds=N`: the CPU profile of the next N seconds (30 by default),
//!   cut short when the guest exits; one at a time; `&format=cpuprofile` (or any output
//!   format's name) for another format than pprof;
//! - `/debug/pprof/heap`, `/debug/pprof/allocs`: the memory profile so far (in-use and
//!   allocation views), when memory is profiled;
//! - `/debug/pprof/goroutine?debug=2`: the stack of every guest running now, taken on demand
//!   (Go's goroutine dump; `debug=0`, a pprof profile of them);
//! - `/debug/pprof/cmdline`: the guest's command line, NUL-separated;
//! - `/debug/wasmspy/window?seconds=N`: the CPU profile of the next N seconds (1 by default),
//!   any number at once, for `wasmspy top`.
//!
//! Building a profile (symbolizing it, encoding it) runs on tokio's blocking threads.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::{oneshot, watch};

use crate::export::Format;
use crate::profile::Profile;
use crate::profile::{ALLOC_SPACE, INUSE_SPACE};
use crate::ProfilerHandle;

/// What the server serves besides the profiler's data.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The longest CPU profile a request may ask for, in seconds.
    pub max_seconds: u64,
    /// The guest's command line, for `/debug/pprof/cmdline`.
    pub cmdline: Vec<String>,
}

/// A running server; dropping it stops it.
///
/// ```
/// use std::io::{Read, Write};
///
/// use wasmspy::pprof_http::{LiveServer, ServerOptions};
/// use wasmspy::{Profiler, ProfilerOptions};
/// # fn main() -> anyhow::Result<()> {
/// let options = ProfilerOptions::default();
/// let mut config = wasmtime::Config::new();
/// Profiler::configure(&mut config, &options);
/// let profiler = Profiler::new(&wasmtime::Engine::new(&config)?, options)?;
/// let cmdline = vec!["app.wasm".to_string(), "input.txt".to_string()];
/// let server = LiveServer::start(
///     profiler.handle(),
///     "127.0.0.1:0",
///     ServerOptions { max_seconds: 60, cmdline },
/// )?;
///
/// // What `go tool pprof` asks a Go server for, asked here by hand.
/// let mut http = std::net::TcpStream::connect(server.local_addr())?;
/// http.write_all(b"GET /debug/pprof/cmdline HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
/// let mut answer = String::new();
/// http.read_to_string(&mut answer)?;
/// assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
/// assert!(answer.ends_with("app.wasm\0input.txt"), "{answer}");
/// server.stop();
/// # Ok(())
/// # }
/// ```
pub struct LiveServer {
    addr: SocketAddr,
    exited: watch::Sender<bool>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    profiler: ProfilerHandle,
    options: ServerOptions,
    cpu_busy: AtomicBool,
    exited: watch::Receiver<bool>,
}

impl LiveServer {
    /// Listens on `addr` (bound before returning, so a bad address fails here) and serves
    /// from a thread of its own. A port alone (`:6060`, `6060`) is on loopback.
    pub fn start(
        profiler: ProfilerHandle,
        addr: &str,
        options: ServerOptions,
    ) -> Result<Self, crate::Error> {
        let addr = match addr.strip_prefix(':').unwrap_or(addr) {
            port if port.parse::<u16>().is_ok() => format!("127.0.0.1:{port}"),
            _ => addr.to_string(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .context("cannot start the server's runtime")?;
        let listener = std::net::TcpListener::bind(&addr)
            .with_context(|| format!("cannot listen on `{addr}`"))?;
        let local = listener
            .set_nonblocking(true)
            .and_then(|()| listener.local_addr())
            .with_context(|| format!("cannot listen on `{addr}`"))?;
        let (exited_tx, exited_rx) = watch::channel(false);
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let shared = Arc::new(Shared {
            profiler,
            options,
            cpu_busy: AtomicBool::new(false),
            exited: exited_rx,
        });
        let app = Router::new()
            .route("/debug/pprof/", get(index))
            .route("/debug/pprof/profile", get(cpu_profile))
            .route("/debug/pprof/cmdline", get(cmdline))
            .route("/debug/pprof/{name}", get(named_profile))
            .route("/debug/wasmspy/window", get(window))
            .with_state(shared);
        let thread = std::thread::Builder::new()
            .name("wasmspy-server".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                        return;
                    };
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(async {
                            let _ = shutdown_rx.await;
                        })
                        .await;
                });
            })
            .context("cannot start the server's thread")?;
        Ok(LiveServer {
            addr: local,
            exited: exited_tx,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        })
    }

    /// The address the server listens on (its port chosen by the system when asked for 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The guest has exited: CPU profiles in progress end now, later ones at once.
    pub fn guest_exited(&self) {
        self.exited.send_replace(true);
    }

    /// Stops serving, after the requests in progress.
    pub fn stop(mut self) {
        self.shut_down();
    }

    fn shut_down(&mut self) {
        self.guest_exited();
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for LiveServer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// A plain-text answer, as `net/http/pprof`'s `serveError` gives it.
fn error(status: StatusCode, text: &str) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::HeaderName::from_static("x-go-pprof"), "1"),
        ],
        format!("{text}\n"),
    )
        .into_response()
}

/// A profile as `net/http/pprof` sends one: gzipped pprof, as an attachment.
fn attachment(profile: &Profile, name: &str) -> Response {
    attachment_as(profile, name, Format::Pprof)
}

/// A profile in `format`, as an attachment (a `.cpuprofile` named so, for the browser).
fn attachment_as(profile: &Profile, name: &str, format: Format) -> Response {
    let mut bytes = Vec::new();
    match format.write(profile, &mut bytes) {
        Ok(()) => {
            let name = match format {
                Format::CpuProfile => format!("{name}.cpuprofile"),
                _ => name.to_string(),
            };
            let disposition = format!("attachment; filename=\"{name}\"");
            let mut response =
                ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response();
            if let Ok(value) = HeaderValue::from_str(&disposition) {
                response
                    .headers_mut()
                    .insert(header::CONTENT_DISPOSITION, value);
            }
            response
        }
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("cannot encode the profile: {e:#}"),
        ),
    }
}

async fn index(State(shared): State<Arc<Shared>>) -> Html<String> {
    let memory = shared.profiler.profiles_memory();
    let row = |path: &str, name: &str, what: &str| {
        format!("<tr><td><a href=\"{path}\">{name}</a></td><td>{what}</td></tr>\n")
    };
    let mut rows = row(
        "profile?seconds=30",
        "profile",
        "CPU profile of the guest: samples of its stack over the next <code>seconds</code> (default 30); <code>format=cpuprofile</code> for VS Code and Chrome DevTools.",
    );
    for (name, what) in [
        ("heap", "Memory in use, by allocation site (sampled allocations through the guest's allocator)."),
        ("allocs", "All allocations so far, by allocation site: the same profile, allocation view."),
    ] {
        if memory {
            rows += &row(name, name, what);
        } else {
            rows += &format!("<tr><td>{name}</td><td>{what} Off: run with <code>--mem-profile</code>.</td></tr>\n");
        }
    }
    rows += &row(
        "goroutine?debug=2",
        "goroutine",
        "The stack of every guest running now (each serve request with its labels and how long it has run), as <code>wasmspy dump</code> prints it.",
    );
    rows += &row("cmdline", "cmdline", "The guest's command line.");
    Html(format!(
        "<!DOCTYPE html>\n<html><head><title>/debug/pprof/</title></head><body>\n\
         <h1>wasmspy: /debug/pprof/</h1>\n<p>Profiles of the running guest, for \
         <code>go tool pprof http://HOST/debug/pprof/profile</code>.</p>\n\
         <table>\n{rows}</table>\n</body></html>\n"
    ))
}

async fn cmdline(State(shared): State<Arc<Shared>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        shared.options.cmdline.join("\0"),
    )
        .into_response()
}

/// The number of seconds a request asks for, or why it is refused (as Go words it).
fn seconds(query: &HashMap<String, String>, max: u64) -> Result<u64, String> {
    let Some(text) = query.get("seconds") else {
        return Ok(30);
    };
    match text.parse::<i64>() {
        Ok(n) if n > 0 && n as u64 <= max => Ok(n as u64),
        Ok(n) if n > 0 => Err(format!(
            "profile duration exceeds the server's limit of {max} seconds"
        )),
        _ => Err(r#"invalid value for "seconds" - must be a positive integer"#.into()),
    }
}

/// Releases the CPU profile slot however the request ends (a client gone mid-wait too).
struct CpuSlot<'a>(&'a AtomicBool);

impl Drop for CpuSlot<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

async fn cpu_profile(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let seconds = match seconds(&query, shared.options.max_seconds) {
        Ok(s) => s,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    let format = match query.get("format").map(|f| f.parse::<Format>()) {
        None => Format::Pprof,
        Some(Ok(format)) => format,
        Some(Err(why)) => return error(StatusCode::BAD_REQUEST, &why),
    };
    if shared.cpu_busy.swap(true, Ordering::AcqRel) {
        return error(
            StatusCode::CONFLICT,
            "Could not enable CPU profiling: cpu profiling already in use",
        );
    }
    let _slot = CpuSlot(&shared.cpu_busy);
    profile_of_next(&shared, seconds, format).await
}

/// `/debug/wasmspy/window?seconds=N`: the CPU profile of the next N seconds (1 by default),
/// as `/debug/pprof/profile` has it, any number at once: what `wasmspy top` polls.
async fn window(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let seconds = match query.contains_key("seconds") {
        true => seconds(&query, shared.options.max_seconds),
        false => Ok(1),
    };
    match seconds {
        Ok(seconds) => profile_of_next(&shared, seconds, Format::Pprof).await,
        Err(why) => error(StatusCode::BAD_REQUEST, &why),
    }
}

/// `/debug/pprof/goroutine`: the stack of every guest running now, as text with `debug=1` or
/// `debug=2` (Go's layout: a block per guest), else as a pprof profile of `goroutine` counts.
async fn goroutines(shared: &Arc<Shared>, query: &HashMap<String, String>) -> Response {
    let text = match query.get("debug").map(String::as_str) {
        None | Some("0") => false,
        Some("1" | "2") => true,
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                r#"invalid value for "debug" - must be 0, 1 or 2"#,
            )
        }
    };
    let profiler = shared.profiler.clone();
    let dumped = tokio::task::spawn_blocking(move || profiler.dump_stacks(DUMP_WAIT)).await;
    match dumped {
        Ok(Ok(dump)) if text => (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            dump.render(),
        )
            .into_response(),
        Ok(Ok(dump)) => attachment(&dump.as_profile(), "goroutine"),
        Ok(Err(e)) => error(StatusCode::NOT_IMPLEMENTED, &format!("{e:#}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// How long a stack dump waits for the threads' answers: a thread answers when it next runs.
const DUMP_WAIT: Duration = Duration::from_millis(500);

/// The CPU profile of the next `seconds`, cut short when the guest exits.
async fn profile_of_next(shared: &Arc<Shared>, seconds: u64, format: Format) -> Response {
    let mark = shared.profiler.mark();
    let mut exited = shared.exited.clone();
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(seconds)) => {}
        _ = exited.wait_for(|&e| e) => {}
    }
    let profiler = shared.profiler.clone();
    let built = tokio::task::spawn_blocking(move || {
        attachment_as(&profiler.profile_since(&mark), "profile", format)
    })
    .await;
    built.unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))
}

async fn named_profile(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let default = match name.as_str() {
        "heap" => INUSE_SPACE,
        "allocs" => ALLOC_SPACE,
        "goroutine" => return goroutines(&shared, &query).await,
        _ => return error(StatusCode::NOT_FOUND, "Unknown profile"),
    };
    if query.contains_key("seconds") {
        return error(
            StatusCode::BAD_REQUEST,
            r#""seconds" parameter is not supported for this profile type"#,
        );
    }
    if !shared.profiler.profiles_memory() {
        return error(
            StatusCode::NOT_FOUND,
            "memory profiling is off: run wasmspy record with --mem-profile",
        );
    }
    let profiler = shared.profiler.clone();
    let built = tokio::task::spawn_blocking(move || match profiler.heap_profile() {
        Some(mut profile) => {
            // A garbage-collected guest's in-use values are unknown: its heap view stays on
            // allocations (see the profile's comments).
            if default == ALLOC_SPACE || profile.default_sample_type != ALLOC_SPACE {
                profile.default_sample_type = default;
            }
            attachment(&profile, &name)
        }
        None => error(StatusCode::NOT_FOUND, "memory profiling is off"),
    })
    .await;
    built.unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))
}
