//! Where profiles go: files written whole and renamed into place (also periodically), and the
//! live pprof server, for `record` and `serve` alike.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::commands::carried_sources;
use crate::export::Format;
use crate::export::WriteError;
use crate::pprof_http::{LiveServer, ServerOptions};
use crate::profile::Profile;
use crate::profile::{ALLOC_OBJECTS, ALLOC_SPACE, CPU, INUSE_SPACE, SAMPLES};
use crate::record::COLLECTED_NOTE;
use crate::sync::lock;
use crate::ProfilerHandle;
use anyhow::{bail, Context, Result};
use tempfile::NamedTempFile;

use super::profiling_args::ProfilingArgs;
use crate::commands::interrupt::{self, GuestEnded};

/// Writes the profiles so far every `every`, until the last write; errors are warned about
/// once.
pub fn flush_periodically(
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
                        say!("wasmspy: warning: {e:#}");
                    }
                }
            }
        })
        .context("cannot start the flush thread")?;
    Ok(())
}

/// On Ctrl-C, SIGTERM or SIGHUP: the profiles so far written, then the exit
/// [`interrupt::stop_guest_on_signals`] makes.
pub fn write_on_signals(
    profiler: ProfilerHandle,
    outputs: Arc<Outputs>,
    ended: GuestEnded,
    verbose: Option<Counts>,
) -> Result<()> {
    let handle = profiler.clone();
    interrupt::stop_guest_on_signals(profiler, ended, move |profile| {
        let _ = std::io::stdout().flush();
        say!("wasmspy: {}", interrupt::ended_by());
        if let Some(counts) = &verbose {
            counts.print(&handle);
        }
        if let Err(e) = outputs.save(&handle, profile) {
            say!("wasmspy: error: {e:#}");
        }
    })
}

/// Starts the live server, warning when it listens beyond this machine.
pub fn start_server(
    profiler: ProfilerHandle,
    addr: &str,
    args: &ProfilingArgs,
    argv: &[String],
) -> Result<LiveServer> {
    let options = ServerOptions {
        max_seconds: args.pprof_max_seconds,
        cmdline: argv.to_vec(),
    };
    let server = LiveServer::start(profiler, addr, options)?;
    let local = server.local_addr();
    if !local.ip().is_loopback() {
        say!("wasmspy: warning: serving profiles on {local}, beyond this machine: profiles reveal the guest's code structure (function names, source files)");
    }
    say!("wasmspy: serving profiles at http://{local}/debug/pprof/");
    Ok(server)
}

/// The profiles asked for.
pub struct Outputs {
    pub cpu: Vec<Output>,
    pub memory: Option<Output>,
}

impl Outputs {
    /// The first profile's path, beside which the sources maps carry are written.
    pub fn first_path(&self) -> Option<&Path> {
        self.cpu
            .iter()
            .chain(&self.memory)
            .next()
            .map(|o| o.path.as_path())
    }

    /// Fails, before the guest runs, where a profile could not be written. `format` is every
    /// output's, or each one's name says.
    pub fn create(cpu: &[PathBuf], memory: Option<&Path>, format: Option<Format>) -> Result<Self> {
        let output = |p: &Path| Output::create(p, Format::for_output(format, p));
        if let Some(memory) = memory {
            if Format::for_output(format, memory) == Format::CpuProfile {
                bail!(
                    "--mem-profile `{}`: a .cpuprofile holds time, not memory: write the memory profile as pprof (.pb.gz) or another format",
                    memory.display()
                );
            }
        }
        Ok(Outputs {
            cpu: cpu.iter().map(|p| output(p)).collect::<Result<_>>()?,
            memory: memory.map(output).transpose()?,
        })
    }

