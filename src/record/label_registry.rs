//! The sets of labels registered for samples. A server registers two sets a request, on
//! whichever worker answers it, and lets them go as the request ends; at 100 Hz it samples one
//! request in a hundred of a small handler's, so most sets are never looked up. Each thread
//! keeps the sets it registers in a shard of its own (a lock only its thread takes, but for
//! the moment a sample is resolved or the pipeline's thread looks for sets let go), in the
//! order of their keys, beside their holders: a set lives while it is held (an `Arc`), then
//! until no sample can still name it. Letting go of a set is dropping an `Arc`: nothing is
//! written to the registry, no map is kept of the sets.
//!
//! Kept in one map behind one lock, each registration and each drop took that lock (and the
//! cache line it is on) from the other workers, some 2 points of a small request's
//! throughput. Kept in a map the pipeline's thread filled from the shards' records of
//! registrations and drops, each drop still upgraded a shared reference to the pipeline, read
//! the counters its threads write and wrote a record, and each set was inserted into a map and
//! removed: 460 instructions a request more (`/hello`), and with `serve`'s shared counters
//! (`commands/serve.rs`) about a point of its throughput (`docs/serve.md`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::packed_labels::PackedLabels;
use crate::capture::LabelsKey;
use crate::profile::Labels;
use crate::sync::lock;

thread_local! {
    /// This thread's shard of each registry it has registered a set in, by the registry's id.
    static SHARDS: RefCell<Vec<(u64, Arc<Shard>)>> = const { RefCell::new(Vec::new()) };
}

/// A registered set of labels, kept registered while held (and after, while samples may name
/// it).
#[derive(Debug)]
pub struct LabelSet {
    key: LabelsKey,
    labels: PackedLabels,
    /// When it was registered (`CLOCK_MONOTONIC`).
    since_ns: u64,
}

impl LabelSet {
    /// What samples carry to name it.
    pub fn key(&self) -> LabelsKey {
        self.key
    }
}

/// When the registry found a set no longer held: it is forgotten once no sample can still name
/// it ([`LabelRegistry::forget`] is told when).
#[derive(Clone, Copy, Debug)]
pub struct Unheld {
    /// `CLOCK_MONOTONIC`.
    pub at_ns: u64,
    /// The signal sampler's drain passes ended by then.
    pub passes: u64,
    /// The pipeline queue's drains ended by then.
    pub drains: u64,
}

struct Entry {
    set: Arc<LabelSet>,
    /// Since when no one else holds it, once seen.
    unheld: Option<Unheld>,
}

/// The sets one thread registered, in the order of their keys.
#[derive(Default)]
struct Shard(Mutex<Vec<Entry>>);

/// The sets registered, written to by any thread, read by the pipeline's side.
pub struct LabelRegistry {
    /// Tells this registry's shards from other registries' in a thread's [`SHARDS`].
    id: u64,
    /// Every thread's shard; a shard whose thread has ended is let go once emptied.
    shards: Mutex<Vec<Arc<Shard>>>,
}

impl Default for LabelRegistry {
    fn default() -> Self {
        static LAST: AtomicU64 = AtomicU64::new(0);
        LabelRegistry {
            id: LAST.fetch_add(1, Ordering::Relaxed) + 1,
            shards: Mutex::new(Vec::new()),
        }
    }
}

impl LabelRegistry {
    /// Registers `labels` under `key`, a key greater than any the calling thread registered
    /// before ([`LabelsKey::unique`]), at `since_ns` (`CLOCK_MONOTONIC`): registered while the
    /// set returned is held.
    pub fn register(&self, key: LabelsKey, labels: PackedLabels, since_ns: u64) -> Arc<LabelSet> {
        let set = Arc::new(LabelSet {
            key,
            labels,
            since_ns,
        });
        let mut entry = Some(Entry {
            set: set.clone(),
            unheld: None,
        });
        let _ = SHARDS.try_with(|shards| {
            let Ok(mut shards) = shards.try_borrow_mut() else {
                return;
            };
            let at = match shards.iter().position(|(id, _)| *id == self.id) {
                Some(at) => at,
                None => {
                    // The shards of registries dropped since, let go.
                    shards.retain(|(_, shard)| Arc::strong_count(shard) > 1);
                    let shard = Arc::new(Shard::default());
                    lock(&self.shards).push(shard.clone());
                    shards.push((self.id, shard));
                    shards.len() - 1
                }
            };
            let (_, shard) = &shards[at];
            let mut entries = lock(&shard.0);
            debug_assert!(entries.last().is_none_or(|last| last.set.key < key));
            entries.extend(entry.take());
        });
        // A thread ending (its thread-locals gone): a shard of the set's own.
        if let Some(entry) = entry {
            lock(&self.shards).push(Arc::new(Shard(Mutex::new(vec![entry]))));
        }
        set
    }

