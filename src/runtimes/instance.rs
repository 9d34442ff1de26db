//! An instance of a runtime's module as the samplers read it: where its memory and the
//! globals its runtime reads are, from its `VMContext` ([`InstanceView`]), and the runtime
//! that reads it ([`RuntimeInstance`]). Reading through a view is `unsafe`: it is valid while
//! the instance lives.

use std::sync::Arc;

use anyhow::{bail, Result};
use wasmtime::{AsContextMut, Instance, WasmBacktrace};
use wasmtime_environ::{DefinedGlobalIndex, DefinedMemoryIndex, VMOffsets};

use super::{id_of, GuestPoint, Runtime};
use crate::shared::vmctx::{fields_of, vmctx_and_memory};
use crate::shared::{GuestStack, LinearMemory, Spliced};

/// An instance of a runtime's module as walks read it: an anchor (the instance's `VMContext`,
/// or a [cell](RuntimeInstance::in_component) holding its memory's definition), where from it
/// the pointer to its memory's definition is, and where the globals its runtime reads are.
/// Valid while the instance lives; reading through it is `unsafe` for that reason.
#[derive(Clone, Copy, Debug)]
pub struct InstanceView {
    anchor: usize,
    memory: u32,
    globals: [u32; 2],
    root: u32,
}

impl InstanceView {
    /// `instance`, whose runtime reads its defined globals `globals` (at most two), checked
    /// against the memory Wasmtime reports.
    pub fn of(mut store: impl AsContextMut, instance: &Instance, globals: &[u32]) -> Result<Self> {
        if globals.len() > 2 {
            bail!("a runtime reads at most two globals");
        }
        let module = instance.module(&mut store).clone();
        let defined = globals.iter().map(|g| g + 1).max().unwrap_or(0);
        let fields = fields_of(&module, defined)?;
        if !globals.is_empty() && fields.num_imported_globals != 0 {
            bail!("the module imports globals");
        }
        let offsets = VMOffsets::from(fields);
        let mut at = [0; 2];
        for (slot, &g) in at.iter_mut().zip(globals) {
            *slot = offsets.vmctx_vmglobal_definition(DefinedGlobalIndex::from_u32(g));
        }
        let (vmctx, memory) = vmctx_and_memory(&mut store, instance)?;
        let view = InstanceView {
            anchor: vmctx,
            memory: offsets.vmctx_vmmemory_pointer(DefinedMemoryIndex::from_u32(0)),
            globals: at,
            root: 0,
        };
        let packed = InstanceView::unpack(vmctx, view.pack(), 0);
        if (packed.memory, packed.globals) != (view.memory, view.globals) {
            bail!("the instance's layout is larger than expected");
        }
        // SAFETY: the instance is alive: it is in `store`.
        unsafe { view.memory() }.check(&store, memory)?;
        Ok(view)
    }

    /// The offsets in one word, for the signal handler's table: 21 bits each.
    pub fn pack(&self) -> u64 {
        u64::from(self.memory) | u64::from(self.globals[0]) << 21 | u64::from(self.globals[1]) << 42
    }

    /// The view of `anchor` whose offsets are `packed` and whose runtime's state is at `root`.
    pub fn unpack(anchor: usize, packed: u64, root: u32) -> Self {
        let field = |shift: u32| (packed >> shift & ((1 << 21) - 1)) as u32;
        InstanceView {
            anchor,
            memory: field(0),
            globals: [field(21), field(42)],
            root,
        }
    }

    /// Where the runtime's state is in the memory ([`Runtime::root`]).
    pub fn root(&self) -> u32 {
        self.root
    }

    /// The memory as it is now.
    ///
    /// # Safety
    /// The instance must be alive: in its store's host functions, or in the signal handler
    /// while it is published ([`crate::capture`]'s table of runtime instances).
    pub unsafe fn memory(&self) -> LinearMemory {
        // SAFETY: the caller's contract.
        unsafe { LinearMemory::of(self.anchor, self.memory) }
    }

    /// The value of the `i`th global of those the view was made with.
    ///
    /// # Safety
    /// As [`memory`](Self::memory); `T` must be the global's type.
    pub unsafe fn global<T: Copy>(&self, i: usize) -> T {
        // SAFETY: the caller's contract: a live instance's global definition.
        unsafe { std::ptr::read_volatile((self.anchor + self.globals[i] as usize) as *const T) }
    }

    /// Where the view reads from, unique while the instance lives.
    pub fn anchor(&self) -> usize {
        self.anchor
    }
}

/// A runtime's instance, as the samplers read it (the signal handler's table, the epoch
/// callback, the allocator hook). Made only for an instance of the runtime's module, and kept
/// by the instance's store only.
#[derive(Clone)]
pub struct RuntimeInstance {
    runtime: Arc<dyn Runtime>,
    view: InstanceView,
    /// The anchor of a view of an instance inside a component, kept while the view is.
    _cell: Option<Arc<usize>>,
}

impl RuntimeInstance {
    /// `runtime`'s instance seen through `view`; why not, where its state is not found.
    ///
    /// # Safety
    /// `view` must be of an instance of `runtime`'s module, and this value must not outlive
    /// the instance's store.
    pub unsafe fn new(runtime: Arc<dyn Runtime>, mut view: InstanceView) -> Result<Self, String> {
        // SAFETY: the caller's contract: the instance is alive.
        view.root = runtime.root(&unsafe { view.memory() })?;
        Ok(RuntimeInstance {
            runtime,
            view,
            _cell: None,
        })
    }

    /// An instance of `runtime`'s module inside a component, which Wasmtime does not show
    /// but by the definition of its memory (`definition`, a `VMMemoryDefinition`): a cell
    /// holding it is the view's anchor. Its runtime reads no global.
    ///
    /// # Safety
    /// `definition` must be that of a memory of the store whose instance's value this is,
    /// which it must not outlive.
    pub unsafe fn in_component(
        runtime: Arc<dyn Runtime>,
        definition: usize,
    ) -> Result<Self, String> {
        if !runtime.globals().is_empty() {
            return Err(
                "the runtime reads globals, which an instance inside a component does not show"
                    .into(),
            );
        }
        let cell = Arc::new(definition);
        let mut view = InstanceView {
            anchor: &*cell as *const usize as usize,
            memory: 0,
            globals: [0; 2],
            root: 0,
        };
        // SAFETY: the caller's contract: the cell holds a live memory's definition.
        view.root = runtime.root(&unsafe { view.memory() })?;
        Ok(RuntimeInstance {
            runtime,
            view,
            _cell: Some(cell),
        })
    }

    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    pub fn view(&self) -> &InstanceView {
        &self.view
    }

    /// The guest stack on the guest thread, with the runtime's stack where it reads one.
    pub fn stack(&self, backtrace: WasmBacktrace, at: GuestPoint) -> GuestStack {
        // SAFETY: made for an instance of the runtime's module, alive while its store is,
        // which this value does not outlive.
        match unsafe { self.runtime.at_guest_thread(&self.view, &backtrace, at) } {
            Some((kept, words)) => GuestStack {
                backtrace,
                splice: Some(Spliced {
                    at: kept,
                    runtime: id_of(&self.runtime),
                    words,
                }),
            },
            None => GuestStack::wasm(backtrace),
        }
    }
}

#[cfg(test)]
mod tests {
    use wasmtime::{Engine, Linker, Module, Store, Val};

    use super::*;
    use crate::shared::Memory;

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
