//! wasmspy: a sampling profiler for WebAssembly programs running on Wasmtime.
//!
//! Samples flow one way through four stages, each a folder (private: the API is what this page
//! lists):
//! - `capture` takes samples of the guest's stack: raw program counters or Wasmtime
//!   backtraces, per sampling strategy (one file each), on the sampling path that never waits
//!   for the stages after it;
//! - `resolve` maps what was captured to frames of the registered modules: the code map,
//!   host calls named by the import (or the WIT function) called, the allocator rewrite's
//!   offsets, and symbolization (DWARF file:line and inlined frames, names, demangling);
//! - `record` aggregates the frames into the format-neutral [`profile`] model, in bounded
//!   memory: totals by stack, the timeline, the heap profile;
//! - [`export`] writes the model in a file format (pprof, Firefox Profiler, speedscope,
//!   flame graph SVG, folded stacks) and reads some back; `top` is the terminal report;
//!   [`server`] serves live profiles over HTTP, as Go's `net/http/pprof` does.
//!
//! Around them: [`wasi_host`] runs a WASI command (a preview 1 module or a `wasi:cli`
//! component) as `wasmtime run` does; [`memory`] rewrites a module's (or a component's core
//! modules') allocators for memory profiles; `wasm` reads what a binary says (a component's
//! core modules, the WIT functions they lower, demangled names); [`Profiler`] wires the stages for embedders with
//! their own `Engine`/`Store`: see its documentation.

// The library's API: the profiler, the profile model and its files, the live server, the
// memory rewrite, the WASI runner. Everything else is how they work, private.
pub mod export;
pub mod memory;
pub mod profile;
pub mod server;
pub mod wasi_host;

mod capture;
mod clock;
mod diff;
mod dump;
mod live_view;
mod opcodes;
mod perf;
mod pipeline;
mod profiler;
mod record;
mod resolve;
mod runtimes;
mod store_labels;
mod sync;
mod top;
mod wasm;

// The `wasmspy` executable: its whole `main` is `wasmspy::cli::main()`.
#[doc(hidden)]
pub mod cli;
mod commands;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals;

/// The terminal report of a profile: `wasmspy report`'s table, as `go tool pprof -top`'s.
pub mod report {
    pub use crate::top::{top, Row, Top};
}

pub use capture::SamplerKind;
pub use clock::Clock;
pub use dump::{GuestState, RunningGuest, StackDump};
pub use profiler::{Interrupted, Profiler, ProfilerHandle, ProfilerOptions};
pub use record::{KindCounts, Mark};
pub use resolve::ListedFunction;
pub use runtimes::in_component::probe_runtimes;
pub use store_labels::{SampleLabels, StoreLabels};
