//! The command line, in one place.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};

use crate::capture::SamplerKind;
use crate::clock::Clock;
use crate::export::Format;
use crate::live_view::SortBy;
use crate::wasi_host::{DirMount, UnknownImports, WasiConfig};
use crate::ProfilerOptions;
use clap::{Args, Parser, Subcommand};
use wasmtime_cli_flags::CommonOptions;

#[derive(Parser)]
#[command(
    name = "wasmspy",
    version,
    about = "A sampling profiler for WebAssembly programs running on Wasmtime"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run a WASI program as `wasmtime run` would, and write a CPU profile of it.
    Record(RecordArgs),
    /// Serve a wasi:http/proxy component as `wasmtime serve` would, and profile every request.
    Serve(ServeArgs),
    /// Print a profile's top functions (or lines), as `go tool pprof -top` does.
    Report(ReportArgs),
    /// Write a profile in another format.
    Convert(ConvertArgs),
    /// Compare two profiles: what grew and what shrank, totals first, and a verdict for CI.
    Diff(DiffArgs),
    /// Show the functions taking a running guest's CPU now, refreshed, from its live server
    /// (`record --pprof-addr`, `serve --pprof-addr`), as py-spy's `top` does.
    Top(TopArgs),
    /// Print the stack of every guest running now, from its live server (`record
    /// --pprof-addr`, `serve --pprof-addr`), as py-spy's `dump` does: each request with its
    /// labels and how long it has run.
    Dump(DumpArgs),
}

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct DumpArgs {
    /// The live server: `http://127.0.0.1:6060`, `127.0.0.1:6060`, or `:6060` on loopback.
    #[arg(value_name = "ADDR")]
    pub addr: String,
}

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct TopArgs {
    /// The live server: `http://127.0.0.1:6060`, `127.0.0.1:6060`, or `:6060` on loopback.
    #[arg(value_name = "ADDR")]
    pub addr: String,

    /// The column the functions are sorted by: `own` (their time as the leaf) or `total`
    /// (anywhere on the stack); keys `o` and `t` switch it.
    #[arg(long, value_name = "COLUMN", default_value = "own")]
    pub sort: SortBy,

    /// Seconds between refreshes: each shows the CPU of the seconds before it.
    #[arg(long, value_name = "SECONDS", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub refresh: u64,
}

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct DiffArgs {
    /// The profile before (of the main branch, say): pprof, speedscope JSON, `.cpuprofile` or
    /// folded stacks.
    #[arg(value_name = "BASE")]
    pub base: PathBuf,

    /// The profile after (of the change).
    #[arg(value_name = "NEW")]
    pub new: PathBuf,

    /// Also write the difference, in the format its name says: `.svg`, a differential flame
    /// graph of NEW (red: grew, blue: shrank); `.pb.gz` (pprof), NEW's samples with BASE's
    /// negated, which `go tool pprof` shows as the difference, as `-diff_base` makes it; may
    /// be given several times.
    #[arg(short, long, value_name = "OUT")]
    pub output: Vec<PathBuf>,

    /// The sample type to compare, by name (`cpu`, `samples`, `instructions`...) or index;
    /// BASE's default unless given. Profiles of time are compared by share (NEW scaled to
    /// BASE's total), profiles of instructions as they are.
    #[arg(long, value_name = "TYPE")]
    pub sample_index: Option<String>,

    /// A row per source line rather than per function.
    #[arg(long)]
    pub lines: bool,

    /// Print only the first N rows.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,

    /// Exit with 1, saying why in one line, when NEW's total exceeds BASE's by more than PCT
    /// percent.
    #[arg(long, value_name = "PCT")]
    pub fail_above: Option<f64>,

    /// Exit with 1, saying why in one line, when a function's cumulative value in NEW exceeds
    /// its value in BASE by more than PCT percent (a function under 1 % of BASE's total: by
    /// more than PCT percent of that total).
    #[arg(long, value_name = "PCT")]
    pub fail_above_function: Option<f64>,
}

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct ReportArgs {
    /// The profile: pprof (ours, Go's, pprof-rs's...), speedscope JSON, `.cpuprofile` (V8's
    /// too) or folded stacks.
    #[arg(value_name = "PROFILE")]
    pub profile: PathBuf,

    /// The sample type to rank by, by name (`cpu`, `samples`, `alloc_space`...) or index;
    /// the profile's default unless given.
    #[arg(long, value_name = "TYPE")]
    pub sample_index: Option<String>,

    /// A row per source line rather than per function.
    #[arg(long)]
    pub lines: bool,

    /// Self time per Pulley opcode and per adjacent opcode pair (a profile recorded with
    /// `--target pulley64`), rather than per function.
    #[arg(long, conflicts_with = "lines")]
    pub opcodes: bool,

    /// Print only the first N rows.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
}

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct ConvertArgs {
    /// The profile to read: pprof, speedscope JSON, `.cpuprofile` (V8's too) or folded stacks.
    #[arg(value_name = "IN")]
    pub input: PathBuf,

    /// Where to write it, in the format its name says (or `--format`'s).
    #[arg(short, long, value_name = "OUT", required = true)]
    pub output: PathBuf,

    /// The output's format: pprof, firefox, speedscope, svg, folded or cpuprofile.
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<Format>,

    /// For the single-valued formats (svg, folded): the sample type to draw, by name or index;
    /// the profile's default unless given.
    #[arg(long, value_name = "TYPE")]
    pub sample_index: Option<String>,

    /// A Wasm module that a V8 `.cpuprofile` (Node's `--cpu-prof`, Chrome DevTools) shows as
    /// `wasm://wasm/...` frames: its functions named from its name section and DWARF, with
    /// file and line; may be given several times, each module found by its code.
    #[arg(long, value_name = "MODULE")]
    pub wasm: Vec<PathBuf>,

    /// The DWARF of a `--wasm` module that was split off (Emscripten's `-gseparate-dwarf`),
    /// where it is not beside the module under the name the module gives it; may be given
    /// several times, each matched to its module by its code.
    #[arg(long, value_name = "FILE", requires = "wasm")]
    pub debug_file: Vec<PathBuf>,
}

