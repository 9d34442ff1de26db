//! The profiler's record of its attached stores, by the address of their data. A server
//! attaches a store a request and drops it as the request ends, on each of its workers: one
//! map behind one lock made every worker take the lock (and its cache line) from the others
//! twice a request. The map is split in shards by the data's address, each behind a lock on a
//! cache line of its own, so that two workers seldom meet on one.

use std::sync::Mutex;

use rustc_hash::FxHashMap;

use super::attach::AttachedStore;
use crate::capture::allocations::StoreData;
use crate::sync::lock;

const SHARDS: usize = 16;
// A shard is chosen by the top bits of a hash.
const _: () = assert!(SHARDS.is_power_of_two());

#[derive(Default)]
#[repr(align(64))]
struct Shard(Mutex<FxHashMap<StoreData, AttachedStore>>);

#[derive(Default)]
pub(super) struct AttachedStores([Shard; SHARDS]);

impl AttachedStores {
    fn shard(&self, data: StoreData) -> &Mutex<FxHashMap<StoreData, AttachedStore>> {
        // The address's bits spread by a Fibonacci hash, its top bits taken: data of stores
        // made one after another lie at addresses a few allocations apart.
        let spread = (data.0 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.0[(spread >> (64 - SHARDS.trailing_zeros())) as usize].0
    }

    pub(super) fn insert(&self, data: StoreData, attached: AttachedStore) {
        lock(self.shard(data)).insert(data, attached);
    }

    pub(super) fn remove(&self, data: StoreData) {
        lock(self.shard(data)).remove(&data);
    }

    /// `f` of the store attached whose data is `data`; `None` if there is none.
    pub(super) fn with<R>(
        &self,
        data: StoreData,
        f: impl FnOnce(&AttachedStore) -> R,
    ) -> Option<R> {
        lock(self.shard(data)).get(&data).map(f)
    }

    /// `f` of each store attached.
    pub(super) fn for_each(&self, mut f: impl FnMut(&AttachedStore)) {
        for shard in &self.0 {
            lock(&shard.0).values().for_each(&mut f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_one_after_another_spread_over_the_shards() {
        let stores = AttachedStores::default();
        // Store data 256 bytes apart, as a server's stores made one after another may be.
        let used: std::collections::HashSet<usize> = (0..64usize)
            .map(|i| StoreData(0x7f00_1000_0000 + i * 256))
            .map(|data| std::ptr::from_ref(stores.shard(data)) as usize)
            .collect();
        assert!(
            used.len() >= SHARDS / 2,
            "{} shards of {SHARDS} used",
            used.len()
        );
    }
}
