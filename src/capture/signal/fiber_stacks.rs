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
//!   bounded by [`SLOTS`]; a range being written is skipped (a sequence lock per slot), so a
//!   range read is one that was published whole;
//! - a stack that finds no free slot works as any other, unpublished: samples taken on it keep
//!   only their leaf.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use wasmtime::{StackCreator, StackMemory};

/// How many fiber stacks can be walked at once: one per guest call in progress.
pub const SLOTS: usize = 256;

/// One published stack, `[low, high)`, read under a sequence lock: `seq` is odd while the
/// range is being written, and changes with every write, so a reader that sees the same even
/// `seq` before and after reading the range read one consistent range.
struct Slot {
    taken: AtomicBool,
    seq: AtomicUsize,
    low: AtomicUsize,
    high: AtomicUsize,
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        taken: AtomicBool::new(false),
        seq: AtomicUsize::new(0),
        low: AtomicUsize::new(0),
        high: AtomicUsize::new(0),
    }
}; SLOTS];

impl Slot {
    fn write(&self, range: Range<usize>) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        self.low.store(range.start, Ordering::SeqCst);
        self.high.store(range.end, Ordering::SeqCst);
        self.seq.fetch_add(1, Ordering::SeqCst);
    }

    fn read(&self) -> Option<Range<usize>> {
        let before = self.seq.load(Ordering::SeqCst);
        if before % 2 == 1 {
            return None;
        }
        let range = self.low.load(Ordering::SeqCst)..self.high.load(Ordering::SeqCst);
        (self.seq.load(Ordering::SeqCst) == before && !range.is_empty()).then_some(range)
    }
}

/// One past the highest slot ever taken: the handler reads no further, so that with one fiber
/// stack it reads one cache line, not the whole table.
static USED: AtomicUsize = AtomicUsize::new(0);

/// The published fiber stack that holds `addr`. Async-signal-safe.
pub fn range_of(addr: usize) -> Option<Range<usize>> {
    TABLE[..USED.load(Ordering::SeqCst).min(SLOTS)]
        .iter()
        .filter_map(Slot::read)
        .find(|range| range.contains(&addr))
}

fn publish(range: Range<usize>) -> Option<usize> {
    let i = TABLE.iter().position(|slot| {
        slot.taken
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    })?;
    TABLE[i].write(range);
    USED.fetch_max(i + 1, Ordering::SeqCst);
    Some(i)
}

/// Returns once no handler can be reading the stack: it may be unmapped then.
fn withdraw(i: usize) {
    TABLE[i].write(0..0);
    super::handler::wait_for_running_handlers();
    TABLE[i].taken.store(false, Ordering::SeqCst);
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
    slot: Option<usize>,
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
            slot: None,
        };
        stack.slot = publish(stack.range());
        Ok(stack)
    }
}

// SAFETY: the stack's memory is owned by this value and unmapped once, when it is dropped.
unsafe impl StackMemory for FiberStack {
    fn top(&self) -> *mut u8 {
        (self.base + self.len) as *mut u8
    }

    fn range(&self) -> Range<usize> {
        self.base + page_size()..self.base + self.len
    }

    fn guard_range(&self) -> Range<*mut u8> {
        self.base as *mut u8..(self.base + page_size()) as *mut u8
    }
}

impl Drop for FiberStack {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            withdraw(slot);
        }
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
