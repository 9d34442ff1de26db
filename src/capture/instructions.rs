//! The instructions clock: a sample every so many executed Wasm instructions, as Wasmtime's
//! fuel counts them (1 for most operators, 0 for `nop`, `drop` and structured control flow,
//! one more per byte or element of a bulk operation), at intervals drawn from a fixed seed.
//! The same program given the same input executes the same instructions, so it is sampled at
//! the same points with the same values, on any machine.
//!
//! How: the store is given `FUEL` with Wasmtime's fuel yield interval set to the interval
//! drawn, so that its out-of-gas libcall, each time the interval is spent, refuels it with
//! exactly the interval (the store's total unchanged) and yields to the executor. Compiled
//! code checks its fuel where it checks epochs (function entries and loop headers), keeps it
//! in a register between checks, calls and returns, and reloads it from the store after the
//! out-of-gas libcall and after calls, not after other libcalls (`memory.copy`...). A call
//! hook, which Wasmtime runs as every libcall and host call returns, takes the sample where
//! the store's fuel counter holds exactly the interval with some fuel spent: only right
//! after a refuel (elsewhere it holds less of the interval, or, with nothing run since the
//! interval was set, the whole fuel is there). There it sets the next interval, which the
//! guest reloads; the instructions the sample stands for are what the total lost since the
//! last one (the interval, and the few between its end and the check that saw it).
//!
//! Host calls execute no Wasm instructions: they are not in these profiles. The guest must be
//! called asynchronously (`call_async`): fuel yields need a fiber.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use wasmtime::{AsContextMut, CallHook, Engine, Store, StoreContextMut};
use wasmtime_environ::{HostPtr, PtrSize};

use super::intervals::RandomIntervals;
use super::Sampler;
use crate::shared::vmctx::ContextFinder;
use crate::sync::lock;

/// The fuel a store holds after each sample: more than any run executes (2^62 instructions at
/// 10^9 a second take 146 years), so it never runs out.
const FUEL: u64 = 1 << 62;

/// Every store's intervals start from this seed: a run is sampled as the last run was.
const SEED: u64 = 0x7761_736d_7370_7921;

/// The sampler as the profiler holds it: whether samples are wanted now (between `start` and
/// `stop`); the samples themselves are taken by each store's call hook ([`FuelSampling`]).
/// Its clones share that.
#[derive(Clone)]
pub struct InstructionSampler {
    running: Arc<AtomicBool>,
    contexts: ContextFinder,
}

impl InstructionSampler {
    pub fn new(engine: &Engine) -> Self {
        InstructionSampler {
            running: Arc::default(),
            contexts: ContextFinder::new(engine),
        }
    }

    /// Gives `store` its fuel and the first interval (mean `interval`): the state its call
    /// hook keeps.
    pub fn attach<T: 'static>(&self, store: &mut Store<T>, interval: u64) -> Result<FuelSampling> {
        let context = self.contexts.find(store)?;
        let sampling = FuelSampling {
            intervals: Mutex::new(RandomIntervals::new(interval, SEED)),
            current: AtomicU64::new(0),
            fuel_consumed: context + usize::from(HostPtr.vm_store_context().fuel_consumed()),
            running: self.running.clone(),
        };
        sampling
            .next_interval(store.as_context_mut())
            .map_err(anyhow::Error::from)
            .context("the instructions clock needs an engine that consumes fuel: configure it with Profiler::configure")?;
        Ok(sampling)
    }
}

impl Sampler for InstructionSampler {
    fn name(&self) -> &'static str {
        "instructions"
    }

    fn bind_to_current_thread(&mut self) -> Result<()> {
        Ok(())
    }

    fn start(&mut self, _code: &[std::ops::Range<usize>]) -> Result<()> {
        self.running.store(true, Ordering::Relaxed);
        Ok(())
    }

    fn stop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
    }
}

/// A store's instructions clock, which its call hook runs. Shared (by the hook, and by the
/// profiler for [`crate::ProfilerHandle::call_hook`]); the hook reads it without a lock until
/// it samples, as it runs at every exit from Wasm.
pub struct FuelSampling {
    intervals: Mutex<RandomIntervals>,
    /// The interval the guest's code counts down now.
    current: AtomicU64,
    /// The address of the store's `VMStoreContext::fuel_consumed`: the negated fuel left in
    /// the interval, as compiled code last stored it (it keeps it in a register between
    /// calls, checks and returns).
    fuel_consumed: usize,
    running: Arc<AtomicBool>,
}

impl FuelSampling {
    /// Draws the next interval and gives it to the store, with [`FUEL`] in all.
    fn next_interval<T>(&self, mut store: StoreContextMut<'_, T>) -> wasmtime::Result<()> {
        let interval = lock(&self.intervals).next_uniform();
        self.current.store(interval, Ordering::Relaxed);
        store.fuel_async_yield_interval(Some(interval))?;
        store.set_fuel(FUEL)
    }

    /// At the call hook: if the guest has just been refuelled, the instructions it executed
    /// since the previous sample, the next interval set (this is a sample).
    pub fn on_call_hook<T>(
        &self,
        mut store: StoreContextMut<'_, T>,
        hook: CallHook,
    ) -> wasmtime::Result<Option<u64>> {
        if !matches!(hook, CallHook::ReturningFromHost) {
            return Ok(None);
        }
        // SAFETY: the store's own `VMStoreContext` (found at attach), alive while the store
        // is, which runs this hook; read on the store's thread while its guest is stopped here.
        let in_interval = unsafe { std::ptr::read(self.fuel_consumed as *const i64) };
        // Refuelling injects exactly the interval; anywhere else since the interval was set
        // the counter holds less, or no instruction has run (then the fuel is all there).
        if in_interval != -(self.current.load(Ordering::Relaxed) as i64) {
            return Ok(None);
        }
        let left = store.get_fuel()?;
        if left >= FUEL {
            return Ok(None);
        }
        // Refuelling keeps the store's total: what it lost since the interval was set (the
        // interval, and the instructions between its end and the check that saw it) ran.
        let ran = FUEL - left;
        self.next_interval(store.as_context_mut())?;
        if !self.running.load(Ordering::Relaxed) {
            return Ok(None);
        }
        Ok(Some(ran))
    }
}
