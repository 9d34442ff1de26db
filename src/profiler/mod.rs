//! The profiler as embedders use it, with their own Wasmtime `Engine` and `Store`:
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use wasmspy::{Profiler, ProfilerOptions};
//! let options = ProfilerOptions::default();
//! let mut config = wasmtime::Config::new();
//! Profiler::configure(&mut config, &options); // only what the chosen sampler needs
//! let engine = wasmtime::Engine::new(&config)?;
//! let wasm: std::sync::Arc<[u8]> = std::fs::read("app.wasm")?.into();
//! let module = wasmtime::Module::new(&engine, &wasm)?;
//!
//! let mut profiler = Profiler::new(&engine, options)?;
//! profiler.add_module("app.wasm", &module, wasm.clone())?;
//! let mut store = wasmtime::Store::new(&engine, ());
//! profiler.attach(&mut store)?; // on the thread that will run the guest
//! profiler.start()?;
//! // ... instantiate and call into the guest ...
//! let profile = profiler.stop();
//! for warning in profiler.handle().take_warnings() {
//!     eprintln!("warning: {warning}"); // e.g. no DWARF: functions without file:line
//! }
//! std::fs::write("app.pb.gz", wasmspy::export::pprof::encode(&profile)?)?;
//! # Ok(()) }
//! ```
//!
//! One job a file: [`options`] what an embedder chooses; [`modules`] registering code;
//! [`attach`] attaching stores and threads; [`runtime_instances`] showing the samplers the
//! instances of language runtimes; [`allocator_hook`] the heap profile's hook;
//! [`while_running`] what a handle does while the guest runs; [`signal_sampler`] what the
//! signal sampler needs, where there is one. Here: the [`Profiler`] and its
//! [`ProfilerHandle`], made, started and stopped.

mod allocator_hook;
mod attach;
mod attached_stores;
mod modules;
mod options;
mod runtime_instances;
mod signal_sampler;
mod while_running;

use std::num::NonZeroUsize;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::Error;
use crate::warning::Warning;
use wasmtime::{Config, Engine};

use crate::capture::allocations::Allocations;
use crate::capture::epoch::EpochSampler;
use crate::capture::instructions::InstructionSampler;
use crate::capture::{Sampler, SamplerKind, StoreKeeper, SIGNALS_AVAILABLE};
use crate::clock::Clock;
use crate::pipeline::Pipeline;
use crate::profile::Profile;
use crate::record::Recorder;
use crate::resolve::symbolize::source_map::SourceMapSearch;
use crate::resolve::Resolver;
use crate::runtimes::Runtime;
pub use crate::shared::MAX_STACK_DEPTH;
use crate::sync::lock;

#[cfg(feature = "wasi")]
pub(crate) use attach::{Attachment, KeepsAttachment};
use attached_stores::AttachedStores;
// `ProfilerOptions`, `Interrupted` and `DEFAULT_INSTRUCTION_INTERVAL`: a glob, as only the
// command line (the `cli` feature) uses the interval by this path.
pub use options::*;
use signal_sampler::{new_signal_sampler, use_walkable_fiber_stacks, StoreContexts};

/// The API's results: [`Error`] tells its cases apart.
type Result<T, E = Error> = std::result::Result<T, E>;

static NEXT_PROFILER_ID: AtomicU64 = AtomicU64::new(1);

/// The sampler, as every handle of a profiler shares it.
type SharedSampler = Mutex<Box<dyn Sampler>>;

