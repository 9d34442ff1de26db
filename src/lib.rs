//! wasmspy: a sampling profiler for WebAssembly programs running on Wasmtime.
//!
//! Samples flow one way through four stages, each a folder:
//! - [`capture`] takes samples of the guest's stack: raw program counters or Wasmtime
//!   backtraces, per sampling strategy (one file each), on the sampling path that never waits
//!   for the stages after it;
//! - [`resolve`] maps what was captured to frames of the registered modules: the code map,
//!   host calls named by the import (or the WIT function) called, the allocator rewrite's
//!   offsets, and symbolization (DWARF file:line and inlined frames, names, demangling);
//! - [`record`] aggregates the frames into the format-neutral [`profile`] model, in bounded
//!   memory: totals by stack, the timeline, the heap profile;
//! - [`export`] writes the model in a file format (pprof, Firefox Profiler, speedscope,
//!   flame graph SVG, folded stacks) and reads some back; [`top`] is the terminal report;
//!   [`server`] serves live profiles over HTTP, as Go's `net/http/pprof` does.
//!
//! Around them: [`wasi_host`] runs a WASI command (a preview 1 module or a `wasi:cli`
//! component) as `wasmtime run` does; [`memory`] rewrites a module's (or a component's core
//! modules') allocators for memory profiles; [`wasm`] reads what a binary says (a component's
//! core modules, the WIT functions they lower, demangled names); [`Profiler`] wires the stages for embedders with
//! their own `Engine`/`Store`: see its documentation.

pub mod capture;
pub mod clock;
pub mod diff;
pub mod dump;
pub mod export;
#[doc(hidden)]
pub mod internals;
pub mod live_view;
pub mod memory;
pub mod opcodes;
pub mod perf;
mod pipeline;
pub mod profile;
pub mod profiler;
pub mod record;
pub mod resolve;
pub mod runtimes;
pub mod server;
mod store_labels;
pub mod sync;
pub mod top;
pub mod wasi_host;
pub mod wasm;

pub use profiler::{Profiler, ProfilerHandle, ProfilerOptions};
pub use store_labels::{SampleLabels, StoreLabels};
