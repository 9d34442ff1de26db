//! `wasmspy record`: run the guest under the profiler and write its profile, whatever way the
//! guest ends.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;

use super::guest_args::{GuestArgs, WASMTIME};
use super::profiling_args::ProfilingArgs;
use crate::commands::interrupt::{self, GuestEnded};
use crate::commands::outputs::{
    file_name, flush_periodically, print_warnings, start_server, write_on_signals, Outputs,
};
use crate::commands::perf_files;
use crate::commands::profiled::Profiled;
use crate::commands::rewrite::Rewrite;
use crate::commands::top::{RecordTop, Terminal};
use crate::live_view::SortBy;
use crate::wasi_host::{self, Exit, Program};

/// `record`'s sampling rate by default.
pub const RECORD_RATE: u32 = 1000;

#[derive(Args)]
#[command(arg_required_else_help = true)]
pub struct RecordArgs {
    /// Where to write the CPU profile, in the format its name says: `.pb.gz`/`.pprof`
    /// (pprof, also for other names), `.json` (Firefox Profiler), `.speedscope.json`, `.svg`
    /// (flame graph), `.folded`, `.cpuprofile` (VS Code, Chrome DevTools); may be given
    /// several times; `wasmspy.pb.gz` unless only a
    /// memory profile is asked for.
    #[arg(short, long, value_name = "PATH")]
    pub output: Vec<PathBuf>,

    /// Keep the live server up after the guest exits, until Ctrl-C, so that its last
    /// profiles can still be fetched.
    #[arg(long, requires = "pprof_addr")]
    pub serve_after_exit: bool,

    /// Show the functions taking the CPU now, refreshed every second, on the terminal
    /// (`/dev/tty`: the guest's stdout and stderr stay the guest's), as `wasmspy top` does.
    #[arg(long)]
    pub top: bool,

    /// With `--top`: the column the functions are sorted by, `own` or `total`.
    #[arg(long, value_name = "COLUMN", default_value = "own", requires = "top")]
    pub top_sort: SortBy,

    #[command(flatten)]
    pub profiling: ProfilingArgs,

    #[command(flatten)]
    pub guest: GuestArgs,

    /// The function to run
    ///
    /// When used with modules, this must be the export name of a function.
    /// Arguments to the function are parsed from trailing arguments provided
    /// after all options.
    ///
    /// When used with components, this must be a wave-encoded function call,
    /// e.g. `wasi:cli/run.run@0.2.0()` or
    /// `your:pkg/iface.func("arguments in wave encoding")`. Bare function
    /// names (e.g. `run()`) are accepted and searched for in all exported
    /// instances, and must be unambigious.
    #[arg(long, value_name = "FUNCTION", help_heading = WASMTIME)]
    pub invoke: Option<String>,

    /// Load the given WebAssembly module before the main module
    #[arg(long = "preload", number_of_values = 1, value_name = "NAME=MODULE_PATH",
          value_parser = parse_preload, help_heading = WASMTIME)]
    pub preloads: Vec<(String, PathBuf)>,

    /// Override the value of `argv[0]`, typically the name of the executable of
    /// the application being run.
    #[arg(long, help_heading = WASMTIME)]
    pub argv0: Option<String>,

    /// The WebAssembly module or component to run (binary or text).
    #[arg(value_name = "MODULE")]
    pub module: PathBuf,

    /// Arguments for the guest (with `--invoke` on a module, the function's arguments).
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub args: Vec<String>,
}

impl RecordArgs {
    /// Where the CPU profile goes, if one is wanted: `wasmspy.pb.gz` unless nothing but a
    /// memory profile or the live server is asked for.
    pub fn cpu_outputs(&self) -> Vec<PathBuf> {
        self.profiling.default_output(&self.output)
    }
}

/// `NAME=MODULE_PATH`.
fn parse_preload(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, path)) => Ok((name.to_string(), path.into())),
        None => Err("must contain exactly one equals character ('=')".to_string()),
    }
}

