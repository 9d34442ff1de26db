//! The bounded reader of a guest's linear memory, which the language runtimes' walks read
//! through (in the signal handler too): every read is checked against the memory's length at
//! that instant, so a guest that lies about its pointers makes a read fail, never a read
//! outside the memory. Async-signal-safe: no allocation, no lock.

use anyhow::{bail, Result};
use wasmtime_environ::{HostPtr, PtrSize};

use super::vmctx::read;

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
