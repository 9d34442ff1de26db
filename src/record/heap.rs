//! Heap accounting, as Go's heap profiles do it. Allocations are sampled by bytes with a
//! Poisson process whose mean interval is `rate` bytes (Go's `MemProfileRate`): a sampled
//! allocation of `size` bytes stands for `1 / p` allocations like it, where
//! `p = 1 − e^(−size / rate)` is the chance it had to be sampled, which makes the totals
//! unbiased estimates. Freeing a sampled block takes its share out of the in-use values; what
//! is never freed stays in use. A rate of 1 records every allocation as it is.

use std::collections::hash_map::Entry;
use std::hash::Hash;

use rustc_hash::FxHashMap;

use crate::capture::StoreKey;

/// Where a block is: an address of a store's memory (`None`: a store not attached).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Block {
    pub store: Option<StoreKey>,
    pub address: u32,
}

/// A stack's estimated heap values.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HeapValues {
    pub alloc_objects: f64,
    pub alloc_space: f64,
    pub inuse_objects: f64,
    pub inuse_space: f64,
}

/// The sampled allocations' values by stack (`K`: a stack's id), and the blocks still live.
/// Which allocations are sampled is decided as they are made
/// ([`crate::capture::allocations`]).
pub struct Heap<K> {
    rate: u64,
    /// Store → address → (stack, size) of each sampled block not freed yet.
    live: FxHashMap<Option<StoreKey>, FxHashMap<u32, (K, u64)>>,
    by_stack: FxHashMap<K, HeapValues>,
    /// Whether a garbage-collected block was counted: its in-use values are unknown.
    collected: bool,
}

impl<K: Copy + Eq + Hash> Heap<K> {
    pub fn new(rate: u64) -> Self {
        Heap {
            rate,
            live: FxHashMap::default(),
            by_stack: FxHashMap::default(),
            collected: false,
        }
    }

    /// The mean sampling interval, in bytes.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// How many allocations a sampled one of `size` bytes stands for.
    fn scale(&self, size: u64) -> f64 {
        if self.rate <= 1 || size == 0 {
            return 1.0;
        }
        1.0 / (1.0 - (-(size as f64) / self.rate as f64).exp())
    }

    /// A sampled allocation of `size` bytes at `block`, made by `stack`. A `collected`
    /// block (Go's, TinyGo's) is freed by a garbage collector that tells nobody: it counts as
    /// allocated only.
    pub fn allocated(&mut self, stack: K, block: Block, size: u64, collected: bool) {
        let scale = self.scale(size);
        let values = self.by_stack.entry(stack).or_default();
        values.alloc_objects += scale;
        values.alloc_space += scale * size as f64;
        if collected {
            self.collected = true;
            return;
        }
        values.inuse_objects += scale;
        values.inuse_space += scale * size as f64;
        // A block at an address still thought live was freed unseen (by code not wrapped).
        let live = self.live.entry(block.store).or_default();
        if let Some((old_stack, old_size)) = live.insert(block.address, (stack, size)) {
            self.take_out(old_stack, old_size);
        }
    }

    /// `block` was freed; only sampled blocks count.
    pub fn freed(&mut self, block: Block) {
        let Entry::Occupied(mut live) = self.live.entry(block.store) else {
            return;
        };
        let freed = live.get_mut().remove(&block.address);
        // A store's blocks all freed leave nothing of it (a server makes a store per request).
        if live.get().is_empty() {
            live.remove();
        }
        if let Some((stack, size)) = freed {
            self.take_out(stack, size);
        }
    }

    /// `store`'s memory is gone, with every block in it.
    pub fn store_dropped(&mut self, store: StoreKey) {
        for (_, (stack, size)) in self.live.remove(&Some(store)).unwrap_or_default() {
            self.take_out(stack, size);
        }
    }

    /// Whether garbage-collected blocks were counted, whose in-use values are unknown.
    pub fn has_collected(&self) -> bool {
        self.collected
    }

    fn take_out(&mut self, stack: K, size: u64) {
        let scale = self.scale(size);
        if let Entry::Occupied(mut values) = self.by_stack.entry(stack) {
            let values = values.get_mut();
            values.inuse_objects -= scale;
            values.inuse_space -= scale * size as f64;
        }
    }