/// A profiler attached to an embedder's own engine: modules registered with it (its names,
/// lines and runtimes read from their bytes), the stores attached to it sampled, on whichever
/// thread runs them, from [`start`](Self::start) to [`stop`](Self::stop), which returns the
/// profile. [`handle`](Self::handle) gives what other threads use meanwhile.
///
/// ```
/// use wasmspy::profile::CPU;
/// use wasmspy::{Profiler, ProfilerOptions};
///
/// # fn main() -> anyhow::Result<()> {
/// let options = ProfilerOptions::default();
/// let mut config = wasmtime::Config::new();
/// Profiler::configure(&mut config, &options);
/// let engine = wasmtime::Engine::new(&config)?;
/// let wasm = wat::parse_str(
///     r#"(module (func $spin (export "spin") (param $n i32)
///           (loop $l (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))))"#,
/// )?;
/// let module = wasmtime::Module::new(&engine, &wasm)?;
///
/// let mut profiler = Profiler::new(&engine, options)?;
/// profiler.add_module("spin.wasm", &module, wasm.as_slice())?;
/// let mut store = wasmtime::Store::new(&engine, ());
/// profiler.attach(&mut store)?;
/// let instance = wasmtime::Instance::new(&mut store, &module, &[])?;
/// profiler.attach_instance(&mut store, &instance)?;
///
/// profiler.start()?;
/// let spin = instance.get_typed_func::<i32, ()>(&mut store, "spin")?;
/// spin.call(&mut store, 200_000_000)?;
/// let profile = profiler.stop();
///
/// // The CPU time is the loop's.
/// let spun: i64 = profile
///     .samples
///     .iter()
///     .filter(|s| profile.frame_name(profile.stacks[s.stack][0]) == "spin")
///     .map(|s| s.values[CPU])
///     .sum();
/// assert!(spun * 10 > profile.total(CPU) * 9);
/// std::fs::write(
///     std::env::temp_dir().join("spin.pb.gz"),
///     wasmspy::export::pprof::encode(&profile)?,
/// )?;
/// # Ok(())
/// # }
/// ```
pub struct Profiler {
    handle: ProfilerHandle,
}

/// What other threads may do with a running profiler: attach their stores, read the profile
/// so far, or stop the guest.
///
/// ```
/// use wasmspy::{Profiler, ProfilerOptions};
/// # fn main() -> anyhow::Result<()> {
/// let options = ProfilerOptions::default();
/// let mut config = wasmtime::Config::new();
/// Profiler::configure(&mut config, &options);
/// let engine = wasmtime::Engine::new(&config)?;
/// let wasm = wat::parse_str(
///     r#"(module (func $spin (export "spin") (param $n i32)
///           (loop $l (br_if $l (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))))"#,
/// )?;
/// let module = wasmtime::Module::new(&engine, &wasm)?;
/// let mut profiler = Profiler::new(&engine, options)?;
/// profiler.add_module("spin.wasm", &module, wasm.as_slice())?;
/// profiler.start()?;
///
/// // Two threads, a store each, their samples labeled with the tenant each serves.
/// let threads: Vec<_> = ["acme", "globex"]
///     .into_iter()
///     .map(|tenant| {
///         let (handle, engine, module) = (profiler.handle(), engine.clone(), module.clone());
///         std::thread::spawn(move || -> anyhow::Result<()> {
///             let mut store = wasmtime::Store::new(&engine, ());
///             handle.attach_with_labels(&mut store, &[("tenant", tenant)])?;
///             let instance = wasmtime::Instance::new(&mut store, &module, &[])?;
///             let spin = instance.get_typed_func::<i32, ()>(&mut store, "spin")?;
///             Ok(spin.call(&mut store, 100_000_000)?)
///         })
///     })
///     .collect();
/// for thread in threads {
///     thread.join().unwrap()?;
/// }
/// let profile = profiler.stop();
/// for tenant in ["acme", "globex"] {
///     let labeled = |labels: &[(String, String)]| {
///         labels.iter().any(|(key, value)| key == "tenant" && value == tenant)
///     };
///     assert!(profile.samples.iter().any(|s| labeled(&s.labels)), "{tenant}");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ProfilerHandle {
    engine: Engine,
    pipeline: Arc<Pipeline>,
    interrupt: Arc<AtomicBool>,
    /// Whether guests yield to their executor at epoch checks ([`ProfilerHandle::yield_at_epochs`]).
    yields: Arc<AtomicBool>,
    sampler: Arc<SharedSampler>,
    /// On the instructions clock: what gives each attached store its fuel and intervals, and
    /// their mean.
    fuel: Option<(InstructionSampler, u64)>,
    /// With the signal sampler: shows the handler each attached store's record of the guest's
    /// exits from Wasm, by which samples in host code find the guest stack under them.
    store_contexts: Option<Arc<StoreContexts>>,
    /// Tells this profiler from others of the process, for the per-thread record of what
    /// sampled the thread ([`ProfilerHandle::sample_this_thread`]).
    id: u64,
    /// Threads that could not be sampled, said once each.
    warnings: Arc<Mutex<Vec<Warning>>>,
    /// Which allocations the rewritten allocators sample, when memory is profiled.
    allocations: Option<Arc<Mutex<Allocations>>>,
    /// The texts of the registered modules of a language runtime (Go, CPython), whose
    /// instances [`ProfilerHandle::attach_instance`] shows the samplers, with their runtime.
    runtimes: Arc<Mutex<Vec<RuntimeText>>>,
    /// The attached stores, by the address of their data, while they live.
    stores: Arc<AttachedStores>,
    /// What ties what the profiler keeps of a store to the store's life.
    keeper: StoreKeeper,
}

