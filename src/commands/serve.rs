//! `wasmspy serve`: serve a `wasi:http/proxy` component as `wasmtime serve` does, every
//! request profiled on whichever worker thread runs it, its samples labeled with the request
//! (`request`, `method`, `path`); the profile written when the server stops.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use wasmspy::wasi_host::proxy::Proxy;
use wasmspy::wasi_host::{self, Program, WasiOptions};
use wasmspy::ProfilerHandle;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::cli::{ServeArgs, SERVE_RATE};
use crate::commands::interrupt::GuestEnded;
use crate::commands::outputs::{
    file_name, flush_periodically, print_warnings, start_server, write_on_signals, Outputs,
};
use crate::commands::perf_files;
use crate::commands::profiled::Profiled;
use crate::commands::rewrite::Rewrite;

pub fn serve(args: ServeArgs) -> Result<i32> {
    let outputs = Arc::new(Outputs::create(
        &args.cpu_outputs(),
        args.profiling.mem_profile.as_deref(),
        args.profiling.format,
    )?);
    let wasm: Arc<[u8]> = wasi_host::read_program(&args.component)?.into();
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
        SERVE_RATE,
        &outputs,
        wasi_host::serve_engine_config,
        &wasm,
        &name,
    )?;
    let Program::Component(component) = wasi_host::compile(&engine, rewritten.code(&wasm))
        .map_err(anyhow::Error::from)
        .with_context(|| format!("cannot compile `{}`", args.component.display()))?
    else {
        unreachable!("checked to be a component")
    };
    match &rewritten {
        Rewrite::Component(r) => profiler.add_rewritten_component(&name, &component, &wasm, r)?,
        _ => profiler.add_component(&name, &component, &wasm)?,
    }
    print_warnings(&profiler.handle());
    let _perf_files = perf_files::write(&args.profiling, &profiler.handle())?;
    let argv = vec![name.clone()];
    // As `wasmtime serve`: the proxy world's interfaces unless `-S cli` asks for all of WASI.
    let mut wasi = args.guest.wasi_config(argv.clone());
    wasi.options = args.guest.wasi_options_over(WasiOptions {
        cli: false,
        http: true,
        ..WasiOptions::default()
    });
    if !wasi.options.http {
        anyhow::bail!("wasi-http is required for the serve command, and must not be disabled");
    }
    let proxy = Proxy::new(&component, wasi, |linker| match rewritten {
        Rewrite::Component(_) => profiler.define_component_allocator_hook(linker),
        _ => Ok(()),
    })
    .with_context(|| format!("cannot serve `{name}`"))?;

    let runtime = wasi_host::runtime()?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(args.addr))
        .with_context(|| format!("cannot listen at {}", args.addr))?;
    let server = match &args.profiling.pprof_addr {
        Some(addr) => Some(start_server(
            profiler.handle(),
            addr,
            &args.profiling,
            &argv,
        )?),
        None => None,
    };
    write_on_signals(
        profiler.handle(),
        outputs.clone(),
        GuestEnded::default(),
        counts.clone(),
    )?;
    profiler.start()?;
    if let Some(every) = args.profiling.flush_every {
        flush_periodically(outputs.clone(), profiler.handle(), every)?;
    }
    eprintln!(
        "Serving HTTP on http://{}/",
        listener
            .local_addr()
            .context("cannot read the bound address")?
    );
    let requests = Arc::new(Requests {
        proxy,
        profiler: profiler.handle(),
        next: AtomicU64::new(1),
        unprofiled: AtomicBool::new(false),
    });
    let accepted = runtime.block_on(accept_loop(listener, requests));
    // Only an accept error ends the loop; signals end the process from their own thread.
    let profile = profiler.stop();
    if let Some(counts) = &counts {
        counts.print(&profiler.handle());
    }
    let saved = outputs.save(&profiler.handle(), &profile);
    if let Some(server) = server {
        server.stop();
    }
    accepted?;
    saved.map(|()| 0)
}

/// What every request needs: the component, the profiler, the next request's number.
struct Requests {
    proxy: Proxy,
    profiler: ProfilerHandle,
    next: AtomicU64,
    /// Whether a request could not be profiled (said once).
    unprofiled: AtomicBool,
}

async fn accept_loop(listener: tokio::net::TcpListener, requests: Arc<Requests>) -> Result<()> {
    loop {
        let (client, _) = listener
            .accept()
            .await
            .context("cannot accept a connection")?;
        let requests = requests.clone();
        tokio::task::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let requests = requests.clone();
                async move { Ok::<_, Infallible>(requests.handle(request).await) }
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
    ) -> hyper::Response<HyperOutgoingBody> {
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
        request: hyper::Request<hyper::body::Incoming>,
    ) -> Result<hyper::Response<HyperOutgoingBody>> {
        let mut store = self.proxy.new_store()?;
        let path = request.uri().path().to_string();
        let labels = [
            ("request", number.to_string()),
            ("method", request.method().to_string()),
            ("path", path),
        ];
        let labels = labels.each_ref().map(|(k, v)| (*k, v.as_str()));
        if let Err(e) = self.profiler.attach_with_labels(&mut store, &labels) {
            // Served all the same, as `wasmtime serve` would.
            if !self.unprofiled.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "wasmspy: warning: request {number} and others like it not profiled: {e:#}"
                );
            }
        }
        let profiler = self.profiler.clone();
        self.proxy
            .handle(store, request, |call| {
                tokio::task::spawn(profiler.sampled(call))
            })
            .await
    }
}