#[derive(Args)]
#[command(arg_required_else_help = true)]
pub struct RecordArgs {
    /// Where to write the CPU profile, in the format its name says: `.pb.gz`/`.pprof`
    /// (pprof, also for other names), `.json` (Firefox Profiler), `.speedscope.json`, `.svg`
    /// (flame graph), `.folded`, `.cpuprofile` (VS Code, Chrome DevTools); may be given
    /// several times; `wasmspy.pb.gz` unless only a
    /// memory profile is asked for.
    #[arg(short, long, value_name = "PATH")]
    pub output: Vec<PathBuf>,

    /// Keep the live server up after the guest exits, until Ctrl-C, so that its last
    /// profiles can still be fetched.
    #[arg(long, requires = "pprof_addr")]
    pub serve_after_exit: bool,

    /// Show the functions taking the CPU now, refreshed every second, on the terminal
    /// (`/dev/tty`: the guest's stdout and stderr stay the guest's), as `wasmspy top` does.
    #[arg(long)]
    pub top: bool,

    /// With `--top`: the column the functions are sorted by, `own` or `total`.
    #[arg(long, value_name = "COLUMN", default_value = "own", requires = "top")]
    pub top_sort: SortBy,

    #[command(flatten)]
    pub profiling: ProfilingArgs,

    #[command(flatten)]
    pub guest: GuestArgs,

    /// The function to run
    ///
    /// When used with modules, this must be the export name of a function.
    /// Arguments to the function are parsed from trailing arguments provided
    /// after all options.
    ///
    /// When used with components, this must be a wave-encoded function call,
    /// e.g. `wasi:cli/run.run@0.2.0()` or
    /// `your:pkg/iface.func("arguments in wave encoding")`. Bare function
    /// names (e.g. `run()`) are accepted and searched for in all exported
    /// instances, and must be unambigious.
    #[arg(long, value_name = "FUNCTION", help_heading = WASMTIME)]
    pub invoke: Option<String>,

    /// Load the given WebAssembly module before the main module
    #[arg(long = "preload", number_of_values = 1, value_name = "NAME=MODULE_PATH",
          value_parser = preload, help_heading = WASMTIME)]
    pub preloads: Vec<(String, PathBuf)>,

    /// Override the value of `argv[0]`, typically the name of the executable of
    /// the application being run.
    #[arg(long, help_heading = WASMTIME)]
    pub argv0: Option<String>,

    /// The WebAssembly module or component to run (binary or text).
    #[arg(value_name = "MODULE")]
    pub module: PathBuf,

    /// Arguments for the guest (with `--invoke` on a module, the function's arguments).
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub args: Vec<String>,
}

