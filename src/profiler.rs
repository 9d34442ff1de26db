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

use std::fmt;
use std::num::NonZeroUsize;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::Error;
use crate::warning::{Warning, WarningKind};
use rustc_hash::FxHashMap;
use wasmtime::{
    AsContextMut, CallHook, Caller, Config, Engine, Func, Instance, Module, Ref, Store,
    StoreContextMut, UpdateDeadline, WasmBacktrace,
};

use crate::capture::allocations::{Allocations, AllocatorCall, StoreData};
use crate::capture::epoch::{self, EpochSampler};
use crate::capture::instructions::{FuelSampling, InstructionSampler};
pub use crate::capture::MAX_STACK_DEPTH;
use crate::capture::{
    keep_until_dropped, GuestStack, LabelsNow, NativeKind, SampleValues, Sampler, SamplerKind,
    Sink, StoreKey, Taken, SIGNALS_AVAILABLE,
};
use crate::clock::{monotonic_ns, thread_cpu_ns, Clock};
use crate::dump::{GuestState, RunningGuest, StackDump};
use crate::memory::component::ALLOCATOR_HOOK;
use crate::memory::rewrite::{report, Rewritten, HOOK_TABLE, SAMPLE_COUNTDOWN};
use crate::pipeline::Pipeline;
use crate::profile::{Labels, Profile};
use crate::record::{KindCounts, Mark, Recorder};
use crate::resolve::{ListedFunction, ModuleId, Resolver};
use crate::runtimes::in_component::{ProbedMemory, PROBE};
use crate::runtimes::{GuestPoint, InstanceView, Runtime, RuntimeInstance};
use crate::store_labels::{SampleLabels, StoreLabels};
use crate::sync::lock;

/// The API's results: [`Error`] tells its cases apart.
type Result<T, E = Error> = std::result::Result<T, E>;

static NEXT_PROFILER_ID: AtomicU64 = AtomicU64::new(1);

/// [`ProfilerOptions::instruction_interval`] by default. Compiled Wasm runs 10^9 to 10^10 of
/// its instructions a second (`local.get` counts one and often costs nothing): a sample every
/// 0.1 to 1 ms of the guest's time (16,000 a second on the bundled example), each costing a
/// few microseconds, for profiles precise enough to diff.
pub const DEFAULT_INSTRUCTION_INTERVAL: u64 = 1_000_000;

thread_local! {
    /// The profiler that last began sampling this thread.
    static SAMPLED_BY: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The samplers sampling this thread, told when it ends.
    static THREAD_END: ThreadEnd = const { ThreadEnd(std::cell::RefCell::new(Vec::new())) };
}

/// Releases the thread from its samplers when it ends (its slot in the signal handler's table
/// freed, its timer deleted), so that threads that come and go do not use them up.
struct ThreadEnd(std::cell::RefCell<Vec<std::sync::Weak<SharedSampler>>>);

/// The sampler, as every handle of a profiler shares it.
type SharedSampler = Mutex<Box<dyn Sampler>>;

impl Drop for ThreadEnd {
    fn drop(&mut self) {
        let thread = epoch::current_thread();
        for sampler in self.0.take() {
            if let Some(sampler) = sampler.upgrade() {
                lock(&sampler).unbind_thread(thread);
            }
        }
    }
}

/// What a [`Profiler`] samples, how often and how: `wasmspy record`'s options. Built from
/// [`Default`] (1 kHz, the sampler chosen for the platform, CPU time, DWARF read):
///
/// ```
/// use wasmspy::{Clock, ProfilerOptions};
///
/// let options = ProfilerOptions { rate_hz: 4000, clock: Clock::Wall, ..ProfilerOptions::default() };
/// assert!(options.dwarf && options.mem_rate.is_none());
/// ```
#[derive(Clone, Debug)]
pub struct ProfilerOptions {
    /// Samples per second, on the CPU and wall clocks.
    pub rate_hz: u32,
    /// What takes the samples: signals (the default where there are: Linux on x86_64 and
    /// aarch64) or epoch interruption.
    pub sampler: SamplerKind,
    /// What samples follow: CPU time, wall time, or executed Wasm instructions
    /// ([`Clock::Instructions`], whatever `sampler` says).
    pub clock: Clock,
    /// On the instructions clock: a sample every this many executed Wasm instructions on
    /// average.
    pub instruction_interval: u64,
    /// Map code to file:line, inlined calls included, with the modules' DWARF debug info;
    /// when false, profiles name functions only.
    pub dwarf: bool,
    /// Profile memory too: sample allocations every this many bytes on average (1: every
    /// allocation). Allocations reach the profiler through [`Profiler::install_allocator_hook`].
    pub mem_rate: Option<u64>,
    /// Guests that run an interpreter (CPython): the interpreted frames interleaved with the
    /// interpreter's own (Wasm) frames, each activation of its eval loop replaced by the
    /// frames it runs, as py-spy's `--native`; when false, the interpreted frames alone, as
    /// py-spy shows Python's by default.
    pub runtime_native: bool,
    /// Keep the samples in time order, for the formats that show a timeline (Firefox
    /// Profiler, speedscope), within a fixed budget. Without it a CPU
    /// profile has one sample per distinct stack, and memory grows with those alone.
    pub timeline: bool,
}

