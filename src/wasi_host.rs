//! Runs a WASI command the way `wasmtime run` does, with its options: a preview 1 module
//! (`wasi_unstable`, preview 0, too) or a component exporting `wasi:cli/run` (WASI 0.2, or 0.3
//! with the component model's async ABI), or the function `--invoke` names; argv,
//! environment, preopened directories, inherited stdio, the proposals `-S` turns on, `-W`'s
//! limits, fuel and timeout, exit codes and traps; file and stdio calls made on the guest's
//! own thread.
//!
//! ```
//! use wasmspy::wasi_host::{self, Exit, WasiConfig};
//! # fn main() -> anyhow::Result<()> {
//! let engine = wasmtime::Engine::new(&wasi_host::engine_config())?;
//! let wasm = wat::parse_str(
//!     r#"(module
//!         (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
//!         (memory (export "memory") 1)
//!         (func (export "_start") (call $exit (i32.const 3))))"#,
//! )?;
//! let program = wasi_host::compile(&engine, &wasm)?;
//! let config = WasiConfig { argv: vec!["exit.wasm".into()], ..WasiConfig::default() };
//! let mut store = wasi_host::new_store(&engine, &config)?;
//! assert!(matches!(wasi_host::run_program(&mut store, &program), Exit::Code(3)));
//! # Ok(())
//! # }
//! ```

mod host;
mod invoke;
mod link;
mod log_prefix;
pub mod proxy;
mod unknown_imports;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use self::host::{new_store, Host};
pub use self::link::check_options;

use anyhow::{anyhow, bail, Context, Result};
use wasmtime::component::{Component, Linker as ComponentLinker};
use wasmtime::{Config, Engine, Module, Store, Trap};
use wasmtime_wasi::I32Exit;

use crate::profiler::Interrupted;

/// A host directory the guest sees at `guest`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirMount {
    /// The directory on the host.
    pub host: PathBuf,
    /// The path the guest opens it by.
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

/// What the guest is given and what is called, as `wasmtime run`'s options say.
#[derive(Clone, Debug, Default)]
pub struct WasiConfig {
    /// argv, including `argv[0]`; with `invoke`, `argv[1..]` are the function's arguments.
    pub argv: Vec<String>,
    /// The guest's environment variables, (name, value): `--env`'s, and the host's with
    /// `--inherit-env`.
    pub env: Vec<(String, String)>,
    /// `--dir`: the host directories the guest is given.
    pub dirs: Vec<DirMount>,
    /// wasmspy's own policy for imports nothing provides (`-W unknown-imports-trap` and
    /// `-W unknown-imports-default` are in `wasm`); it holds for components too.
    pub unknown_imports: UnknownImports,
    /// `-S`: which WASI interfaces and proposals the guest gets, and their settings, as
    /// `wasmtime-cli-flags` parses them (all unset: `wasmtime run`'s defaults).
    pub wasi: wasmtime_cli_flags::WasiOptions,
    /// `-W`: the store's limits, fuel and timeout, unknown imports and exports.
    pub wasm: wasmtime_cli_flags::WasmOptions,
    /// `--invoke`: the module's export, or the component's function as a WAVE call, to call
    /// instead of the command's `_start` or `wasi:cli/run`.
    pub invoke: Option<String>,
    /// `--preload NAME=MODULE`: modules instantiated before the main module, whose exports it
    /// may import from NAME.
    pub preloads: Vec<(String, Module)>,
    /// `-D coredump=PATH`: where a trap's core dump goes (the engine must capture them).
    pub coredump: Option<String>,
}

/// What `wasmtime serve` gives each instance it makes: `INSTANCE_ID` in its environment, no
/// stdin, and, with `log_prefix` (unless `--no-logging-prefix`), its stdout and stderr lines
/// prefixed `stdout [ID] :: ` and `stderr [ID] :: `.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServedInstance {
    /// Its number, from 0 in the order instances are made.
    pub id: u64,
    /// Whether its stdout and stderr lines are prefixed with its number.
    pub log_prefix: bool,
}

