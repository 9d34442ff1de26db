//! What wasmspy reads of an instance's `VMContext`, Wasmtime's record of an instance, which
//! has no public accessor for it: its store's context (see
//! [`crate::capture::signal::store_contexts`]), its memory (a pointer to its base and current
//! length), its globals (where [`crate::runtimes::InstanceView`] finds them). The offsets are `wasmtime-environ`'s, the crate from which Wasmtime's
//! compiler takes them (the exact version Wasmtime depends on), computed from the module's
//! counts of imports and definitions, and checked against what Wasmtime reports.

use std::any::TypeId;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context as PollContext, Poll, Waker};

use anyhow::{bail, Context, Result};
use rustc_hash::FxHashMap;
use wasmtime::{AsContextMut, Engine, ExternType, Instance, Module, Store};
use wasmtime_environ::{HostPtr, PtrSize, VMOffsetsFields, VMCONTEXT_MAGIC};

use crate::shared::background::Background;
use crate::sync::lock;

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

/// Finds stores' `VMStoreContext`s: with a probe module, compiled once per engine, for the
/// first store of each type of data; for the others, from where their data is.
///
/// A store is one allocation that holds both its context and its data (`StoreInner<T>`), so
/// the distance between the two is the same for every store of a given `T` in a build. Each
/// store's context records where its data is (the `store_data` field), which the distance is
/// checked against, store by store. Instantiating the probe cost a server a core instance and
/// some 3 µs per request; this is one read.
#[derive(Clone)]
pub struct ContextFinder {
    engine: Engine,
    /// Compiled on a thread of its own from the finder's making (0.5 ms of a start, out of
    /// Wasmtime's cache), while the program's own compilation goes on; waited for by the
    /// first store's find.
    probe: Arc<Background<Result<Module, String>>>,
    /// The context's address less the data's, by the type of the data; shared by the finder's
    /// clones (an instructions sampler's).
    from_data: Arc<Mutex<FxHashMap<TypeId, isize>>>,
}

const PROBE: &str = r#"(module (func (export "probe")))"#;

impl ContextFinder {
    pub fn new(engine: &Engine) -> Self {
        let compiling = engine.clone();
        let probe = Background::spawn("wasmspy-probe", move || {
            compile_probe(&compiling).map_err(|e| format!("{e:#}"))
        });
        ContextFinder {
            engine: engine.clone(),
            probe: Arc::new(probe),
            from_data: Default::default(),
        }
    }

    /// The address of `store`'s `VMStoreContext`, alive as long as the store. Adds the probe's
    /// instance to the first store of each type of data.
    pub fn find<T: 'static>(&self, store: &mut Store<T>) -> Result<usize> {
        let data = store.data() as *const T as usize;
        let known = lock(&self.from_data).get(&TypeId::of::<T>()).copied();
        if let Some(distance) = known {
            let context = data.wrapping_add_signed(distance);
            // SAFETY: the distance was measured in a store of the same type, whose context
            // and data are in one allocation laid out as this one is: `context` is this
            // store's context, alive as long as the store.
            if unsafe { data_of_context(context) } == data {
                return Ok(context);
            }
        }
        let context = self.probed(store)?;
        // SAFETY: the probe's instance gave the store's context.
        if unsafe { data_of_context(context) } == data {
            lock(&self.from_data).insert(TypeId::of::<T>(), context.wrapping_sub(data) as isize);
        }
        Ok(context)
    }

    /// `store`'s context, through an instance of the probe made in it.
    fn probed<T: 'static>(&self, store: &mut Store<T>) -> Result<usize> {
        // Instantiating a module without a start function runs no code and never suspends, on
        // a synchronous store or an asynchronous one alike: one poll completes it.
        // A store of another engine than the profiler's (a mistake, but one that works).
        let other;
        let probe = if Engine::same(store.engine(), &self.engine) {
            match self.probe.get() {
                Some(Ok(probe)) => probe,
                Some(Err(e)) => bail!("cannot compile the probe module: {e}"),
                None => bail!("compiling the probe module panicked"),
            }
        } else {
            other = compile_probe(store.engine())?;
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

/// The probe module, compiled by `engine`.
fn compile_probe(engine: &Engine) -> Result<Module> {
    Ok(Module::new(engine, wat::parse_str(PROBE)?)?)
}

/// Where the data of the store whose `VMStoreContext` is at `context` is, as the context
/// records it.
///
/// # Safety
/// `context` must be a live store's `VMStoreContext`.
unsafe fn data_of_context(context: usize) -> usize {
    let field = usize::from(HostPtr.vm_store_context().store_data());
    // SAFETY: the caller's contract; the field is a pointer.
    unsafe { read::<usize>(context + field) }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Stores of two types of data, each found from its data after the first, are found where
    /// the probe finds them.
    #[test]
    fn a_store_is_found_from_its_data_where_the_probe_finds_it() {
        let engine = Engine::default();
        let finder = ContextFinder::new(&engine);
        let mut units: Vec<Store<()>> = (0..3).map(|_| Store::new(&engine, ())).collect();
        let mut words: Vec<Store<[u64; 5]>> = (0..3).map(|i| Store::new(&engine, [i; 5])).collect();
        for store in &mut units {
            assert_eq!(finder.find(store).unwrap(), finder.probed(store).unwrap());
        }
        for store in &mut words {
            assert_eq!(finder.find(store).unwrap(), finder.probed(store).unwrap());
        }
        assert_eq!(
            lock(&finder.from_data).len(),
            2,
            "one distance for each type of data"
        );
    }
}
