//! The SIGPROF handler: all of wasmspy's code that runs inside a signal handler is here.
//!
//! Invariants, which every change must keep:
//! - **Async-signal-safe**: no allocation (framehop unwinds under its
//!   `MustNotAllocateDuringUnwind` policy, into caches allocated beforehand), no locks, no panics; only atomics, `clock_gettime`
//!   (async-signal-safe per POSIX), `gettid`, `getpid`, `timer_settime`, `timer_gettime` and `getrusage` (system calls:
//!   telling the sampled thread, arming the timer for the next sample, telling a wait from a
//!   preemption; see [`super::timer`]) and reads of memory proven mapped (below). `errno` is
//!   saved and restored.
//! - **Bounded**: at most [`MAX_FRAMES`] frame records followed, at most
//!   [`store_contexts::SLOTS`] store contexts read; a language runtime's walk as bounded as its
//!   folder of [`crate::runtimes`] states (each states its bound on frames followed and words
//!   read, and never writes past the sample's [`MAX_FRAMES`]).
//! - **Reads only mapped memory**: stack reads stay in `[sp, top)` of the stack `sp` is on
//!   (live frames; the sampled thread is the one the handler runs on): the guest thread's own
//!   stack, or a fiber stack that [`fiber_stacks`] publishes while it is mapped (guests called
//!   with `call_async`), or a fiber stack of Wasmtime's own (the pooling allocator's) between the
//!   guard page and the Wasm entry that a store running on it records (see
//!   [`ThreadState::running_fiber_at`]). They are skipped entirely when `sp` is on none of these
//!   (e.g. on Wasmtime's alternate signal stack). The host's frames are unwound on that same
//!   live stack, with the unwind tables of the host's loaded objects, never unloaded (see
//!   [`host_frames`]). The one exception, a guest's fiber suspended in a host call while
//!   the thread runs its own stack, is read within that fiber's published mapping. Code reads
//!   (instruction bytes at the PC) happen only for a PC inside a registered module's text.
//!   Store contexts are read only while [`store_contexts`] publishes them (their stores alive);
//!   a runtime instance's `VMContext` and linear memory only while [`runtime_instances`]
//!   publishes it, its memory within the length Wasmtime records for it at that instant. A
//!   Pulley interpreter's state and stack, and the native words where its dispatch loop keeps
//!   its PC, as [`pulley_stack`] states.
//! - **Lifetime**: the handler reaches a thread's state only through [`THREADS`], after
//!   counting itself in [`RUNNING`]; [`detach`] clears the state's slot and waits for `RUNNING`
//!   to drop to zero before the state may be freed. The code ranges ([`CODE`]) only grow while
//!   any state is attached; they are cleared only when none is.
//! - **One producer per ring**: only a signal of one of a thread's own timers (`si_code`
//!   `SI_TIMER` with its cookie), on that thread, takes a sample into that thread's ring and
//!   arms its next timer; a stack dump's signal (`SI_QUEUE` from this process with the dump
//!   cookie, see [`super::timer::send_dump_signal`]) or any of the thread's own signals answers
//!   a dump asked of it, into its one dump slot; any other SIGPROF (`kill`, another library's
//!   timer, a signal to another thread) is ignored, so each ring and slot has one producer,
//!   its thread.
//!
//! Frame walking: Cranelift keeps a frame record (saved frame pointer, return address) in every
//! Wasm function and trampoline. From a PC in Wasm code the handler follows the chain, keeping
//! each return address while it points into known code. The first instructions of a function
//! (before its frame record is set up) and its final `ret` (after the record is popped) leave
//! the frame pointer naming the caller's frame; there the caller's return address is read from
//! the stack (x86_64) or the link register (aarch64), so the caller is neither lost nor misplaced.
//!
//! Outside Wasm code (a host function, a libcall, Wasmtime itself), whose frames need not keep
//! frame records, the guest frames under the PC come from Wasmtime's record of the last exit
//! from Wasm of the store running on the thread (see [`store_contexts`]).
//!
//! The handler's files, one job each, each stating which of these invariants it keeps and
//! how: [`sample`], what a sample holds; [`threads`], the lifetime protocol; [`thread_state`],
//! a sampled thread's state, its ticks and dumps; [`stacks`], where the handler may read;
//! [`walk`], the frames it follows; [`registers`], the interrupted registers and prologues;
//! [`host_frames`], the host's frames outside Wasm code.
//! This file: the handler's entry, [`on_sigprof`], and its installation.

