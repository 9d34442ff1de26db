//! What the signal sampler needs of the profiler, on the platforms that have it (Linux on
//! x86_64 and aarch64): the sampler itself, fiber stacks the signal handler can walk, the store
//! contexts by which it finds a guest's stack under host code, and runtime instances shown to
//! it; elsewhere, stand-ins that are never reached (`SIGNALS_AVAILABLE` is false there).

use std::sync::Arc;

use wasmtime::{AsContextMut, Config};

use super::Result;
use crate::capture::{Sampler, Sink, StoreKeeper, StoreKey};
use crate::runtimes::RuntimeInstance;

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
use crate::capture::signal::runtime_instances;
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(super) use crate::capture::signal::store_contexts::{Publication, StoreContexts};

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
use crate::capture::LabelsNow;
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
use wasmtime::{Engine, Store};

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(super) fn new_signal_sampler(
    rate_hz: u32,
    wall: bool,
    host_frames: bool,
    sink: Arc<dyn Sink>,
) -> Box<dyn Sampler> {
    Box::new(crate::capture::signal::SignalSampler::new(
        rate_hz,
        wall,
        host_frames,
        sink,
    ))
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(super) fn use_walkable_fiber_stacks(config: &mut Config) {
    config.with_host_stack(Arc::new(crate::capture::signal::fiber_stacks::FiberStacks));
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(super) fn use_walkable_fiber_stacks(_: &mut Config) {}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(super) fn new_signal_sampler(_: u32, _: bool, _: bool, _: Arc<dyn Sink>) -> Box<dyn Sampler> {
    unreachable!("SIGNALS_AVAILABLE is false on this platform")
}

/// Shows the signal handler a runtime instance of `store`, whose key is `key`, until the
/// store is dropped.
///
/// # Safety
/// As [`runtime_instances::publish`].
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(super) unsafe fn publish_runtime<T: 'static>(
    keeper: &StoreKeeper,
    store: impl AsContextMut<Data = T>,
    key: StoreKey,
    runtime: RuntimeInstance,
) -> Result<()> {
    // SAFETY: the caller's contract.
    Ok(unsafe { runtime_instances::publish(keeper, store, key, runtime) }?)
}

/// No signal sampler: no instance is published (`attach_instance` returns before).
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(super) unsafe fn publish_runtime<T: 'static>(
    _: &StoreKeeper,
    _: impl AsContextMut<Data = T>,
    _: StoreKey,
    _: RuntimeInstance,
) -> Result<()> {
    unreachable!("SIGNALS_AVAILABLE is false on this platform")
}

/// No signal sampler: nothing published.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(super) type Publication = ();

/// No signal sampler, no store contexts to show it.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(super) enum StoreContexts {}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
impl StoreContexts {
    pub(super) fn new(_: &Engine) -> Result<Self> {
        unreachable!("SIGNALS_AVAILABLE is false on this platform")
    }

    pub(super) fn publish<T>(
        &self,
        _: &mut Store<T>,
        _: StoreKey,
        _: Arc<LabelsNow>,
    ) -> Result<()> {
        match *self {}
    }
}
