//! Runs a WASI command the way `wasmtime run` does: a preview 1 module (`wasi_unstable`,
//! preview 0, too) or a component exporting `wasi:cli/run` (WASI preview 2, with outgoing
//! `wasi:http` on `-S http`): argv, environment, preopened directories, inherited stdio, exit
//! codes and traps; file and stdio calls made on the guest's own thread.

pub mod proxy;
mod unknown_imports;

use std::path::{Path, PathBuf};

use self::unknown_imports::Stub;

use anyhow::{anyhow, bail, Context, Result};
use wasmtime::component::{Component, Linker as ComponentLinker};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, Linker, Module, PoolingAllocationConfig, Store,
    Trap,
};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::p2::bindings::{Command, LinkOptions};
use wasmtime_wasi::{p0, p2, WasiCtxView, WasiView};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::profiler::Interrupted;

/// A host directory the guest sees at `guest`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirMount {
    pub host: PathBuf,
    pub guest: String,
}

impl std::str::FromStr for DirMount {
    type Err = String;

    /// `HOST[::GUEST]`, as `wasmtime run --dir` takes it.
    fn from_str(s: &str) -> Result<Self, String> {
        let (host, guest) = s.split_once("::").unwrap_or((s, s));
        if host.is_empty() || guest.is_empty() {
            return Err(format!("expected HOST[::GUEST], got `{s}`"));
        }
        Ok(DirMount {
            host: host.into(),
            guest: guest.into(),
        })
    }
}

/// What to do with imports that neither WASI nor the embedder provides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnknownImports {
    /// Refuse to instantiate (Wasmtime's default).
    #[default]
    Reject,
    /// Define them as functions that trap when called.
    Trap,
    /// Define them as functions returning zero values (and default globals, tables, memories).
    DefaultValues,
}

/// The `-S` options of `wasmtime run` that wasmspy takes, as it spells and reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WasiOptions {
    /// `cli`: link WASI at all (on by default).
    pub cli: bool,
    /// `http`: outgoing `wasi:http` (components only).
    pub http: bool,
    /// `inherit-network`: the host's network, TCP and UDP included.
    pub inherit_network: bool,
    /// `allow-ip-name-lookup`: `wasi:sockets/ip-name-lookup`.
    pub allow_ip_name_lookup: Option<bool>,
    pub tcp: Option<bool>,
    pub udp: Option<bool>,
    /// `network-error-code`: the unstable `wasi:sockets` function of that name.
    pub network_error_code: bool,
    /// `inherit-env`: the whole host environment, as `--inherit-env`.
    pub inherit_env: bool,
}

impl Default for WasiOptions {
    fn default() -> Self {
        WasiOptions {
            cli: true,
            http: false,
            inherit_network: false,
            allow_ip_name_lookup: None,
            tcp: None,
            udp: None,
            network_error_code: false,
            inherit_env: false,
        }
    }
}

impl WasiOptions {
    pub const NAMES: &'static str = "cli, http, inherit-network, allow-ip-name-lookup, tcp, udp, network-error-code, inherit-env";

    /// Refuses what a core module cannot be given, as `wasmtime run` does.
    pub fn check_for_module(&self) -> Result<()> {
        if self.http {
            bail!("cannot enable wasi-http for core wasm modules");
        }
        Ok(())
    }

