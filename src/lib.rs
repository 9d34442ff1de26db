//! wasmspy: a sampling profiler for WebAssembly programs running on Wasmtime, as a library
//! for hosts that run guests with their own `Engine` and `Store` (the `wasmspy` command line is
//! built on it). The guide below is `docs/library.md`; how the crate is laid out is in
//! `ARCHITECTURE.md`.
//!
//! Features: `cli` (the default) turns on the others and the command line; `wasi`
//! ([`wasi_host`]: WASI commands run as `wasmtime run` runs them, with its Wasmtime features),
//! `server` ([`pprof_http`]: live profiles over HTTP), `flamegraph` (SVG flame graphs). With
//! `default-features = false` the profiler, the profile model, its other formats and the
//! terminal report need none of clap, axum, hyper, inferno, tokio or WASI.
//!
#![doc = include_str!("../docs/library.md")]
// Every item docs.rs shows, documented (with `internals`, the private items the tests reach
// would count too).
#![cfg_attr(not(feature = "internals"), deny(missing_docs))]

// Samples flow one way through four private stages, each a folder: `capture` (samples of the
// guest's stack, on the sampling path that never waits for the stages after it), `resolve`
// (frames of the registered modules, symbolization), `record` (the profile model in bounded
// memory), and the public `export`, `report` and `pprof_http` that write, print and serve it;
// below them all, what they share (`shared`, `profile`, `wasm`). ARCHITECTURE.md lists the
// layers, which tests/architecture.rs keeps.

// The library's API: the profiler, the profile model and its files, the live server, the
// memory rewrite, the WASI runner. Everything else is how they work, private.
pub mod export;
pub mod memory;
#[cfg(feature = "server")]
pub mod pprof_http;
pub mod profile;
pub mod report;
#[cfg(feature = "wasi")]
pub mod wasi_host;

// The samplers, the language runtimes' walks and the guest-memory reader they share run in
// the signal handler (and the rest of them runs beside it): a panic there would abort the
// guest's process. clippy.toml lets their unit tests assert with them.
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable
)]
mod capture;
mod clock;
mod dump;
mod error;
mod pipeline;
mod profiler;
mod record;
mod resolve;
mod runtime_probe;
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable
)]
mod runtimes;
#[deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable
)]
mod shared;
mod store_labels;
mod sync;
mod warning;
mod wasm;

// The `wasmspy` executable: its whole `main` is `wasmspy::cli::main()`; the modules only its
// commands use.
#[cfg(feature = "cli")]
mod annotate;
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod cli;
#[cfg(feature = "cli")]
mod commands;
#[cfg(feature = "cli")]
mod diff;
#[cfg(feature = "cli")]
mod live_view;
#[cfg(feature = "cli")]
mod perf;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals;

pub use capture::SamplerKind;
pub use clock::Clock;
pub use dump::{GuestState, RunningGuest, StackDump};
pub use error::Error;
pub use profiler::{Interrupted, Profiler, ProfilerHandle, ProfilerOptions};
pub use record::{KindCounts, Mark};
pub use resolve::ListedFunction;
pub use runtime_probe::probe_runtimes;
pub use store_labels::{SampleLabels, StoreLabels};
pub use warning::{Warning, WarningKind};
