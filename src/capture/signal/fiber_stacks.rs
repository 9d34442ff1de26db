//! Fiber stacks the signal handler can walk. A guest called asynchronously (`call_async`, as
//! `wasmtime run` calls every guest) runs on a fiber stack that Wasmtime allocates, not on its
//! thread's stack; the handler reads only the stack the interrupted code runs on, so it must know
//! where that stack ends. [`FiberStacks`], installed with `Config::with_host_stack`, allocates
//! the stacks as Wasmtime does (an anonymous mapping, a guard page below it) and publishes each
//! one's range in a fixed table for as long as it exists.
//!
//! Invariants the handler relies on:
//! - a range is published only while its memory is mapped: published after `mmap`, withdrawn
//!   before `munmap`, which waits for running handlers (one may read a suspended fiber);
//! - [`range_of`] is async-signal-safe: atomic loads over a fixed table, no allocation, no locks,
//!   bounded by [`SLOTS`] (see [`super::slot_table`]);
//! - a stack that finds no free slot works as any other, unpublished: samples taken on it keep
//!   only their leaf.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime::{StackCreator, StackMemory};

use super::slot_table::{Payload, Publication, SlotTable};

/// How many fiber stacks can be walked at once: one per guest call in progress.
pub const SLOTS: usize = 256;

/// A published stack, `[low, high)`: its end is the slot's live word.
struct Low(AtomicUsize);

impl Payload for Low {
    const EMPTY: Self = Low(AtomicUsize::new(0));
}

static TABLE: SlotTable<Low, SLOTS> = SlotTable::new();

/// The published fiber stack that holds `addr`. Async-signal-safe.
pub fn range_of(addr: usize) -> Option<Range<usize>> {
    TABLE.find_map(|high, low| {
        let range = low.0.load(Ordering::Relaxed)..high;
        range.contains(&addr).then_some(range)
    })
}

/// Wasmtime's allocator of fiber stacks, for `Config::with_host_stack`.
pub struct FiberStacks;

// SAFETY: each stack is a fresh mapping of its own, zero-filled, page-aligned, with a guard page
// at its bottom, as the trait requires.
unsafe impl StackCreator for FiberStacks {
    fn new_stack(&self, size: usize, _zeroed: bool) -> wasmtime::Result<Box<dyn StackMemory>> {
        Ok(Box::new(FiberStack::new(size)?))
    }
}

struct FiberStack {
    /// The whole mapping: the guard page, then the stack.
    base: usize,
    len: usize,
    /// The guard page's size: asked once, where Wasmtime asks for the ranges at each call.
    page: usize,
    /// Withdrawn before the mapping goes.
    published: Option<Publication>,
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

impl FiberStack {
    fn new(size: usize) -> std::io::Result<Self> {
        let page = page_size();
        let len = size.div_ceil(page).max(1) * page + page;
        // SAFETY: a fresh private anonymous mapping, made accessible above its first page; on
        // failure it is unmapped.
        let base = unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let stack = base.cast::<u8>().add(page).cast();
            if libc::mprotect(stack, len - page, libc::PROT_READ | libc::PROT_WRITE) != 0 {
                let e = std::io::Error::last_os_error();
                libc::munmap(base, len);
                return Err(e);
            }
            base as usize
        };
        let mut stack = FiberStack {
            base,
            len,
            page,
            published: None,
        };
        let range = stack.range();
        stack.published =
            TABLE.publish(range.end, |low| low.0.store(range.start, Ordering::Relaxed));
        Ok(stack)
    }
}

// SAFETY: the stack's memory is owned by this value and unmapped once, when it is dropped.
unsafe impl StackMemory for FiberStack {
    fn top(&self) -> *mut u8 {
        (self.base + self.len) as *mut u8
    }

    fn range(&self) -> Range<usize> {
        self.base + self.page..self.base + self.len
    }

    fn guard_range(&self) -> Range<*mut u8> {
        self.base as *mut u8..(self.base + self.page) as *mut u8
    }
}

impl Drop for FiberStack {
    fn drop(&mut self) {
        drop(self.published.take());
        // SAFETY: the mapping made in `new`, no longer published, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stack_is_published_while_it_exists() {
        let stack = FiberStack::new(64 * 1024).unwrap();
        let range = stack.range();
        assert_eq!(range.len(), 64 * 1024);
        assert_eq!(range_of(range.start), Some(range.clone()));
        assert_eq!(range_of(range.end - 8), Some(range.clone()));
        assert_eq!(range_of(range.end), None);
        assert_eq!(
            range_of(range.start - 1),
            None,
            "the guard page is not stack"
        );
        // The memory is there to be used.
        // SAFETY: inside the stack's mapping.
        unsafe { *((range.end - 8) as *mut u64) = 7 };
        drop(stack);
        assert_eq!(range_of(range.start), None);
    }
}