    /// Takes one `-S` value: `NAME[=y|n]`, several separated by commas.
    pub fn set(&mut self, spec: &str) -> Result<(), String> {
        for item in spec.split(',') {
            let (name, value) = match item.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (item, None),
            };
            let on = match value {
                None | Some("y" | "yes" | "true") => true,
                Some("n" | "no" | "false") => false,
                Some(other) => {
                    return Err(format!(
                        "unknown boolean flag `{other}`, only yes,no,<nothing> accepted"
                    ))
                }
            };
            match name {
                "cli" | "common" => self.cli = on,
                "http" => self.http = on,
                "inherit-network" => self.inherit_network = on,
                "allow-ip-name-lookup" => self.allow_ip_name_lookup = Some(on),
                "tcp" => self.tcp = Some(on),
                "udp" => self.udp = Some(on),
                "network-error-code" => self.network_error_code = on,
                "inherit-env" => self.inherit_env = on,
                _ => {
                    return Err(format!(
                        "unknown or unsupported -S option `{name}` (wasmspy takes: {})",
                        Self::NAMES
                    ))
                }
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Default)]
pub struct WasiConfig {
    /// argv, including argv[0].
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub dirs: Vec<DirMount>,
    pub unknown_imports: UnknownImports,
    pub options: WasiOptions,
}

/// What a store's guest is given: WASI (preview 1 and 2 over one context and resource table,
/// as `wasmtime run` has it) and, with `-S http`, outgoing `wasi:http`.
pub struct Host {
    wasi: WasiP1Ctx,
    http: Option<WasiHttpCtx>,
    options: WasiOptions,
}

impl Host {
    pub fn new(wasi: WasiP1Ctx, options: WasiOptions) -> Self {
        Host {
            wasi,
            http: None,
            options,
        }
    }

    /// Its WASI preview 1 context, for a linker of preview 1 functions of its own.
    pub fn wasi(&mut self) -> &mut WasiP1Ctx {
        &mut self.wasi
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
            ctx: self.http.get_or_insert_with(WasiHttpCtx::new),
            table: self.wasi.ctx().table,
            hooks: wasmtime_wasi_http::default_hooks(),
        }
    }
}

/// A program `wasmtime run` runs.
pub enum Program {
    Module(Module),
    Component(Component),
}

/// How a guest run ended.
#[derive(Debug)]
pub enum Exit {
    /// `_start` returned, or the guest called `proc_exit(code)`.
    Code(i32),
    /// A Wasm trap; the error carries the guest backtrace.
    Trap(anyhow::Error),
    Interrupted,
    /// Anything else: a host function failed, or the module could not be instantiated.
    Error(anyhow::Error),
}

/// The engine settings `wasmtime run` uses: Wasmtime's defaults.
pub fn engine_config() -> Config {
    Config::new()
}

/// The engine settings `wasmtime serve` uses: Wasmtime's defaults, with the pooling allocator
/// (instances, memories and fiber stacks reused from one reservation: a new instance per
/// request costs less) where the machine lets the process reserve its address space, as
/// `wasmtime serve` checks. With `allocator_rewrite` (a memory profile), room for what the
/// rewrite adds to a module: a memory (its flags) and a table (its hook).
pub fn serve_engine_config(allocator_rewrite: bool) -> Config {
    let mut config = Config::new();
    if pooling_available() {
        let mut pooling = PoolingAllocationConfig::default();
        if allocator_rewrite {
            pooling.max_memories_per_module(2);
            pooling.max_tables_per_module(2);
        }
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
    }
    config
}

/// Whether a 4 TiB reservation (42 bits of address space) succeeds: the test `wasmtime serve`
/// makes before it turns the pooling allocator on.
fn pooling_available() -> bool {
    const BITS: u32 = 42;
    let mut config = Config::new();
    config.wasm_memory64(true);
    config.memory_reservation(1 << BITS);
    let Ok(engine) = Engine::new(&config) else {
        return false;
    };
    let mut store = Store::new(&engine, ());
    let ty = wasmtime::MemoryType::new64(0, Some(1 << (BITS - 16)));
    wasmtime::Memory::new(&mut store, ty).is_ok()
}

/// Reads a module or component in binary or text form, refusing what is neither.
pub fn read_program(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    if bytes.starts_with(b"\0asm") {
        return Ok(bytes);
    }
    let text = std::str::from_utf8(&bytes).ok().filter(|t| {
        let t = t.trim_start();
        t.starts_with('(') || t.starts_with(";;")
    });
    match text {
        Some(text) => wat::parse_str(text)
            .map_err(|e| anyhow!("`{}`: invalid WebAssembly text: {e}", path.display())),
        None => bail!(
            "`{}` is not a WebAssembly module or component (no `\\0asm` header, and not WebAssembly text)",
            path.display()
        ),
    }
}

/// Compiles a module or component (`wasm` in binary form).
pub fn compile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Program> {
    Ok(if wasmparser::Parser::is_component(wasm) {
        Program::Component(Component::new(engine, wasm)?)
    } else {
        Program::Module(Module::new(engine, wasm)?)
    })
}

