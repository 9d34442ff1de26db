//! What wasmspy reads of an instance's `VMContext`, Wasmtime's record of an instance, which
//! has no public accessor for it: its store's context (see
//! [`crate::capture::signal::store_contexts`]), its memory (a pointer to its base and current
//! length), and for an instance of a Go module, Go's registers (its SP in global 0, `g` in
//! global 2). The offsets are `wasmtime-environ`'s, the crate from which Wasmtime's
//! compiler takes them (the exact version Wasmtime depends on), computed from the module's
//! counts of imports and definitions, and checked against what Wasmtime reports.

use anyhow::{bail, Context, Result};
use wasmtime::{AsContextMut, ExternType, Instance, Module};
use wasmtime_environ::{
    DefinedGlobalIndex, DefinedMemoryIndex, HostPtr, PtrSize, VMOffsets, VMOffsetsFields,
    VMCONTEXT_MAGIC,
};

use crate::capture::go_stack::Registers;

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
fn vmctx_and_memory(
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

/// Where an instance's Go registers and memory are in its `VMContext`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Offsets {
    sp: u32,
    g: u32,
    memory: u32,
}

/// The counts of `module`'s imports and definitions that place the fields of its instances'
/// `VMContext`, with `globals` defined globals.
fn fields_of(module: &Module, globals: u32) -> Result<VMOffsetsFields<HostPtr>> {
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

impl Offsets {
    fn of(module: &Module) -> Result<Self> {
        let fields = fields_of(module, 3)?;
        if fields.num_imported_globals != 0 {
            bail!("a Go module imports no globals");
        }
        let offsets = VMOffsets::from(fields);
        let offsets = Offsets {
            sp: offsets.vmctx_vmglobal_definition(DefinedGlobalIndex::from_u32(0)),
            g: offsets.vmctx_vmglobal_definition(DefinedGlobalIndex::from_u32(2)),
            memory: offsets.vmctx_vmmemory_pointer(DefinedMemoryIndex::from_u32(0)),
        };
        if Offsets::unpack(offsets.pack()) != offsets {
            bail!("a Go instance's layout is larger than expected");
        }
        Ok(offsets)
    }

    fn pack(self) -> u64 {
        u64::from(self.sp) | u64::from(self.g) << 21 | u64::from(self.memory) << 42
    }

    fn unpack(packed: u64) -> Self {
        let field = |shift: u32| (packed >> shift & ((1 << 21) - 1)) as u32;
        Offsets {
            sp: field(0),
            g: field(21),
            memory: field(42),
        }
    }
}

/// An instance of a Go module, as a walk of its goroutine's stack reads it.
#[derive(Clone, Copy)]
pub struct GoInstance {
    vmctx: usize,
    offsets: Offsets,
}

impl GoInstance {
    /// `instance`, of a Go module, checked against the memory Wasmtime reports.
    pub fn of(mut store: impl AsContextMut, instance: &Instance) -> Result<Self> {
        let module = instance.module(&mut store).clone();
        let offsets = Offsets::of(&module)?;
        let (vmctx, memory) = vmctx_and_memory(&mut store, instance)?;
        let go = GoInstance { vmctx, offsets };
        go.read().1.check(&store, memory)?;
        Ok(go)
    }

    /// The instance's `VMContext`.
    pub fn vmctx(&self) -> usize {
        self.vmctx
    }

    /// For the handler's table: the offsets in one word.
    pub fn pack(&self) -> u64 {
        self.offsets.pack()
    }

    pub fn unpack(vmctx: usize, packed: u64) -> Self {
        GoInstance {
            vmctx,
            offsets: Offsets::unpack(packed),
        }
    }

    /// Go's SP and `g`, and the memory as it is now. Only while the instance lives: from its
    /// store's host functions, or in the signal handler while it is published
    /// ([`crate::capture::signal::guest_instances`]).
    pub fn read(&self) -> (Registers, LinearMemory) {
        // SAFETY: the instance is published, so its `VMContext` is alive; the memory
        // definition pointer it holds is valid as long as the instance.
        unsafe {
            let sp = read::<u32>(self.vmctx + self.offsets.sp as usize);
            let g = read::<u64>(self.vmctx + self.offsets.g as usize);
            let memory = LinearMemory::of(self.vmctx, self.offsets.memory);
            (
                Registers {
                    sp: u64::from(sp),
                    g,
                },
                memory,
            )
        }
    }
}

/// An instance of a module whose memory a walk reads (CPython's): its `VMContext` and where
/// the pointer to its memory's definition is in it.
#[derive(Clone, Copy)]
pub struct MemoryOf {
    vmctx: usize,
    memory: u32,
}

impl MemoryOf {
    /// `instance`'s memory, checked against what Wasmtime reports.
    pub fn of(mut store: impl AsContextMut, instance: &Instance) -> Result<Self> {
        let module = instance.module(&mut store).clone();
        let offsets = VMOffsets::from(fields_of(&module, 0)?);
        let memory = offsets.vmctx_vmmemory_pointer(DefinedMemoryIndex::from_u32(0));
        let (vmctx, exported) = vmctx_and_memory(&mut store, instance)?;
        let of = MemoryOf { vmctx, memory };
        of.read().check(&store, exported)?;
        Ok(of)
    }

    pub fn vmctx(&self) -> usize {
        self.vmctx
    }

    /// For the handler's table: the offset in one word.
    pub fn pack(&self) -> u64 {
        u64::from(self.memory)
    }

    pub fn unpack(vmctx: usize, packed: u64) -> Self {
        MemoryOf {
            vmctx,
            memory: packed as u32,
        }
    }

    /// The memory as it is now. Only while the instance lives: from its store's host
    /// functions, or in the signal handler while it is published
    /// ([`crate::capture::signal::guest_instances`]).
    pub fn read(&self) -> LinearMemory {
        // SAFETY: the instance is alive (the caller's contract).
        unsafe { LinearMemory::of(self.vmctx, self.memory) }
    }
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
    /// `vmctx` must be a live instance's `VMContext`, holding at `offset` the pointer to its
    /// memory's definition.
    unsafe fn of(vmctx: usize, offset: u32) -> Self {
        // SAFETY: the caller's contract; the definition lives as long as the instance.
        unsafe {
            let definition = read::<usize>(vmctx + offset as usize);
            let layout = HostPtr.vm_memory_definition();
            LinearMemory {
                base: read::<usize>(definition + usize::from(layout.base())),
                length: read::<usize>(definition + usize::from(layout.current_length())),
            }
        }
    }

    /// Whether this is `memory` as Wasmtime reports it.
    fn check(&self, store: impl wasmtime::AsContext, memory: wasmtime::Memory) -> Result<()> {
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

    /// A module laid out as a Go module is after the allocator rewrite (imported functions,
    /// two memories, a table, then Go's globals): SP, `g` and the memory are read where
    /// Wasmtime keeps them, as its own API reports them.
    #[test]
    fn go_registers_and_memory_are_read_where_wasmtime_keeps_them() {
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
        let go = GoInstance::of(&mut store, &instance).unwrap();
        let (registers, linear) = go.read();
        assert_eq!((registers.sp, registers.g), (0x12340, 0x5678_9abc));
        assert_eq!(linear.u64_at(0x100), Some(0x1122_3344_5566_7788));
        let size = memory.data_size(&store) as u64;
        assert_eq!(linear.u64_at(size - 8), Some(0));
        assert_eq!(linear.u64_at(size - 7), None);
        assert_eq!(linear.u64_at(u64::MAX), None);
    }
}