/// A program `wasmtime run` runs.
pub enum Program {
    /// A core module: a preview 1 command, or one whose export `--invoke` names.
    Module(Module),
    /// A component: a `wasi:cli/run` command, or one whose function `--invoke` names.
    Component(Component),
}

/// How a guest run ended.
#[derive(Debug)]
pub enum Exit {
    /// `_start` returned, or the guest called `proc_exit(code)`.
    Code(i32),
    /// A Wasm trap; the error carries the guest backtrace.
    Trap(anyhow::Error),
    /// Stopped by [`ProfilerHandle::interrupt`](crate::ProfilerHandle::interrupt).
    Interrupted,
    /// Anything else: a host function failed, or the module could not be instantiated.
    Error(anyhow::Error),
}

/// The engine settings `wasmtime run` uses without options: Wasmtime's defaults.
pub fn engine_config() -> Config {
    Config::new()
}

/// Whether a 4 TiB reservation (42 bits of address space) succeeds: the test `wasmtime serve`
/// makes before it turns the pooling allocator on by default.
pub fn pooling_available() -> bool {
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
pub fn read_program(path: &Path) -> Result<Arc<[u8]>> {
    read_program_file(path).map(|read| read.wasm)
}

/// A program read: its bytes in binary form, and what its file was when it was opened (before
/// its bytes were read): its size, its times, its inode.
pub struct ReadProgram {
    /// The program in binary form.
    pub wasm: Arc<[u8]>,
    /// Its file, when opened.
    pub file: std::fs::Metadata,
}

/// As [`read_program`], with what the file was.
pub fn read_program_file(path: &Path) -> Result<ReadProgram> {
    let (bytes, file) =
        read_shared(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    Ok(ReadProgram {
        wasm: read_binary(path, bytes)?,
        file,
    })
}

/// `bytes`, read from `path`, in binary form.
fn read_binary(path: &Path, bytes: Arc<[u8]>) -> Result<Arc<[u8]>> {
    if bytes.starts_with(b"\0asm") {
        return Ok(bytes);
    }
    if Engine::detect_precompiled(&bytes).is_some() {
        bail!(
            "`{}` is precompiled (`wasmtime compile`): wasmspy names functions from the WebAssembly, so profile the `.wasm` it was compiled from",
            path.display()
        );
    }
    let text = std::str::from_utf8(&bytes).ok().filter(|t| {
        let t = t.trim_start();
        t.starts_with('(') || t.starts_with(";;")
    });
    match text {
        Some(text) => wat::parse_str(text)
            .map(Arc::from)
            .map_err(|e| anyhow!("`{}`: invalid WebAssembly text: {e}", path.display())),
        None => bail!(
            "`{}` is not a WebAssembly module or component (no `\\0asm` header, and not WebAssembly text)",
            path.display()
        ),
    }
}

/// A file's bytes, read once into the buffer the engine, the profile's build ids and the
/// symbolizer share: a `Vec` turned into an `Arc<[u8]>` is copied, 16 ms more before a 16 MB
/// component's guest starts (its fresh pages faulted in twice).
fn read_shared(path: &Path) -> std::io::Result<(Arc<[u8]>, std::fs::Metadata)> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let metadata = file.metadata()?;
    let len = usize::try_from(metadata.len()).map_err(std::io::Error::other)?;
    // SAFETY: zeroed bytes are initialized `u8`s.
    let mut bytes = unsafe { Arc::<[u8]>::new_zeroed_slice(len).assume_init() };
    let buffer = Arc::get_mut(&mut bytes).expect("not shared yet");
    populate(buffer);
    file.read_exact(buffer)?;
    if file.read(&mut [0])? != 0 {
        return Err(std::io::Error::other("the file grew while it was read"));
    }
    Ok((bytes, metadata))
}

/// Faults in the fresh pages of `buffer` in one call, where Linux can: a read into them faults
/// them one at a time, 1.2 ms against 0.75 ms for a 2.8 MB component here, a twentieth of
/// its warm start. Kernels before 5.14 refuse, and the read faults them as before.
#[cfg(target_os = "linux")]
fn populate(buffer: &mut [u8]) {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let start = (buffer.as_mut_ptr() as usize).next_multiple_of(page);
    let end = (buffer.as_mut_ptr() as usize + buffer.len()) / page * page;
    if end > start {
        // SAFETY: the whole pages within `buffer`, memory this process owns; populating them
        // changes none of their bytes (it faults them in as a write would).
        unsafe { libc::madvise(start as *mut _, end - start, libc::MADV_POPULATE_WRITE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn populate(_: &mut [u8]) {}

/// Compiles a module or component (`wasm` in binary form), through the engine's compile cache
/// if it has one.
pub fn compile(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Program> {
    Ok(if wasmparser::Parser::is_component(wasm) {
        Program::Component(Component::new(engine, wasm)?)
    } else {
        Program::Module(Module::new(engine, wasm)?)
    })
}

/// Instantiates `module` with WASI preview 1 and calls its `_start` (or `--invoke`'s export).
pub fn run(store: &mut Store<Host>, module: &Module) -> Exit {
    run_with(store, module, |_, _| Ok(()))
}

/// Runs a module as [`run`] does, a component as [`run_component`] does.
pub fn run_program(store: &mut Store<Host>, program: &Program) -> Exit {
    match program {
        Program::Module(module) => run(store, module),
        Program::Component(component) => run_component(store, component),
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
    setup: impl FnOnce(&mut Store<Host>, &wasmtime::Instance) -> wasmtime::Result<()>,
) -> Exit {
    in_runtime(store, async |store| {
        let config = store.data().config.clone();
        let mut linker = link::module_linker(store, module, &config)?;
        for (name, preload) in &config.preloads {
            linker
                .module_async(&mut *store, name, preload)
                .await
                .map_err(|e| e.context(format!("failed to process preload `{name}`")))?;
        }
        let instance = linker
            .instantiate_async(&mut *store, module)
            .await
            .map_err(unknown_import_hint)?;
        setup(store, &instance)?;
        // A reactor's `_initialize` first, then `--invoke`'s export or the command's default
        // export, named "" or `_start`.
        if let Some(init) = instance.get_func(&mut *store, "_initialize") {
            init.typed::<(), ()>(&*store)?
                .call_async(&mut *store, ())
                .await?;
        }
        let main = match &config.invoke {
            Some(name) => Some(
                instance
                    .get_func(&mut *store, name)
                    .ok_or_else(|| wasmtime::format_err!("no func export named `{name}` found"))?,
            ),
            None => instance
                .get_func(&mut *store, "")
                .or_else(|| instance.get_func(&mut *store, "_start")),
        };
        if let Some(main) = main {
            let args = config.argv.get(1..).unwrap_or_default();
            invoke::call_module_func(store, main, config.invoke.as_deref(), args).await?;
        }
        Ok(())
    })
}

/// Instantiates `component` with WASI (and what `-S` adds) and calls its `wasi:cli/run` (0.3's
/// where it exports it, else 0.2's) or `--invoke`'s function, as [`run_with`] does a module:
/// a `run` that returns an error exits with 1, as `wasmtime run` has it.
pub fn run_component(store: &mut Store<Host>, component: &Component) -> Exit {
    run_component_with(store, component, |_| Ok(()))
}

/// As [`run_component`], with `define` adding to the linker what the host provides beyond
/// WASI (such as the allocator hook of a rewritten component).
pub fn run_component_with(
    store: &mut Store<Host>,
    component: &Component,
    define: impl FnOnce(&mut ComponentLinker<Host>) -> wasmtime::Result<()>,
) -> Exit {
    in_runtime(store, async |store| {
        let config = store.data().config.clone();
        let linker = link::component_linker(component, &config, define)?;
        let instance = linker
            .instantiate_async(&mut *store, component)
            .await
            .map_err(unknown_import_hint)?;
        if let Some(call) = &config.invoke {
            return invoke::call_component_func(store, component, &instance, call).await;
        }
        let mut result = None;
        if link::wasip3_on(&config.wasi) {
            use wasmtime_wasi::p3::bindings::Command;
            if let Ok(command) = Command::new(&mut *store, &instance) {
                result = Some(
                    store
                        .run_concurrent(async |store| command.wasi_cli_run().call_run(store).await)
                        .await??,
                );
            }
        }
        let result = match result {
            Some(result) => result,
            None => {
                use wasmtime_wasi::p2::bindings::Command;
                Command::new(&mut *store, &instance)?
                    .wasi_cli_run()
                    .call_run(&mut *store)
                    .await?
            }
        };
        // As `wasmtime run`: `run` returning an error is an exit with status 1.
        result.map_err(|()| I32Exit(1).into())
    })
}

/// Runs `guest` on this thread in the runtime, within `-W timeout` if one is set (epoch
/// interruption stops compiled code, the runtime's timer a guest blocked in the host), and
/// says how it ended; a trap's core dump is written where `-D coredump` says.
fn in_runtime(
    store: &mut Store<Host>,
    guest: impl AsyncFnOnce(&mut Store<Host>) -> wasmtime::Result<()>,
) -> Exit {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => return Exit::Error(e),
    };
    let timeout = store.data().config.wasm.timeout;
    if let Some(timeout) = timeout {
        arm_epoch_timeout(store, timeout);
    }
    let result = runtime.block_on(async {
        match timeout {
            Some(timeout) => match tokio::time::timeout(timeout, guest(&mut *store)).await {
                Ok(result) => result,
                Err(_) => Err(wasmtime::Error::from(Trap::Interrupt)
                    .context(format!("timed out after {timeout:?}"))),
            },
            None => guest(&mut *store).await,
        }
    });
    match result {
        Ok(()) => Exit::Code(0),
        Err(e) => classify(write_core_dump(store, e)),
    }
}

/// `-W timeout` as `wasmtime run` sets it: the guest's compiled code stops at its next epoch
/// check once the time is up (the profiler, attached, answers epochs itself and is told
/// separately).
fn arm_epoch_timeout(store: &mut Store<Host>, timeout: Duration) {
    if !store.engine().get_epoch_interruption() {
        return;
    }
    store.set_epoch_deadline(1);
    let engine = store.engine().clone();
    std::thread::spawn(move || {
        std::thread::sleep(timeout);
        engine.increment_epoch();
    });
}

/// With `-D coredump=PATH`, a trap's core dump written there, as `wasmtime run` writes it.
fn write_core_dump(store: &mut Store<Host>, e: wasmtime::Error) -> wasmtime::Error {
    let Some(path) = store.data().config.coredump.clone() else {
        return e;
    };
    let Some(dump) = e.downcast_ref::<wasmtime::WasmCoreDump>() else {
        return e;
    };
    let name = store
        .data()
        .config
        .argv
        .first()
        .cloned()
        .unwrap_or_default();
    let bytes = dump.serialize(&mut *store, &name);
    match std::fs::write(&path, bytes) {
        Ok(()) => e.context(format!("core dumped at {path}")),
        Err(write) => {
            eprintln!("warning: coredump failed to generate: failed to write core dump file at `{path}`: {write}");
            e
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

/// An instantiation that failed for an import nothing provides says how to run it anyway.
fn unknown_import_hint(e: wasmtime::Error) -> wasmtime::Error {
    if format!("{e:#}").contains("unknown import") {
        e.context("use --default-values-unknown-imports or --trap-unknown-imports to run it anyway")
    } else {
        e
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

    fn run_wat(text: &str, unknown_imports: UnknownImports) -> Exit {
        let engine = Engine::new(&engine_config()).unwrap();
        let module = Module::new(&engine, text).unwrap();
        let config = WasiConfig {
            unknown_imports,
            ..WasiConfig::default()
        };
        let mut store = new_store(&engine, &config).unwrap();
        run(&mut store, &module)
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
