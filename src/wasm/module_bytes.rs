//! A module's bytes where they were read: a component's core module is a range of the
//! component's buffer, shared, not copied (15 MB copied, and its pages faulted in, before a
//! large component's guest could start).

use std::ops::{Deref, Range};
use std::sync::Arc;

#[derive(Clone)]
pub struct ModuleBytes {
    buffer: Arc<[u8]>,
    range: Range<usize>,
}

impl ModuleBytes {
    /// A module read alone: the whole buffer.
    pub fn whole(buffer: Arc<[u8]>) -> Self {
        let range = 0..buffer.len();
        ModuleBytes { buffer, range }
    }

    /// The module at `range` of `buffer` (a component's), or None where the range is not in it.
    pub fn within(buffer: Arc<[u8]>, range: Range<usize>) -> Option<Self> {
        buffer.get(range.clone())?;
        Some(ModuleBytes { buffer, range })
    }

    /// The buffer and where the module is in it, for readers that keep a reference to it
    /// (DWARF's).
    pub fn parts(&self) -> (&Arc<[u8]>, Range<usize>) {
        (&self.buffer, self.range.clone())
    }
}

impl From<Vec<u8>> for ModuleBytes {
    fn from(module: Vec<u8>) -> Self {
        ModuleBytes::whole(module.into())
    }
}

impl Deref for ModuleBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buffer[self.range.clone()]
    }
}
