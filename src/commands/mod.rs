//! The subcommands: `record` runs and profiles a guest, `serve` serves and profiles a
//! `wasi:http` component (both with [`interrupt`] handling Ctrl-C and SIGTERM, and
//! [`outputs`] writing what they recorded, [`profiled`] setting up the profiler, and
//! [`rewrite`] instrumenting the allocators for a memory profile, [`perf_files`] telling Linux
//! perf of the guest's code, [`request_headers`] setting `serve -H`'s headers, [`instances`] the instances `serve`
//! answers with), `report` and
//! `convert` read profiles back, [`annotate`] lists a profile's functions by Wasm instruction, [`top`] shows the live view of a running guest and [`dump`]
//! its stacks now.

/// `eprintln!` that does not panic where stderr is gone (a closed terminal, whose SIGHUP ends
/// the run): what is said on the way out must not keep the profile from being written.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
pub mod annotate;
pub mod carried_sources;
pub mod dump;
pub mod guest_args;
pub mod instances;
pub mod interrupt;
pub mod module_files;
pub mod outputs;
pub mod perf_files;
pub mod probed_cache;
pub mod profiled;
pub mod profiling_args;
pub mod record;
pub mod report;
pub mod request_headers;
pub mod rewrite;
pub mod serve;
pub mod top;
pub mod v8_wasm;