#[derive(Args)]
#[command(arg_required_else_help = true)]
pub struct ServeArgs {
    /// Where to write the CPU profile of every request (see `record -o`); may be given several
    /// times; `wasmspy.pb.gz` unless only the live server is asked for. Written when the
    /// server stops (Ctrl-C, SIGTERM), and every `--flush-every` seconds.
    #[arg(short, long, value_name = "PATH")]
    pub output: Vec<PathBuf>,

    /// Socket address for the web server to bind to.
    #[arg(long, value_name = "SOCKADDR", default_value = "0.0.0.0:8080", help_heading = WASMTIME_SERVE)]
    pub addr: std::net::SocketAddr,

    /// Socket address where, when connected to, will initiate a graceful
    /// shutdown: no new connection is taken, the requests in flight are answered, the profile
    /// is written and wasmspy exits with 0.
    ///
    /// Note that graceful shutdown is also supported on ctrl-c.
    #[arg(long, value_name = "SOCKADDR", help_heading = WASMTIME_SERVE)]
    pub shutdown_addr: Option<std::net::SocketAddr>,

    /// Disable log prefixes of wasi-http handlers.
    /// if unspecified, logs will be prefixed with 'stdout|stderr [{req_id}] :: '
    #[arg(long, help_heading = WASMTIME_SERVE)]
    pub no_logging_prefix: bool,

    /// Replace or add a request header before forwarding it to the component.
    ///
    /// The argument must have the form `name: value`. May be specified more
    /// than once. An argument beginning with `@` is treated as a file containing
    /// one header per line.
    #[arg(short = 'H', long = "header", value_name = "HEADER", help_heading = WASMTIME_SERVE)]
    pub headers: Vec<String>,

    /// Maximum number of concurrent requests that can be processed at any one
    /// point in time.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), help_heading = WASMTIME_SERVE)]
    pub max_concurrent_requests: Option<u32>,

    /// Maximum number of concurrent connections that can be held at any one
    /// point in time.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), help_heading = WASMTIME_SERVE)]
    pub max_concurrent_connections: Option<u32>,

    /// Maximum number of requests to send to a single component instance before
    /// dropping it.
    ///
    /// This defaults to 1 for WASIp2 components and 128 for WASIp3 components.
    #[arg(long, help_heading = WASMTIME_SERVE)]
    pub max_instance_reuse_count: Option<usize>,

    /// Maximum number of concurrent requests to send to a single component
    /// instance.
    ///
    /// This defaults to 1 for WASIp2 components and 16 for WASIp3 components.
    /// Note that setting it to more than 1 will have no effect for WASIp2
    /// components since they cannot be called concurrently.
    #[arg(long, help_heading = WASMTIME_SERVE)]
    pub max_instance_concurrent_reuse_count: Option<usize>,

    /// Time to hold an idle component instance for possible reuse before
    /// dropping it.
    ///
    /// A number with no suffix or with an `s` suffix is interpreted as seconds;
    /// other accepted suffixes include `ms` (milliseconds), `us` or `μs`
    /// (microseconds), and `ns` (nanoseconds).
    #[arg(long, default_value = "1s", value_parser = parse_duration, help_heading = WASMTIME_SERVE)]
    pub idle_instance_timeout: std::time::Duration,

    #[command(flatten)]
    pub profiling: ProfilingArgs,

    #[command(flatten)]
    pub guest: GuestArgs,

    /// The `wasi:http/proxy` component to serve.
    #[arg(value_name = "COMPONENT")]
    pub component: PathBuf,
}

/// `record`'s sampling rate by default.
pub const RECORD_RATE: u32 = 1000;
/// `serve`'s: a server is profiled for as long as it runs, at what Go's net/http/pprof takes.
pub const SERVE_RATE: u32 = 100;

/// The heading of the options that are `wasmtime run`'s (and, but `--invoke`, `--preload`
/// and `--argv0`, `wasmtime serve`'s).
const WASMTIME: &str = "Wasmtime's options";
/// The heading of wasmspy's own options that say what the guest is given.
const WASMSPY: &str = "wasmspy's options for the guest";
/// The heading of the options that are `wasmtime serve`'s alone.
const WASMTIME_SERVE: &str = "Options of `wasmtime serve`";

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

    /// Name functions only: skip the module's DWARF debug info (file:line, inlined frames).
    #[arg(long)]
    pub no_dwarf: bool,

    /// Write a jitdump file (`jit-PID.dump`) of the guest's compiled functions with their
    /// source lines, for Linux perf: `perf record -k 1 -- wasmspy record --jitdump …`, then
    /// `perf inject -j`, and `perf report --sort srcline` shows the guest's file:line.
    #[arg(long)]
    pub jitdump: bool,

    /// Write a perf map (`/tmp/perf-PID.map`) of the guest's compiled functions, for Linux perf.
    #[arg(long)]
    pub perfmap: bool,

    /// CPython guests: show CPython's C (Wasm) frames too, each call of its eval loop replaced
    /// by the Python frames it runs, as py-spy's `--native`; by default, Python frames alone.
    #[arg(long)]
    pub native: bool,

    /// Print where the samples landed (guest code, host calls, the runtime, lost), and how long
    /// compiling and writing the profile took.
    #[arg(short, long)]
    pub verbose: bool,
}

