//! What wasmspy reads of an instance's `VMContext`, Wasmtime's record of an instance, which
//! has no public accessor for it: its store's context (see
//! [`crate::capture::signal::store_contexts`]), its memory (a pointer to its base and current
//! length), its globals (where [`crate::runtimes::InstanceView`] finds them). The offsets are `wasmtime-environ`'s, the crate from which Wasmtime's
//! compiler takes them (the exact version Wasmtime depends on), computed from the module's
//! counts of imports and definitions, and checked against what Wasmtime reports.

use std::future::Future;
use std::task::{Context as PollContext, Poll, Waker};

use anyhow::{bail, Context, Result};
use wasmtime::{AsContextMut, Engine, ExternType, Instance, Module, Store};
use wasmtime_environ::{HostPtr, PtrSize, VMOffsetsFields, VMCONTEXT_MAGIC};

/// The address of the `VMContext` of the instance that defines `func`, alive as long as its
/// store.
pub fn vmctx_of(mut store: impl AsContextMut, func: wasmtime::Func) -> Result<usize> {
    let func_ref = func.to_raw(&mut store) as usize;
    let ptr = HostPtr;
    // SAFETY: `to_raw` returns a pointer to the function's `VMFuncRef`, alive as long as the
    // store; its `vmctx` field is the instance's `VMContext`, whose first word holds the
    // magic number checked before it is used.
    unsafe {
        let vmctx = read::<usize>(func_ref + usize::from(ptr.vm_func_ref().vmctx()));
        if vmctx == 0 || read::<u32>(vmctx + usize::from(ptr.vmctx_magic())) != VMCONTEXT_MAGIC {
            bail!("Wasmtime's instance layout is not the one wasmspy was built for");
        }
        Ok(vmctx)
    }
}

/// `instance`'s `VMContext` (through a function it exports) and the memory it exports.
pub(crate) fn vmctx_and_memory(
    mut store: impl AsContextMut,
    instance: &Instance,
) -> Result<(usize, wasmtime::Memory)> {
    let func = instance
        .exports(&mut store)
        .find_map(|e| e.into_func())
        .context("the module exports no function")?;
    let vmctx = vmctx_of(&mut store, func)?;
    let memory = instance
        .exports(&mut store)
        .find_map(|e| e.into_memory())
        .context("the module exports no memory")?;
    Ok((vmctx, memory))
}

/// The address of the `VMStoreContext` of the store of the instance whose `VMContext` is at
/// `vmctx` (see [`vmctx_of`]).
pub fn context_of_instance(vmctx: usize) -> usize {
    // SAFETY: a live instance's `VMContext` (the caller's `vmctx_of`) holds the store
    // context's address.
    unsafe { read::<usize>(vmctx + usize::from(HostPtr.vmctx_store_context())) }
}

/// Finds stores' `VMStoreContext`s with a probe module, compiled once per engine.
#[derive(Clone)]
pub struct ContextFinder {
    probe: Module,
}

const PROBE: &str = r#"(module (func (export "probe")))"#;

impl ContextFinder {
    pub fn new(engine: &Engine) -> Result<Self> {
        Ok(ContextFinder {
            probe: Module::new(engine, wat::parse_str(PROBE)?)?,
        })
    }

    /// The address of `store`'s `VMStoreContext`, alive as long as the store. Adds the probe's
    /// instance to the store.
    pub fn find<T: 'static>(&self, store: &mut Store<T>) -> Result<usize> {
        // Instantiating a module without a start function runs no code and never suspends, on
        // a synchronous store or an asynchronous one alike: one poll completes it.
        // A store of another engine than the profiler's (a mistake, but one that works).
        let other;
        let probe = if Engine::same(store.engine(), self.probe.engine()) {
            &self.probe
        } else {
            other = Module::new(store.engine(), wat::parse_str(PROBE)?)?;
            &other
        };
        let instance = {
            let instantiating = std::pin::pin!(Instance::new_async(&mut *store, probe, &[]));
            match instantiating.poll(&mut PollContext::from_waker(Waker::noop())) {
                Poll::Ready(instance) => instance?,
                Poll::Pending => bail!("instantiating an empty module did not complete"),
            }
        };
        let func = instance
            .get_func(&mut *store, "probe")
            .context("the probe module exports its function")?;
        Ok(context_of_instance(vmctx_of(&mut *store, func)?))
    }
}

/// The counts of `module`'s imports and definitions that place the fields of its instances'
/// `VMContext`, with `globals` defined globals.
pub(crate) fn fields_of(module: &Module, globals: u32) -> Result<VMOffsetsFields<HostPtr>> {
    let mut fields = VMOffsetsFields {
        ptr: HostPtr,
        num_imported_functions: 0,
        num_imported_tables: 0,
        num_imported_memories: 0,
        num_imported_globals: 0,
        num_imported_tags: 0,
        num_defined_tables: 0,
        num_defined_memories: 0,
        num_owned_memories: 0,
        num_defined_globals: globals,
        num_defined_tags: 0,
        num_escaped_funcs: 0,
        num_runtime_data: 0,
        has_startup_func: false,
    };
    for import in module.imports() {
        match import.ty() {
            ExternType::Func(_) => fields.num_imported_functions += 1,
            ExternType::Table(_) => fields.num_imported_tables += 1,
            ExternType::Memory(_) => fields.num_imported_memories += 1,
            ExternType::Global(_) => fields.num_imported_globals += 1,
            ExternType::Tag(_) => fields.num_imported_tags += 1,
        }
    }
    if fields.num_imported_memories != 0 {
        bail!("the module imports its memory");
    }
    let resources = module.resources_required();
    fields.num_defined_tables = resources.num_tables;
    fields.num_defined_memories = resources.num_memories;
    // Neither Go's memory, CPython's nor the allocator rewrite's is shared.
    fields.num_owned_memories = resources.num_memories;
    if resources.num_memories == 0 {
        bail!("the module defines no memory");
    }
    Ok(fields)
}

/// # Safety
/// `addr` must be valid for reads of a `T`.
pub(super) unsafe fn read<T: Copy>(addr: usize) -> T {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::read_volatile(addr as *const T) }
}