/// A store whose WASI context gives the guest `config`'s argv, environment and directories,
/// and this process's stdio.
pub fn new_store(engine: &Engine, config: &WasiConfig) -> Result<Store<Host>> {
    runtime()?;
    let mut builder = WasiCtxBuilder::new();
    // As `wasmtime run`: file operations block the guest's thread rather than go through
    // tokio's blocking pool, a thread hand-off per call that made a program reading a file
    // with fgets four times slower (`benches/cli.rs`). Set before the directories are opened:
    // it is taken from the builder as each one is.
    builder.allow_blocking_current_thread(true);
    builder.inherit_stdio().args(&config.argv).envs(&config.env);
    for dir in &config.dirs {
        builder
            .preopened_dir(&dir.host, &dir.guest, FsPerms::ReadWrite)
            .map_err(anyhow::Error::from)
            .with_context(|| format!("cannot open directory `{}`", dir.host.display()))?;
    }
    let options = &config.options;
    if options.inherit_network {
        // As `wasmtime run`: the whole network, TCP and UDP with it.
        builder.inherit_network().allow_tcp(true).allow_udp(true);
    }
    if let Some(on) = options.allow_ip_name_lookup {
        builder.allow_ip_name_lookup(on);
    }
    if let Some(on) = options.tcp {
        builder.allow_tcp(on);
    }
    if let Some(on) = options.udp {
        builder.allow_udp(on);
    }
    let host = Host::new(builder.build_p1(), options.clone());
    Ok(Store::new(engine, host))
}

/// Instantiates `module` with WASI preview 1 and calls its `_start`.
pub fn run(store: &mut Store<Host>, module: &Module, unknown: UnknownImports) -> Exit {
    run_with(store, module, unknown, |_, _| Ok(()))
}

/// Runs a module as [`run`] does, a component as [`run_component`] does.
pub fn run_program(store: &mut Store<Host>, program: &Program, unknown: UnknownImports) -> Exit {
    match program {
        Program::Module(module) => run(store, module, unknown),
        Program::Component(component) => run_component(store, component, unknown),
    }
}

/// As [`run`], with `setup` called on the instance before `_start` (to fill in what the host
/// provides after instantiation, such as the allocator hook of a rewritten module).
///
/// As `wasmtime run`: in a multi-threaded tokio runtime, on this thread, the guest instantiated
/// and called asynchronously (on a fiber) with WASI's asynchronous bindings. Its synchronous
/// bindings enter tokio on every host call: 16–34 % more time for a program making millions
/// of `fd_write`s (`benches/cli.rs`).
pub fn run_with(
    store: &mut Store<Host>,
    module: &Module,
    unknown: UnknownImports,
    setup: impl FnOnce(&mut Store<Host>, &wasmtime::Instance) -> wasmtime::Result<()>,
) -> Exit {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => return Exit::Error(e),
    };
    runtime.block_on(async {
        let instance = match instantiate(store, module, unknown).await {
            Ok(instance) => instance,
            Err(e) => return classify(e),
        };
        if let Err(e) = setup(store, &instance) {
            return classify(e);
        }
        // A reactor's `_initialize` first, then the command's default export, named "" or
        // `_start`.
        if let Some(Err(e)) = call(store, &instance, "_initialize").await {
            return classify(e);
        }
        let main = match call(store, &instance, "").await {
            Some(result) => Some(result),
            None => call(store, &instance, "_start").await,
        };
        match main {
            Some(Ok(())) => Exit::Code(0),
            Some(Err(e)) => classify(e),
            None => Exit::Error(anyhow!(
                "the module exports no `_start` function: it is not a WASI command"
            )),
        }
    })
}

/// Instantiates `component` with WASI preview 2 (and outgoing `wasi:http` with `-S http`) and
/// calls its `wasi:cli/run`, as [`run_with`] does a module: a `run` that returns an error
/// exits with 1, as `wasmtime run` has it.
pub fn run_component(
    store: &mut Store<Host>,
    component: &Component,
    unknown: UnknownImports,
) -> Exit {
    run_component_with(store, component, unknown, |_| Ok(()))
}

