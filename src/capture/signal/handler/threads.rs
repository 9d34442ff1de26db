//! The handler's registry: the sampled threads' states ([`THREADS`]), the handlers running
//! ([`RUNNING`]) and the texts of the registered modules ([`CODE`]), changed off the signal
//! path by [`attach`], [`detach`], [`add_code`] and [`clear_code`].
//!
//! Invariant kept here: the **lifetime** protocol. A handler reaches a state only through
//! `THREADS`, after counting itself in `RUNNING` ([`super::on_sigprof`]); [`detach`] clears
//! the state's slot, then waits for `RUNNING` to drop to zero, after which no handler holds
//! the state and it may be freed. A code range is written before `CODE_LEN` counts it
//! (release; the handler's [`ThreadState::in_code`] loads it with acquire and reads only
//! `CODE[..CODE_LEN]`, at most [`MAX_CODE_RANGES`]); the ranges only grow while any state is
//! attached, and [`clear_code`] empties them only when none is. The handler's side is atomic
//! loads alone: async-signal-safe and bounded.

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use super::ThreadState;

/// Texts of modules and components the guest threads may run.
const MAX_CODE_RANGES: usize = 1024;
/// Threads sampled at once.
pub const MAX_THREADS: usize = 256;

/// The sampled threads' states; null where none is.
pub(super) static THREADS: [AtomicPtr<ThreadState>; MAX_THREADS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_THREADS];
/// Handlers currently running (and possibly using the state they loaded).
pub(super) static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Texts of the registered modules, `[start, end)`: `CODE[..CODE_LEN]`, each written before
/// `CODE_LEN` counts it.
pub(super) static CODE: [(AtomicUsize, AtomicUsize); MAX_CODE_RANGES] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_CODE_RANGES];
static CODE_LEN: AtomicUsize = AtomicUsize::new(0);

/// Makes the handler sample the thread of `state` into it; `state` must stay alive until
/// [`detach`] returns. False when [`MAX_THREADS`] are sampled already.
pub fn attach(state: &ThreadState) -> bool {
    let state = state as *const _ as *mut _;
    THREADS.iter().any(|slot| {
        slot.compare_exchange(
            std::ptr::null_mut(),
            state,
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_ok()
    })
}

/// Stops the handler from using `state`; on return no handler uses it any more.
pub fn detach(state: &ThreadState) {
    let state = state as *const _ as *mut _;
    for slot in &THREADS {
        let _ = slot.compare_exchange(
            state,
            std::ptr::null_mut(),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
    wait_for_running_handlers();
}

/// Returns once every handler that was running has finished: none uses what was withdrawn
/// from it before the call.
pub fn wait_for_running_handlers() {
    let mut spins = 0u32;
    while RUNNING.load(Ordering::SeqCst) != 0 {
        // A handler takes microseconds, unless its thread was preempted inside it: then the
        // core is better given up than spun on for the rest of a time slice (on a busy
        // server, a store dropped per request waited so, 2 % of the process's CPU).
        if spins < 100 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Adds the text of a module the sampled threads may run; false when [`MAX_CODE_RANGES`] are
/// known already. Called by one thread at a time (the sampler's owner).
pub fn add_code(code: std::ops::Range<usize>) -> bool {
    let len = CODE_LEN.load(Ordering::Acquire);
    let known = CODE[..len.min(MAX_CODE_RANGES)].iter().any(|(start, end)| {
        start.load(Ordering::Relaxed) == code.start && end.load(Ordering::Relaxed) == code.end
    });
    if known {
        return true;
    }
    let Some((start, end)) = CODE.get(len) else {
        return false;
    };
    start.store(code.start, Ordering::Relaxed);
    end.store(code.end, Ordering::Relaxed);
    CODE_LEN.store(len + 1, Ordering::Release);
    true
}

/// Forgets the texts added so far. Only while no thread is attached: handlers that see them
/// may be running otherwise.
pub fn clear_code() {
    if THREADS
        .iter()
        .all(|slot| slot.load(Ordering::SeqCst).is_null())
    {
        CODE_LEN.store(0, Ordering::SeqCst);
    }
}

impl ThreadState {
    pub(super) fn in_code(&self, pc: usize) -> bool {
        let len = CODE_LEN.load(Ordering::Acquire).min(MAX_CODE_RANGES);
        CODE[..len].iter().any(|(start, end)| {
            pc >= start.load(Ordering::Relaxed) && pc < end.load(Ordering::Relaxed)
        })
    }
}
