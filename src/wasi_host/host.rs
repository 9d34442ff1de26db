//! The guest's store: its WASI context and the contexts of the proposals `-S` turns on, its
//! limits and fuel, each set as `wasmtime run` sets them from the same options.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use wasmtime::{Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_config::WasiConfigVariables;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};
use wasmtime_wasi_keyvalue::{WasiKeyValueCtx, WasiKeyValueCtxBuilder};
use wasmtime_wasi_tls::{WasiTlsCtx, WasiTlsCtxBuilder, WasiTlsCtxView, WasiTlsView};

use super::{log_prefix, ServedInstance, WasiConfig};
use crate::profiler::{Attachment, KeepsAttachment};

/// What a store's guest is given: WASI (preview 1, 2 and 3 over one context and resource
/// table, as `wasmtime run` has it) and the proposals `-S` turns on.
pub struct Host {
    pub(super) wasi: WasiP1Ctx,
    http: WasiHttpCtx,
    http_hooks: HttpHooks,
    pub(super) nn_wit: Option<wasmtime_wasi_nn::wit::WasiNnCtx>,
    pub(super) nn_witx: Option<wasmtime_wasi_nn::witx::WasiNnCtx>,
    pub(super) config_vars: Option<WasiConfigVariables>,
    pub(super) keyvalue: Option<WasiKeyValueCtx>,
    tls: Option<WasiTlsCtx>,
    limits: StoreLimits,
    /// What the store was made with: what to link and call. Shared: a server makes a store
    /// per request.
    pub(super) config: Arc<WasiConfig>,
    /// The profiler's, once the store is attached; never taken out (see below).
    attachment: Option<Attachment>,
}

// SAFETY: `attachment` is only ever set (by the profiler, through this), never read, taken or
// moved out, and no `Store<Host>` is taken apart with `into_data`: it is dropped with the
// store's data, before the rest of the store.
unsafe impl KeepsAttachment for Host {
    fn attachment(&mut self) -> &mut Option<Attachment> {
        &mut self.attachment
    }
}

impl Host {
    /// Its WASI preview 1 context, for a linker of preview 1 functions of its own.
    pub fn wasi(&mut self) -> &mut WasiP1Ctx {
        &mut self.wasi
    }

    /// What the store was made with.
    pub fn config(&self) -> &WasiConfig {
        &self.config
    }
}

impl WasiView for Host {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.wasi.ctx()
    }
}

impl WasiHttpView for Host {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: self.wasi.ctx().table,
            hooks: &mut self.http_hooks,
        }
    }
}

impl WasiTlsView for Host {
    fn tls(&mut self) -> WasiTlsCtxView<'_> {
        WasiTlsCtxView {
            ctx: self
                .tls
                .get_or_insert_with(|| WasiTlsCtxBuilder::new().build()),
            table: self.wasi.ctx().table,
        }
    }
}

/// `-S http-outgoing-body-buffer-chunks` and `-S http-outgoing-body-chunk-size`.
struct HttpHooks {
    buffer_chunks: usize,
    chunk_size: usize,
}

impl wasmtime_wasi_http::WasiHttpHooks for HttpHooks {
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        self.buffer_chunks
    }

    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        self.chunk_size
    }
}

/// A store whose guest is given `config`'s argv, environment, directories and WASI options,
/// with this process's stdio (unless `-S inherit-stdin=n` and the like; for a served instance,
/// as `wasmtime serve` gives it), and `-W`'s limits and fuel.
pub fn new_store(engine: &Engine, config: &WasiConfig) -> Result<Store<Host>> {
    build_store(engine, Arc::new(config.clone()), None)
}

/// A store for an instance `wasmtime serve` would make: `served`'s number in its environment,
/// no stdin, its stdout and stderr lines prefixed as `served` says.
pub fn new_served_store(
    engine: &Engine,
    config: &Arc<WasiConfig>,
    served: ServedInstance,
) -> Result<Store<Host>> {
    build_store(engine, config.clone(), Some(served))
}