/// As [`run_component`], with `define` adding to the linker what the host provides beyond
/// WASI (such as the allocator hook of a rewritten component).
pub fn run_component_with(
    store: &mut Store<Host>,
    component: &Component,
    unknown: UnknownImports,
    define: impl FnOnce(&mut ComponentLinker<Host>) -> wasmtime::Result<()>,
) -> Exit {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => return Exit::Error(e),
    };
    runtime.block_on(async {
        let result = async {
            let linker = component_linker(component, unknown, &store.data().options, define)?;
            let instance = linker.instantiate_async(&mut *store, component).await?;
            let command = Command::new(&mut *store, &instance)?;
            command.wasi_cli_run().call_run(&mut *store).await
        };
        match result.await {
            Ok(Ok(())) => Exit::Code(0),
            Ok(Err(())) => Exit::Code(1),
            Err(e) => classify(e),
        }
    })
}

fn component_linker(
    component: &Component,
    unknown: UnknownImports,
    options: &WasiOptions,
    define: impl FnOnce(&mut ComponentLinker<Host>) -> wasmtime::Result<()>,
) -> wasmtime::Result<ComponentLinker<Host>> {
    let mut linker = ComponentLinker::new(component.engine());
    define(&mut linker)?;
    add_wasi_to_component_linker(&mut linker, options)?;
    define_unknown_component_imports(&mut linker, component, unknown)?;
    Ok(linker)
}

/// WASI preview 2 unless `-S cli=n`, and outgoing `wasi:http` with `-S http`.
fn add_wasi_to_component_linker(
    linker: &mut ComponentLinker<Host>,
    options: &WasiOptions,
) -> wasmtime::Result<()> {
    if options.cli {
        let mut link = LinkOptions::default();
        link.network_error_code(options.network_error_code);
        p2::add_to_linker_with_options_async(linker, &link)?;
    }
    if options.http {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    }
    Ok(())
}

fn define_unknown_component_imports(
    linker: &mut ComponentLinker<Host>,
    component: &Component,
    unknown: UnknownImports,
) -> wasmtime::Result<()> {
    match unknown {
        UnknownImports::Reject => Ok(()),
        UnknownImports::Trap => unknown_imports::define_unknown(linker, component, Stub::Trap),
        UnknownImports::DefaultValues => {
            unknown_imports::define_unknown(linker, component, Stub::ZeroValues)
        }
    }
}

/// The tokio runtime guests run in, one for the process, as `wasmtime run` has. Started by
/// [`new_store`], before a profiler starts, and never shut down: its threads' start and end
/// are not the guest's time.
pub fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::LazyLock<std::io::Result<tokio::runtime::Runtime>> =
        std::sync::LazyLock::new(|| {
            tokio::runtime::Builder::new_multi_thread()
                .enable_time()
                .enable_io()
                .build()
        });
    RUNTIME
        .as_ref()
        .map_err(|e| anyhow!("cannot start the WASI host's runtime: {e}"))
}

/// Calls the export `name` of type [] -> [], if there is one.
async fn call(
    store: &mut Store<Host>,
    instance: &wasmtime::Instance,
    name: &str,
) -> Option<wasmtime::Result<()>> {
    let func = instance.get_func(&mut *store, name)?;
    Some(match func.typed::<(), ()>(&*store) {
        Ok(func) => func.call_async(&mut *store, ()).await,
        Err(e) => Err(e),
    })
}

async fn instantiate(
    store: &mut Store<Host>,
    module: &Module,
    unknown: UnknownImports,
) -> wasmtime::Result<wasmtime::Instance> {
    store
        .data()
        .options
        .check_for_module()
        .map_err(wasmtime::Error::from_anyhow)?;
    let mut linker = Linker::new(module.engine());
    if store.data().options.cli {
        p0::add_to_linker_async(&mut linker, Host::wasi)?;
        p1::add_to_linker_async(&mut linker, Host::wasi)?;
    }
    match unknown {
        UnknownImports::Reject => {}
        UnknownImports::Trap => linker.define_unknown_imports_as_traps(module)?,
        UnknownImports::DefaultValues => {
            linker.define_unknown_imports_as_default_values(&mut *store, module)?
        }
    }
    linker
        .instantiate_async(&mut *store, module)
        .await
        .map_err(|e| {
            if unknown == UnknownImports::Reject && format!("{e:#}").contains("unknown import") {
                e.context(
                    "use --default-values-unknown-imports or --trap-unknown-imports to run it anyway",
                )
            } else {
                e
            }
        })
}