    /// Each stack's values.
    pub fn values(&self) -> impl Iterator<Item = (K, HeapValues)> + '_ {
        self.by_stack.iter().map(|(&k, &v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::intervals::RandomIntervals;

    /// A block of a store not attached.
    fn at(address: u32) -> Block {
        Block {
            store: None,
            address,
        }
    }

    fn of(heap: &Heap<u8>, stack: u8) -> HeapValues {
        heap.values()
            .find(|&(k, _)| k == stack)
            .map(|(_, v)| v)
            .unwrap_or_default()
    }

    #[test]
    fn every_allocation_counts_at_rate_one() {
        let mut sampler = RandomIntervals::new(1, 7);
        let mut heap = Heap::new(1);
        for (i, size) in [16u64, 32, 48].into_iter().enumerate() {
            assert!(sampler.next_interval() - (size as i64) < 0);
            heap.allocated(0, at(100 * i as u32), size, false);
        }
        heap.allocated(1, at(1000), 1 << 20, false);
        heap.freed(at(100));
        heap.freed(at(5000)); // never allocated: ignored
        let a = of(&heap, 0);
        assert_eq!(
            a,
            HeapValues {
                alloc_objects: 3.0,
                alloc_space: 96.0,
                inuse_objects: 2.0,
                inuse_space: 64.0,
            }
        );
        // Never freed: still in use at the end.
        assert_eq!(of(&heap, 1).inuse_space, (1 << 20) as f64);
    }

    #[test]
    fn reusing_a_live_address_retires_the_block_seen_there() {
        let mut heap = Heap::new(1);
        heap.allocated(0, at(64), 10, false);
        heap.allocated(1, at(64), 20, false);
        assert_eq!(of(&heap, 0).inuse_objects, 0.0);
        assert_eq!(of(&heap, 1).inuse_space, 20.0);
        heap.freed(at(64));
        assert_eq!(of(&heap, 1).inuse_space, 0.0);
    }

    /// The same address in two stores is two blocks; a store dropped takes its blocks out of
    /// the in-use values, and only its own.
    #[test]
    fn each_stores_blocks_go_with_it() {
        let mut heap = Heap::new(1);
        let (one, two) = (StoreKey(1), StoreKey(2));
        let block = |store, address| Block {
            store: Some(store),
            address,
        };
        heap.allocated(0, block(one, 64), 10, false);
        heap.allocated(1, block(two, 64), 20, false);
        heap.allocated(1, block(two, 128), 30, false);
        assert_eq!(of(&heap, 0).inuse_space, 10.0);
        heap.store_dropped(two);
        assert_eq!(of(&heap, 1).inuse_space, 0.0);
        assert_eq!(of(&heap, 1).alloc_space, 50.0);
        assert_eq!(of(&heap, 0).inuse_space, 10.0);
        heap.freed(block(one, 64));
        assert_eq!(of(&heap, 0).inuse_space, 0.0);
        assert!(
            heap.live.is_empty(),
            "nothing is kept of a store without live blocks"
        );
    }

    #[test]
    fn collected_blocks_count_as_allocated_only() {
        let mut heap = Heap::new(1);
        heap.allocated(0, at(64), 10, true);
        heap.freed(at(64));
        let v = of(&heap, 0);
        assert_eq!((v.alloc_objects, v.alloc_space), (1.0, 10.0));
        assert_eq!((v.inuse_objects, v.inuse_space), (0.0, 0.0));
        assert!(heap.has_collected());
    }

    /// Sampled at 512 KiB, the estimates of a known workload land near the truth: three call
    /// sites allocating 1:2:4 of 3.5 GB, in blocks of different sizes, half of them freed. An
    /// estimate from n samples is off by about 1/√n: the bound is four times that.
    #[test]
    fn sampled_estimates_are_unbiased() {
        let rate = 512 * 1024;
        let mut sampler = RandomIntervals::new(rate, 0x1234_5678);
        let mut heap = Heap::new(rate);
        let sites: [(u8, u64, u64); 3] = [
            (0, 100, 5_000_000),
            (1, 4000, 250_000),
            (2, 1 << 16, 30_000),
        ];
        let mut address = 0u32;
        // As the guest's countdown does it.
        let mut countdown = sampler.next_interval();
        for &(stack, size, count) in &sites {
            for i in 0..count {
                address += 1;
                countdown -= size as i64;
                if countdown < 0 {
                    heap.allocated(stack, at(address), size, false);
                    countdown = sampler.next_interval();
                }
                if i % 2 == 0 {
                    heap.freed(at(address));
                }
            }
        }
        for &(stack, size, count) in &sites {
            let v = of(&heap, stack);
            let bytes = (size * count) as f64;
            let bound = |truth: f64| 4.0 / (truth / rate as f64).sqrt();
            let error = |estimate: f64, truth: f64| (estimate - truth).abs() / truth;
            assert!(
                error(v.alloc_space, bytes) < bound(bytes),
                "{stack}: {v:?} vs {bytes}"
            );
            assert!(
                error(v.alloc_objects, count as f64) < bound(bytes),
                "{stack}: {v:?}"
            );
            let inuse = bytes / 2.0;
            assert!(error(v.inuse_space, inuse) < bound(inuse), "{stack}: {v:?}");
        }
    }
}