/// What the guest is given, as `wasmtime run` and `wasmtime serve` spell it: their options,
/// `-O`/`-C`/`-D`/`-W`/`-S` parsed and applied by Wasmtime's own crate for them.
#[derive(Args)]
pub struct GuestArgs {
    #[command(flatten, next_help_heading = WASMTIME)]
    pub wasmtime: CommonOptions,

    /// Grant access of a host directory to a guest.
    ///
    /// If specified as just `HOST_DIR` then the same directory name on the
    /// host is made available within the guest. If specified as `HOST::GUEST`
    /// then the `HOST` directory is opened and made available as the name
    /// `GUEST` in the guest.
    #[arg(long = "dir", value_name = "HOST_DIR[::GUEST_DIR]", help_heading = WASMTIME)]
    pub dirs: Vec<DirMount>,

    /// Pass an environment variable to the program.
    ///
    /// The `--env FOO=BAR` form will set the environment variable named `FOO`
    /// to the value `BAR` for the guest program using WASI. The `--env FOO`
    /// form will set the environment variable named `FOO` to the same value it
    /// has in the calling process for the guest, or in other words it will
    /// cause the environment variable `FOO` to be inherited.
    #[arg(long = "env", number_of_values = 1, value_name = "NAME[=VAL]", help_heading = WASMTIME)]
    pub env: Vec<String>,

    /// Profiling strategy: wasmspy takes `perfmap` and `jitdump` (as `--perfmap` and
    /// `--jitdump`); `guest`, `vtune` and `pulley` are refused (wasmspy is the profiler).
    #[arg(long, value_name = "STRATEGY", help_heading = WASMTIME)]
    pub profile: Option<String>,

    /// Allow executing precompiled WebAssembly modules as `*.cwasm` files: refused, as
    /// wasmspy names functions from the WebAssembly a program was compiled from.
    #[arg(long, help_heading = WASMTIME)]
    pub allow_precompiled: bool,

    /// Give the guest all of the host's environment variables (as `-S inherit-env`).
    #[arg(long, help_heading = WASMSPY)]
    pub inherit_env: bool,

    /// Define imports nothing provides as functions that return zeros (e.g. Sightglass's
    /// `bench.start`/`bench.end`), for components too; `-W unknown-imports-default` means
    /// the same here.
    #[arg(long, conflicts_with = "trap_unknown_imports", help_heading = WASMSPY)]
    pub default_values_unknown_imports: bool,

    /// Define imports nothing provides as functions that fail when called (for a component,
    /// WASI's left to WASI); `-W unknown-imports-trap` means the same here.
    #[arg(long, help_heading = WASMSPY)]
    pub trap_unknown_imports: bool,
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
        Ok(ProfilerOptions {
            rate_hz: self.rate.unwrap_or(default_rate),
            sampler: self.sampler,
            clock: self.clock,
            instruction_interval: self
                .interval
                .unwrap_or(crate::profiler::DEFAULT_INSTRUCTION_INTERVAL),
            dwarf: !self.no_dwarf,
            runtime_native: self.native,
            mem_rate: self.mem_profile.as_ref().map(|_| self.mem_rate),
            timeline,
        })
    }

    /// The CPU profile's outputs: those `given`, else `wasmspy.pb.gz` unless a memory profile
    /// or the live server is asked for.
    fn default_output(&self, given: &[PathBuf]) -> Vec<PathBuf> {
        if !given.is_empty() {
            given.to_vec()
        } else if self.mem_profile.is_some() || self.pprof_addr.is_some() {
            Vec::new()
        } else {
            vec![PathBuf::from("wasmspy.pb.gz")]
        }
    }
}