mod host_frames;
mod registers;
mod sample;
mod stacks;
mod thread_state;
mod threads;
mod walk;

use std::sync::atomic::Ordering;

// The signal module's files the handler reads through: named here for the invariants' links,
// and so that the files below reach them as `super::…`, as the handler did in one file.
use super::{fiber_stacks, pulley_stack, ring, runtime_instances, store_contexts, timer};
use crate::clock::clock_ns;
pub use host_frames::prepare as prepare_host_frames;
use registers::Registers;
pub use sample::{Kind, RawSample, MAX_FRAMES};
pub(super) use stacks::read;
pub use thread_state::ThreadState;
use thread_state::Tick;
pub use threads::{add_code, attach, clear_code, detach, wait_for_running_handlers, MAX_THREADS};
use threads::{RUNNING, THREADS};

// Named in the documentation only.
#[cfg(doc)]
use threads::CODE;

/// Installs the SIGPROF handler, once per process. It stays installed: a SIGPROF arriving when
/// no sampler is attached is ignored rather than killing the process.
pub fn install() -> std::io::Result<()> {
    static INSTALLED: std::sync::OnceLock<std::io::Result<()>> = std::sync::OnceLock::new();
    let result = INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO signature.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigprof as *const () as usize;
            // SA_RESTART: system calls the guest's host calls make resume after a sample.
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    });
    match result {
        Ok(()) => Ok(()),
        Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
    }
}

/// The start of Linux's `siginfo_t` as a POSIX timer's signal fills it (the union member
/// `_timer`: timer id, overrun count, then the `sigev_value` given at `timer_create`) and as a
/// queued signal does (`_rt`: the sender's pid and uid, then the value queued), on the 64-bit
/// targets this module is built for.
#[repr(C)]
pub(super) struct SigInfo {
    pub signo: libc::c_int,
    pub errno: libc::c_int,
    pub code: libc::c_int,
    pub pad: libc::c_int,
    /// The timer's id, or the pid of the process that queued the signal.
    pub sender: libc::c_int,
    /// The timer's overrun count, or the uid that queued the signal.
    pub overrun_or_uid: libc::c_int,
    pub value: usize,
}

const _: () = assert!(std::mem::size_of::<SigInfo>() <= std::mem::size_of::<libc::siginfo_t>());

extern "C" fn on_sigprof(_signal: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno slot.
    let errno = unsafe { *libc::__errno_location() };
    RUNNING.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo_t to SA_SIGINFO handlers; SigInfo is a
    // prefix of it (checked at compile time above), whose fields any signal may read.
    let info = unsafe { &*(info as *const SigInfo) };
    let own = THREADS.iter().find_map(|slot| {
        let state = slot.load(Ordering::SeqCst);
        // SAFETY: `detach` waits for RUNNING to reach zero before a state can be freed, and we
        // counted ourselves in RUNNING before loading the pointer.
        (!state.is_null())
            .then(|| unsafe { &*state })
            .and_then(|state| Some((state, state.tick_of(info)?)))
    });
    if let Some((state, tick)) = own {
        // SAFETY: the kernel passes a valid ucontext to SA_SIGINFO handlers.
        let regs = unsafe { Registers::from_ucontext(uc as *const libc::ucontext_t) };
        let wall = clock_ns(libc::CLOCK_MONOTONIC);
        // Whatever the signal: a dump's own may have merged into a pending tick's.
        state.answer_dump(&regs, wall);
        // A failure cannot be reported here; it ends this thread's sampling (`--verbose` shows
        // how many samples were taken).
        let _ = match tick {
            Tick::Dump => state.rearm_if_lost(wall),
            tick => state.on_tick(tick, &regs, wall, clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)),
        };
    }
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}