/// `wasmtime run`'s exit code for a trap: that of an abort.
const TRAP_EXIT_CODE: i32 = 128 + libc::SIGABRT;

pub fn record(mut args: RecordArgs) -> Result<i32> {
    args.guest.configure()?;
    let terminal = args.top.then(Terminal::open).transpose()?;
    // Created before the guest runs, so a bad path fails fast rather than after a long run.
    let outputs = Arc::new(Outputs::create(
        &args.cpu_outputs(),
        args.profiling.mem_profile.as_deref(),
        args.profiling.format,
    )?);
    // Shared by the engine, the profile's build id and the symbolizer: never copied again.
    let read = wasi_host::read_program_file(&args.module)?;
    let wasm = read.wasm.clone();
    let name = file_name(&args.module);
    let mut wasi = args.guest.wasi_config(
        std::iter::once(args.argv0.clone().unwrap_or_else(|| name.clone()))
            .chain(args.args.iter().cloned())
            .collect(),
    )?;
    wasi.invoke = args.invoke.clone();
    // What the program cannot be given fails before it compiles.
    let component = wasmparser::Parser::is_component(&wasm);
    wasi_host::check_options(&wasi, component).map_err(anyhow::Error::from)?;

    let Profiled {
        engine,
        mut profiler,
        counts,
        rewritten,
    } = Profiled::new(
        &args.profiling,
        &mut args.guest,
        RECORD_RATE,
        &outputs,
        |wasmtime, _| wasmtime.config(None).map_err(anyhow::Error::from),
        &read,
        &name,
    )?;
    let compile_start = Instant::now();
    let program = rewritten
        .compile(&engine, &wasm)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("cannot compile `{}`", args.module.display()))?;
    let compile_time = compile_start.elapsed();

    profiler.module_path(&name, &args.module);
    let registered = rewritten.register(&profiler, &name, &program, &wasm)?;
    for (preload_name, path) in &args.preloads {
        let module = preload(&engine, &mut profiler, preload_name, path)?;
        wasi.preloads.push((preload_name.clone(), module));
    }
    print_warnings(&profiler.handle());
    let _perf_files = perf_files::write(&args.profiling, &args.guest, &profiler.handle())?;
    let mut store = wasi_host::new_store(&engine, &wasi)?;
    profiler.attach(&mut store)?;
    let timed_out = wasi
        .wasm
        .timeout
        .map(|timeout| interrupt_after(profiler.handle(), timeout));
    let ended = GuestEnded::default();
    write_on_signals(
        profiler.handle(),
        outputs.clone(),
        ended.clone(),
        counts.clone(),
    )?;

    profiler.start()?;
    // After the start, before the guest runs: a window asked for at once counts its seconds
    // from samples' first.
    let server = match &args.profiling.pprof_addr {
        Some(addr) => Some(start_server(
            profiler.handle(),
            addr,
            &args.profiling,
            &wasi.argv,
        )?),
        None => None,
    };
    let view = match terminal {
        Some(terminal) => Some(RecordTop::start(
            terminal,
            profiler.handle(),
            format!("wasmspy record {name}"),
            args.top_sort,
        )?),
        None => None,
    };
    if let Some(every) = args.profiling.flush_every {
        flush_periodically(outputs.clone(), profiler.handle(), every)?;
    }
    let exit = match &program {
        Program::Module(module) => wasi_host::run_with(&mut store, module, |store, instance| {
            profiler
                .attach_instance(&mut *store, instance)
                .map_err(wasmtime::Error::from)
        }),
        Program::Component(component) => {
            wasi_host::run_component_with(&mut store, component, |linker| {
                profiler.define_runtime_probe(linker, component)?;
                match rewritten.allocators {
                    Rewrite::Component(_) => profiler.define_component_allocator_hook(linker),
                    _ => Ok(()),
                }
            })
        }
    };
    // Stopped by the profiler at `-W timeout`: a trap, as `wasmtime run` has it.
    let exit = match (exit, &timed_out) {
        (Exit::Interrupted, Some(timed_out)) if timed_out.load(Ordering::Relaxed) => {
            let timeout = wasi.wasm.timeout.unwrap_or_default();
            Exit::Trap(
                anyhow::Error::from(wasmtime::Trap::Interrupt)
                    .context(format!("timed out after {timeout:?}")),
            )
        }
        (exit, _) => exit,
    };
    let run_end = Instant::now();
    ended.returned();
    if let Some(view) = view {
        view.stop();
    }
    if let Some(server) = &server {
        server.guest_exited();
    }
    let profile = profiler.stop();
    let _ = std::io::stdout().flush();
    if let Some(counts) = &counts {
        counts.print(&profiler.handle());
    }

    let guest_code = match exit {
        Exit::Code(code) => code,
        Exit::Trap(e) => {
            eprintln!(
                "Error: {:?}",
                e.context(format!("failed to run main module `{name}`"))
            );
            TRAP_EXIT_CODE
        }
        Exit::Interrupted => {
            eprintln!("wasmspy: {}", interrupt::ended_by());
            interrupt::exit_code()
        }
        Exit::Error(e) => {
            eprintln!("wasmspy: error: {e:#}");
            1
        }
    };
    let saved = outputs.save(&profiler.handle(), &profile);
    rewritten.keep_build_ids(&profiler.handle(), &registered);
    if args.profiling.verbose {
        eprintln!(
            "wasmspy: compiling took {:.3} s{}; from the guest's end to the profile written {:.3} s; peak memory {} MiB",
            compile_time.as_secs_f64(),
            match rewritten.was_cached() {
                true => " (found in wasmspy's cache)",
                false => "",
            },
            run_end.elapsed().as_secs_f64(),
            peak_rss_kib() / 1024
        );
    }
    let code = match saved {
        Ok(_) => guest_code,
        Err(e) => {
            eprintln!("wasmspy: error: {e:#}");
            if guest_code == 0 {
                1
            } else {
                guest_code
            }
        }
    };
    if let Some(server) = server {
        if args.serve_after_exit {
            ended.set(code);
            let _ = std::io::stdout().flush();
            eprintln!(
                "wasmspy: the guest has exited; still serving http://{}/debug/pprof/ until Ctrl-C",
                server.local_addr()
            );
            loop {
                std::thread::park();
            }
        }
        server.stop();
    }
    Ok(code)
}