impl RecordArgs {
    /// Where the CPU profile goes, if one is wanted: `wasmspy.pb.gz` unless nothing but a
    /// memory profile or the live server is asked for.
    pub fn cpu_outputs(&self) -> Vec<PathBuf> {
        self.profiling.default_output(&self.output)
    }
}

impl ServeArgs {
    /// Where the CPU profile goes, if one is wanted: `wasmspy.pb.gz` unless nothing but a
    /// memory profile or the live server is asked for.
    pub fn cpu_outputs(&self) -> Vec<PathBuf> {
        self.profiling.default_output(&self.output)
    }
}

impl GuestArgs {
    /// Whether `--target` is Pulley's: the interpreter runs the guest, not compiled code.
    pub fn on_pulley(&self) -> bool {
        self.wasmtime
            .target
            .as_deref()
            .is_some_and(|t| t.starts_with("pulley"))
    }

    /// Reads `--config` and the option groups: Wasmtime's own step before it uses them (and
    /// where `-D logging` starts its log). Once, before anything reads them.
    pub fn configure(&mut self) -> Result<()> {
        self.wasmtime.init_logging().map_err(anyhow::Error::from)?;
        if self.wasmtime.debug.debugger.is_some() {
            bail!("-D debugger: wasmspy runs no debugger component; debug the program under `wasmtime run`");
        }
        if self.allow_precompiled {
            bail!("--allow-precompiled: wasmspy names functions from the WebAssembly, so profile the `.wasm` the program was compiled from");
        }
        Ok(())
    }

    fn unknown_imports(&self) -> UnknownImports {
        if self.default_values_unknown_imports {
            UnknownImports::DefaultValues
        } else if self.trap_unknown_imports {
            UnknownImports::Trap
        } else {
            UnknownImports::Reject
        }
    }

    /// `--profile` as wasmspy takes it: (`--perfmap`, `--jitdump`).
    pub fn perf_profile(&self) -> Result<(bool, bool)> {
        match self.profile.as_deref() {
            None => Ok((false, false)),
            Some("perfmap") => Ok((true, false)),
            Some("jitdump") => Ok((false, true)),
            Some(other) if other.starts_with("guest") => bail!(
                "--profile={other}: wasmspy is the guest profiler; its profile goes where -o says"
            ),
            Some(other) => bail!(
                "--profile={other}: wasmspy takes --profile=perfmap or --profile=jitdump (it is the profiler itself)"
            ),
        }
    }

    /// The guest's environment: the host's with `--inherit-env` (or `-S inherit-env`), then
    /// each `--env`.
    pub fn guest_env(&self) -> Result<Vec<(String, String)>> {
        let inherit = self.inherit_env || self.wasmtime.wasi.inherit_env == Some(true);
        let mut env: Vec<(String, String)> = Vec::new();
        if inherit {
            for (name, value) in std::env::vars_os() {
                let name = name
                    .into_string()
                    .map_err(|n| anyhow!("environment variable name {n:?} not valid utf-8"))?;
                let value = value.into_string().map_err(|v| {
                    anyhow!("environment variable {name:?} value {v:?} not valid utf-8")
                })?;
                env.push((name, value));
            }
        }
        for spec in &self.env {
            let (name, value) = match spec.split_once('=') {
                Some((name, value)) => (name.to_string(), Some(value.to_string())),
                None => (spec.clone(), std::env::var(spec).ok()),
            };
            env.retain(|(n, _)| *n != name);
            if let Some(value) = value {
                env.push((name, value));
            }
        }
        Ok(env)
    }

    /// What the guest is given, `argv` as its command line.
    pub fn wasi_config(&self, argv: Vec<String>) -> Result<WasiConfig> {
        Ok(WasiConfig {
            argv,
            env: self.guest_env()?,
            dirs: self.dirs.clone(),
            unknown_imports: self.unknown_imports(),
            wasi: self.wasmtime.wasi.clone(),
            wasm: self.wasmtime.wasm.clone(),
            coredump: self.wasmtime.debug.coredump.clone(),
            ..WasiConfig::default()
        })
    }
}

/// `NAME=MODULE_PATH`.
fn preload(s: &str) -> Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((name, path)) => Ok((name.to_string(), path.into())),
        None => Err("must contain exactly one equals character ('=')".to_string()),
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

/// `--idle-instance-timeout`: a duration as Wasmtime's options write one.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    use wasmtime_cli_flags::opt::WasmtimeOptionValue;
    std::time::Duration::parse(Some(s)).map_err(|e| e.to_string())
}
