//! The heap profile's hook: the host function through which the allocators of a module or
//! component rewritten by [`crate::memory`] report their calls, each sampled allocation
//! recorded with the guest stack that made it (the runtime's own, where the instance is of a
//! language runtime shown to the profiler).

use std::sync::Mutex;

use wasmtime::{AsContextMut, Caller, Func, Instance, Ref, WasmBacktrace};

use super::{Profiler, ProfilerHandle};
use crate::capture::allocations::{Allocations, AllocatorCall, StoreData};
use crate::capture::Sink;
use crate::memory::component::ALLOCATOR_HOOK;
use crate::memory::rewrite::{report, HOOK_TABLE, SAMPLE_COUNTDOWN};
use crate::runtimes::{GuestPoint, RuntimeInstance};
use crate::shared::GuestStack;
use crate::sync::lock;

impl Profiler {
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
                    let runtime = stores.with(data, |s| s.runtime.get().cloned()).flatten();
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
}

impl ProfilerHandle {
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
    pub(super) fn install_hook<T: 'static>(
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
