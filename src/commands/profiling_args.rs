//! How `record` and `serve` sample, and the outputs both have.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;

use crate::capture::SamplerKind;
use crate::clock::Clock;
use crate::export::Format;
use crate::ProfilerOptions;

/// `--host-frames`: what a sample outside the guest's code shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HostFrames {
    All,
    None,
}

/// How to sample, and the outputs both `record` and `serve` have.
#[derive(Args)]
pub struct ProfilingArgs {
    /// The format of every output, whatever their names: pprof, firefox, speedscope, svg,
    /// folded or cpuprofile.
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<Format>,

    /// Write a memory profile here (format chosen as `-o`'s): allocations and in-use memory
    /// by allocation site, from the guest's allocator (C, Rust, Go, TinyGo).
    #[arg(long, value_name = "PATH")]
    pub mem_profile: Option<PathBuf>,

    /// Sample allocations every BYTES bytes on average, as Go's MemProfileRate does, with
    /// values scaled to unbiased estimates; 1 records every allocation.
    #[arg(long, value_name = "BYTES", default_value_t = 512 * 1024, requires = "mem_profile",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub mem_rate: u64,

    /// Serve live profiles at this address while the guest runs, as Go's net/http/pprof does
    /// (`go tool pprof http://ADDR/debug/pprof/profile?seconds=10`).
    #[arg(long, value_name = "ADDR")]
    pub pprof_addr: Option<String>,

    /// The longest CPU profile a request to the live server may ask for.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600, requires = "pprof_addr",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub pprof_max_seconds: u64,

    /// Write the profiles so far every SECONDS seconds (each write replaces the file whole),
    /// so that a run killed without warning (SIGKILL, out of memory) loses at most that much.
    #[arg(long, value_name = "SECONDS", value_parser = flush_interval)]
    pub flush_every: Option<std::time::Duration>,

    /// Samples per second [default: 1000 for record; 100 for serve, Go's net/http/pprof rate,
    /// which a server can afford all the time].
    #[arg(long, value_name = "HZ", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rate: Option<u32>,

    /// How to sample: `signal` (wherever the guest is, host calls included; Linux x86_64 and
    /// aarch64), `epoch` (where compiled code checks Wasmtime's epoch: function entries and
    /// loop headers; the checks slow call-heavy guests by up to a third), or `auto` (signal
    /// where available).
    #[arg(long, value_name = "SAMPLER", default_value = "auto")]
    pub sampler: SamplerKind,

    /// What samples follow: `cpu` (the guest thread's CPU time), `wall` (wall time, so time
    /// the guest spends blocked, e.g. sleeping or reading, is sampled too) or `instructions`
    /// (executed Wasm instructions, counted by Wasmtime's fuel: the same run gives the same
    /// profile on any machine; host calls are not counted; see `--interval`).
    #[arg(long, value_name = "CLOCK", default_value = "cpu")]
    pub clock: Clock,

    /// With `--clock instructions`: a sample every N executed Wasm instructions on average
    /// [default: 1000000], at intervals drawn from a fixed seed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub interval: Option<u64>,

    /// Name functions only: skip the module's DWARF debug info (file:line, inlined frames) and
    /// source maps.
    #[arg(long)]
    pub no_dwarf: bool,

    /// A source map (v3) of the program, of one of a component's core modules, or of a
    /// preloaded module, for file:line where it has no DWARF; may be given several times, each
    /// matched to the module its `file` names, else to one whose code its offsets fall on.
    /// Without it, the map a module's `sourceMappingURL` section points to is read, else
    /// `MODULE.map` beside it.
    #[arg(long, value_name = "FILE", conflicts_with = "no_dwarf")]
    pub source_map: Vec<PathBuf>,

    /// File:line from a module's source map where it has both DWARF and a map (by default
    /// DWARF, which also shows inlined calls).
    #[arg(long, conflicts_with = "no_dwarf")]
    pub prefer_source_map: bool,