impl Default for ProfilerOptions {
    fn default() -> Self {
        ProfilerOptions {
            rate_hz: 1000,
            sampler: SamplerKind::Auto,
            clock: Clock::Cpu,
            instruction_interval: DEFAULT_INSTRUCTION_INTERVAL,
            dwarf: true,
            mem_rate: None,
            runtime_native: false,
            timeline: true,
        }
    }
}

/// The error a guest call returns after [`ProfilerHandle::interrupt`].
#[derive(Debug)]
pub struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("guest interrupted")
    }
}

impl std::error::Error for Interrupted {}

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
    /// Tells this profiler from others of the process, for [`ProfilerHandle::sampled`]'s
    /// per-thread record of what sampled the thread.
    id: u64,
    /// Threads that could not be sampled, said once each.
    warnings: Arc<Mutex<Vec<Warning>>>,
    /// Which allocations the rewritten allocators sample, when memory is profiled.
    allocations: Option<Arc<Mutex<Allocations>>>,
    /// The texts of the registered modules of a language runtime (Go, CPython), whose
    /// instances [`ProfilerHandle::attach_instance`] shows the samplers, with their runtime.
    runtimes: Arc<Mutex<Vec<RuntimeText>>>,
    /// The attached stores, by the address of their data, while they live.
    stores: Arc<Mutex<FxHashMap<StoreData, AttachedStore>>>,
}

/// What the profiler keeps of an attached store.
struct AttachedStore {
    key: StoreKey,
    /// When it was attached (`CLOCK_MONOTONIC`).
    attached_ns: u64,
    /// The runtime instance whose stack its samplers read, once shown.
    runtime: Arc<ReaderSlot>,
    /// On the instructions clock: its intervals, and its labels, which its call hook uses.
    fuel: Option<(Arc<FuelSampling>, Arc<LabelsNow>)>,
}

/// A runtime's module's text, with the runtime.
type RuntimeText = (Range<usize>, Arc<dyn Runtime>);

/// A store's runtime instance, once shown to the profiler.
type ReaderSlot = OnceLock<RuntimeInstance>;

/// Takes a store out of the profiler's map of attached stores as it drops.
struct StoreAttached {
    data: StoreData,
    stores: Weak<Mutex<FxHashMap<StoreData, AttachedStore>>>,
}

