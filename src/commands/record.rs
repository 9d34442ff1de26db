//! `wasmspy record`: run the guest under the profiler and write its profile, whatever way the
//! guest ends.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use tempfile::NamedTempFile;
use wasmspy::export::flamegraph::NothingToDraw;
use wasmspy::export::Format;
use wasmspy::memory::component::{rewrite_component, RewrittenComponent};
use wasmspy::memory::rewrite::{rewrite, Rewritten};
use wasmspy::profile::Profile;
use wasmspy::record::{ALLOC_OBJECTS, ALLOC_SPACE, COLLECTED_NOTE, CPU, INUSE_SPACE, SAMPLES};
use wasmspy::server::{LiveServer, ServerOptions};
use wasmspy::wasi_host::{self, Exit, Program, WasiConfig};
use wasmspy::{Profiler, ProfilerHandle, ProfilerOptions};
use wasmtime::Engine;

use crate::cli::RecordArgs;
use crate::commands::interrupt::{self, GuestEnded};

/// `wasmtime run`'s exit code for a trap: that of an abort.
const TRAP_EXIT_CODE: i32 = 128 + libc::SIGABRT;

pub fn record(args: RecordArgs) -> Result<i32> {
    // Created before the guest runs, so a bad path fails fast rather than after a long run.
    let outputs = Arc::new(Outputs {
        cpu: args
            .cpu_outputs()
            .iter()
            .map(|p| Output::create(p, Format::for_output(args.format, p)))
            .collect::<Result<_>>()?,
        memory: args
            .mem_profile
            .as_deref()
            .map(|p| Output::create(p, Format::for_output(args.format, p)))
            .transpose()?,
    });
    // Shared by the engine, the profile's build id and the symbolizer: never copied again.
    let wasm: Arc<[u8]> = wasi_host::read_program(&args.module)?.into();
    let name = file_name(&args.module);
    if !wasmparser::Parser::is_component(&wasm) {
        args.wasi_options().check_for_module()?;
    }

    let options = ProfilerOptions {
        rate_hz: args.rate,
        sampler: args.sampler,
        clock: args.clock,
        dwarf: !args.no_dwarf,
        mem_rate: outputs.memory.as_ref().map(|_| args.mem_rate),
        timeline: outputs.cpu.iter().any(|o| o.format.shows_time()),
    };
    let mut config = wasi_host::engine_config();
    Profiler::configure(&mut config, &options);
    let engine = Engine::new(&config)?;
    let mut profiler = Profiler::new(&engine, options)?;
    let rewritten = match &outputs.memory {
        Some(_) => Rewrite::of(&wasm, &profiler)
            .with_context(|| format!("cannot instrument the allocators of `{name}`"))?,
        None => Rewrite::None,
    };
    if outputs.memory.is_some() && matches!(rewritten, Rewrite::None) {
        eprintln!("wasmspy: warning: {name} has no allocator function wasmspy knows (malloc, free, __rust_alloc, ...): the memory profile will be empty");
    }
    let compile_start = Instant::now();
    let code: &[u8] = match &rewritten {
        Rewrite::Module(r) => &r.wasm,
        Rewrite::Component(r) => &r.wasm,
        Rewrite::None => &wasm,
    };
    let program = wasi_host::compile(&engine, code)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("cannot compile `{}`", args.module.display()))?;
    let compile_time = compile_start.elapsed();

    match (&program, &rewritten) {
        (Program::Module(module), Rewrite::Module(r)) => {
            profiler.add_rewritten_module(&name, module, wasm.clone(), r.clone())?
        }
        (Program::Module(module), _) => profiler.add_module(&name, module, wasm.clone())?,
        (Program::Component(component), Rewrite::Component(r)) => {
            profiler.add_rewritten_component(&name, component, &wasm, r)?
        }
        (Program::Component(component), _) => profiler.add_component(&name, component, &wasm)?,
    }
    print_warnings(&profiler.handle());
    let wasi = WasiConfig {
        argv: std::iter::once(name.clone())
            .chain(args.args.iter().cloned())
            .collect(),
        env: args.guest_env(),
        dirs: args.dirs.clone(),
        unknown_imports: args.unknown_imports(),
        options: args.wasi_options(),
    };
    let mut store = wasi_host::new_store(&engine, &wasi)?;
    profiler.attach(&mut store)?;
    let server = match &args.pprof_addr {
        Some(addr) => Some(start_server(profiler.handle(), addr, &args, &wasi.argv)?),
        None => None,
    };
    let on_interrupt = outputs.clone();
    let handle = profiler.handle();
    let ended = GuestEnded::default();
    interrupt::stop_guest_on_signals(profiler.handle(), ended.clone(), move |profile| {
        let _ = std::io::stdout().flush();
        eprintln!("wasmspy: {}", interrupt::ended_by());
        if let Err(e) = on_interrupt.save(&handle, profile) {
            eprintln!("wasmspy: error: {e:#}");
        }
    })?;

    profiler.start()?;
    if let Some(every) = args.flush_every {
        flush_periodically(outputs.clone(), profiler.handle(), every)?;
    }
    let exit = match &program {
        Program::Module(module) => wasi_host::run_with(
            &mut store,
            module,
            wasi.unknown_imports,
            |store, instance| profiler.install_allocator_hook(&mut *store, instance),
        ),
        Program::Component(component) => {
            wasi_host::run_component_with(&mut store, component, wasi.unknown_imports, |linker| {
                match rewritten {
                    Rewrite::Component(_) => profiler.define_component_allocator_hook(linker),
                    _ => Ok(()),
                }
            })
        }
    };
    let run_end = Instant::now();
    ended.returned();
    if let Some(server) = &server {
        server.guest_exited();
    }
    let profile = profiler.stop();
    let _ = std::io::stdout().flush();
    if args.verbose {
        let c = profiler.handle().counts();
        eprintln!(
            "wasmspy: {} sampler at {} Hz on the {} clock: {} guest, {} host call, {} runtime, {} lost samples",
            profiler.sampler_name(),
            args.rate,
            args.clock,
            c.guest,
            c.host_call,
            c.runtime,
            c.lost
        );
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
    if args.verbose {
        eprintln!(
            "wasmspy: compiling took {:.3} s; from the guest's end to the profile written {:.3} s; peak memory {} MiB",
            compile_time.as_secs_f64(),
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

/// The allocator rewrite of a program, for a memory profile.
enum Rewrite {
    Module(Arc<Rewritten>),
    Component(RewrittenComponent),
    /// Nothing to rewrite: no allocator wasmspy knows.
    None,
}

impl Rewrite {
    fn of(wasm: &[u8], profiler: &Profiler) -> Result<Self> {
        Ok(if wasmparser::Parser::is_component(wasm) {
            let countdown = profiler.first_heap_countdown();
            match rewrite_component(wasm, countdown)? {
                Some(r) => Rewrite::Component(r),
                None => Rewrite::None,
            }
        } else {
            match rewrite(wasm)? {
                Some(r) => Rewrite::Module(Arc::new(r)),
                None => Rewrite::None,
            }
        })
    }
}

/// Writes the profiles so far every `every`, until the last write; errors are warned about
/// once.
fn flush_periodically(
    outputs: Arc<Outputs>,
    profiler: ProfilerHandle,
    every: std::time::Duration,
) -> Result<()> {
    std::thread::Builder::new()
        .name("wasmspy-flush".into())
        .spawn(move || {
            let mut warned = false;
            loop {
                std::thread::sleep(every);
                if outputs.all_written() {
                    return;
                }
                if let Err(e) = outputs.flush(&profiler) {
                    if !std::mem::replace(&mut warned, true) {
                        eprintln!("wasmspy: warning: {e:#}");
                    }
                }
            }
        })
        .context("cannot start the flush thread")?;
    Ok(())
}

/// Starts the live server, warning when it listens beyond this machine.
fn start_server(
    profiler: ProfilerHandle,
    addr: &str,
    args: &RecordArgs,
    argv: &[String],
) -> Result<LiveServer> {
    let options = ServerOptions {
        max_seconds: args.pprof_max_seconds,
        cmdline: argv.to_vec(),
    };
    let server = LiveServer::start(profiler, addr, options)?;
    let local = server.local_addr();
    if !local.ip().is_loopback() {
        eprintln!("wasmspy: warning: serving profiles on {local}, beyond this machine: profiles reveal the guest's code structure (function names, source files)");
    }
    eprintln!("wasmspy: serving profiles at http://{local}/debug/pprof/");
    Ok(server)
}

/// The profiles asked for.
struct Outputs {
    cpu: Vec<Output>,
    memory: Option<Output>,
}

impl Outputs {
    /// Writes the CPU profile `cpu` to each of its outputs and the memory profile, after the
    /// warnings about them. One output failing does not keep the others from being written.
    fn save(&self, profiler: &ProfilerHandle, cpu: &Profile) -> Result<()> {
        self.write(profiler, cpu, Save::Last)
    }

    /// Whether every output had its last write.
    fn all_written(&self) -> bool {
        self.cpu.iter().chain(&self.memory).all(Output::written)
    }

    /// Writes the profiles so far, replacing the last flush.
    fn flush(&self, profiler: &ProfilerHandle) -> Result<()> {
        let cpu = if self.cpu.is_empty() {
            Profile::default()
        } else {
            profiler.snapshot()
        };
        self.write(profiler, &cpu, Save::Flush)
    }

    fn write(&self, profiler: &ProfilerHandle, cpu: &Profile, save: Save) -> Result<()> {
        let heap = self.memory.as_ref().and_then(|_| profiler.heap_profile());
        if save == Save::Last {
            print_warnings(profiler);
        }
        let mut result = Ok(());
        let summary = format!(
            "{} samples, {:.3} s CPU",
            cpu.total(SAMPLES),
            cpu.total(CPU) as f64 / 1e9
        );
        for output in &self.cpu {
            result = result.and(output.save(cpu, &summary, save));
        }
        if let (Some(output), Some(heap)) = (&self.memory, heap) {
            let mib = |i| heap.total(i) as f64 / (1024.0 * 1024.0);
            let collected = heap.comments.iter().any(|c| c == COLLECTED_NOTE);
            let summary = format!(
                "{} allocations of {:.1} MiB, {:.1} MiB in use at the end{}",
                heap.total(ALLOC_OBJECTS),
                mib(ALLOC_SPACE),
                mib(INUSE_SPACE),
                if collected {
                    " (not counting garbage-collected blocks)"
                } else {
                    ""
                }
            );
            result = result.and(output.save(&heap, &summary, save));
        }
        result
    }
}

fn print_warnings(profiler: &ProfilerHandle) {
    for warning in profiler.take_warnings() {
        eprintln!("wasmspy: warning: {warning}");
    }
}

/// The process's peak resident memory so far.
fn peak_rss_kib() -> i64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes the struct it is given.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0;
    }
    usage.ru_maxrss
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The profile's destination. Each write goes to a temporary file beside it, renamed into
/// place once complete: a run that fails, or is killed, before or while writing leaves
/// whatever was at the path untouched (the last flush, or an older profile). The last write
/// is the main thread's when the guest ends, or the signal thread's when the guest cannot be
/// stopped; nothing is written after it.
struct Output {
    path: PathBuf,
    format: Format,
    state: Mutex<OutputState>,
}

struct OutputState {
    /// Made before the guest runs, to fail early where nothing can be written; used by the
    /// first write.
    first: Option<NamedTempFile>,
    done: bool,
}

/// Whether a write is the run's last: reported on stderr, and final.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Save {
    Flush,
    Last,
}

impl Output {
    /// Fails, before the guest runs, where the profile could not be written.
    fn create(path: &Path, format: Format) -> Result<Self> {
        if path.is_dir() {
            return Err(anyhow::anyhow!("it is a directory"))
                .with_context(|| format!("cannot create output `{}`", path.display()));
        }
        let first = temp_file_beside(path)?;
        Ok(Output {
            path: path.to_path_buf(),
            format,
            state: Mutex::new(OutputState {
                first: Some(first),
                done: false,
            }),
        })
    }

    fn written(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).done
    }

    /// Writes `profile`, unless the last write was made; the last one is reported, with
    /// `summary`, on stderr. A flame graph of nothing is not drawn: the last write warns so.
    fn save(&self, profile: &Profile, summary: &str, save: Save) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.done {
            return Ok(());
        }
        state.done = save == Save::Last;
        // Taken out now, so that the last write removes it even when it writes nothing.
        let first = state.first.take();
        let what = || format!("cannot write profile `{}`", self.path.display());
        let mut bytes = Vec::new();
        match self.format.write(profile, &mut bytes) {
            Err(e) if e.is::<NothingToDraw>() => {
                if save == Save::Last {
                    eprintln!(
                        "wasmspy: warning: {} not written: {e} (the guest was not sampled)",
                        self.path.display()
                    );
                }
                return Ok(());
            }
            result => result.with_context(what)?,
        }
        let mut file = match first {
            Some(file) => file,
            None => temp_file_beside(&self.path)?,
        };
        file.write_all(&bytes)
            .and_then(|()| file.as_file().sync_all())
            .with_context(what)?;
        file.persist(&self.path)
            .map_err(|e| e.error)
            .with_context(what)?;
        if save == Save::Last {
            eprintln!(
                "wasmspy: wrote {} ({summary}); view it with: {}",
                self.path.display(),
                self.format.how_to_view(&self.path)
            );
        }
        Ok(())
    }
}

/// A new temporary file in `path`'s directory, with the permissions `File::create` would give.
fn temp_file_beside(path: &Path) -> Result<NamedTempFile> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".wasmspy-")
        .suffix(".tmp")
        // As `File::create` would: the process's umask applies.
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .with_context(|| format!("cannot create output `{}`", path.display()))
}
