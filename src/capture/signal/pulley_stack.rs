//! What the SIGPROF handler reads of a Pulley interpreter it interrupted: the bytecode PC,
//! the frame pointer and link register, and the frame records on the Pulley stack.
//!
//! The interpreter's machine code ([`Interpreter::runs_bytecode`]) tells running bytecode from
//! a host call. Running it, the dispatch loop holds its `&mut MachineState` in a register, so
//! the store whose current `Vm` one of the thread's registers points into is the one running
//! here. Its PC is a local of that loop, in a register or in the loop's frame on the native
//! stack, where codegen put it at that instant: the candidates are the values in the registers
//! and the innermost native stack words that are addresses in a registered module's text,
//! except the link register (which the loop also keeps in a register); the resolver picks the
//! instruction most of them are in ([`PC_CANDIDATES`]). Measured on `cprog.c`'s loop: the PC
//! was in a register in 4 samples of 5, and in the loop's frame (the second word above the
//! stack pointer) in all.
//!
//! Invariants, on top of the handler's ([`super::handler`]):
//! - a store's executor word is read only while [`store_contexts`] publishes the store (alive);
//! - a `Vm` is read only when the interrupted thread uses it: one of its registers points into
//!   it (the loop running it), or its stack pointer is on the fiber the store runs on (a host
//!   call of that fiber, whose executor Wasmtime swapped into the store; it is freed only after
//!   the fiber ends, on this thread). Its fields are aligned words;
//! - the Pulley stack is read within `[base, base + slots * 16)` of that `Vm`;
//! - with the PC in the interpreter's code, the innermost words of the native stack are read
//!   even on a stack wasmspy does not know the bounds of (a pooled fiber's): the interpreter
//!   was called, so its own frame and its callers' lie above the stack pointer, mapped.

use std::ops::Range;
use std::sync::OnceLock;

use anyhow::{anyhow, Result};

use super::pulley_layout::{interpreter_code, VmLayout};
use super::store_contexts::{self, Offsets};
use super::{fiber_stacks, handler::read};
pub use crate::capture::PULLEY_PC_CANDIDATES as PC_CANDIDATES;

/// The interpreter of this build: its `Vm`'s layout and its code.
pub struct Interpreter {
    pub layout: VmLayout,
    /// Sorted, disjoint.
    code: Vec<Range<usize>>,
}

/// The interpreter once looked for, or why it cannot be sampled with signals (an executable
/// without symbols).
static INTERPRETER: OnceLock<Result<Interpreter, String>> = OnceLock::new();

/// Finds the interpreter and shows it to the handler, once per process.
pub fn interpreter() -> Result<&'static Interpreter> {
    let found = INTERPRETER.get_or_init(|| {
        let find = || -> Result<Interpreter> {
            Ok(Interpreter {
                layout: VmLayout::of_this_build()?,
                code: interpreter_code()?,
            })
        };
        find().map_err(|e| format!("{e:#}"))
    });
    found
        .as_ref()
        .map_err(|e| anyhow!("Pulley cannot be sampled with signals: {e}"))
}

impl Interpreter {
    fn runs_bytecode(&self, pc: usize) -> bool {
        let after = self.code.partition_point(|r| r.start <= pc);
        after > 0 && self.code[after - 1].contains(&pc)
    }
}

/// The innermost words of the native stack where the dispatch loop may keep its PC.
const NATIVE_WORDS: usize = 8;

/// Where an interrupted thread was in a store's Pulley code.
pub enum Interrupted {
    /// Running bytecode: the candidates for its PC (zeros after the last); `lr` and `fp` are
    /// Pulley's.
    Bytecode {
        store: u64,
        pcs: [usize; PC_CANDIDATES],
        lr: usize,
        fp: usize,
        stack: Range<usize>,
    },
    /// In a host call from bytecode: the return address into the bytecode that called it, and
    /// the frame pointer of the frame it returns to.
    HostCall {
        store: u64,
        pc: usize,
        fp: usize,
        stack: Range<usize>,
    },
}

/// The Pulley state of the store the thread runs, if it runs one. `registers` are the
/// thread's general-purpose registers at the signal; `native_word(i)` reads word `i` above its
/// stack pointer (called only while the PC is in the interpreter's code, for the first
/// [`NATIVE_WORDS`]); `in_code` tells addresses in registered modules' text.
/// Async-signal-safe.
pub fn interrupted(
    pc: usize,
    sp: usize,
    registers: &[usize],
    native_word: impl Fn(usize) -> usize,
    o: Offsets,
    in_code: impl Fn(usize) -> bool,
) -> Option<Interrupted> {
    let interpreter = INTERPRETER.get()?.as_ref().ok()?;
    let layout = interpreter.layout;
    let running = interpreter.runs_bytecode(pc);
    let mut found = None;
    store_contexts::for_each_pulley(|context, store, executor, vm_in_state| {
        if found.is_some() {
            return;
        }
        // SAFETY: a published context and its executor word are fields of a live store.
        let (entry_fp, state) = unsafe { (read(context + o.entry_fp), read(executor)) };
        if entry_fp == 0 || state == 0 {
            return;
        }
        let vm = state + vm_in_state;
        let held = registers.iter().any(|&r| r >= vm && r < vm + layout.size);
        let host_call_here = !running && {
            // SAFETY: as above.
            let guard_end = unsafe { read(context + o.fiber_guard_end) };
            guard_end != 0
                && guard_end <= sp
                && fiber_stacks::range_of(sp).is_some_and(|r| r.start <= guard_end)
        };
        if !(running && held || host_call_here) {
            return;
        }
        // SAFETY: the thread uses this Vm (see the module's invariants); its fields are words.
        let (fp, lr, base, slots) = unsafe {
            (
                read(vm + layout.fp),
                read(vm + layout.lr),
                read(vm + layout.stack_base),
                read(vm + layout.stack_slots),
            )
        };
        let stack = base..base.saturating_add(slots.saturating_mul(16));
        if running {
            let mut pcs = [0; PC_CANDIDATES];
            let candidates = (0..NATIVE_WORDS)
                .map(&native_word)
                .chain(registers.iter().copied())
                .filter(|&v| v != lr && in_code(v));
            let mut count = 0;
            for v in candidates {
                if count < PC_CANDIDATES && !pcs[..count].contains(&v) {
                    pcs[count] = v;
                    count += 1;
                }
            }
            found = Some(Interrupted::Bytecode {
                store,
                pcs,
                lr,
                fp,
                stack,
            });
            return;
        }
        // In a host call the exit trampoline's frame is Pulley's current one; its record saves
        // the frame pointer of the bytecode that called it.
        // SAFETY: as above.
        let (trampoline_fp, exit_pc) = unsafe {
            (
                read(context + o.exit_trampoline_fp),
                read(context + o.exit_pc),
            )
        };
        let on_stack = |a: usize| a.is_multiple_of(8) && stack.contains(&a);
        if fp == trampoline_fp && on_stack(fp) && in_code(exit_pc) {
            // SAFETY: fp is on the Vm's stack (checked above).
            let fp = unsafe { read(fp) };
            found = Some(Interrupted::HostCall {
                store,
                pc: exit_pc,
                fp,
                stack,
            });
        }
    });
    found
}