    /// Write a jitdump file (`jit-PID.dump`) of the guest's compiled functions with their
    /// source lines, for Linux perf: `perf record -k 1 -- wasmspy record --jitdump …`, then
    /// `perf inject -j`, and `perf report --sort srcline` shows the guest's file:line.
    #[arg(long)]
    pub jitdump: bool,

    /// Write a perf map (`/tmp/perf-PID.map`) of the guest's compiled functions, for Linux perf.
    #[arg(long)]
    pub perfmap: bool,

    /// Samples outside the guest's code: `all` shows the host's own functions (Wasmtime's
    /// instantiation, WASI's host side, the HTTP server, wasmspy's bookkeeping), named from
    /// wasmspy's and its libraries' symbols as Linux perf names them, under the host call's
    /// frame or a `[host]` root; `none` shows one frame, `[wasmtime]` or the host call's
    /// [default: all with the signal sampler].
    #[arg(long, value_name = "FRAMES")]
    pub host_frames: Option<HostFrames>,

    /// CPython guests: show CPython's C (Wasm) frames too, each call of its eval loop replaced
    /// by the Python frames it runs, as py-spy's `--native`; by default, Python frames alone.
    #[arg(long)]
    pub native: bool,

    /// Print where the samples landed (guest code, host calls, the runtime, lost), and how long
    /// compiling and writing the profile took.
    #[arg(short, long)]
    pub verbose: bool,
}

impl ProfilingArgs {
    /// The profiler's options at `--rate` or the command's `default_rate`, with a memory
    /// profile if one is asked for, and the samples' times kept when an output shows a
    /// timeline.
    pub fn options(&self, default_rate: u32, timeline: bool) -> Result<ProfilerOptions> {
        let instructions = self.clock == Clock::Instructions;
        if instructions && self.rate.is_some() {
            bail!("--rate counts samples a second; with --clock instructions, --interval sets how many instructions apart they are");
        }
        if instructions && self.sampler != SamplerKind::Auto {
            bail!(
                "--clock instructions samples where Wasmtime counts fuel: --sampler does not apply"
            );
        }
        if !instructions && self.interval.is_some() {
            bail!("--interval is for --clock instructions");
        }
        if self.host_frames == Some(HostFrames::All)
            && (instructions || self.sampler == SamplerKind::Epoch)
        {
            bail!("--host-frames all needs the signal sampler: the epoch sampler and --clock instructions sample the guest's code alone");
        }
        Ok(ProfilerOptions {
            rate_hz: self.rate.unwrap_or(default_rate),
            sampler: self.sampler,
            clock: self.clock,
            instruction_interval: self
                .interval
                .unwrap_or(crate::profiler::DEFAULT_INSTRUCTION_INTERVAL),
            dwarf: !self.no_dwarf,
            source_maps: self.source_map.clone(),
            prefer_source_maps: self.prefer_source_map,
            runtime_native: self.native,
            mem_rate: self.mem_profile.as_ref().map(|_| self.mem_rate),
            timeline,
            host_frames: self.host_frames != Some(HostFrames::None),
        })
    }

    /// The CPU profile's outputs: those `given`, else `wasmspy.pb.gz` unless a memory profile
    /// or the live server is asked for.
    pub(super) fn default_output(&self, given: &[PathBuf]) -> Vec<PathBuf> {
        if !given.is_empty() {
            given.to_vec()
        } else if self.mem_profile.is_some() || self.pprof_addr.is_some() {
            Vec::new()
        } else {
            vec![PathBuf::from("wasmspy.pb.gz")]
        }
    }
}

/// A positive number of seconds, fractions allowed.
fn flush_interval(s: &str) -> Result<std::time::Duration, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs > 0.0 && secs.is_finite() => {
            std::time::Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"))
        }
        _ => Err(format!("expected a positive number of seconds, got `{s}`")),
    }
}