fn build_store(
    engine: &Engine,
    config: Arc<WasiConfig>,
    served: Option<ServedInstance>,
) -> Result<Store<Host>> {
    // A served instance runs in the server's runtime: the process's own (two threads) would
    // only idle beside it.
    if served.is_none() {
        super::runtime()?;
    }
    let wasi = &config.wasi;
    let mut builder = WasiCtxBuilder::new();
    // As `wasmtime run`: file operations block the guest's thread rather than go through
    // tokio's blocking pool, a thread hand-off per call that made a program reading a file
    // with fgets four times slower (`benches/cli.rs`); not with `-W timeout`, which a guest
    // blocked in the host could not otherwise meet. Set before the directories are opened:
    // it is taken from the builder as each one is.
    builder.allow_blocking_current_thread(config.wasm.timeout.is_none());
    builder.args(&config.argv).envs(&config.env);
    match served {
        None => {
            if wasi.inherit_stdin.unwrap_or(true) {
                builder.inherit_stdin();
            }
            if wasi.inherit_stdout.unwrap_or(true) {
                builder.inherit_stdout();
            }
            if wasi.inherit_stderr.unwrap_or(true) {
                builder.inherit_stderr();
            }
        }
        Some(ServedInstance { id, log_prefix }) => {
            builder.env("INSTANCE_ID", id.to_string());
            if log_prefix {
                builder.stdout(log_prefix::stream(format!("stdout [{id}] :: "), false));
                builder.stderr(log_prefix::stream(format!("stderr [{id}] :: "), true));
            } else {
                builder.inherit_stdout().inherit_stderr();
            }
        }
    }
    for dir in &config.dirs {
        builder
            .preopened_dir(&dir.host, &dir.guest, FsPerms::ReadWrite)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("cannot open directory `{}`", dir.host.display()))?;
    }
    if let Some(cwd) = &wasi.cwd {
        builder.initial_cwd(cwd);
    }
    if wasi.listenfd == Some(true) {
        bail!("components do not support --listenfd");
    }
    if !wasi.tcplisten.is_empty() {
        bail!("components do not support --tcplisten");
    }
    if wasi.inherit_network == Some(true) {
        // As `wasmtime run`: the whole network, TCP and UDP with it.
        builder.inherit_network().allow_tcp(true).allow_udp(true);
    }
    if let Some(on) = wasi.allow_ip_name_lookup {
        builder.allow_ip_name_lookup(on);
    }
    if let Some(on) = wasi.tcp {
        builder.allow_tcp(on);
    }
    if let Some(on) = wasi.udp {
        builder.allow_udp(on);
    }
    if let Some(max) = wasi.max_random_size {
        builder.max_random_size(max);
    }
    let mut ctx = builder.build_p1();
    if let Some(max) = wasi.max_resources {
        ctx.ctx().table.set_max_capacity(max);
    }

    let mut http = WasiHttpCtx::new();
    if let Some(limit) = wasi.max_http_fields_size {
        http.set_field_size_limit(limit);
    }
    let host = Host {
        wasi: ctx,
        http,
        http_hooks: HttpHooks {
            buffer_chunks: wasi
                .http_outgoing_body_buffer_chunks
                .unwrap_or(wasmtime_wasi_http::p2::DEFAULT_OUTGOING_BODY_BUFFER_CHUNKS),
            chunk_size: wasi
                .http_outgoing_body_chunk_size
                .unwrap_or(wasmtime_wasi_http::p2::DEFAULT_OUTGOING_BODY_CHUNK_SIZE),
        },
        nn_wit: None,
        nn_witx: None,
        config_vars: (wasi.config == Some(true)).then(|| {
            WasiConfigVariables::from_iter(
                wasi.config_var
                    .iter()
                    .map(|v| (v.key.clone(), v.value.clone())),
            )
        }),
        keyvalue: (wasi.keyvalue == Some(true)).then(|| {
            WasiKeyValueCtxBuilder::new()
                .in_memory_data(
                    wasi.keyvalue_in_memory_data
                        .iter()
                        .map(|v| (v.key.clone(), v.value.clone())),
                )
                .build()
        }),
        tls: None,
        limits: store_limits(&config.wasm),
        config: config.clone(),
        attachment: None,
    };
    let mut store = Store::new(engine, host);
    if wasi.nn == Some(true) {
        let graphs: Vec<_> = wasi
            .nn_graph
            .iter()
            .map(|g| (g.format.clone(), g.dir.clone()))
            .collect();
        // Once for each binding (a module's witx, a component's wit): neither a backend nor a
        // registry can be shared.
        let preload = || {
            wasmtime_wasi_nn::preload(&graphs)
                .map_err(|e| anyhow!("{e:#}"))
                .context("cannot load the wasi-nn graphs")
        };
        let (backends, registry) = preload()?;
        let nn_wit = wasmtime_wasi_nn::wit::WasiNnCtx::new(backends, registry);
        let (backends, registry) = preload()?;
        let nn_witx = wasmtime_wasi_nn::witx::WasiNnCtx::new(backends, registry);
        let data = store.data_mut();
        data.nn_wit = Some(nn_wit);
        data.nn_witx = Some(nn_witx);
    }
    store.limiter(|host| &mut host.limits);
    if let Some(max) = wasi.max_resources {
        if let Some(table) = store.concurrent_resource_table() {
            table.set_max_capacity(max);
        }
    }
    if let Some(fuel) = wasi.hostcall_fuel {
        store.set_hostcall_fuel(fuel);
    }
    if let Some(max) = wasi.max_component_handles {
        store.set_max_component_handles(max);
    }
    if let Some(fuel) = config.wasm.fuel {
        store
            .set_fuel(fuel)
            .map_err(anyhow::Error::from)
            .context("-W fuel needs an engine that consumes fuel")?;
    }
    Ok(store)
}

/// `-W max-memory-size`, `max-table-elements`, `max-instances`, `max-tables`,
/// `max-memories` and `trap-on-grow-failure`.
fn store_limits(wasm: &wasmtime_cli_flags::WasmOptions) -> StoreLimits {
    let mut limits = StoreLimitsBuilder::new();
    if let Some(max) = wasm.max_memory_size {
        limits = limits.memory_size(max);
    }
    if let Some(max) = wasm.max_table_elements {
        limits = limits.table_elements(max);
    }
    if let Some(max) = wasm.max_instances {
        limits = limits.instances(max);
    }
    if let Some(max) = wasm.max_tables {
        limits = limits.tables(max);
    }
    if let Some(max) = wasm.max_memories {
        limits = limits.memories(max);
    }
    if let Some(on) = wasm.trap_on_grow_failure {
        limits = limits.trap_on_grow_failure(on);
    }
    limits.build()
}
