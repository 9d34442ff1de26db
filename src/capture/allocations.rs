//! Memory capture: the host side of the allocator rewrite ([`crate::memory::rewrite`]). A
//! rewritten allocator counts its bytes down in the guest and calls the host only for a sampled
//! allocation, or for a free whose slot may hold a sampled block. On the guest thread,
//! [`Allocations`] answers at once (the next countdown, which slots hold sampled live blocks)
//! and hands the sampled allocation, with the stack that made it, and the frees of sampled
//! blocks to the [`Sink`], never waiting for the stages after it.

use rustc_hash::FxHashSet;
use wasmtime::WasmBacktrace;

use super::Sink;
use crate::memory::rewrite::{block_slot, report, Allocator};

/// Draws the intervals between sampled allocations. The countdown itself runs in the guest
/// (see [`crate::memory::rewrite`]): each allocation takes its size off the interval, and the
/// one that takes it below zero is sampled.
pub struct HeapSampler {
    rate: u64,
    /// xorshift64* state: the intervals need no more than a fast uniform source.
    rng: u64,
}

impl HeapSampler {
    /// `seed` starts the random intervals (zero is taken as one: xorshift needs a bit set).
    pub fn new(rate: u64, seed: u64) -> Self {
        HeapSampler {
            rate,
            rng: seed.max(1),
        }
    }

    /// An exponentially distributed number of bytes, of mean `rate`; at a rate of 1, −1, so
    /// that every allocation, even of zero bytes, is sampled.
    pub fn next_interval(&mut self) -> i64 {
        if self.rate <= 1 {
            return -1;
        }
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let bits = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        // Uniform in (0, 1].
        let uniform = (bits as f64 + 1.0) / (1u64 << 53) as f64;
        (-uniform.ln() * self.rate as f64) as i64
    }
}

/// A call of a rewritten allocator that reached the host: (allocator, size, freed address,
/// allocated address, countdown), as [`crate::memory::rewrite::HOOK_TABLE`] says.
pub type AllocatorCall = (i32, i32, i32, i32, i64);

/// Which allocations to sample, and which sampled blocks are live.
pub struct Allocations {
    sampler: HeapSampler,
    /// Sampled blocks not freed yet (garbage-collected ones are never freed by a call).
    live: FxHashSet<u32>,
    /// How many of `live` are in each [`block_slot`]: the guest asks the host about a free
    /// only when its slot has some.
    live_per_slot: Vec<u32>,
}

impl Allocations {
    /// Samples an allocation every `rate` bytes on average; `seed` starts the intervals.
    pub fn new(rate: u64, seed: u64) -> Self {
        Allocations {
            sampler: HeapSampler::new(rate, seed),
            live: FxHashSet::default(),
            live_per_slot: vec![0; 1 << 16],
        }
    }

    /// The bytes the guest is to allocate before its next sampled allocation.
    pub fn next_interval(&mut self) -> i64 {
        self.sampler.next_interval()
    }

    /// Handles a call of a rewritten allocator, whose stack `backtrace` captures; returns the
    /// allocator's [`report`]: the next countdown and the flags of the slots involved.
    pub fn on_call(
        &mut self,
        (allocator, size, freed, allocated, countdown): AllocatorCall,
        sink: &dyn Sink,
        backtrace: impl FnOnce() -> WasmBacktrace,
    ) -> i64 {
        let (freed, allocated) = (freed as u32, allocated as u32);
        let mut next = countdown;
        if freed != 0 && self.live.remove(&freed) {
            self.live_per_slot[block_slot(freed)] -= 1;
            sink.free(freed);
        }
        if allocated != 0 && countdown < 0 {
            let collected = Allocator::from_code(allocator).is_some_and(Allocator::collected);
            // A block at an address still live was freed unseen (by code not wrapped).
            if !collected && self.live.insert(allocated) {
                self.live_per_slot[block_slot(allocated)] += 1;
            }
            sink.allocation(backtrace(), allocated, u64::from(size as u32), collected);
            next = self.next_interval();
        }
        report(next, self.slot_is_live(freed), self.slot_is_live(allocated))
    }

    fn slot_is_live(&self, address: u32) -> bool {
        self.live_per_slot[block_slot(address)] > 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::capture::{NativeSample, SampleValues, Taken};
    use crate::memory::rewrite::Allocator;

    /// What reached the sink: (address, size, collected) of allocations; freed addresses.
    #[derive(Default)]
    struct Seen {
        allocations: Mutex<Vec<(u32, u64, bool)>>,
        frees: Mutex<Vec<u32>>,
    }

    impl Sink for Seen {
        fn native(&self, _: NativeSample<'_>, _: Taken, _: SampleValues) {}
        fn backtrace(&self, _: WasmBacktrace, _: Taken, _: SampleValues) {}
        fn lost(&self, _: u64) {}
        fn allocation(&self, _: WasmBacktrace, address: u32, size: u64, collected: bool) {
            self.allocations
                .lock()
                .unwrap()
                .push((address, size, collected));
        }
        fn free(&self, address: u32) {
            self.frees.lock().unwrap().push(address);
        }
    }

    #[test]
    fn sampled_blocks_flag_their_slots_until_freed() {
        let store = wasmtime::Store::<()>::default();
        let backtrace = || WasmBacktrace::capture(&store);
        let seen = Seen::default();
        let mut a = Allocations::new(1, 7);
        let malloc = Allocator::Malloc.code();
        // Sampled (countdown below zero): the slot of 64 is flagged live.
        let answer = a.on_call((malloc, 10, 0, 64, -1), &seen, backtrace);
        assert_eq!(answer, report(-1, false, true));
        // A free in that slot reaches the sink, and clears the flag.
        let answer = a.on_call((malloc, 0, 64, 0, 5), &seen, backtrace);
        assert_eq!(answer, report(5, false, false));
        // A free of a block never sampled does not.
        a.on_call((malloc, 0, 128, 0, 5), &seen, backtrace);
        assert_eq!(*seen.allocations.lock().unwrap(), [(64, 10, false)]);
        assert_eq!(*seen.frees.lock().unwrap(), [64]);
    }
}