fn classify(e: wasmtime::Error) -> Exit {
    if let Some(exit) = e.downcast_ref::<I32Exit>() {
        Exit::Code(exit.0)
    } else if e.is::<Interrupted>() {
        Exit::Interrupted
    } else if e.is::<Trap>() {
        Exit::Trap(e.into())
    } else {
        Exit::Error(e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_mounts_parse_like_wasmtime() {
        let d: DirMount = "/tmp/data::/data".parse().unwrap();
        assert_eq!(
            (d.host.to_str().unwrap(), d.guest.as_str()),
            ("/tmp/data", "/data")
        );
        let d: DirMount = ".".parse().unwrap();
        assert_eq!((d.host.to_str().unwrap(), d.guest.as_str()), (".", "."));
        assert!("::x".parse::<DirMount>().is_err());
    }

    fn run_wat(text: &str, unknown: UnknownImports) -> Exit {
        let engine = Engine::new(&engine_config()).unwrap();
        let module = Module::new(&engine, text).unwrap();
        let mut store = new_store(&engine, &WasiConfig::default()).unwrap();
        run(&mut store, &module, unknown)
    }

    #[test]
    fn exit_codes_and_traps() {
        let exits = r#"(module
            (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
            (memory (export "memory") 1)
            (func (export "_start") (call $exit (i32.const 7))))"#;
        assert!(matches!(
            run_wat(exits, UnknownImports::Reject),
            Exit::Code(7)
        ));
        let returns = r#"(module (memory (export "memory") 1) (func (export "_start")))"#;
        assert!(matches!(
            run_wat(returns, UnknownImports::Reject),
            Exit::Code(0)
        ));
        let traps = r#"(module (memory (export "memory") 1) (func (export "_start") unreachable))"#;
        assert!(matches!(
            run_wat(traps, UnknownImports::Reject),
            Exit::Trap(_)
        ));
    }

    /// As `wasmtime run`: WASI preview 0 (`wasi_unstable`) imports, a reactor's
    /// `_initialize` before the command, and a default export named "" before `_start`.
    #[test]
    fn runs_what_wasmtime_run_runs() {
        let preview0 = r#"(module
            (import "wasi_unstable" "proc_exit" (func $exit (param i32)))
            (memory (export "memory") 1)
            (func (export "_start") (call $exit (i32.const 3))))"#;
        assert!(matches!(
            run_wat(preview0, UnknownImports::Reject),
            Exit::Code(3)
        ));
        let ordered = r#"(module
            (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
            (memory (export "memory") 1)
            (global $g (mut i32) (i32.const 0))
            (func (export "_initialize") (global.set $g (i32.const 40)))
            (func (export "") (call $exit (i32.add (global.get $g) (i32.const 2))))
            (func (export "_start") (call $exit (i32.const 1))))"#;
        assert!(matches!(
            run_wat(ordered, UnknownImports::Reject),
            Exit::Code(42)
        ));
    }

    #[test]
    fn unknown_imports_follow_the_chosen_policy() {
        let bench = r#"(module
            (import "bench" "start" (func $start))
            (memory (export "memory") 1)
            (func (export "_start") (call $start)))"#;
        match run_wat(bench, UnknownImports::Reject) {
            Exit::Error(e) => {
                assert!(format!("{e:#}").contains("--default-values-unknown-imports"))
            }
            other => panic!("expected an instantiation error, got {other:?}"),
        }
        assert!(matches!(
            run_wat(bench, UnknownImports::DefaultValues),
            Exit::Code(0)
        ));
        // As in wasmtime, calling such an import fails the run with an error, not a Wasm trap.
        match run_wat(bench, UnknownImports::Trap) {
            Exit::Error(e) => assert!(format!("{e:#}").contains("bench::start"), "{e:#}"),
            other => panic!("expected an error from the trapping import, got {other:?}"),
        }
    }
}