/// `--preload NAME=PATH`: the module compiled and registered with the profiler, so that its
/// functions are named in the profile.
fn preload(
    engine: &wasmtime::Engine,
    profiler: &mut crate::Profiler,
    name: &str,
    path: &std::path::Path,
) -> Result<wasmtime::Module> {
    let wasm: Arc<[u8]> = wasi_host::read_program(path)?;
    match wasi_host::compile(engine, &wasm)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("failed to process preload `{name}` at `{}`", path.display()))?
    {
        Program::Module(module) => {
            profiler.module_path(name, path);
            profiler.add_module(name, &module, wasm)?;
            Ok(module)
        }
        Program::Component(_) => anyhow::bail!("components cannot be loaded with `--preload`"),
    }
}

/// At `-W timeout`, the guest stopped by the profiler (whose epoch callback, attached, is the
/// store's): the flag says it was the timeout.
fn interrupt_after(
    profiler: crate::ProfilerHandle,
    timeout: std::time::Duration,
) -> Arc<AtomicBool> {
    let timed_out = Arc::new(AtomicBool::new(false));
    let flag = timed_out.clone();
    std::thread::spawn(move || {
        std::thread::sleep(timeout);
        flag.store(true, Ordering::Relaxed);
        profiler.interrupt();
    });
    timed_out
}

/// The process's peak resident memory so far.
fn peak_rss_kib() -> i64 {
    // SAFETY: all zeros is a valid `rusage` (integers and timevals).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes the struct it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    usage.ru_maxrss
}
