//! Runs a WASI preview 1 command module the way `wasmtime run` does: argv, environment,
//! preopened directories, inherited stdio, `proc_exit` codes and traps; `wasi_unstable`
//! (preview 0) imports too; file and stdio calls made on the guest's own thread.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use wasmtime::{Config, Engine, Linker, Module, Store, Trap};
use wasmtime_wasi::p0;
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

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

#[derive(Clone, Debug, Default)]
pub struct WasiConfig {
    /// argv, including argv[0].
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub dirs: Vec<DirMount>,
    pub unknown_imports: UnknownImports,
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

/// Reads a module in binary or text form, refusing what this runner cannot run.
pub fn read_module(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    if wasmparser::Parser::is_component(&bytes) {
        bail!(
            "`{}` is a WebAssembly component; `record` runs WASI preview 1 modules (components are not supported yet)",
            path.display()
        );
    }
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
            "`{}` is not a WebAssembly module (no `\\0asm` header, and not WebAssembly text)",
            path.display()
        ),
    }
}

/// A store whose WASI context gives the guest `config`'s argv, environment and directories,
/// and this process's stdio.
pub fn new_store(engine: &Engine, config: &WasiConfig) -> Result<Store<WasiP1Ctx>> {
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
    Ok(Store::new(engine, builder.build_p1()))
}

/// Instantiates `module` with WASI preview 1 and calls its `_start`.
pub fn run(store: &mut Store<WasiP1Ctx>, module: &Module, unknown: UnknownImports) -> Exit {
    run_with(store, module, unknown, |_, _| Ok(()))
}

/// As [`run`], with `setup` called on the instance before `_start` (to fill in what the host
/// provides after instantiation, such as the allocator hook of a rewritten module).
///
/// As `wasmtime run`: in a multi-threaded tokio runtime, on this thread, the guest instantiated
/// and called asynchronously (on a fiber) with WASI's asynchronous bindings. Its synchronous
/// bindings enter tokio on every host call: 16–34 % more time for a program making millions
/// of `fd_write`s (`benches/cli.rs`).
pub fn run_with(
    store: &mut Store<WasiP1Ctx>,
    module: &Module,
    unknown: UnknownImports,
    setup: impl FnOnce(&mut Store<WasiP1Ctx>, &wasmtime::Instance) -> wasmtime::Result<()>,
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

/// The tokio runtime guests run in, one for the process, as `wasmtime run` has. Started by
/// [`new_store`], before a profiler starts, and never shut down: its threads' start and end
/// are not the guest's time.
fn runtime() -> Result<&'static tokio::runtime::Runtime> {
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
    store: &mut Store<WasiP1Ctx>,
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
    store: &mut Store<WasiP1Ctx>,
    module: &Module,
    unknown: UnknownImports,
) -> wasmtime::Result<wasmtime::Instance> {
    let mut linker = Linker::new(module.engine());
    p0::add_to_linker_async(&mut linker, |ctx| ctx)?;
    p1::add_to_linker_async(&mut linker, |ctx| ctx)?;
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
