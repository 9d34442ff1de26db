//! The profiler as embedders use it, with their own Wasmtime `Engine` and `Store`:
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use wasmspy::{Profiler, ProfilerOptions};
//! let mut config = wasmtime::Config::new();
//! Profiler::configure(&mut config);
//! let engine = wasmtime::Engine::new(&config)?;
//! let wasm = std::fs::read("app.wasm")?;
//! let module = wasmtime::Module::new(&engine, &wasm)?;
//!
//! let mut profiler = Profiler::new(&engine, ProfilerOptions::default());
//! profiler.add_module("app.wasm", &module, &wasm)?;
//! let mut store = wasmtime::Store::new(&engine, ());
//! profiler.attach(&mut store);
//! profiler.start()?;
//! // ... instantiate and call into the guest ...
//! let profile = profiler.stop();
//! std::fs::write("app.pb.gz", wasmspy::export::pprof::encode(&profile)?)?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use wasmtime::{Config, Engine, Module, Store, UpdateDeadline};

use crate::collector::Collector;
use crate::cpu_clock::thread_cpu_ns;
use crate::profile::Profile;
use crate::sampler::epoch::{self, EpochSampler};
use crate::sampler::Sampler;

/// The innermost frames a sample keeps; deeper stacks lose their outermost frames.
pub const MAX_STACK_DEPTH: usize = 512;

#[derive(Clone, Debug)]
pub struct ProfilerOptions {
    /// Samples per second.
    pub rate_hz: u32,
}

impl Default for ProfilerOptions {
    fn default() -> Self {
        ProfilerOptions { rate_hz: 1000 }
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

pub struct Profiler {
    handle: ProfilerHandle,
    sampler: Box<dyn Sampler>,
}

/// What other threads may do with a running profiler: read the profile so far, or stop the guest.
#[derive(Clone)]
pub struct ProfilerHandle {
    engine: Engine,
    collector: Arc<Mutex<Collector>>,
    interrupt: Arc<AtomicBool>,
}

impl Profiler {
    /// Sets what the profiler needs in an engine's configuration: epoch interruption, and
    /// backtraces deep enough for real stacks (Wasmtime keeps only the 20 innermost frames by
    /// default, which would cut the roots off deep stacks).
    pub fn configure(config: &mut Config) {
        config.epoch_interruption(true);
        config.wasm_backtrace_max_frames(NonZeroUsize::new(MAX_STACK_DEPTH));
    }

    /// `engine` must have been configured with [`Profiler::configure`].
    pub fn new(engine: &Engine, options: ProfilerOptions) -> Self {
        let sampler = EpochSampler::new(engine, options.rate_hz);
        let collector = Collector::new(options.rate_hz, sampler.name());
        Profiler {
            handle: ProfilerHandle {
                engine: engine.clone(),
                collector: Arc::new(Mutex::new(collector)),
                interrupt: Arc::new(AtomicBool::new(false)),
            },
            sampler: Box::new(sampler),
        }
    }

    /// Registers a module so its frames are named and attributed to it. `wasm` is the module's
    /// binary (not text) form. Returns a warning when its names could not all be read.
    pub fn add_module(
        &self,
        file_name: &str,
        module: &Module,
        wasm: &[u8],
    ) -> Result<Option<String>> {
        self.handle.lock().add_module(file_name, module, wasm)
    }

    /// Installs the profiler in `store`, on the thread that will run the guest. This replaces
    /// the store's epoch-deadline callback and deadline.
    pub fn attach<T: 'static>(&self, store: &mut Store<T>) {
        let collector = self.handle.collector.clone();
        let interrupt = self.handle.interrupt.clone();
        let mut last_cpu = thread_cpu_ns();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |ctx| {
            if interrupt.load(Ordering::Relaxed) {
                return Err(Interrupted.into());
            }
            let cpu = thread_cpu_ns();
            epoch::take_sample(&ctx, &collector, cpu.saturating_sub(last_cpu));
            last_cpu = cpu;
            Ok(UpdateDeadline::Continue(1))
        });
    }

    pub fn start(&mut self) -> Result<()> {
        self.sampler.start()
    }

    /// Stops sampling and returns the finished profile.
    pub fn stop(&mut self) -> Profile {
        self.sampler.stop();
        let mut collector = self.handle.lock();
        collector.stop();
        collector.profile()
    }

    pub fn handle(&self) -> ProfilerHandle {
        self.handle.clone()
    }
}

impl ProfilerHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Collector> {
        self.collector.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the guest's current call return [`Interrupted`] at its next epoch check.
    pub fn interrupt(&self) {
        self.interrupt.store(true, Ordering::Relaxed);
        self.engine.increment_epoch();
    }

    /// The profile recorded so far.
    pub fn snapshot(&self) -> Profile {
        self.lock().profile()
    }

    pub fn sample_count(&self) -> usize {
        self.lock().sample_count()
    }
}
