//! Memory capture: the host side of the allocator rewrite ([`crate::memory::rewrite`]). A
//! rewritten allocator counts its bytes down in the guest and calls the host only for a sampled
//! allocation, or for a free whose slot may hold a sampled block. On the guest thread,
//! [`Allocations`] answers at once (the next countdown, which slots hold sampled live blocks)
//! and hands the sampled allocation, with the stack that made it, and the frees of sampled
//! blocks to the [`Sink`], never waiting for the stages after it.

use std::collections::hash_map::Entry;
use std::sync::Arc;

use super::intervals::RandomIntervals;
use super::{LabelsNow, Sink, StoreKey};
use crate::memory::rewrite::{block_slot, bytes_unseeded, report, Allocator};
use crate::shared::GuestStack;
use rustc_hash::{FxHashMap, FxHashSet};

/// A call of a rewritten allocator that reached the host: (allocator, size, freed address,
/// allocated address, countdown), as [`crate::memory::rewrite::HOOK_TABLE`] says.
pub type AllocatorCall = (i32, i32, i32, i32, i64);

/// Where the hook's caller is: the address of its store's data (`Store::data`), the same for
/// the store's whole life and no other live store's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StoreData(pub usize);

impl StoreData {
    pub fn of<T>(data: &T) -> Self {
        StoreData(data as *const T as usize)
    }
}

/// The sampled blocks of one store's memory not freed yet (garbage-collected ones are never
/// freed by a call).
#[derive(Default)]
struct Blocks {
    live: FxHashSet<u32>,
    /// How many of `live` are in each [`block_slot`]: the guest asks the host about a free
    /// only when its slot has some.
    per_slot: FxHashMap<usize, u32>,
}

impl Blocks {
    fn slot_is_live(&self, address: u32) -> bool {
        self.per_slot.contains_key(&block_slot(address))
    }

    fn remove(&mut self, address: u32) -> bool {
        if !self.live.remove(&address) {
            return false;
        }
        if let Entry::Occupied(mut count) = self.per_slot.entry(block_slot(address)) {
            *count.get_mut() -= 1;
            if *count.get() == 0 {
                count.remove();
            }
        }
        true
    }

    fn insert(&mut self, address: u32) {
        if self.live.insert(address) {
            *self.per_slot.entry(block_slot(address)).or_default() += 1;
        }
    }
}

/// Which allocations to sample, and which sampled blocks are live, by store: every store has
/// its own memory, where the same addresses mean other blocks.
pub struct Allocations {
    sampler: RandomIntervals,
    /// The attached stores, and the labels each has now.
    stores: FxHashMap<StoreData, (StoreKey, Arc<LabelsNow>)>,
    /// By the store they are in (`None`: a store not attached).
    blocks: FxHashMap<Option<StoreKey>, Blocks>,
}

impl Allocations {
    /// Samples an allocation every `rate` bytes on average; `seed` starts the intervals.
    pub fn new(rate: u64, seed: u64) -> Self {
        Allocations {
            sampler: RandomIntervals::new(rate, seed),
            stores: FxHashMap::default(),
            blocks: FxHashMap::default(),
        }
    }

    /// The store whose data is at `data` is `key`'s, its allocations labeled as `labels` says
    /// when they are made, until [`store_dropped`](Self::store_dropped).
    pub fn store_attached(&mut self, data: StoreData, key: StoreKey, labels: Arc<LabelsNow>) {
        self.stores.insert(data, (key, labels));
    }

    /// The store's memory is gone, and with it its blocks.
    pub fn store_dropped(&mut self, data: StoreData, sink: &dyn Sink) {
        let Some((key, _)) = self.stores.remove(&data) else {
            return;
        };
        if self
            .blocks
            .remove(&Some(key))
            .is_some_and(|b| !b.live.is_empty())
        {
            sink.store_dropped(key);
        }
    }

