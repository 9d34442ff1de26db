//! The stack walk: [`ThreadState::fill`] takes into a sample the stack the thread was
//! interrupted in. From a PC in Wasm code, its callers ([`ThreadState::walk`]: the caller's
//! return address where the frame record is not set up, then the chain of frame records);
//! outside Wasm code, the guest's frames under its last exit from Wasm, or a Pulley
//! interpreter's ([`ThreadState::add_pulley_stack`]); then a language runtime's stack.
//!
//! Invariants kept here (see [`super`]): **bounded**, [`ThreadState::follow_chain`] stops at
//! [`MAX_FRAMES`], at a return address outside known code, or at a frame pointer that does not
//! go up the stack; **reads only mapped memory**, frame records only on the [`Stack`] found
//! live ([`super::stacks`]), code bytes only at a PC that [`ThreadState::in_code`] places in a
//! registered module's text, a Pulley interpreter's words as [`pulley_stack`] states, a
//! runtime's memory as [`runtime_instances`] states; **async-signal-safe**, it only reads and
//! writes the sample it is given.

use super::host_frames;
use super::pulley_stack::{self, Interrupted, PC_CANDIDATES};
use super::registers::{caller_after_push, caller_at_entry, prologue_state, Prologue, Registers};
use super::runtime_instances;
use super::sample::push;
use super::stacks::{read, Stack, WORD};
use super::store_contexts;
use super::{Kind, RawSample, ThreadState, MAX_FRAMES};

impl ThreadState {
    /// Fills `s` with the stack the thread was interrupted in, its store and labels.
    pub(super) fn fill(&self, regs: &Registers, s: &mut RawSample) {
        s.pcs[0] = regs.pc;
        s.depth = 1;
        s.store = 0;
        s.host_depth = 0;
        s.set_splice(None);
        let mut leaf_at = None;
        let stack = self.stack_at(regs.sp);
        if self.in_code(regs.pc) {
            s.kind = Kind::Guest;
            if let Some(stack) = stack {
                // Found with a pooled fiber's stack already, else looked for.
                s.store = match stack.store {
                    0 => self.running_store(stack),
                    known => known,
                };
                self.walk(regs, stack, s);
            }
            leaf_at = Some(0);
        } else {
            s.kind = Kind::Host;
            if let Some(exit) = stack.and_then(|st| self.last_exit(regs.sp, st)) {
                s.store = exit.store;
                s.host_depth = self.host_frames(regs, stack, s);
                push(s, exit.pc);
                self.follow_chain(exit.stack, exit.fp, s);
                leaf_at = Some(s.host_depth.max(1));
            } else {
                self.add_pulley_stack(regs, stack, s);
                // Neither in Wasm nor under it: the host's own work (Wasmtime's, its embedder's).
                if s.kind == Kind::Host && s.depth == 1 {
                    s.host_depth = self.host_frames(regs, stack, s);
                }
            }
        }
        add_runtime_stack(s, leaf_at);
        s.labels = match s.store {
            0 => 0,
            store => store_contexts::labels_of(store),
        };
    }

    /// The host frames above the interrupted PC, where the thread takes them (see
    /// [`host_frames`]): how many `s` holds, the PC's included; 0 where it does not.
    fn host_frames(&self, regs: &Registers, stack: Option<Stack>, s: &mut RawSample) -> usize {
        match (&self.host_cache, stack) {
            (Some(cache), Some(stack)) => {
                host_frames::unwind(regs, stack, cache, |a| self.in_code(a), s)
            }
            _ => 0,
        }
    }

    /// Appends the callers of a PC in Wasm code to `s`.
    fn walk(&self, regs: &Registers, stack: Stack, s: &mut RawSample) {
        // SAFETY: regs.pc is inside a registered module's text, which is mapped and readable.
        let state = unsafe { prologue_state(regs.pc) };
        let caller = match state {
            Prologue::Entry => caller_at_entry(regs, stack),
            Prologue::FramePushed => caller_after_push(regs, stack),
            Prologue::Body => None,
        };
        if let Some(ra) = caller {
            if !self.in_code(ra) {
                return;
            }
            push(s, ra);
        }
        self.follow_chain(stack, regs.fp, s);
    }

    /// When the thread runs a store's Pulley code: its stack, as [`Kind::Pulley`] describes
    /// running bytecode, as [`Kind::Host`] a host call from it.
    /// `stack` is the live part of the stack `regs.sp` is on, where wasmspy knows it.
    fn add_pulley_stack(&self, regs: &Registers, stack: Option<Stack>, s: &mut RawSample) {
        // Called only with the PC in the interpreter's code, for the innermost few words.
        let native_word = |i: usize| {
            let addr = regs.sp.wrapping_add(i * WORD);
            match stack {
                // SAFETY: on the live stack (checked).
                Some(stack) => stack.holds(addr).then(|| unsafe { read(addr) }),
                // A stack wasmspy does not know (a fiber of Wasmtime's pooling allocator): the
                // interpreter was called, so its frame and its callers' (Wasmtime's entry into
                // Pulley, the fiber's start) lie above `sp` on it, more than these words.
                // SAFETY: mapped, per the above.
                None => addr.is_multiple_of(WORD).then(|| unsafe { read(addr) }),
            }
            .unwrap_or(0)
        };
        let at = pulley_stack::interrupted(
            regs.pc,
            regs.sp,
            &regs.general,
            native_word,
            self.exit_record,
            |a| self.in_code(a),
        );
        let on = |stack: std::ops::Range<usize>| Stack {
            sp: stack.start,
            top: stack.end,
            store: 0,
        };
        match at {
            Some(Interrupted::Bytecode {
                store,
                pcs,
                lr,
                fp,
                stack,
            }) => {
                s.kind = Kind::Pulley;
                s.store = store;
                s.pcs[..PC_CANDIDATES].copy_from_slice(&pcs);
                s.depth = PC_CANDIDATES;
                push(s, lr);
                self.follow_chain(on(stack), fp, s);
            }
            Some(Interrupted::HostCall {
                store,
                pc,
                fp,
                stack,
            }) => {
                s.store = store;
                push(s, pc);
                self.follow_chain(on(stack), fp, s);
            }
            None => {}
        }
    }

    /// Follows frame records from `fp`, appending return addresses into known code.
    fn follow_chain(&self, stack: Stack, mut fp: usize, s: &mut RawSample) {
        while s.depth < MAX_FRAMES && stack.holds(fp) && stack.holds(fp + WORD) {
            // SAFETY: fp and fp + word are on the live stack (checked above).
            let (next, ra) = unsafe { (read(fp), read(fp + WORD)) };
            if !self.in_code(ra) {
                break;
            }
            push(s, ra);
            if next <= fp {
                break;
            }
            fp = next;
        }
    }
}

/// When the sample's store runs a language runtime (Go, CPython): its stack, spliced in
/// after the native frames (see [`crate::runtimes`]). `leaf_at`: the innermost Wasm frame's
/// index, where the sample has one.
fn add_runtime_stack(s: &mut RawSample, leaf_at: Option<usize>) {
    if let Some(splice) = runtime_instances::walk(s.store, &mut s.pcs, &mut s.depth, leaf_at) {
        s.set_splice(Some(splice));
    }
}
