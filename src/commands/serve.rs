//! `wasmspy serve`: serve a `wasi:http` component as `wasmtime serve` does, every request
//! profiled on whichever worker thread runs it, its samples labeled with the request
//! (`request`, `method`, `path`, `instance`); the profile written when the server stops.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;
use wasmtime_wasi_http::handler::ProxyHandler;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::WasiBody;

use super::guest_args::GuestArgs;
use super::profiling_args::ProfilingArgs;
use crate::commands::instances::{Instances, RequestLabels, Reuse};
use crate::commands::interrupt::GuestEnded;
use crate::commands::outputs::{
    file_name, flush_periodically, print_warnings, start_server, write_on_signals, Outputs,
};
use crate::commands::perf_files;
use crate::commands::profiled::Profiled;
use crate::commands::request_headers::RequestHeaders;
use crate::commands::rewrite::Rewrite;
use crate::wasi_host::proxy::Proxy;
use crate::wasi_host::{self, Program};

/// `serve`'s: a server is profiled for as long as it runs, at what Go's net/http/pprof takes.
pub const SERVE_RATE: u32 = 100;

/// The heading of the options that are `wasmtime serve`'s alone.
const WASMTIME_SERVE: &str = "Options of `wasmtime serve`";

#[derive(Args)]
#[command(arg_required_else_help = true)]
pub struct ServeArgs {
    /// Where to write the CPU profile of every request (see `record -o`); may be given several
    /// times; `wasmspy.pb.gz` unless only the live server is asked for. Written when the
    /// server stops (Ctrl-C, SIGTERM), and every `--flush-every` seconds.
    #[arg(short, long, value_name = "PATH")]
    pub output: Vec<PathBuf>,

    /// Socket address for the web server to bind to.
    #[arg(long, value_name = "SOCKADDR", default_value = "0.0.0.0:8080", help_heading = WASMTIME_SERVE)]
    pub addr: std::net::SocketAddr,

    /// Socket address where, when connected to, will initiate a graceful
    /// shutdown: no new connection is taken, the requests in flight are answered, the profile
    /// is written and wasmspy exits with 0.
    ///
    /// Note that graceful shutdown is also supported on ctrl-c.
    #[arg(long, value_name = "SOCKADDR", help_heading = WASMTIME_SERVE)]
    pub shutdown_addr: Option<std::net::SocketAddr>,

    /// Disable log prefixes of wasi-http handlers.
    /// if unspecified, logs will be prefixed with 'stdout|stderr [{req_id}] :: '
    #[arg(long, help_heading = WASMTIME_SERVE)]
    pub no_logging_prefix: bool,

    /// Replace or add a request header before forwarding it to the component.
    ///
    /// The argument must have the form `name: value`. May be specified more
    /// than once. An argument beginning with `@` is treated as a file containing
    /// one header per line.
    #[arg(short = 'H', long = "header", value_name = "HEADER", help_heading = WASMTIME_SERVE)]
    pub headers: Vec<String>,

    /// Maximum number of concurrent requests that can be processed at any one
    /// point in time.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), help_heading = WASMTIME_SERVE)]
    pub max_concurrent_requests: Option<u32>,

    /// Maximum number of concurrent connections that can be held at any one
    /// point in time.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), help_heading = WASMTIME_SERVE)]
    pub max_concurrent_connections: Option<u32>,

    /// Maximum number of requests to send to a single component instance before
    /// dropping it.
    ///
    /// This defaults to 1 for WASIp2 components and 128 for WASIp3 components.
    #[arg(long, help_heading = WASMTIME_SERVE)]
    pub max_instance_reuse_count: Option<usize>,

    /// Maximum number of concurrent requests to send to a single component
    /// instance.
    ///
    /// This defaults to 1 for WASIp2 components and 16 for WASIp3 components.
    /// Note that setting it to more than 1 will have no effect for WASIp2
    /// components since they cannot be called concurrently.
    #[arg(long, help_heading = WASMTIME_SERVE)]
    pub max_instance_concurrent_reuse_count: Option<usize>,

    /// Time to hold an idle component instance for possible reuse before
    /// dropping it.
    ///
    /// A number with no suffix or with an `s` suffix is interpreted as seconds;
    /// other accepted suffixes include `ms` (milliseconds), `us` or `μs`
    /// (microseconds), and `ns` (nanoseconds).
    #[arg(long, default_value = "1s", value_parser = parse_duration, help_heading = WASMTIME_SERVE)]
    pub idle_instance_timeout: std::time::Duration,

