//! Showing the samplers the instances of language runtimes (Go, CPython), whose stacks they
//! then read from the instance's memory: a module's instance shown by the embedder, or the
//! instances inside a component probed by [`crate::probe_runtimes`], shown as it is
//! instantiated. Soundness: a [`RuntimeInstance`] points into an instance's memory, and what
//! keeps it lives no longer than the store that owns that instance: the store's own hooks (the
//! epoch callback, the call hook, the allocator hook), the profiler's record of the store
//! (withdrawn as the store drops) and the signal handler's table (until the store is dropped).

use wasmtime::{AsContextMut, Instance};

use super::signal_sampler::publish_runtime;
use super::{Profiler, ProfilerHandle, Result};
use crate::capture::allocations::StoreData;
use crate::error::Error;
use crate::runtime_probe::{ProbedMemory, PROBE};
use crate::runtimes::{InstanceView, RuntimeInstance};
use crate::sync::lock;
use crate::warning::{Warning, WarningKind};

impl Profiler {
    /// Shows the profiler an instance of a registered module, after instantiating it and before
    /// the guest runs: see [`ProfilerHandle::attach_instance`].
    pub fn attach_instance<T: 'static>(
        &self,
        store: impl AsContextMut<Data = T>,
        instance: &Instance,
    ) -> Result<()> {
        self.handle.attach_instance(store, instance)
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
}

impl ProfilerHandle {
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
        let shown = self.stores.with(data, |attached| {
            let _ = attached.runtime.set(runtime.clone());
            attached.key
        });
        let Some(key) = shown else {
            return Ok(());
        };
        if self.store_contexts.is_some() {
            // SAFETY: the caller's contract; `key` is the store's.
            unsafe { publish_runtime(&self.keeper, store, key, runtime)? };
        }
        Ok(())
    }
}
