//! The interrupted thread's registers ([`Registers`], per architecture), and where its PC is
//! in its function's prologue or epilogue ([`prologue_state`]), which tells where the caller's
//! return address is while the function's frame record is not set up.
//!
//! Invariant kept here: **reads only mapped memory**, what it is given and proven readable:
//! the ucontext the kernel passed to the handler ([`Registers::from_ucontext`]), the code
//! bytes at a PC inside a registered module's text ([`prologue_state`]'s contract), a stack
//! word only once [`Stack::holds`] it (x86_64). A fixed number of reads, no allocation:
//! bounded and async-signal-safe.

use super::stacks::Stack;
#[cfg(target_arch = "x86_64")]
use super::stacks::{read, WORD};

/// The interrupted thread's registers that the walk needs.
pub(super) struct Registers {
    pub(super) pc: usize,
    pub(super) fp: usize,
    pub(super) sp: usize,
    #[cfg(target_arch = "aarch64")]
    pub(super) lr: usize,
    /// All general-purpose registers: where Pulley's dispatch loop keeps its PC and state.
    pub(super) general: [usize; GENERAL_REGISTERS],
}

#[cfg(target_arch = "x86_64")]
const GENERAL_REGISTERS: usize = 16;
#[cfg(target_arch = "aarch64")]
const GENERAL_REGISTERS: usize = 31;

impl Registers {
    /// # Safety
    /// `uc` must be the ucontext the kernel passed to a SA_SIGINFO handler.
    pub(super) unsafe fn from_ucontext(uc: *const libc::ucontext_t) -> Self {
        // SAFETY: the caller's contract; the kernel's ucontext is valid for the handler's run.
        let mc = unsafe { &(*uc).uc_mcontext };
        #[cfg(target_arch = "x86_64")]
        return Registers {
            pc: mc.gregs[libc::REG_RIP as usize] as usize,
            fp: mc.gregs[libc::REG_RBP as usize] as usize,
            sp: mc.gregs[libc::REG_RSP as usize] as usize,
            // r8–r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp: the first 16 of `gregs`.
            general: std::array::from_fn(|i| mc.gregs[i] as usize),
        };
        #[cfg(target_arch = "aarch64")]
        return Registers {
            pc: mc.pc as usize,
            fp: mc.regs[29] as usize,
            sp: mc.sp as usize,
            lr: mc.regs[30] as usize,
            general: std::array::from_fn(|i| mc.regs[i] as usize),
        };
    }
}

/// Where a PC is relative to its function's frame record.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Prologue {
    /// No frame record of this function exists: at its first instruction, or at its `ret`.
    Entry,
    /// The saved frame pointer is pushed but the frame pointer not yet set.
    FramePushed,
    /// The frame pointer names this function's frame record.
    Body,
}

/// # Safety
/// `pc` must point at readable code.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn prologue_state(pc: usize) -> Prologue {
    // SAFETY: the caller's contract; instructions are at least as long as the bytes read,
    // except `push %rbp` and `ret`, which are recognized from their first byte.
    let b = |i: usize| unsafe { std::ptr::read_volatile((pc + i) as *const u8) };
    match b(0) {
        0x55 => Prologue::Entry,                                       // push %rbp
        0xc3 | 0xc2 => Prologue::Entry, // ret, ret $imm16 (after pop %rbp)
        0x48 if b(1) == 0x89 && b(2) == 0xe5 => Prologue::FramePushed, // mov %rsp, %rbp
        _ => Prologue::Body,
    }
}

/// # Safety
/// `pc` must point at readable code.
#[cfg(target_arch = "aarch64")]
pub(super) unsafe fn prologue_state(pc: usize) -> Prologue {
    // SAFETY: the caller's contract; aarch64 instructions are 4 aligned bytes.
    match unsafe { std::ptr::read_volatile(pc as *const u32) } {
        0xa9bf7bfd => Prologue::Entry,       // stp x29, x30, [sp, #-16]!
        0xd65f03c0 => Prologue::Entry,       // ret (after ldp x29, x30, [sp], #16)
        0x910003fd => Prologue::FramePushed, // mov x29, sp
        _ => Prologue::Body,
    }
}

/// The caller's return address when the frame record is not set up yet or already popped.
pub(super) fn caller_at_entry(regs: &Registers, stack: Stack) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: sp is read only after checking it is on the live stack.
        stack.holds(regs.sp).then(|| unsafe { read(regs.sp) })
    }
    #[cfg(target_arch = "aarch64")]
    {
        let _ = stack;
        Some(regs.lr)
    }
}

/// The caller's return address when only the old frame pointer has been pushed.
pub(super) fn caller_after_push(regs: &Registers, stack: Stack) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: sp + word is read only after checking it is on the live stack.
        stack
            .holds(regs.sp.wrapping_add(WORD))
            .then(|| unsafe { read(regs.sp + WORD) })
    }
    #[cfg(target_arch = "aarch64")]
    {
        let _ = stack;
        Some(regs.lr)
    }
}
