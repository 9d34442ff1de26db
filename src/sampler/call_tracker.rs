//! Tracks the guest's transitions between Wasm and the host, from the store's call hook, for
//! the signal handler:
//! - inside a host call (a call to one of the guest's imports), a sample is charged to the
//!   import under the guest stack that called it. The handler cannot capture that stack, so the
//!   sample only counts itself; when the call returns, the hook captures the guest stack once
//!   for all the samples that call received (the guest stack does not change during a call);
//! - with no Wasm on the stack at all (instantiating, or after the guest returned), a sample in
//!   the runtime has no guest frames to look for.
//!
//! Transitions nest: a host function may call back into Wasm (an embedder's import calling an
//! export), which may call the host again. They are kept as a stack, so that samples in the
//! outer host function, before or after the inner calls, stay charged to the outer call.

use std::sync::atomic::{AtomicU32, Ordering};

/// Nested transitions tracked; deeper ones are counted, and their samples charged to none.
const MAX_DEPTH: usize = 64;
/// A level of the stack that is Wasm called by the host, not a host call.
const WASM: u32 = 0;

pub struct CallTracker {
    /// Transitions in progress: `levels[..depth]`, innermost last.
    depth: AtomicU32,
    /// Per level: [`WASM`], or the number of a host call.
    levels: [AtomicU32; MAX_DEPTH],
    /// Per level: samples the host call there received.
    samples: [AtomicU32; MAX_DEPTH],
    /// Numbers the host calls (from 1), so samples find the stack captured for their call.
    last_host_call: AtomicU32,
    /// Host-to-Wasm calls in progress.
    wasm_depth: AtomicU32,
}

impl Default for CallTracker {
    fn default() -> Self {
        CallTracker {
            depth: AtomicU32::new(0),
            levels: std::array::from_fn(|_| AtomicU32::new(WASM)),
            samples: std::array::from_fn(|_| AtomicU32::new(0)),
            last_host_call: AtomicU32::new(0),
            wasm_depth: AtomicU32::new(0),
        }
    }
}

impl CallTracker {
    /// The host called into Wasm. Runs on the guest thread.
    pub fn enter_wasm(&self) {
        self.wasm_depth.fetch_add(1, Ordering::Release);
        self.push(WASM);
    }

    /// Wasm returned to the host.
    pub fn leave_wasm(&self) {
        self.pop();
        self.wasm_depth.fetch_sub(1, Ordering::Release);
    }

    /// The guest called an import.
    pub fn enter_host_call(&self) {
        let mut call = self.last_host_call.load(Ordering::Relaxed).wrapping_add(1);
        if call == WASM {
            call = 1;
        }
        self.last_host_call.store(call, Ordering::Relaxed);
        self.push(call);
    }

    /// The import returned: the call's number and how many samples it received.
    pub fn leave_host_call(&self) -> (u32, u32) {
        self.pop().unwrap_or((WASM, 0))
    }

    /// Only the guest thread changes the stack; the handler, which interrupts that thread,
    /// sees each level written before `depth` counts it.
    fn push(&self, level: u32) {
        let depth = self.depth.load(Ordering::Relaxed) as usize;
        if let (Some(l), Some(s)) = (self.levels.get(depth), self.samples.get(depth)) {
            l.store(level, Ordering::Relaxed);
            s.store(0, Ordering::Relaxed);
        }
        self.depth.store(depth as u32 + 1, Ordering::Release);
    }

    /// Removes the innermost level: its host call and samples, if it is a tracked host call.
    fn pop(&self) -> Option<(u32, u32)> {
        let depth = self.depth.load(Ordering::Relaxed).checked_sub(1)?;
        self.depth.store(depth, Ordering::Release);
        let depth = depth as usize;
        let level = self.levels.get(depth)?.load(Ordering::Relaxed);
        let samples = self.samples[depth].load(Ordering::Relaxed);
        (level != WASM).then_some((level, samples))
    }

    /// From the sampler, on the guest thread: the number of the host call in progress (counting
    /// this sample in it), if the innermost transition is one. Async-signal-safe.
    pub fn sample_host_call(&self) -> Option<u32> {
        let top = (self.depth.load(Ordering::Acquire) as usize).checked_sub(1)?;
        let level = self.levels.get(top)?.load(Ordering::Relaxed);
        if level == WASM {
            return None;
        }
        self.samples[top].fetch_add(1, Ordering::Relaxed);
        Some(level)
    }

    /// Whether Wasm frames may be on the stack. Async-signal-safe.
    pub fn wasm_active(&self) -> bool {
        self.wasm_depth.load(Ordering::Acquire) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_call_keeps_its_samples_around_wasm_it_calls() {
        let t = CallTracker::default();
        t.enter_wasm();
        assert_eq!(t.sample_host_call(), None);
        t.enter_host_call(); // outer import
        assert_eq!(t.sample_host_call(), Some(1));
        t.enter_wasm(); // the import calls an export
        assert_eq!(t.sample_host_call(), None);
        t.enter_host_call(); // which calls another import
        assert_eq!(t.sample_host_call(), Some(2));
        assert_eq!(t.sample_host_call(), Some(2));
        assert_eq!(t.leave_host_call(), (2, 2));
        t.leave_wasm();
        assert_eq!(t.sample_host_call(), Some(1));
        assert_eq!(t.leave_host_call(), (1, 2));
        assert_eq!(t.sample_host_call(), None);
        assert!(t.wasm_active());
        t.leave_wasm();
        assert!(!t.wasm_active());
        assert_eq!(t.leave_host_call(), (WASM, 0));
    }

    #[test]
    fn levels_past_the_limit_are_counted_but_charge_nothing() {
        let t = CallTracker::default();
        for _ in 0..MAX_DEPTH + 3 {
            t.enter_host_call();
        }
        assert_eq!(t.sample_host_call(), None);
        for _ in 0..3 {
            assert_eq!(t.leave_host_call(), (WASM, 0));
        }
        assert_eq!(t.sample_host_call(), Some(MAX_DEPTH as u32));
    }
}