    /// The labels registered under `key`, with when.
    pub fn get(&self, key: LabelsKey) -> Option<(Labels, u64)> {
        let shards = lock(&self.shards);
        shards.iter().find_map(|shard| {
            let entries = lock(&shard.0);
            let at = entries
                .binary_search_by_key(&key, |entry| entry.set.key)
                .ok()?;
            let set = &entries[at].set;
            Some((set.labels.unpack(), set.since_ns))
        })
    }

    /// Forgets the sets no longer held that `expired` says no sample can still name, since
    /// they were first found so; those found so now are marked `now`.
    pub fn forget(&self, now: Unheld, expired: impl Fn(&Unheld) -> bool) {
        let mut gone = Vec::new();
        let mut shards = lock(&self.shards);
        shards.retain(|shard| {
            let mut entries = lock(&shard.0);
            gone.extend(entries.extract_if(.., |entry| {
                // Held by the shard alone, it stays so: no one can take it from there.
                if Arc::strong_count(&entry.set) > 1 {
                    return false;
                }
                match &entry.unheld {
                    Some(unheld) => expired(unheld),
                    None => {
                        entry.unheld = Some(now);
                        false
                    }
                }
            }));
            // Emptied, those whose threads have ended go.
            !entries.is_empty() || Arc::strong_count(shard) > 1
        });
        drop(shards);
        // Freed with no lock held: the shards' threads go on registering meanwhile.
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(value: &str) -> Labels {
        [("request".to_string(), value.to_string())].into()
    }

    fn register(registry: &LabelRegistry, key: u64) -> Arc<LabelSet> {
        let value = key.to_string();
        registry.register(
            LabelsKey(key),
            PackedLabels::new(&[("request", &value)]),
            key,
        )
    }

    const NOW: Unheld = Unheld {
        at_ns: 0,
        passes: 0,
        drains: 0,
    };

    #[test]
    fn sets_are_known_while_held_and_until_forgotten_once_let_go() {
        let registry = Arc::new(LabelRegistry::default());
        let mut held: Vec<_> = (1..=5).map(|key| register(&registry, key)).collect();
        // Joined: the thread has ended, its thread-locals dropped (a scoped thread's may not
        // have been when its scope returns).
        let on_another_thread = {
            let registry = registry.clone();
            std::thread::spawn(move || register(&registry, 6))
                .join()
                .unwrap()
        };
        for key in 1..=6 {
            let value = key.to_string();
            assert_eq!(registry.get(LabelsKey(key)), Some((labels(&value), key)));
        }
        assert_eq!(registry.get(LabelsKey(7)), None);

        drop(on_another_thread);
        drop(held.split_off(1));
        registry.forget(NOW, |_| true);
        assert!(
            registry.get(LabelsKey(6)).is_some(),
            "let go, but samples may still name it"
        );
        registry.forget(NOW, |_| false);
        assert!(registry.get(LabelsKey(3)).is_some(), "not expired");
        registry.forget(NOW, |_| true);
        for key in 2..=6 {
            assert_eq!(registry.get(LabelsKey(key)), None);
        }
        assert_eq!(registry.get(held[0].key()), Some((labels("1"), 1)), "held");
        // The ended thread's shard, emptied, is let go; this thread's stays.
        assert_eq!(lock(&registry.shards).len(), 1);
        drop(held);
    }
}