    /// Handles a call of a rewritten allocator in the store whose data is at `data`, whose
    /// stack `stack` captures; returns the allocator's [`report`]: the next countdown and
    /// the flags of the slots involved.
    pub fn on_call(
        &mut self,
        data: StoreData,
        (allocator, size, freed, allocated, countdown): AllocatorCall,
        sink: &dyn Sink,
        stack: impl FnOnce() -> GuestStack,
    ) -> i64 {
        let (freed, allocated) = (freed as u32, allocated as u32);
        // An instance's first call: its countdown starts here, as if drawn at its start.
        let countdown = match bytes_unseeded(countdown) {
            Some(spent) => self.sampler.next_interval().saturating_sub_unsigned(spent),
            None => countdown,
        };
        let (store, labels) = match self.stores.get(&data) {
            Some((key, labels)) => (Some(*key), labels.get()),
            None => (None, None),
        };
        let blocks = self.blocks.entry(store).or_default();
        let mut next = countdown;
        if freed != 0 && blocks.remove(freed) {
            sink.free(store, freed);
        }
        if allocated != 0 && countdown < 0 {
            let collected = Allocator::from_code(allocator).is_some_and(Allocator::collected);
            // A block at an address still live was freed unseen (by code not wrapped).
            if !collected {
                blocks.insert(allocated);
            }
            let size = u64::from(size as u32);
            sink.allocation(stack(), store, labels, allocated, size, collected);
            next = self.sampler.next_interval();
        }
        report(
            next,
            blocks.slot_is_live(freed),
            blocks.slot_is_live(allocated),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use wasmtime::WasmBacktrace;

    use super::*;
    use crate::capture::{LabelsKey, NativeSample, SampleValues, Taken};
    use crate::memory::rewrite::{Allocator, UNSEEDED};

    /// An allocation as the sink heard it: (store, labels, address, size, collected).
    type Heard = (Option<StoreKey>, Option<LabelsKey>, u32, u64, bool);

    /// What reached the sink: allocations; (store, address) of frees; stores dropped with
    /// blocks live.
    #[derive(Default)]
    struct Seen {
        allocations: Mutex<Vec<Heard>>,
        frees: Mutex<Vec<(Option<StoreKey>, u32)>>,
        dropped: Mutex<Vec<StoreKey>>,
    }

    impl Sink for Seen {
        fn native(&self, _: NativeSample<'_>, _: Taken, _: SampleValues) {}
        fn backtrace(&self, _: GuestStack, _: Taken, _: SampleValues) {}
        fn lost(&self, _: u64) {}
        fn allocation(
            &self,
            _: GuestStack,
            store: Option<StoreKey>,
            labels: Option<LabelsKey>,
            address: u32,
            size: u64,
            collected: bool,
        ) {
            let seen = (store, labels, address, size, collected);
            self.allocations.lock().unwrap().push(seen);
        }
        fn free(&self, store: Option<StoreKey>, address: u32) {
            self.frees.lock().unwrap().push((store, address));
        }
        fn store_dropped(&self, store: StoreKey) {
            self.dropped.lock().unwrap().push(store);
        }
    }

    const ONE: StoreData = StoreData(0x1000);
    const TWO: StoreData = StoreData(0x2000);

    #[test]
    fn sampled_blocks_flag_their_slots_until_freed() {
        let store = wasmtime::Store::<()>::default();
        let backtrace = || GuestStack::wasm(WasmBacktrace::capture(&store));
        let seen = Seen::default();
        let mut a = Allocations::new(1, 7);
        let malloc = Allocator::Malloc.code();
        // Sampled (countdown below zero): the slot of 64 is flagged live.
        let answer = a.on_call(ONE, (malloc, 10, 0, 64, -1), &seen, backtrace);
        assert_eq!(answer, report(-1, false, true));
        // A free in that slot reaches the sink, and clears the flag.
        let answer = a.on_call(ONE, (malloc, 0, 64, 0, 5), &seen, backtrace);
        assert_eq!(answer, report(5, false, false));
        // A free of a block never sampled does not.
        a.on_call(ONE, (malloc, 0, 128, 0, 5), &seen, backtrace);
        assert_eq!(
            *seen.allocations.lock().unwrap(),
            [(None, None, 64, 10, false)]
        );
        assert_eq!(*seen.frees.lock().unwrap(), [(None, 64)]);
    }

    /// Two stores' memories hold different blocks at the same address; a store dropped with
    /// blocks live says so, once. An allocation carries the labels its store had when made.
    #[test]
    fn each_store_has_its_own_blocks() {
        let store = wasmtime::Store::<()>::default();
        let backtrace = || GuestStack::wasm(WasmBacktrace::capture(&store));
        let seen = Seen::default();
        let mut a = Allocations::new(1, 7);
        let (one, two) = (StoreKey(1), StoreKey(2));
        let (first, second) = (LabelsKey::unique(), LabelsKey::unique());
        let labels_of_one = Arc::new(LabelsNow::default());
        labels_of_one.set(Some(first));
        a.store_attached(ONE, one, labels_of_one.clone());
        a.store_attached(TWO, two, Arc::default());
        let malloc = Allocator::Malloc.code();
        a.on_call(ONE, (malloc, 10, 0, 64, -1), &seen, backtrace);
        labels_of_one.set(Some(second));
        a.on_call(ONE, (malloc, 10, 0, 96, -1), &seen, backtrace);
        // The same address in the other store: not live there.
        let answer = a.on_call(TWO, (malloc, 0, 64, 0, 5), &seen, backtrace);
        assert_eq!(answer, report(5, false, false));
        assert!(seen.frees.lock().unwrap().is_empty());
        a.on_call(TWO, (malloc, 20, 0, 64, -1), &seen, backtrace);
        a.store_dropped(ONE, &seen);
        a.store_dropped(ONE, &seen);
        let answer = a.on_call(TWO, (malloc, 0, 64, 0, 5), &seen, backtrace);
        assert_eq!(answer, report(5, false, false));
        assert_eq!(
            *seen.allocations.lock().unwrap(),
            [
                (Some(one), Some(first), 64, 10, false),
                (Some(one), Some(second), 96, 10, false),
                (Some(two), None, 64, 20, false)
            ]
        );
        assert_eq!(*seen.frees.lock().unwrap(), [(Some(two), 64)]);
        assert_eq!(*seen.dropped.lock().unwrap(), [one]);
    }

    /// An instance's first call, from the countdown every instance starts with, draws its
    /// first interval then: a small first allocation is not sampled, and the countdown goes
    /// on from the interval less what was allocated.
    #[test]
    fn an_instance_is_seeded_at_its_first_call() {
        let store = wasmtime::Store::<()>::default();
        let backtrace = || GuestStack::wasm(WasmBacktrace::capture(&store));
        let seen = Seen::default();
        let rate = 1 << 40;
        let mut a = Allocations::new(rate, 7);
        let malloc = Allocator::Malloc.code();
        let answer = a.on_call(ONE, (malloc, 16, 0, 64, UNSEEDED - 16), &seen, backtrace);
        let next = answer >> 2;
        assert!(next > 0 && next < 20 * rate as i64, "{next}");
        assert!(seen.allocations.lock().unwrap().is_empty());
    }
}