impl Drop for StoreAttached {
    fn drop(&mut self) {
        if let Some(stores) = self.stores.upgrade() {
            lock(&stores).remove(&self.data);
        }
    }
}

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
        let pipeline = Arc::new(Pipeline::new(
            Resolver::new(options.dwarf, options.runtime_native),
            recorder,
        ));
        let wall = options.clock == Clock::Wall;
        let mut fuel = None;
        let (sampler, store_contexts): (Box<dyn Sampler>, _) = if instructions {
            let sampler = InstructionSampler::new(engine)?;
            fuel = Some((sampler.clone(), options.instruction_interval));
            (Box::new(sampler), None)
        } else if use_signals {
            (
                new_signal_sampler(options.rate_hz, wall, pipeline.clone()),
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
            },
        })
    }

    /// Shows the sampler the code of a module just registered (one registered after
    /// [`start`](Self::start) is sampled too).
    fn code_registered(&self) {
        let code = self.handle.resolver().code_ranges();
        lock(&self.handle.sampler).add_code(&code);
    }

    /// The sampler in use: `signal` or `epoch`.
    pub fn sampler_name(&self) -> &'static str {
        lock(&self.handle.sampler).name()
    }

    /// Registers a module so its frames are named and attributed to it, before or after
    /// [`start`](Self::start). `wasm` is the module's binary (not text) form; pass an
    /// `Arc<[u8]>` to share it rather than have it copied. Problems with its names or debug info
    /// are not errors: see [`ProfilerHandle::take_warnings`].
    pub fn add_module(
        &self,
        file_name: &str,
        module: &Module,
        wasm: impl Into<Arc<[u8]>>,
    ) -> Result<()> {
        let id = self
            .handle
            .resolver()
            .add_module(file_name, module, wasm.into(), None)?;
        self.code_registered();
        self.runtime_registered(id, module);
        Ok(())
    }

    /// Keeps the runtime of a module just registered, if it has one, for its instances shown
    /// to [`ProfilerHandle::attach_instance`].
    fn runtime_registered(&self, id: ModuleId, module: &Module) {
        if let Some(runtime) = self.handle.resolver().runtime(id) {
            let text = module.text().as_ptr_range();
            let text = text.start as usize..text.end as usize;
            lock(&self.handle.runtimes).push((text, runtime));
        }
    }

    /// Registers a component (`wasmtime::component::Component`), as
    /// [`add_module`](Self::add_module) does a module: each of its core modules is a module of
    /// the profile (a mapping of its own, named `FILE/NAME` after the module's name), and a host
    /// call is named by the WIT function it lowers
    /// (`wasi:io/streams@0.2.0#[method]output-stream.blocking-write-and-flush`). `wasm` is the
    /// component's binary; only its core modules' bytes are kept.
    pub fn add_component(
        &self,
        file_name: &str,
        component: &wasmtime::component::Component,
        wasm: impl Into<Arc<[u8]>>,
    ) -> Result<()> {
        self.handle
            .resolver()
            .add_component(file_name, component, wasm.into(), None)?;
        self.code_registered();
        Ok(())
    }

    /// As [`add_component`](Self::add_component), for a component compiled from
    /// `rewritten.wasm`, the allocator rewrite of `original` (see
    /// [`crate::memory::component`]); define the hook it imports with
    /// [`define_component_allocator_hook`](Self::define_component_allocator_hook).
    pub fn add_rewritten_component(
        &self,
        file_name: &str,
        component: &wasmtime::component::Component,
        original: impl Into<Arc<[u8]>>,
        rewritten: &crate::memory::component::RewrittenComponent,
    ) -> Result<()> {
        self.handle.resolver().add_component(
            file_name,
            component,
            original.into(),
            Some(rewritten),
        )?;
        self.code_registered();
        Ok(())
    }

    /// As [`add_module`](Self::add_module), for a module compiled from `rewritten`, the
    /// allocator rewrite of `original` (see [`crate::memory::rewrite`]): its samples are
    /// symbolized in the original's terms, each allocator shown once.
    pub fn add_rewritten_module(
        &self,
        file_name: &str,
        module: &Module,
        original: impl Into<Arc<[u8]>>,
        rewritten: Arc<Rewritten>,
    ) -> Result<()> {
        let id = self.handle.resolver().add_module(
            file_name,
            module,
            original.into(),
            Some(rewritten.clone()),
        )?;
        self.code_registered();
        self.runtime_registered(id, module);
        Ok(())
    }

    /// Installs the profiler in `store`: see [`ProfilerHandle::attach`].
    pub fn attach<T: 'static>(&mut self, store: &mut Store<T>) -> Result<()> {
        self.handle.attach(store)
    }

    /// Shows the profiler an instance of a registered module, after instantiating it and before
    /// the guest runs: see [`ProfilerHandle::attach_instance`].
    pub fn attach_instance<T: 'static>(
        &self,
        store: impl AsContextMut<Data = T>,
        instance: &Instance,
    ) -> Result<()> {
        self.handle.attach_instance(store, instance)
    }

    /// Connects an instance of a module rewritten by [`crate::memory::rewrite`] to the heap
    /// profile: see [`ProfilerHandle::install_allocator_hook`].
    pub fn install_allocator_hook<T: 'static>(
        &self,
        store: impl AsContextMut<Data = T>,
        instance: &Instance,
    ) -> wasmtime::Result<()> {
        self.handle.install_allocator_hook(store, instance)
    }

    /// Defines in `linker` the host function through which the allocators of a component
    /// rewritten by [`crate::memory::component::rewrite_component`] report to the heap
    /// profile (its import [`ALLOCATOR_HOOK`]), as
    /// [`install_allocator_hook`](Self::install_allocator_hook) does for a module's instance.
    pub fn define_component_allocator_hook<T: 'static>(
        &self,
        linker: &mut wasmtime::component::Linker<T>,
    ) -> wasmtime::Result<()> {
        let pipeline = self.handle.pipeline.clone();
        let allocations = self.handle.allocations.clone();
        let stores = self.handle.stores.clone();
        linker.root().func_wrap(
            ALLOCATOR_HOOK,
            move |store: wasmtime::StoreContextMut<'_, T>, call: AllocatorCall| {
                let data = StoreData::of(store.data());
                // With the stack of the runtime the component shows (see
                // `define_runtime_probe`), as a module's instance's hook has it.
                let backtrace = || {
                    let backtrace = WasmBacktrace::capture(&store);
                    let runtime = lock(&stores)
                        .get(&data)
                        .and_then(|s| s.runtime.get().cloned());
                    match runtime {
                        Some(runtime) => runtime.stack(backtrace, GuestPoint::Allocator),
                        None => GuestStack::wasm(backtrace),
                    }
                };
                let pipeline = pipeline.as_ref();
                let report =
                    allocator_call(allocations.as_deref(), pipeline, data, call, backtrace);
                Ok((report,))
            },
        )
    }

    /// Defines in `linker` the host function through which a component probed by
    /// [`probe_runtimes`](crate::probe_runtimes) shows the instances of language runtimes inside
    /// it (its import `wasmspy-runtime-probe`), as [`ProfilerHandle::attach_instance`] shows a module's: `component`,
    /// registered before, is the one compiled from the probed bytes. Each instance is shown as
    /// the component is instantiated, in a store attached before.
    pub fn define_runtime_probe<T: 'static>(
        &self,
        linker: &mut wasmtime::component::Linker<T>,
        component: &wasmtime::component::Component,
    ) -> wasmtime::Result<()> {
        let handle = self.handle.clone();
        let text = component.text().as_ptr_range();
        let text = text.start as usize..text.end as usize;
        linker.root().func_wrap(
            PROBE,
            move |store: wasmtime::StoreContextMut<'_, T>, (memory,): (ProbedMemory,)| {
                let runtime = handle.resolver().runtime_in_component(&text, memory.module);
                let Some(runtime) = runtime else {
                    return Ok(());
                };
                // SAFETY: Wasmtime's definition of a memory of the calling instance, in
                // `store`, as long as which the runtime instance is kept (by the store).
                let runtime = unsafe { RuntimeInstance::in_component(runtime, memory.definition) };
                // What stops a runtime's stack from being read stops neither the guest nor
                // its profile: its samples keep their Wasm frames.
                let shown = runtime.map_err(Error::Unavailable).and_then(|runtime| {
                    // SAFETY: as above.
                    unsafe { handle.show_runtime(store, runtime) }
                });
                if let Err(e) = shown {
                    handle.warn_once(Warning {
                        module: None,
                        kind: WarningKind::RuntimeUnreadable {
                            why: format!("{e:#}: samples keep their Wasm frames"),
                        },
                    });
                }
                Ok(())
            },
        )
    }

    /// Starts sampling; the profile's time counts from here.
    pub fn start(&mut self) -> Result<()> {
        self.handle.pipeline.recorder().start();
        self.handle.pipeline.start()?;
        let code = self.handle.resolver().code_ranges();
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

/// A store's blocks, forgotten when the store (which owns this) is dropped.
struct MemoryOfStore {
    data: StoreData,
    allocations: Weak<Mutex<Allocations>>,
    pipeline: Weak<Pipeline>,
}

impl Drop for MemoryOfStore {
    fn drop(&mut self) {
        if let (Some(allocations), Some(pipeline)) =
            (self.allocations.upgrade(), self.pipeline.upgrade())
        {
            lock(&allocations).store_dropped(self.data, pipeline.as_ref());
        }
    }
}

/// Answers a call of a rewritten allocator (see [`Allocations::on_call`]); without a memory
/// profile, samples nothing.
fn allocator_call(
    allocations: Option<&Mutex<Allocations>>,
    sink: &dyn Sink,
    data: StoreData,
    call: AllocatorCall,
    backtrace: impl FnOnce() -> GuestStack,
) -> i64 {
    match allocations {
        Some(a) => lock(a).on_call(data, call, sink, backtrace),
        None => report(i64::MAX, false, false),
    }
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn new_signal_sampler(rate_hz: u32, wall: bool, sink: Arc<dyn Sink>) -> Box<dyn Sampler> {
    Box::new(crate::capture::signal::SignalSampler::new(
        rate_hz, wall, sink,
    ))
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn use_walkable_fiber_stacks(config: &mut Config) {
    config.with_host_stack(Arc::new(crate::capture::signal::fiber_stacks::FiberStacks));
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn use_walkable_fiber_stacks(_: &mut Config) {}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn new_signal_sampler(_: u32, _: bool, _: Arc<dyn Sink>) -> Box<dyn Sampler> {
    unreachable!("SIGNALS_AVAILABLE is false on this platform")
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
use crate::capture::signal::{runtime_instances, store_contexts::StoreContexts};

/// Shows the signal handler a runtime instance of `store`, whose key is `key`, until the
/// store is dropped.
///
/// # Safety
/// As [`runtime_instances::publish`].
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
unsafe fn publish_runtime<T: 'static>(
    store: impl AsContextMut<Data = T>,
    key: StoreKey,
    runtime: RuntimeInstance,
) -> Result<()> {
    // SAFETY: the caller's contract.
    Ok(unsafe { runtime_instances::publish(store, key, runtime) }?)
}

/// No signal sampler: no instance is published (`attach_instance` returns before).
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
unsafe fn publish_runtime<T: 'static>(
    _: impl AsContextMut<Data = T>,
    _: StoreKey,
    _: RuntimeInstance,
) -> Result<()> {
    unreachable!("SIGNALS_AVAILABLE is false on this platform")
}

/// No signal sampler, no store contexts to show it.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
enum StoreContexts {}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
impl StoreContexts {
    fn new(_: &Engine) -> Result<Self> {
        unreachable!("SIGNALS_AVAILABLE is false on this platform")
    }

    fn publish<T>(&self, _: &mut Store<T>, _: StoreKey, _: Arc<LabelsNow>) -> Result<()> {
        match *self {}
    }
}

impl ProfilerHandle {
    /// Installs the profiler in `store`, on the thread that will run the guest. Any number of
    /// stores may be attached, on any threads, before or after [`start`](Profiler::start): the
    /// signal sampler samples every thread that attached one. With the signal sampler this adds to the
    /// store an empty instance and a host function, by which the signal handler reads, for a
    /// sample taken in host code (a host call, a libcall), Wasmtime's record of where the guest
    /// left Wasm, until the store is dropped; it sets no call hook, so the guest runs as fast
    /// as without the profiler. On an engine with epoch interruption it replaces the store's
    /// epoch-deadline callback and deadline (the epoch sampler samples there, and
    /// [`ProfilerHandle::interrupt`] stops the guest there).
    pub fn attach<T: 'static>(&self, store: &mut Store<T>) -> Result<()> {
        self.attach_with_labels(store, &[]).map(|_| ())
    }

    /// As [`attach`](Self::attach), and every sample taken in `store` carries `labels` (pprof's
    /// string labels: `go tool pprof -tagfocus key=value` keeps them, `-tags` lists them), e.g.
    /// the tenant or the request the store serves, until changed with the [`StoreLabels`]
    /// returned.
    pub fn attach_with_labels<T: 'static>(
        &self,
        store: &mut Store<T>,
        labels: &[(&str, &str)],
    ) -> Result<StoreLabels> {
        let key = StoreKey::unique();
        let labels = StoreLabels::new(self.labels(labels));
        self.sample_this_thread()?;
        let data = StoreData::of(store.data());
        let runtime = Arc::new(ReaderSlot::new());
        let fuel = match &self.fuel {
            Some((sampler, interval)) => {
                let sampling = Arc::new(sampler.attach(store, *interval)?);
                let clock = self.fuel_clock(sampling.clone(), labels.now(), runtime.clone());
                store.call_hook(clock);
                Some((sampling, labels.now()))
            }
            None => None,
        };
        let attached = AttachedStore {
            key,
            attached_ns: monotonic_ns(),
            runtime: runtime.clone(),
            fuel,
        };
        lock(&self.stores).insert(data, attached);
        let stores = Arc::downgrade(&self.stores);
        keep_until_dropped(&mut *store, StoreAttached { data, stores });
        if self.engine.get_epoch_interruption() {
            let samples_at_epochs = lock(&self.sampler).samples_at_epochs();
            let runtime = samples_at_epochs.then(|| runtime.clone());
            self.attach_epoch_callback(store, labels.now(), runtime);
        }

        if let Some(contexts) = &self.store_contexts {
            contexts.publish(store, key, labels.now())?;
        }
        let memory = self.allocations.as_ref().map(|allocations| {
            lock(allocations).store_attached(data, key, labels.now());
            MemoryOfStore {
                data,
                allocations: Arc::downgrade(allocations),
                pipeline: Arc::downgrade(&self.pipeline),
            }
        });
        // One value the store owns, withdrawn when it drops.
        keep_until_dropped(store, (labels.clone(), memory));
        Ok(labels)
    }

    /// A set of labels to give stores with [`StoreLabels::set`]: made once (the profile
    /// registers it), given as often as a store switches to the work it names.
    pub fn labels(&self, labels: &[(&str, &str)]) -> SampleLabels {
        let labels: Labels = labels
            .iter()
            .map(|&(k, v)| (k.to_string(), v.to_string()))
            .collect();
        SampleLabels::new(self.pipeline.register_labels(labels))
    }

    /// Connects an instance of a module rewritten by [`crate::memory::rewrite`] to the heap
    /// profile, before the guest runs: puts the hook in its [`HOOK_TABLE`]. The hook records
    /// sampled allocations, with the guest stack that made them (and the labels of the store,
    /// if attached), and frees of sampled blocks. Does nothing for an instance of a module not
    /// rewritten.
    pub fn install_allocator_hook<T: 'static>(
        &self,
        store: impl AsContextMut<Data = T>,
        instance: &Instance,
    ) -> wasmtime::Result<()> {
        self.install_hook(store, instance, None)
    }

    /// As [`install_allocator_hook`](Self::install_allocator_hook); with `runtime`, the
    /// instance's language's own stack (Go's, Python's) is the allocations'.
    fn install_hook<T: 'static>(
        &self,
        mut store: impl AsContextMut<Data = T>,
        instance: &Instance,
        runtime: Option<RuntimeInstance>,
    ) -> wasmtime::Result<()> {
        let Some(table) = instance.get_table(&mut store, HOOK_TABLE) else {
            return Ok(());
        };
        if instance.get_global(&mut store, SAMPLE_COUNTDOWN).is_none() {
            wasmtime::bail!(
                "the module exports {HOOK_TABLE} without the rest of the allocator rewrite"
            );
        }
        let pipeline = self.pipeline.clone();
        let allocations = self.allocations.clone();
        let hook = Func::wrap(
            &mut store,
            move |caller: Caller<'_, T>,
                  allocator: i32,
                  size: i32,
                  freed: i32,
                  allocated: i32,
                  countdown: i64|
                  -> i64 {
                let call = (allocator, size, freed, allocated, countdown);
                let data = StoreData::of(caller.data());
                let backtrace = || {
                    let backtrace = WasmBacktrace::capture(&caller);
                    match &runtime {
                        Some(runtime) => runtime.stack(backtrace, GuestPoint::Allocator),
                        None => GuestStack::wasm(backtrace),
                    }
                };
                allocator_call(
                    allocations.as_deref(),
                    pipeline.as_ref(),
                    data,
                    call,
                    backtrace,
                )
            },
        );
        table.set(&mut store, 0, Ref::Func(Some(hook)))
    }

    /// Shows the profiler an instance of a registered module, in a store attached before, after
    /// instantiating it and before the guest runs: the instance of a module built by Go, whose
    /// goroutine stacks the samplers then read from its memory (without it, samples of Go code
    /// show only the Wasm stack, which Go unwinds at every goroutine switch); of CPython, whose
    /// Python stacks they read (without it, samples show CPython's C functions); of a module
    /// rewritten for memory profiles, whose allocator hook it installs (see
    /// [`Profiler::install_allocator_hook`]). Does nothing for any other instance.
    pub fn attach_instance<T: 'static>(
        &self,
        mut store: impl AsContextMut<Data = T>,
        instance: &Instance,
    ) -> Result<()> {
        let text = instance.module(&store).text().as_ptr_range();
        let text = text.start as usize..text.end as usize;
        let runtime = lock(&self.runtimes)
            .iter()
            .find(|(t, _)| *t == text)
            .map(|(_, runtime)| runtime.clone());
        let runtime = match runtime {
            Some(runtime) => {
                let view = InstanceView::of(&mut store, instance, runtime.globals())?;
                // SAFETY: `instance` is of the runtime's module (its code is); the store keeps
                // what is made of this (the allocator hook, the epoch callback's slot).
                match unsafe { RuntimeInstance::new(runtime, view) } {
                    Ok(runtime) => Some(runtime),
                    Err(why) => {
                        self.warn_once(Warning {
                            module: None,
                            kind: WarningKind::RuntimeUnreadable { why },
                        });
                        None
                    }
                }
            }
            None => None,
        };
        self.install_hook(&mut store, instance, runtime.clone())?;
        match runtime {
            // SAFETY: an instance in `store`.
            Some(runtime) => unsafe { self.show_runtime(store, runtime) },
            None => Ok(()),
        }
    }

    /// Shows the samplers `runtime`'s instance, whose stack they then read: the store's epoch
    /// callback, and the signal handler. Nothing for a store not attached.
    ///
    /// # Safety
    /// `runtime` must be of an instance in `store`.
    unsafe fn show_runtime<T: 'static>(
        &self,
        store: impl AsContextMut<Data = T>,
        runtime: RuntimeInstance,
    ) -> Result<()> {
        let data = StoreData::of(store.as_context().data());
        let key = match lock(&self.stores).get(&data) {
            Some(attached) => {
                let _ = attached.runtime.set(runtime.clone());
                attached.key
            }
            None => return Ok(()),
        };
        if self.store_contexts.is_some() {
            // SAFETY: the caller's contract; `key` is the store's.
            unsafe { publish_runtime(store, key, runtime)? };
        }
        Ok(())
    }

    /// Samples the calling thread from now on, as [`attach`](Self::attach) does the thread
    /// that attaches a store. A guest called asynchronously (`call_async`, on a fiber) runs on
    /// whichever thread polls its future, and a multi-threaded runtime (tokio's) moves tasks
    /// between its workers: call this as each of them starts (`on_thread_start`). The sampler
    /// is asked once per thread (a failure is not retried).
    pub fn sample_this_thread(&self) -> Result<()> {
        if SAMPLED_BY.get() == self.id {
            return Ok(());
        }
        SAMPLED_BY.set(self.id);
        lock(&self.sampler).bind_to_current_thread()?;
        // Fails only while the thread ends, when it runs no guest any more.
        let _ = THREAD_END.try_with(|end| end.0.borrow_mut().push(Arc::downgrade(&self.sampler)));
        Ok(())
    }

    /// The call hook that samples `store` on the instructions clock: see
    /// [`crate::capture::instructions`].
    fn fuel_clock<T: 'static>(
        &self,
        sampling: Arc<FuelSampling>,
        labels: Arc<LabelsNow>,
        runtime: Arc<ReaderSlot>,
    ) -> impl FnMut(StoreContextMut<'_, T>, CallHook) -> wasmtime::Result<()> + Send + Sync + 'static
    {
        let pipeline = self.pipeline.clone();
        move |mut store: StoreContextMut<'_, T>, hook: CallHook| {
            let ran = sampling.on_call_hook(store.as_context_mut(), hook)?;
            if let Some(ran) = ran {
                let taken = Taken {
                    labels: labels.get(),
                    thread: epoch::current_thread(),
                    time_ns: monotonic_ns(),
                };
                let values = SampleValues {
                    measured: ran,
                    wall_ns: 0,
                };
                epoch::take_sample(&store, runtime.get(), taken, pipeline.as_ref(), values);
            }
            Ok(())
        }
    }

    /// Sets `store`'s call hook (see `Store::call_hook`), which the instructions clock uses
    /// itself: use this in its place on a store attached to a profiler, and both run, the
    /// profiler's first. The store must have been attached.
    pub fn call_hook<T: 'static>(
        &self,
        store: &mut Store<T>,
        mut hook: impl FnMut(StoreContextMut<'_, T>, CallHook) -> wasmtime::Result<()>
            + Send
            + Sync
            + 'static,
    ) -> Result<()> {
        let attached = lock(&self.stores)
            .get(&StoreData::of(store.data()))
            .map(|attached| (attached.fuel.clone(), attached.runtime.clone()));
        let Some((fuel, runtime)) = attached else {
            return Err(Error::NotAttached);
        };
        match fuel {
            Some((sampling, labels)) => {
                let mut clock = self.fuel_clock(sampling, labels, runtime);
                store.call_hook(move |mut store, kind| {
                    clock(store.as_context_mut(), kind)?;
                    hook(store, kind)
                });
            }
            None => store.call_hook(hook),
        }
        Ok(())
    }

    /// Samples at epoch deadlines where `samples` (the epoch sampler; the store's runtime
    /// instance once shown), and stops the guest there once interrupted.
    fn attach_epoch_callback<T: 'static>(
        &self,
        store: &mut Store<T>,
        labels: Arc<LabelsNow>,
        samples: Option<Arc<ReaderSlot>>,
    ) {
        let pipeline = self.pipeline.clone();
        let interrupt = self.interrupt.clone();
        let yields = self.yields.clone();
        let mut last_thread = epoch::current_thread();
        let mut last_cpu = thread_cpu_ns();
        let mut last_wall = monotonic_ns();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |ctx| {
            if interrupt.load(Ordering::Relaxed) {
                return Err(Interrupted.into());
            }
            if let Some(runtime) = &samples {
                let (thread, cpu, wall) =
                    (epoch::current_thread(), thread_cpu_ns(), monotonic_ns());
                let wall_ns = wall.saturating_sub(last_wall);
                // An asynchronous store moves between threads: another thread's CPU clock
                // says nothing of this store's time, which is then taken as the wall time.
                let cpu_ns = if thread == last_thread {
                    cpu.saturating_sub(last_cpu)
                } else {
                    wall_ns
                };
                let values = SampleValues {
                    measured: cpu_ns,
                    wall_ns,
                };
                (last_thread, last_cpu, last_wall) = (thread, cpu, wall);
                let taken = Taken {
                    labels: labels.get(),
                    thread,
                    time_ns: wall,
                };
                epoch::take_sample(&ctx, runtime.get(), taken, pipeline.as_ref(), values);
            }
            Ok(match yields.load(Ordering::Relaxed) {
                true => UpdateDeadline::Yield(1),
                false => UpdateDeadline::Continue(1),
            })
        });
    }

    /// The registered modules' compiled functions, named, with their source lines: what Linux
    /// perf is told of JIT code (`record --perfmap`, `--jitdump`).
    pub fn code_listing(&self) -> Vec<ListedFunction> {
        self.resolver().code_listing()
    }

    fn resolver(&self) -> std::sync::MutexGuard<'_, Resolver> {
        self.pipeline.resolver()
    }

    /// From now on, at each epoch check, the guests of the attached stores yield to their
    /// executor, as Wasmtime's `epoch_deadline_async_yield_and_update` has them (the profiler
    /// owns a store's epoch callback): a server's timers then run while a guest computes, so
    /// that it can time a request out. For asynchronous calls only (`call_async`): a
    /// synchronous call fails at its next epoch check.
    pub fn yield_at_epochs(&self) {
        self.yields.store(true, Ordering::Relaxed);
    }

    /// Makes the guest's current call return [`Interrupted`] at its next epoch check, on an
    /// engine with epoch interruption (the epoch sampler's). False where the engine has none:
    /// then nothing stops the guest's code (the signal sampler does without epochs, so that the
    /// guest runs at full speed), and the caller must end the run another way, e.g. by writing
    /// the [`snapshot`](Self::snapshot) and exiting, as `wasmspy record` does on Ctrl-C.
    pub fn interrupt(&self) -> bool {
        if !self.engine.get_epoch_interruption() {
            return false;
        }
        self.interrupt.store(true, Ordering::Relaxed);
        self.engine.increment_epoch();
        true
    }

    /// The profile recorded so far.
    pub fn snapshot(&self) -> Profile {
        self.pipeline.profile()
    }

    /// Where the recording stands now: [`profile_since`](Self::profile_since) is the profile
    /// of what comes after (e.g. the next 30 seconds, as `/debug/pprof/profile` serves).
    pub fn mark(&self) -> Mark {
        self.pipeline.recorder().mark()
    }

    /// The profile of the samples taken since `mark`, one per stack.
    pub fn profile_since(&self, mark: &Mark) -> Profile {
        self.pipeline.profile_since(mark)
    }

    /// The stack of every guest running now, in its code or in a host call it made: one
    /// taken of each sampled thread on demand, waiting up to `wait` for them (a thread
    /// answers when it next runs); none before [`start`](Profiler::start) or after the
    /// profile is stopped. Only with the signal sampler: an epoch or the instructions clock
    /// stops a guest only where its code checks for them.
    pub fn dump_stacks(&self, wait: std::time::Duration) -> Result<StackDump> {
        let Some(dumper) = lock(&self.sampler).dumper() else {
            return Err(Error::Unavailable("stacks are dumped by the signal sampler (the default on Linux x86_64 and aarch64; not with --sampler epoch or --clock instructions)".into()));
        };
        let dumps = dumper.dump(wait);
        let profile = self.pipeline.dumped_profile(&dumps.stacks);
        let attached: FxHashMap<StoreKey, u64> = lock(&self.stores)
            .values()
            .map(|s| (s.key, s.attached_ns))
            .collect();
        let mut guests: Vec<RunningGuest> = dumps
            .stacks
            .iter()
            .filter_map(|stack| {
                let taken = stack.taken;
                let sample = profile
                    .samples
                    .iter()
                    .find(|s| s.thread == Some(taken.thread))?;
                let labeled = self.pipeline.labels_since(taken.labels);
                let since = match &labeled {
                    Some((_, registered)) => Some(*registered),
                    None => stack.store.and_then(|s| attached.get(&s).copied()),
                };
                Some(RunningGuest {
                    store: stack.store.map(|s| s.0),
                    thread: taken.thread,
                    state: match stack.kind {
                        NativeKind::Host => GuestState::HostCall,
                        _ => GuestState::Running,
                    },
                    running_ns: since.map(|t| taken.time_ns.saturating_sub(t)),
                    labels: labeled.map(|(l, _)| l).unwrap_or_default(),
                    stack: sample.stack,
                })
            })
            .collect();
        guests.sort_by_key(|g| std::cmp::Reverse(g.running_ns));
        Ok(StackDump {
            profile,
            guests,
            idle: dumps.idle,
            unanswered: dumps.unanswered,
        })
    }

    /// Whether memory is profiled ([`ProfilerOptions::mem_rate`]).
    pub fn profiles_memory(&self) -> bool {
        self.pipeline.recorder().profiles_memory()
    }

    /// The heap profile so far, when memory is profiled ([`ProfilerOptions::mem_rate`]).
    pub fn heap_profile(&self) -> Option<Profile> {
        self.pipeline.heap_profile()
    }

    /// Warnings not taken yet: a module without debug info or with damaged names or DWARF
    /// (its profile then shows less, but the run goes on). Building a profile can add some.
    /// Says `warning` once, with the warnings [`take_warnings`](Self::take_warnings) gives.
    fn warn_once(&self, warning: Warning) {
        let mut warnings = lock(&self.warnings);
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }

    /// Warnings not taken yet: a module without debug info or with damaged names or DWARF, a
    /// language runtime whose frames cannot be shown (the profile then shows less of them, but
    /// the run goes on). Building a profile can add some.
    pub fn take_warnings(&self) -> Vec<Warning> {
        let mut warnings = std::mem::take(&mut *lock(&self.warnings));
        warnings.extend(self.resolver().take_warnings());
        warnings
    }

    /// Samples by where they landed, and how many were lost (a full buffer).
    pub fn counts(&self) -> KindCounts {
        self.pipeline.counts()
    }
}
