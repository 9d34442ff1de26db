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

/// Linear memory as a walk reads it: every read within its bounds.
pub trait Memory {
    /// Fills `out` with the bytes at `address`, if all of them are in the memory.
    fn read(&self, address: u64, out: &mut [u8]) -> Option<()>;

    fn u8_at(&self, address: u64) -> Option<u8> {
        let mut b = [0; 1];
        self.read(address, &mut b)?;
        Some(b[0])
    }

    fn u32_at(&self, address: u64) -> Option<u32> {
        let mut b = [0; 4];
        self.read(address, &mut b)?;
        Some(u32::from_le_bytes(b))
    }

    fn u64_at(&self, address: u64) -> Option<u64> {
        let mut b = [0; 8];
        self.read(address, &mut b)?;
        Some(u64::from_le_bytes(b))
    }
}

/// An instance's linear memory, `[base, base + length)`, mapped while the instance lives.
pub struct LinearMemory {
    base: usize,
    length: usize,
}

impl LinearMemory {
    /// # Safety
    /// `anchor` must hold at `offset` the pointer to a live memory's definition (a live
    /// instance's `VMContext` does).
    pub(crate) unsafe fn of(anchor: usize, offset: u32) -> Self {
        // SAFETY: the caller's contract; the definition lives as long as the memory.
        unsafe {
            let definition = read::<usize>(anchor + offset as usize);
            let layout = HostPtr.vm_memory_definition();
            LinearMemory {
                base: read::<usize>(definition + usize::from(layout.base())),
                length: read::<usize>(definition + usize::from(layout.current_length())),
            }
        }
    }

    /// Its length in bytes.
    pub fn size(&self) -> u64 {
        self.length as u64
    }

    /// Whether this is `memory` as Wasmtime reports it.
    pub(crate) fn check(
        &self,
        store: impl wasmtime::AsContext,
        memory: wasmtime::Memory,
    ) -> Result<()> {
        if self.base != memory.data_ptr(&store) as usize || self.length != memory.data_size(&store)
        {
            bail!("Wasmtime's instance layout is not the one wasmspy was built for");
        }
        Ok(())
    }
}

impl Memory for LinearMemory {
    fn read(&self, address: u64, out: &mut [u8]) -> Option<()> {
        let address = usize::try_from(address).ok()?;
        if address.checked_add(out.len())? > self.length {
            return None;
        }
        // SAFETY: within the memory's accessible length (checked above), which is mapped
        // while the instance lives; `out` is ours, not in it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (self.base + address) as *const u8,
                out.as_mut_ptr(),
                out.len(),
            );
        }
        Some(())
    }
}

/// # Safety
/// `addr` must be valid for reads of a `T`.
unsafe fn read<T: Copy>(addr: usize) -> T {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::read_volatile(addr as *const T) }
}

#[cfg(test)]
mod tests {
    use wasmtime::{Engine, Linker, Store, Val};

    use super::*;
    use crate::runtimes::InstanceView;

    /// A module laid out as a Go module is after the allocator rewrite (imported functions,
    /// two memories, a table, then Go's globals): SP, `g` and the memory are read where
    /// Wasmtime keeps them, as its own API reports them.
    #[test]
    fn globals_and_memory_are_read_where_wasmtime_keeps_them() {
        let engine = Engine::default();
        let module = Module::new(
            &engine,
            r#"(module
                (import "env" "f" (func))
                (import "env" "h" (func (param i32)))
                (memory (export "memory") 2)
                (memory 1)
                (table 3 funcref)
                (global (export "sp") (mut i32) (i32.const 0))
                (global (mut i64) (i64.const 0))
                (global (export "g") (mut i64) (i64.const 0))
                (func (export "_start")))"#,
        )
        .unwrap();
        let mut store = Store::new(&engine, ());
        let mut linker = Linker::new(&engine);
        linker.func_wrap("env", "f", || {}).unwrap();
        linker.func_wrap("env", "h", |_: i32| {}).unwrap();
        let instance = linker.instantiate(&mut store, &module).unwrap();
        for (name, value) in [("sp", Val::I32(0x12340)), ("g", Val::I64(0x5678_9abc))] {
            let global = instance.get_global(&mut store, name).unwrap();
            global.set(&mut store, value).unwrap();
        }
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        memory
            .write(&mut store, 0x100, &0x1122_3344_5566_7788u64.to_le_bytes())
            .unwrap();
        let view = InstanceView::of(&mut store, &instance, &[0, 2]).unwrap();
        // SAFETY: the instance is alive in `store`.
        let (sp, g, linear) =
            unsafe { (view.global::<u32>(0), view.global::<u64>(1), view.memory()) };
        assert_eq!((sp, g), (0x12340, 0x5678_9abc));
        assert_eq!(linear.u64_at(0x100), Some(0x1122_3344_5566_7788));
        let size = memory.data_size(&store) as u64;
        assert_eq!(linear.u64_at(size - 8), Some(0));
        assert_eq!(linear.u64_at(size - 7), None);
        assert_eq!(linear.u64_at(u64::MAX), None);
    }
}