/// A runtime's module's text, with the runtime.
type RuntimeText = (Range<usize>, Arc<dyn Runtime>);

impl Profiler {
    /// Sets in an engine's configuration what the sampler `options` choose needs, and nothing
    /// else, so that the guest runs as it does on an engine without the profiler:
    /// - both samplers: backtraces of up to 512 frames (Wasmtime keeps 20 by
    ///   default), for the stacks captured at host calls and allocations. Free while the guest
    ///   runs (a backtrace is only walked when one is captured); the one visible effect is that
    ///   a trap's error lists up to that many frames;
    /// - the signal sampler: fiber stacks allocated by wasmspy (`Config::with_host_stack`), as
    ///   Wasmtime allocates them, so that the signal handler knows where a guest called with
    ///   `call_async` runs. Free: the same kind of mapping, made once per asynchronous call;
    /// - the epoch sampler: epoch interruption, which compiles a check of the epoch into every
    ///   function entry and loop back-edge: up to a third slower guest code, most on call-heavy
    ///   code (see docs/record.md, "Same as `wasmtime run`"). The signal sampler needs none: it samples from a timer
    ///   signal, and an engine without epochs runs the guest's code as Wasmtime does by default;
    /// - the instructions clock ([`Clock::Instructions`]): fuel, which compiles a count of the
    ///   instructions run into the guest's code (see docs/overhead.md for its cost); no sampler's.
    pub fn configure(config: &mut Config, options: &ProfilerOptions) {
        config.wasm_backtrace_max_frames(NonZeroUsize::new(MAX_STACK_DEPTH));
        if options.clock == Clock::Instructions {
            config.consume_fuel(true);
            return;
        }
        match options.sampler.resolve() {
            SamplerKind::Epoch => {
                config.epoch_interruption(true);
            }
            _ => use_walkable_fiber_stacks(config),
        }
    }

