//! What the profiler's API fails with: the cases a caller may act on told apart, the rest
//! (Wasmtime, the operating system or a module refusing) with their causes.

use thiserror::Error as ThisError;

/// Why a [`Profiler`](crate::Profiler) or [`ProfilerHandle`](crate::ProfilerHandle) call
/// failed.
///
/// ```
/// use wasmspy::{Clock, Error, Profiler, ProfilerOptions, SamplerKind};
///
/// let engine = wasmtime::Engine::default();
/// let options = ProfilerOptions {
///     clock: Clock::Instructions,
///     sampler: SamplerKind::Epoch,
///     ..ProfilerOptions::default()
/// };
/// // The instructions clock samples where Wasmtime counts fuel: no sampler of time with it.
/// assert!(matches!(Profiler::new(&engine, options), Err(Error::Options(_))));
/// ```
#[derive(Debug, ThisError)]
#[non_exhaustive]
pub enum Error {
    /// The options contradict each other, or the engine they are used with (which
    /// [`Profiler::configure`](crate::Profiler::configure) prepares for them).
    #[error("{0}")]
    Options(&'static str),
    /// What was asked needs a sampler this process cannot have or is not using: signals on a
    /// platform without them, a second signal sampler in one process, too many threads sampled
    /// at once, stack dumps without the signal sampler.
    #[error("{0}")]
    Unavailable(String),
    /// The store was never attached to this profiler.
    #[error("the store is not attached to the profiler")]
    NotAttached,
    /// A module or component whose bytes wasmspy cannot read or rewrite (not valid Wasm, or
    /// of a shape the allocator rewrite does not follow): the error's chain says where.
    #[error("{0:#}")]
    Malformed(anyhow::Error),
    /// Wasmtime, the operating system or a module's bytes refused what the profiler needed
    /// (compiling its probe, a thread, a timer, a signal handler, reading a module): the
    /// error's chain says what and why.
    #[error("{0:#}")]
    Refused(anyhow::Error),
}

impl From<anyhow::Error> for Error {
    /// An [`Error`] that travelled inside an `anyhow::Error` comes out as itself.
    fn from(error: anyhow::Error) -> Self {
        error.downcast::<Error>().unwrap_or_else(Error::Refused)
    }
}

impl From<wasmtime::Error> for Error {
    /// An [`Error`] that travelled inside a `wasmtime::Error` comes out as itself.
    fn from(error: wasmtime::Error) -> Self {
        match error.downcast::<Error>() {
            Ok(error) => error,
            Err(error) => Error::Refused(error.into()),
        }
    }
}
