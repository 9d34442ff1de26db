//! `wasmspy record`: run the guest under the profiler and write its profile, whatever way the
//! guest ends.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use wasmspy::collector::{CPU, SAMPLES};
use wasmspy::export::pprof;
use wasmspy::profile::Profile;
use wasmspy::wasi_host::{self, Exit, WasiConfig};
use wasmspy::{Profiler, ProfilerHandle, ProfilerOptions};
use wasmtime::{Engine, Module};

use crate::cli::RecordArgs;
use crate::interrupt;

/// `wasmtime run`'s exit code for a trap: that of an abort.
const TRAP_EXIT_CODE: i32 = 128 + libc::SIGABRT;

pub fn record(args: RecordArgs) -> Result<i32> {
    // Created before the guest runs, so a bad path fails fast rather than after a long run.
    let output = Arc::new(Output::create(&args.output)?);
    // Shared by the engine, the profile's build id and the symbolizer: never copied again.
    let wasm: Arc<[u8]> = wasi_host::read_module(&args.module)?.into();
    let name = file_name(&args.module);

    let mut config = wasi_host::engine_config();
    Profiler::configure(&mut config);
    let engine = Engine::new(&config)?;
    let compile_start = Instant::now();
    let module = Module::new(&engine, &wasm)
        .map_err(anyhow::Error::from)
        .with_context(|| format!("cannot compile `{}`", args.module.display()))?;
    let compile_time = compile_start.elapsed();

    let options = ProfilerOptions {
        rate_hz: args.rate,
        sampler: args.sampler,
        clock: args.clock,
        dwarf: !args.no_dwarf,
    };
    let mut profiler = Profiler::new(&engine, options)?;
    profiler.add_module(&name, &module, wasm.clone())?;
    print_warnings(&profiler.handle());
    let wasi = WasiConfig {
        argv: std::iter::once(name.clone())
            .chain(args.args.iter().cloned())
            .collect(),
        env: args.guest_env(),
        dirs: args.dirs.clone(),
        unknown_imports: args.unknown_imports(),
    };
    let mut store = wasi_host::new_store(&engine, &wasi)?;
    profiler.attach(&mut store)?;
    let on_interrupt = output.clone();
    let handle = profiler.handle();
    interrupt::stop_guest_on_ctrl_c(profiler.handle(), move |profile| {
        let _ = std::io::stdout().flush();
        print_warnings(&handle);
        if let Err(e) = on_interrupt.save(profile) {
            eprintln!("wasmspy: error: {e:#}");
        }
    })?;

    profiler.start()?;
    let exit = wasi_host::run(&mut store, &module, wasi.unknown_imports);
    let run_end = Instant::now();
    let profile = profiler.stop();
    let _ = std::io::stdout().flush();
    print_warnings(&profiler.handle());
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
            eprintln!("wasmspy: interrupted");
            interrupt::EXIT_CODE
        }
        Exit::Error(e) => {
            eprintln!("wasmspy: error: {e:#}");
            1
        }
    };
    let saved = output.save(&profile);
    if args.verbose {
        eprintln!(
            "wasmspy: compiling took {:.3} s; from the guest's end to the profile written {:.3} s; peak memory {} MiB",
            compile_time.as_secs_f64(),
            run_end.elapsed().as_secs_f64(),
            peak_rss_kib() / 1024
        );
    }
    match saved {
        Ok(_) => Ok(guest_code),
        Err(e) => {
            eprintln!("wasmspy: error: {e:#}");
            Ok(if guest_code == 0 { 1 } else { guest_code })
        }
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

/// The profile's destination, written exactly once: by the main thread when the guest ends,
/// or by the Ctrl-C thread when the guest cannot be stopped.
struct Output {
    path: PathBuf,
    file: Mutex<Option<File>>,
}

impl Output {
    fn create(path: &Path) -> Result<Self> {
        let file = File::create(path)
            .with_context(|| format!("cannot create output `{}`", path.display()))?;
        Ok(Output {
            path: path.to_path_buf(),
            file: Mutex::new(Some(file)),
        })
    }

    /// Writes `profile` and reports it on stderr, unless it was saved already.
    fn save(&self, profile: &Profile) -> Result<()> {
        let mut slot = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut file) = slot.take() else {
            return Ok(());
        };
        let bytes = pprof::encode(profile)?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .with_context(|| format!("cannot write profile `{}`", self.path.display()))?;
        let path = self.path.display();
        eprintln!(
            "wasmspy: wrote {path} ({} samples, {:.3} s CPU); view it with: go tool pprof -http=: {path}",
            profile.total(SAMPLES),
            profile.total(CPU) as f64 / 1e9,
        );
        Ok(())
    }
}
