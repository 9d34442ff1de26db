//! Samplers capture the guest's call stack on a timer and hand each sample to the
//! [`Collector`](crate::collector::Collector). One file per strategy, behind [`Sampler`]:
//! - [`signal`]: a POSIX timer sends SIGPROF to the guest thread, whose handler walks the stack
//!   wherever the guest is (the default on Linux x86_64 and aarch64);
//! - [`epoch`]: Wasmtime's epoch interruption, where compiled code checks for it (everywhere).

pub mod epoch;
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub mod signal;

use anyhow::Result;

/// Whether this build can sample with signals.
pub const SIGNALS_AVAILABLE: bool = cfg!(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
));

/// One captured frame, before symbolization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RawFrame {
    /// An instruction of a Wasm function: the sampled one for the leaf, the call for callers.
    Wasm {
        /// Index in the collector's registry; `None` for a module nobody registered.
        module: Option<u32>,
        /// Index in the module's function index space (imports first).
        func_index: u32,
        /// Offset of the instruction in the module's bytes.
        offset: u32,
    },
    /// Inside the host function that import `func_index` resolved to.
    HostCall {
        module: Option<u32>,
        func_index: u32,
    },
    /// Inside the host function a component's shim reaches with the `call_indirect` at
    /// `offset` (see [`crate::component`]).
    LoweredCall { module: u32, offset: u32 },
    /// Inside a host function the guest reached other than by a direct call.
    UnknownHostCall,
    /// Inside Wasmtime's own code: trampolines, libcalls such as `memory.grow`.
    Runtime,
}

/// What a sample measured since the previous one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleValues {
    pub cpu_ns: u64,
    pub wall_ns: u64,
}

/// Which sampler to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SamplerKind {
    /// Signals where available, else epochs.
    #[default]
    Auto,
    Signal,
    Epoch,
}

impl SamplerKind {
    /// The sampler this choice means on this platform: `Signal` or `Epoch`.
    pub fn resolve(self) -> SamplerKind {
        match self {
            SamplerKind::Auto if SIGNALS_AVAILABLE => SamplerKind::Signal,
            SamplerKind::Auto => SamplerKind::Epoch,
            chosen => chosen,
        }
    }
}

impl std::str::FromStr for SamplerKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(SamplerKind::Auto),
            "signal" => Ok(SamplerKind::Signal),
            "epoch" => Ok(SamplerKind::Epoch),
            _ => Err(format!("expected auto, signal or epoch, got `{s}`")),
        }
    }
}

/// A sampling strategy.
pub trait Sampler: Send {
    /// Short name recorded in the profile, e.g. `signal`.
    fn name(&self) -> &'static str;
    /// Makes the calling thread the one sampled; called on the thread that will run the guest.
    fn bind_to_current_thread(&mut self) -> Result<()>;
    fn start(&mut self) -> Result<()>;
    /// After `stop` returns no more samples arrive.
    fn stop(&mut self);
    /// True when samples are taken in the store's epoch-deadline callback.
    fn samples_at_epochs(&self) -> bool {
        false
    }
}