    /// Writes the CPU profile `cpu` to each of its outputs and the memory profile, after the
    /// warnings about them. One output failing does not keep the others from being written.
    pub fn save(&self, profiler: &ProfilerHandle, cpu: &Profile) -> Result<()> {
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
            // Here, not before the guest runs: a component `record` registers is read while
            // its guest runs (see `Resolver::add_component_read_later`).
            if let Some(first) = self.first_path() {
                carried_sources::write(profiler, first);
            }
            print_warnings(profiler);
        }
        let mut result = Ok(());
        // The second value is what the clock measured: CPU nanoseconds, or instructions.
        let measured = match cpu.sample_types.get(CPU) {
            Some(kind) if kind.unit == "count" => format!("{} {}", cpu.total(CPU), kind.kind),
            _ => format!("{:.3} s CPU", cpu.total(CPU) as f64 / 1e9),
        };
        let summary = format!("{} samples, {measured}", cpu.total(SAMPLES));
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

pub fn print_warnings(profiler: &ProfilerHandle) {
    for warning in profiler.take_warnings() {
        say!("wasmspy: warning: {warning}");
    }
}

pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The profile's destination. Each write goes to a temporary file beside it, renamed into
/// place once complete: a run that fails, or is killed, before or while writing leaves
/// whatever was at the path untouched (the last flush, or an older profile). The last write
/// is the main thread's when the guest ends, or the signal thread's when the guest cannot be
/// stopped; nothing is written after it.
pub struct Output {
    path: PathBuf,
    pub format: Format,
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
        lock(&self.state).done
    }

    /// Writes `profile`, unless the last write was made; the last one is reported, with
    /// `summary`, on stderr. A flame graph of nothing is not drawn: the last write warns so.
    fn save(&self, profile: &Profile, summary: &str, save: Save) -> Result<()> {
        let mut state = lock(&self.state);
        if state.done {
            return Ok(());
        }
        state.done = save == Save::Last;
        // Taken out now, so that the last write removes it even when it writes nothing.
        let first = state.first.take();
        let what = || format!("cannot write profile `{}`", self.path.display());
        let mut bytes = Vec::new();
        match self.format.write(profile, &mut bytes) {
            Err(e @ WriteError::NothingToDraw(_)) => {
                if save == Save::Last {
                    say!(
                        "wasmspy: warning: {} not written: {e} (the guest was not sampled)",
                        self.path.display()
                    );
                }
                return Ok(());
            }
            result => result.with_context(what)?,
        }
        let file = match first {
            Some(file) => file,
            None => temp_file_beside(&self.path)?,
        };
        persist(file, &bytes, &self.path).with_context(what)?;
        if save == Save::Last {
            say!(
                "wasmspy: wrote {} ({summary}); view it with: {}",
                self.path.display(),
                self.format.how_to_view(&self.path)
            );
        }
        Ok(())
    }
}

/// Writes `bytes` to `path` whole: into a temporary file beside it, renamed into place once
/// complete, so that a write that fails leaves whatever was there untouched; reported on
/// stderr as the profile of `format` it is.
pub fn write_whole(path: &Path, format: Format, bytes: &[u8]) -> Result<()> {
    replace_whole(path, bytes)?;
    say!(
        "wasmspy: wrote {} ({format}); view it with: {}",
        path.display(),
        format.how_to_view(path)
    );
    Ok(())
}

/// Writes `bytes` to `path` whole, as [`write_whole`] does, saying nothing.
pub fn replace_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    persist(temp_file_beside(path)?, bytes, path)
        .with_context(|| format!("cannot write `{}`", path.display()))
}

/// `bytes` written to `file`, synced, then `file` renamed to `path`.
fn persist(mut file: NamedTempFile, bytes: &[u8], path: &Path) -> std::io::Result<()> {
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
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

/// Where the samples landed, with how they were taken (`--verbose`).
#[derive(Clone)]
pub struct Counts {
    pub sampler: &'static str,
    /// How often it samples: `at 1000 Hz`, `every 1000000 instructions`.
    pub rate: String,
    pub clock: crate::clock::Clock,
}

impl Counts {
    pub fn of(profiler: &crate::Profiler, options: &crate::ProfilerOptions) -> Self {
        let rate = match options.clock {
            crate::clock::Clock::Instructions => {
                format!("every {} instructions", options.instruction_interval)
            }
            _ => format!("at {} Hz", options.rate_hz),
        };
        Counts {
            sampler: profiler.sampler_name(),
            rate,
            clock: options.clock,
        }
    }

    pub fn print(&self, profiler: &ProfilerHandle) {
        let c = profiler.counts();
        say!(
            "wasmspy: {} sampler {} on the {} clock: {} guest, {} host call, {} runtime, {} lost samples",
            self.sampler, self.rate, self.clock, c.guest, c.host_call, c.runtime, c.lost
        );
    }
}
