//! What an embedder chooses of a [`Profiler`]'s sampling (`wasmspy record`'s options), and
//! the error a guest call returns once a handle interrupts it.

use std::fmt;
use std::path::PathBuf;

use crate::capture::SamplerKind;
use crate::clock::Clock;

#[cfg(doc)]
use super::{Profiler, ProfilerHandle};

/// [`ProfilerOptions::instruction_interval`] by default. Compiled Wasm runs 10^9 to 10^10 of
/// its instructions a second (`local.get` counts one and often costs nothing): a sample every
/// 0.1 to 1 ms of the guest's time (16,000 a second on the bundled example), each costing a
/// few microseconds, for profiles precise enough to diff.
pub const DEFAULT_INSTRUCTION_INTERVAL: u64 = 1_000_000;

/// What a [`Profiler`] samples, how often and how: `wasmspy record`'s options. Built from
/// [`Default`] (1 kHz, the sampler chosen for the platform, CPU time, DWARF read):
///
/// ```
/// use wasmspy::{Clock, ProfilerOptions};
///
/// let options = ProfilerOptions { rate_hz: 4000, clock: Clock::Wall, ..ProfilerOptions::default() };
/// assert!(options.dwarf && options.mem_rate.is_none());
/// ```
#[derive(Clone, Debug)]
pub struct ProfilerOptions {
    /// Samples per second, on the CPU and wall clocks.
    pub rate_hz: u32,
    /// What takes the samples: signals (the default where there are: Linux on x86_64 and
    /// aarch64) or epoch interruption.
    pub sampler: SamplerKind,
    /// What samples follow: CPU time, wall time, or executed Wasm instructions
    /// ([`Clock::Instructions`], whatever `sampler` says).
    pub clock: Clock,
    /// On the instructions clock: a sample every this many executed Wasm instructions on
    /// average.
    pub instruction_interval: u64,
    /// Map code to file:line, inlined calls included, with the modules' DWARF debug info, or
    /// with their source maps (v3) where they have none; when false, profiles name functions
    /// only.
    pub dwarf: bool,
    /// Source maps to use, each matched to the module its `file` names, else to one whose code
    /// its offsets fall on (`wasmspy record --source-map`); besides these, a module's map is
    /// found where its `sourceMappingURL` section points, or beside its file (see
    /// [`Profiler::module_path`]).
    pub source_maps: Vec<PathBuf>,
    /// Where a module has both DWARF and a source map: file:line from the map (DWARF, by
    /// default, also shows inlined calls).
    pub prefer_source_maps: bool,
    /// Profile memory too: sample allocations every this many bytes on average (1: every
    /// allocation). Allocations reach the profiler through [`Profiler::install_allocator_hook`].
    pub mem_rate: Option<u64>,
    /// Guests that run an interpreter (CPython): the interpreted frames interleaved with the
    /// interpreter's own (Wasm) frames, each activation of its eval loop replaced by the
    /// frames it runs, as py-spy's `--native`; when false, the interpreted frames alone, as
    /// py-spy shows Python's by default.
    pub runtime_native: bool,
    /// Keep the samples in time order, for the formats that show a timeline (Firefox
    /// Profiler, speedscope), within a fixed budget. Without it a CPU
    /// profile has one sample per distinct stack, and memory grows with those alone.
    pub timeline: bool,
    /// Samples outside the guest's code (Wasmtime's own work, your host's, WASI's host side,
    /// the host functions the guest calls) show the host's own functions, named from the
    /// executable's and its libraries' symbols and DWARF, as Linux perf names them: under the
    /// host call's frame, or under a `[host]` root for work outside any guest call. Taken by
    /// the signal sampler only. When false, such a sample is one frame, `[wasmtime]` (or the
    /// host call's).
    pub host_frames: bool,
}

impl Default for ProfilerOptions {
    fn default() -> Self {
        ProfilerOptions {
            rate_hz: 1000,
            sampler: SamplerKind::Auto,
            clock: Clock::Cpu,
            instruction_interval: DEFAULT_INSTRUCTION_INTERVAL,
            dwarf: true,
            source_maps: Vec::new(),
            prefer_source_maps: false,
            mem_rate: None,
            runtime_native: false,
            timeline: true,
            host_frames: true,
        }
    }
}

/// The error a guest call returns after [`ProfilerHandle::interrupt`].
#[derive(Debug)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("guest interrupted")
    }
}

impl std::error::Error for Interrupted {}
