//! wasmspy: a sampling profiler for WebAssembly programs running on Wasmtime.
//!
//! The pieces, each in its own module:
//! - [`wasi_host`] runs a WASI command (a preview 1 module or a `wasi:cli` component) as
//!   `wasmtime run` does;
//! - [`sampler`] takes samples of the guest's stack (one file per sampling strategy);
//! - [`component`] reads what a component's profile needs from its binary (its core modules,
//!   the WIT functions their imports lower);
//! - [`symbolize`] maps the sampled code to source: DWARF file:line and inlined frames, the
//!   name section, demangling;
//! - [`collector`] turns raw samples into the format-neutral [`profile`] model;
//! - [`export`] writes the model in a file format (pprof, Firefox Profiler, speedscope,
//!   flame graph SVG, folded stacks) and reads some back;
//! - [`top`] is the terminal report, numbers as `go tool pprof -top` prints them;
//! - [`memory`] rewrites a module's (or a component's core modules') allocators for memory
//!   profiles;
//! - [`server`] serves live profiles over HTTP, as Go's `net/http/pprof` does.
//!
//! Embedders with their own `Engine`/`Store` use [`Profiler`]: see its documentation.

pub mod clock;
pub mod code_map;
pub mod collector;
pub mod component;
pub mod export;
pub mod memory;
pub mod profile;
pub mod profiler;
pub mod sampler;
pub mod server;
pub mod symbolize;
pub mod timeline;
pub mod top;
pub mod wasi_host;

pub use profiler::{Profiler, ProfilerHandle, ProfilerOptions};
