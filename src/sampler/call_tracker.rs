//! Tracks the guest's transitions between Wasm and the host, from the store's call hook, for
//! the signal handler:
//! - inside a host call (a call to one of the guest's imports), a sample is charged to the
//!   import under the guest stack that called it. The handler cannot capture that stack, so the
//!   sample only counts itself; when the call returns, the hook captures the guest stack once
//!   for all the samples that call received (the guest stack does not change during a call);
//! - with no Wasm on the stack at all (instantiating, or after the guest returned), a sample in
//!   the runtime has no guest frames to look for.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

#[derive(Default)]
pub struct CallTracker {
    in_host_call: AtomicBool,
    /// Numbers the host calls, so samples find the stack captured for their call.
    host_call: AtomicU32,
    host_call_samples: AtomicU32,
    /// Host-to-Wasm calls in progress.
    wasm_depth: AtomicU32,
}

impl CallTracker {
    /// The host called into Wasm. Runs on the guest thread.
    pub fn enter_wasm(&self) {
        self.wasm_depth.fetch_add(1, Ordering::Release);
    }

    /// Wasm returned to the host.
    pub fn leave_wasm(&self) {
        self.wasm_depth.fetch_sub(1, Ordering::Release);
    }

    /// The guest called an import.
    pub fn enter_host_call(&self) {
        self.host_call.fetch_add(1, Ordering::Relaxed);
        self.in_host_call.store(true, Ordering::Release);
    }

    /// The import returned: the call's number and how many samples it received.
    pub fn leave_host_call(&self) -> (u32, u32) {
        self.in_host_call.store(false, Ordering::Release);
        (
            self.host_call.load(Ordering::Relaxed),
            self.host_call_samples.swap(0, Ordering::Relaxed),
        )
    }

    /// From the sampler, on the guest thread: the number of the host call in progress (counting
    /// this sample in it), if any. Async-signal-safe.
    pub fn sample_host_call(&self) -> Option<u32> {
        if !self.in_host_call.load(Ordering::Acquire) {
            return None;
        }
        self.host_call_samples.fetch_add(1, Ordering::Relaxed);
        Some(self.host_call.load(Ordering::Relaxed))
    }

    /// Whether Wasm frames may be on the stack. Async-signal-safe.
    pub fn wasm_active(&self) -> bool {
        self.wasm_depth.load(Ordering::Acquire) > 0
    }
}
