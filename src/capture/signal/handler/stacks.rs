//! Where the handler may read: the live part of the stack the interrupted code runs on
//! ([`Stack`], found by [`ThreadState::stack_at`]) and, from the store contexts, which store's
//! Wasm runs on it ([`ThreadState::running_store`]) and where its guest last left Wasm for the
//! host ([`ThreadState::last_exit`]).
//!
//! Invariant kept here, for the whole handler: **reads only mapped memory**. A stack is the
//! thread's own, a fiber stack that [`fiber_stacks`] publishes while it is mapped, or a pooled
//! fiber's between the guard page and the Wasm entry that the store running on it records;
//! a stack word is [`read`] only once such a stack [`Stack::holds`] it (or, for a guest
//! suspended in a host call, within its fiber's published mapping); a store context only
//! inside [`store_contexts::for_each`], which hands out only published (live) ones.
//! **Bounded**: at most [`store_contexts::SLOTS`] contexts visited, a few words read of each.

use super::fiber_stacks;
use super::store_contexts;
use super::ThreadState;

impl ThreadState {
    /// The live part of the stack `sp` is on, if wasmspy knows that stack.
    pub(super) fn stack_at(&self, sp: usize) -> Option<Stack> {
        if sp >= self.stack_low && sp < self.stack_top {
            return Some(Stack {
                sp,
                top: self.stack_top,
                store: 0,
            });
        }
        fiber_stacks::range_of(sp)
            .map(|r| Stack {
                sp,
                top: r.end,
                store: 0,
            })
            .or_else(|| self.running_fiber_at(sp))
    }

    /// On a fiber stack that Wasmtime allocated itself (the pooling allocator's stacks, for
    /// which no `StackCreator` is asked), the live part up to the frame record of the Wasm
    /// entry of the store running on it. While a store runs on a fiber, its context records
    /// that fiber's guard page, just below the fiber's stack, and its Wasm entry, on that
    /// stack: the stack is one readable mapping from the guard's end up past the entry.
    /// So when `sp` lies between them, `[sp, entry)` is on that stack, whichever store it is
    /// (the stacks of different fibers do not overlap), and the thread runs on it, so it stays
    /// mapped while the handler reads it.
    fn running_fiber_at(&self, sp: usize) -> Option<Stack> {
        let o = self.exit_record;
        let mut found = None;
        store_contexts::for_each(|context, key, _| {
            // SAFETY: a published context is the VMStoreContext of a live store (see
            // store_contexts), whose fields are aligned words.
            let (guard_end, entry_fp) = unsafe {
                (
                    read(context + o.fiber_guard_end),
                    read(context + o.entry_fp),
                )
            };
            if guard_end != 0 && guard_end <= sp && sp < entry_fp {
                // The entry trampoline's frame record: saved frame pointer, return address.
                found = Some(Stack {
                    sp,
                    top: entry_fp + 2 * std::mem::size_of::<usize>(),
                    store: key,
                });
            }
        });
        found
    }

    /// Where the guest left Wasm for the host code that `sp` runs: the return address into Wasm
    /// code, the frame pointer of the frame it returns to, and the stack they are on; `None`
    /// with no Wasm under the host code. The exit is the innermost one on `current` of the
    /// stores with Wasm on that stack (whichever thread attached them: an asynchronous store
    /// runs on the thread that polls it); with none there, while the thread runs its own stack,
    /// the one store attached by this thread whose guest waits suspended on a fiber (its
    /// asynchronous host call pending), whose frames stay in that fiber's mapping.
    pub(super) fn last_exit(&self, sp: usize, current: Stack) -> Option<Exit> {
        let on_thread_stack = sp >= self.stack_low && sp < self.stack_top;
        let mut innermost: Option<(usize, usize, u64)> = None;
        let mut suspended: Option<(usize, usize, Stack, u64)> = None;
        let mut suspended_count = 0;
        let o = self.exit_record;
        store_contexts::for_each(|context, key, tid| {
            // SAFETY: a published context is the VMStoreContext of a live store (see
            // store_contexts), whose fields are aligned words.
            let (entry_fp, trampoline_fp, pc) = unsafe {
                (
                    read(context + o.entry_fp),
                    read(context + o.exit_trampoline_fp),
                    read(context + o.exit_pc),
                )
            };
            if entry_fp == 0 || trampoline_fp >= entry_fp || !self.in_code(pc) {
                return;
            }
            if current.holds(trampoline_fp) {
                if innermost.is_none_or(|(_, fp, _)| trampoline_fp < fp) {
                    innermost = Some((pc, trampoline_fp, key));
                }
            } else if let Some(fiber) = (tid == self.tid)
                .then(|| fiber_stacks::range_of(trampoline_fp))
                .flatten()
            {
                suspended_count += 1;
                let stack = Stack {
                    sp: fiber.start,
                    top: fiber.end,
                    store: key,
                };
                suspended = Some((pc, trampoline_fp, stack, key));
            }
        });
        let (pc, trampoline_fp, stack, store) = match (innermost, suspended) {
            (Some((pc, fp, key)), _) => (pc, fp, current, key),
            (None, Some(exit)) if on_thread_stack && suspended_count == 1 => exit,
            _ => return None,
        };
        // The trampoline's frame record saves the frame pointer of the Wasm code it left.
        // SAFETY: trampoline_fp is on `stack`, mapped (checked above).
        let fp = unsafe { read(trampoline_fp) };
        stack.holds(fp).then_some(Exit {
            pc,
            fp,
            stack,
            store,
        })
    }

    /// The key of the store whose Wasm, entered on `current`, is innermost; 0 for none known.
    pub(super) fn running_store(&self, current: Stack) -> u64 {
        let mut innermost: Option<(usize, u64)> = None;
        let entry_fp = self.exit_record.entry_fp;
        store_contexts::for_each(|context, key, _| {
            // SAFETY: a published context is the VMStoreContext of a live store (see
            // store_contexts), whose fields are aligned words.
            let entry = unsafe { read(context + entry_fp) };
            if current.holds(entry) && innermost.is_none_or(|(fp, _)| entry < fp) {
                innermost = Some((entry, key));
            }
        });
        innermost.map_or(0, |(_, key)| key)
    }
}

/// Where the guest left Wasm for host code (see [`ThreadState::last_exit`]).
pub(super) struct Exit {
    /// The return address into the Wasm code that left.
    pub(super) pc: usize,
    /// The frame pointer of the frame it returns to.
    pub(super) fp: usize,
    /// The stack they are on.
    pub(super) stack: Stack,
    /// The key of the store the exit was from.
    pub(super) store: u64,
}

pub(super) const WORD: usize = std::mem::size_of::<usize>();

/// The live part of the stack the interrupted code runs on: `[sp, top)`.
#[derive(Clone, Copy)]
pub(super) struct Stack {
    pub(super) sp: usize,
    pub(super) top: usize,
    /// The key of the store running on it, when finding the stack told it (a pooled fiber's);
    /// 0 otherwise.
    pub(super) store: u64,
}

impl Stack {
    pub(super) fn holds(self, addr: usize) -> bool {
        addr >= self.sp && addr < self.top && addr.is_multiple_of(WORD)
    }
}

/// # Safety
/// `addr` must be mapped, readable and aligned.
pub(in super::super) unsafe fn read(addr: usize) -> usize {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::read_volatile(addr as *const usize) }
}
