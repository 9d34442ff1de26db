//! What `record` and `serve` set up before the guest runs: an engine configured by
//! Wasmtime's options and then for the profiler's, the profiler, and the program as compiled
//! (its allocators rewritten when memory is profiled, a component's runtimes probed).

use crate::capture::SamplerKind;
use crate::clock::Clock;
use crate::Profiler;
use anyhow::Result;
use wasmtime::{Config, Engine};
use wasmtime_cli_flags::CommonOptions;

use super::guest_args::GuestArgs;
use super::profiling_args::ProfilingArgs;
use crate::commands::outputs::{Counts, Outputs};
use crate::commands::probed_cache::ProbedCache;
use crate::commands::rewrite::Instrumented;
use crate::wasi_host::ReadProgram;

pub struct Profiled {
    pub engine: Engine,
    pub profiler: Profiler,
    /// What `--verbose` prints.
    pub counts: Option<Counts>,
    pub rewritten: Instrumented,
}

impl Profiled {
    /// Sampling at `--rate` or `default_rate`; `config` makes the command's engine settings
    /// from Wasmtime's options, told whether the allocators are rewritten. `program` is the
    /// program named `name`, as read.
    pub fn new(
        args: &ProfilingArgs,
        guest: &mut GuestArgs,
        default_rate: u32,
        outputs: &Outputs,
        config: impl FnOnce(&mut CommonOptions, bool) -> Result<Config>,
        program: &ReadProgram,
        name: &str,
    ) -> Result<Self> {
        let timeline = outputs.cpu.iter().any(|o| o.format.shows_time());
        let mut options = args.options(default_rate, timeline)?;
        let timed = options.clock != Clock::Instructions;
        if timed && guest.on_pulley() && options.sampler == SamplerKind::Auto {
            if let Err(e) = crate::capture::signals_sample_pulley() {
                eprintln!("wasmspy: warning: {e:#}; sampling at epochs instead");
                options.sampler = SamplerKind::Epoch;
            }
        }
        if options.clock == Clock::Instructions && guest.wasmtime.wasm.fuel.is_some() {
            anyhow::bail!("-W fuel: --clock instructions gives the guest fuel of its own (more than any run uses)");
        }
        let mut config = config(&mut guest.wasmtime, outputs.memory.is_some())?;
        // As `wasmtime run` and `wasmtime serve`: `-W timeout` stops compiled code at epochs.
        if guest.wasmtime.wasm.timeout.is_some() {
            config.epoch_interruption(true);
        }
        override_for_profiling(guest, &options, &mut config);
        let engine = Engine::new(&config)?;
        let profiler = Profiler::new(&engine, options.clone())?;
        let counts = args.verbose.then(|| Counts::of(&profiler, &options));
        let cache = ProbedCache::of(&guest.wasmtime)?;
        let rewritten = Instrumented::of(
            &engine,
            cache.as_ref(),
            &program.wasm,
            &program.file,
            name,
            outputs.memory.is_some(),
        )?;
        Ok(Profiled {
            engine,
            profiler,
            counts,
            rewritten,
        })
    }
}

/// The engine settings the profiler needs over those Wasmtime's options made, with one line
/// for each option of the user's they override.
fn override_for_profiling(
    guest: &GuestArgs,
    options: &crate::ProfilerOptions,
    config: &mut Config,
) {
    Profiler::configure(config, options);
    let wasmtime = &guest.wasmtime;
    if options.sampler.resolve() == SamplerKind::Epoch
        && wasmtime.wasm.epoch_interruption == Some(false)
    {
        eprintln!("wasmspy: warning: -W epoch-interruption=n overridden: the epoch sampler needs epoch interruption");
    }
    if wasmtime.debug.address_map == Some(false) {
        config.generate_address_map(true);
        eprintln!("wasmspy: warning: -D address-map=n overridden: the profile's source lines and inlined frames come from Wasmtime's address map");
    }
    if wasmtime.debug.max_backtrace.is_some() {
        eprintln!(
            "wasmspy: warning: -D max-backtrace overridden: wasmspy captures up to {} frames",
            crate::shared::MAX_STACK_DEPTH
        );
    }
}
