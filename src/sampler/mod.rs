//! Samplers capture the guest's call stack on a timer and hand each sample to the
//! [`Collector`](crate::collector::Collector). One file per strategy, behind [`Sampler`].

pub mod epoch;

use anyhow::Result;

/// One captured Wasm frame, before symbolization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawFrame {
    /// Index of the module in the collector's registry; `None` for a module nobody registered.
    pub module: Option<u32>,
    /// Index in the module's function index space (imports first).
    pub func_index: u32,
    /// Offset of the instruction in the module's bytes.
    pub offset: u32,
}

/// A sampling strategy. Starting and stopping happen on the thread that owns the profiler;
/// where the samples are taken is the strategy's business.
pub trait Sampler: Send {
    /// Short name recorded in the profile, e.g. `epoch`.
    fn name(&self) -> &'static str;
    fn start(&mut self) -> Result<()>;
    /// After `stop` returns no more samples arrive.
    fn stop(&mut self);
}