    /// `engine` must have been configured with [`Profiler::configure`] for the same options.
    pub fn new(engine: &Engine, options: ProfilerOptions) -> Result<Self> {
        let instructions = options.clock == Clock::Instructions;
        if instructions && options.sampler != SamplerKind::Auto {
            return Err(Error::Options("the instructions clock samples where Wasmtime counts fuel, with no sampler of time: leave the sampler to auto"));
        }
        if instructions && options.instruction_interval == 0 {
            return Err(Error::Options(
                "the instruction interval must be at least 1",
            ));
        }
        let signals = SIGNALS_AVAILABLE;
        if options.sampler == SamplerKind::Signal && !signals {
            return Err(Error::Unavailable(
                "the signal sampler needs Linux on x86_64 or aarch64; use the epoch sampler".into(),
            ));
        }
        let use_signals =
            !instructions && signals && options.sampler.resolve() == SamplerKind::Signal;
        if !instructions && !use_signals && !engine.get_epoch_interruption() {
            return Err(Error::Options("the epoch sampler needs an engine with epoch interruption: configure it with Profiler::configure for these options"));
        }
        let name = match (instructions, use_signals) {
            (true, _) => "instructions",
            (false, true) => "signal",
            (false, false) => "epoch",
        };
        let mut recorder = Recorder::new(options.rate_hz, options.clock, name);
        if instructions {
            recorder.count_instructions(options.instruction_interval);
        }
        let allocations = options.mem_rate.map(|rate| {
            recorder.profile_heap(rate);
            let seed = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64);
            Arc::new(Mutex::new(Allocations::new(rate, seed)))
        });
        if options.timeline {
            recorder.keep_timeline();
        }
        let mut resolver = Resolver::new(options.dwarf, options.runtime_native);
        let (search, warnings) = SourceMapSearch::new(&options.source_maps);
        resolver.search_source_maps(search, options.prefer_source_maps, warnings);
        let pipeline = Arc::new(Pipeline::new(resolver, recorder));
        let wall = options.clock == Clock::Wall;
        let mut fuel = None;
        let (sampler, store_contexts): (Box<dyn Sampler>, _) = if instructions {
            let sampler = InstructionSampler::new(engine);
            fuel = Some((sampler.clone(), options.instruction_interval));
            (Box::new(sampler), None)
        } else if use_signals {
            (
                new_signal_sampler(options.rate_hz, wall, options.host_frames, pipeline.clone()),
                Some(Arc::new(StoreContexts::new(engine)?)),
            )
        } else {
            let epochs = EpochSampler::new(engine, options.rate_hz, wall);
            (Box::new(epochs), None)
        };
        Ok(Profiler {
            handle: ProfilerHandle {
                engine: engine.clone(),
                pipeline,
                interrupt: Arc::new(AtomicBool::new(false)),
                yields: Arc::new(AtomicBool::new(false)),
                sampler: Arc::new(Mutex::new(sampler)),
                fuel,
                store_contexts,
                id: NEXT_PROFILER_ID.fetch_add(1, Ordering::Relaxed),
                warnings: Arc::default(),
                allocations,
                runtimes: Arc::default(),
                stores: Arc::default(),
                keeper: StoreKeeper::new(engine),
            },
        })
    }

    /// The sampler in use: `signal`, `epoch` or `instructions`.
    pub fn sampler_name(&self) -> &'static str {
        lock(&self.handle.sampler).name()
    }

    /// Starts sampling; the profile's time counts from here.
    pub fn start(&mut self) -> Result<()> {
        self.handle.pipeline.recorder().start();
        // Before the pipeline's thread starts reading the components registered.
        let code = self.handle.registry().code_ranges();
        self.handle.pipeline.start()?;
        Ok(lock(&self.handle.sampler).start(&code)?)
    }

    /// Stops sampling and returns the finished profile.
    pub fn stop(&mut self) -> Profile {
        lock(&self.handle.sampler).stop();
        self.handle.pipeline.stop();
        self.handle.pipeline.recorder().stop();
        self.handle.pipeline.profile()
    }

    /// What other threads use while this profiler runs: attaching their stores, reading the
    /// profile so far, dumping stacks, interrupting the guest.
    pub fn handle(&self) -> ProfilerHandle {
        self.handle.clone()
    }
}

impl Drop for Profiler {
    /// Stops sampling, even while handles live on.
    fn drop(&mut self) {
        lock(&self.handle.sampler).stop();
        self.handle.pipeline.stop();
    }
}

impl ProfilerHandle {
    fn resolver(&self) -> std::sync::MutexGuard<'_, Resolver> {
        self.pipeline.resolver()
    }

    /// The resolver for registering code (see [`Pipeline::registry`]).
    fn registry(&self) -> std::sync::MutexGuard<'_, Resolver> {
        self.pipeline.registry()
    }
}