    #[command(flatten)]
    pub profiling: ProfilingArgs,

    #[command(flatten)]
    pub guest: GuestArgs,

    /// The `wasi:http/proxy` component to serve.
    #[arg(value_name = "COMPONENT")]
    pub component: PathBuf,
}

impl ServeArgs {
    /// Where the CPU profile goes, if one is wanted: `wasmspy.pb.gz` unless nothing but a
    /// memory profile or the live server is asked for.
    pub fn cpu_outputs(&self) -> Vec<PathBuf> {
        self.profiling.default_output(&self.output)
    }
}

/// Refuses the epoch sampler on the CPU clock: its ticks follow the CPU time of one thread,
/// and requests run on all the server's threads, so those on the others would be sampled only
/// while that one is busy, not in proportion to their own CPU.
fn refuse_one_threads_clock(profiler: &crate::Profiler, args: &ProfilingArgs) -> Result<()> {
    if profiler.sampler_name() != "epoch" || args.clock != crate::Clock::Cpu {
        return Ok(());
    }
    let instead = match args.sampler {
        // Auto fell back to epochs: the signal sampler cannot sample this target here.
        crate::SamplerKind::Auto => "use --clock wall",
        _ => "use the signal sampler (the default), or --clock wall",
    };
    anyhow::bail!(
        "--sampler epoch with --clock cpu cannot profile a server: its ticks follow one thread's \
         CPU time, and requests run on all the server's threads; {instead}"
    )
}

/// `--idle-instance-timeout`: a duration as Wasmtime's options write one.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    use wasmtime_cli_flags::opt::WasmtimeOptionValue;
    std::time::Duration::parse(Some(s)).map_err(|e| e.to_string())
}

pub fn serve(mut args: ServeArgs) -> Result<i32> {
    args.guest.configure()?;
    // As `wasmtime serve`: wasi:http and the component model are what it serves.
    if args.guest.wasmtime.wasi.http.replace(true) == Some(false) {
        anyhow::bail!("wasi-http is required for the serve command, and must not be disabled");
    }
    if args.guest.wasmtime.wasm.component_model.replace(true) == Some(false) {
        anyhow::bail!("components are required for the serve command, and must not be disabled");
    }
    if args.guest.wasmtime.debug.coredump.is_some() {
        anyhow::bail!("-D coredump: wasmspy serve writes no core dumps");
    }
    let outputs = Arc::new(Outputs::create(
        &args.cpu_outputs(),
        args.profiling.mem_profile.as_deref(),
        args.profiling.format,
    )?);
    let read = wasi_host::read_program_file(&args.component)?;
    let wasm = read.wasm.clone();
    let name = file_name(&args.component);
    if !wasmparser::Parser::is_component(&wasm) {
        anyhow::bail!("`{name}` is a core module: wasmspy serve takes a wasi:http/proxy component");
    }
    let Profiled {
        engine,
        mut profiler,
        counts,
        rewritten,
    } = Profiled::new(
        &args.profiling,
        &mut args.guest,
        SERVE_RATE,
        &outputs,
        engine_config,
        &read,
        &name,
    )?;
    refuse_one_threads_clock(&profiler, &args.profiling)?;
    let program = rewritten
        .compile(&engine, &wasm)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("cannot compile `{}`", args.component.display()))?;
    let Program::Component(component) = &program else {
        unreachable!("checked to be a component")
    };
    profiler.module_path(&name, &args.component);
    let registered = rewritten.register(&profiler, &name, &program, &wasm)?;
    print_warnings(&profiler.handle());
    let _perf_files = perf_files::write(&args.profiling, &args.guest, &profiler.handle())?;
    let argv = vec![name.clone()];
    // As `wasmtime serve`: the proxy world's interfaces unless `-S cli` asks for all of WASI.
    let wasi = args.guest.wasi_config(argv.clone())?;
    let headers = RequestHeaders::parse(&args.headers)?;
    let proxy = Proxy::new(component, wasi, !args.no_logging_prefix, |linker| {
        profiler.define_runtime_probe(linker, component)?;
        match rewritten.allocators {
            Rewrite::Component(_) => profiler.define_component_allocator_hook(linker),
            _ => Ok(()),
        }
    })
    .with_context(|| format!("cannot serve `{name}`"))?;

    let reuse = Reuse::new(
        &proxy,
        args.max_instance_reuse_count,
        args.max_instance_concurrent_reuse_count,
        args.idle_instance_timeout,
    );
    // As `wasmtime serve`'s, a runtime of its own: its threads, which run the instances
    // wherever its scheduler puts them, are all sampled.
    let runtime = {
        let profiler = profiler.handle();
        tokio::runtime::Builder::new_multi_thread()
            .enable_time()
            .enable_io()
            .on_thread_start(move || {
                if let Err(e) = profiler.sample_this_thread() {
                    eprintln!("wasmspy: warning: a thread of the server is not sampled: {e:#}");
                }
            })
            .build()
            .context("cannot start the server's runtime")?
    };
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(args.addr))
        .with_context(|| format!("cannot listen at {}", args.addr))?;
    let shutdown = match args.shutdown_addr {
        Some(addr) => Some(
            runtime
                .block_on(tokio::net::TcpListener::bind(addr))
                .with_context(|| format!("cannot listen at --shutdown-addr {addr}"))?,
        ),
        None => None,
    };
    write_on_signals(
        profiler.handle(),
        outputs.clone(),
        GuestEnded::default(),
        counts.clone(),
    )?;
    profiler.start()?;
    // After the start: a window asked for at once counts its seconds from samples' first.
    let server = match &args.profiling.pprof_addr {
        Some(addr) => Some(start_server(
            profiler.handle(),
            addr,
            &args.profiling,
            &argv,
        )?),
        None => None,
    };
    if let Some(every) = args.profiling.flush_every {
        flush_periodically(outputs.clone(), profiler.handle(), every)?;
    }
    eprintln!(
        "Serving HTTP on http://{}/",
        listener
            .local_addr()
            .context("cannot read the bound address")?
    );
    // `-W timeout`, as `wasmtime serve` has it: a request, and the work after its response,
    // may take that long; the guest yields at epoch checks so that the time is kept while it
    // computes, a thread advancing the epoch as Wasmtime's does. With either sampler: the epoch
    // sampler (on the wall clock here) takes more samples for the extra epochs, each valued by
    // the time measured since the last, so they split the time rather than add to it.
    let timeout = args.guest.wasmtime.wasm.timeout;
    let _epochs = timeout.map(|timeout| {
        profiler.handle().yield_at_epochs();
        EpochTicker::start(&engine, timeout)
    });
    // Only what a shutdown waits for is tracked: each token taken and dropped is two atomic
    // writes to a counter every worker shares, four a request.
    let tracker = shutdown.is_some().then(TaskTracker::new);
    let instances = Instances::new(
        proxy,
        profiler.handle(),
        reuse,
        timeout.unwrap_or(Duration::MAX),
        tracker.clone(),
    );
    let requests = Arc::new(Requests {
        handler: ProxyHandler::new(instances),
        next: AtomicU64::new(1),
        headers,
        slots: args
            .max_concurrent_requests
            .map(|n| Semaphore::new(n as usize)),
        tracker,
    });
    let connections = Arc::new(Semaphore::new(
        args.max_concurrent_connections
            .map_or(Semaphore::MAX_PERMITS, |n| n as usize),
    ));
    // An accept error ends the loop, and a connection to the shutdown address (the requests in
    // flight answered first); signals end the process from their own thread.
    let accepted = runtime.block_on(async {
        let serving = accept_loop(listener, connections, requests.clone());
        match shutdown {
            Some(shutdown) => tokio::select! {
                accepted = serving => accepted,
                _ = shutdown.accept() => {
                    eprintln!("wasmspy: shutting down: answering the requests in flight");
                    if let Some(tracker) = &requests.tracker {
                        tracker.close();
                        tracker.wait().await;
                    }
                    Ok(())
                }
            },
            None => serving.await,
        }
    });
    let profile = profiler.stop();
    if let Some(counts) = &counts {
        counts.print(&profiler.handle());
    }
    let saved = outputs.save(&profiler.handle(), &profile);
    rewritten.keep_build_ids(&profiler.handle(), &registered);
    if let Some(server) = server {
        server.stop();
    }
    accepted?;
    saved.map(|()| 0)
}

/// The engine settings of Wasmtime's options, as `wasmtime serve` makes them: the pooling
/// allocator by default where the machine lets the process reserve its address space. With
/// `allocator_rewrite` (a memory profile), room for what the rewrite adds to a module: a memory
/// (its flags) and a table (its hook), unless the options say otherwise.
fn engine_config(
    wasmtime: &mut wasmtime_cli_flags::CommonOptions,
    allocator_rewrite: bool,
) -> Result<wasmtime::Config> {
    if allocator_rewrite {
        wasmtime
            .opts
            .pooling_max_memories_per_module
            .get_or_insert(2);
        wasmtime.opts.pooling_max_tables_per_module.get_or_insert(2);
    }
    let pooling = wasi_host::pooling_available().then_some(true);
    wasmtime.config(pooling).map_err(anyhow::Error::from)
}

/// As `wasmtime serve` with `-W timeout`: the epoch advanced every 50 ms (or the timeout, if
/// shorter), until dropped.
struct EpochTicker {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// `wasmtime serve`'s period.
const EPOCH_PERIOD: Duration = Duration::from_millis(50);

impl EpochTicker {
    fn start(engine: &wasmtime::Engine, timeout: Duration) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (engine, stopped) = (engine.clone(), stop.clone());
        let period = EPOCH_PERIOD.min(timeout);
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(period);
                engine.increment_epoch();
            }
        });
        EpochTicker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What every request needs: the instances, the next request's number.
struct Requests {
    handler: ProxyHandler<Instances>,
    next: AtomicU64,
    /// `-H`: set on every request.
    headers: RequestHeaders,
    /// `--max-concurrent-requests`: a permit per request being answered.
    slots: Option<Semaphore>,
    /// With `--shutdown-addr`, every request being answered, and every instance (which may go
    /// on writing a body after the response's head is sent): what a shutdown waits for.
    tracker: Option<TaskTracker>,
}

/// Serves each connection on a task of its own, at most as many at once as `connections` has
/// permits (`--max-concurrent-connections`).
async fn accept_loop(
    listener: tokio::net::TcpListener,
    connections: Arc<Semaphore>,
    requests: Arc<Requests>,
) -> Result<()> {
    loop {
        let permit = connections
            .clone()
            .acquire_owned()
            .await
            .context("the connection limit was closed")?;
        let (client, _) = listener
            .accept()
            .await
            .context("cannot accept a connection")?;
        // As `wasmtime serve`: a guest's small writes (an event stream's chunks) are sent at
        // once, not held back by Nagle's algorithm (up to 40 ms on Linux). A socket that
        // refuses serves as it is.
        let _ = client.set_nodelay(true);
        let requests = requests.clone();
        tokio::task::spawn(async move {
            let _permit = permit;
            // Borrowed by each request's future, as `wasmtime serve` does: a reference count
            // shared by every worker is written twice a connection, not twice a request.
            let requests = &requests;
            let service = hyper::service::service_fn(move |request| {
                let tracked = requests.tracker.as_ref().map(TaskTracker::token);
                async move {
                    let _tracked = tracked;
                    Ok::<_, Infallible>(requests.handle(request).await)
                }
            });
            if let Err(e) = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(client), service)
                .await
            {
                eprintln!("wasmspy: error: {e}");
            }
        });
    }
}

impl Requests {
    /// The guest's response, or a 500 saying why there is none (as `wasmtime serve` answers).
    async fn handle(
        &self,
        request: hyper::Request<hyper::body::Incoming>,
    ) -> hyper::Response<WasiBody> {
        let _slot = match &self.slots {
            Some(slots) => slots.acquire().await.ok(),
            None => None,
        };
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        match self.respond(number, request).await {
            Ok(response) => response,
            Err(e) => {
                eprintln!("wasmspy: error: request {number}: {e:#}");
                let body = Full::new(bytes::Bytes::from("500 Internal Server Error\n"))
                    .map_err(|never| match never {})
                    .boxed_unsync();
                let mut response = hyper::Response::new(body);
                *response.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
                response
            }
        }
    }

    async fn respond(
        &self,
        number: u64,
        mut request: hyper::Request<hyper::body::Incoming>,
    ) -> Result<hyper::Response<WasiBody>> {
        self.headers.apply(request.headers_mut());
        let labels = RequestLabels {
            number,
            method: request.method().clone(),
            uri: request.uri().clone(),
        };
        let request = request.map(|body| body.map_err(Into::into).boxed_unsync());
        Ok(self.handler.handle(labels, request).await?)
    }
}
