//! The sets of labels registered for samples, as threads register and drop them. A server
//! registers two sets a request and drops them as it ends, on whichever worker answers it:
//! kept in one map behind one lock, each registration and each drop took that lock (and the
//! cache line it is on) from the other workers and from the pipeline's thread, some 2 points
//! of a small request's throughput. Each thread writes its changes to a shard of its own
//! instead, whose lock only its thread takes but for the moment the reading side (the
//! pipeline's thread, every 10 ms, or a sample whose set it does not know yet) takes the
//! changes in.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustc_hash::{FxHashMap, FxHashSet};

use super::packed_labels::PackedLabels;
use crate::capture::LabelsKey;
use crate::profile::Labels;
use crate::sync::lock;

thread_local! {
    /// This thread's shard of each registry it has written to, by the registry's id.
    static SHARDS: RefCell<Vec<(u64, Arc<Shard>)>> = const { RefCell::new(Vec::new()) };
}

/// A set no store has any more, and when it was dropped: the reading side forgets it once no
/// sample can still name it ([`LabelRegistry::forget`] is told when).
pub struct Retired {
    pub key: LabelsKey,
    /// When it was dropped (`CLOCK_MONOTONIC`).
    pub at_ns: u64,
    /// The signal sampler's drain passes ended by then.
    pub passes: u64,
    /// The pipeline queue's drains ended by then.
    pub drains: u64,
}

enum Change {
    Registered {
        key: LabelsKey,
        labels: PackedLabels,
        since_ns: u64,
    },
    Retired(Retired),
}

/// The changes one thread made, in its order, not yet taken in.
#[derive(Default)]
struct Shard(Mutex<Vec<Change>>);

/// The sets registered, written to by any thread, read by the pipeline's side.
pub struct LabelRegistry {
    /// Tells this registry's shards from other registries' in a thread's [`SHARDS`].
    id: u64,
    /// Every thread's shard; a shard whose thread has ended is let go once emptied.
    shards: Mutex<Vec<Arc<Shard>>>,
    known: Mutex<Known>,
}

/// What the reading side has taken in.
#[derive(Default)]
struct Known {
    /// Each set registered, with when (`CLOCK_MONOTONIC`).
    registered: FxHashMap<LabelsKey, (PackedLabels, u64)>,
    retired: Vec<Retired>,
    /// Sets forgotten before their registration was taken in (registered on one thread just
    /// after its shard was read, dropped on another before its shard was): dropped as the
    /// registration comes.
    forgotten: FxHashSet<LabelsKey>,
    /// A shard's changes are swapped with this, so that neither side allocates anew.
    spare: Vec<Change>,
}

impl Default for LabelRegistry {
    fn default() -> Self {
        static LAST: AtomicU64 = AtomicU64::new(0);
        LabelRegistry {
            id: LAST.fetch_add(1, Ordering::Relaxed) + 1,
            shards: Mutex::new(Vec::new()),
            known: Mutex::new(Known::default()),
        }
    }
}

impl LabelRegistry {
    /// Registers `labels` under `key` (new), at `since_ns` (`CLOCK_MONOTONIC`).
    pub fn register(&self, key: LabelsKey, labels: PackedLabels, since_ns: u64) {
        self.push(Change::Registered {
            key,
            labels,
            since_ns,
        });
    }

    /// A registered set no store has any more, to forget once [`forget`](Self::forget) is told
    /// its samples have all been recorded.
    pub fn retire(&self, retired: Retired) {
        self.push(Change::Retired(retired));
    }

    /// Writes `change` to the calling thread's shard.
    fn push(&self, change: Change) {
        let mut change = Some(change);
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
            lock(&shard.0).extend(change.take());
        });
        // A thread ending (its thread-locals gone): a shard of the change's own.
        if let Some(change) = change {
            let shard = Arc::new(Shard(Mutex::new(vec![change])));
            lock(&self.shards).push(shard);
        }
    }

    /// The labels registered under `key`, with when.
    pub fn get(&self, key: LabelsKey) -> Option<(Labels, u64)> {
        let mut known = lock(&self.known);
        if !known.registered.contains_key(&key) {
            // Registered since the last look, perhaps.
            self.take_in(&mut known);
        }
        let (labels, since_ns) = known.registered.get(&key)?;
        Some((labels.unpack(), *since_ns))
    }

    /// Forgets the sets retired whose samples `expired` says have all been recorded.
    pub fn forget(&self, expired: impl Fn(&Retired) -> bool) {
        let mut known = lock(&self.known);
        self.take_in(&mut known);
        let Known {
            registered,
            retired,
            forgotten,
            ..
        } = &mut *known;
        retired.retain(|set| {
            if !expired(set) {
                return true;
            }
            if registered.remove(&set.key).is_none() {
                forgotten.insert(set.key);
            }
            false
        });
    }

    /// Takes in every shard's changes.
    fn take_in(&self, known: &mut Known) {
        let mut shards = lock(&self.shards);
        let mut changes = std::mem::take(&mut known.spare);
        for shard in shards.iter() {
            std::mem::swap(&mut *lock(&shard.0), &mut changes);
            for change in changes.drain(..) {
                match change {
                    Change::Registered {
                        key,
                        labels,
                        since_ns,
                    } => {
                        if !known.forgotten.remove(&key) {
                            known.registered.insert(key, (labels, since_ns));
                        }
                    }
                    Change::Retired(set) => known.retired.push(set),
                }
            }
        }
        known.spare = changes;
        // Emptied: those whose threads have ended go.
        shards.retain(|shard| Arc::strong_count(shard) > 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retired(key: LabelsKey) -> Retired {
        Retired {
            key,
            at_ns: 0,
            passes: 0,
            drains: 0,
        }
    }

    #[test]
    fn sets_registered_and_retired_on_any_threads_are_known_until_forgotten() {
        let registry = Arc::new(LabelRegistry::default());
        let (a, b) = (LabelsKey(1), LabelsKey(2));
        registry.register(a, PackedLabels::new(&[("request", "1")]), 7);
        // Joined: the thread has ended, its thread-locals dropped (a scoped thread's may not
        // have been when its scope returns).
        let on_another_thread = |f: fn(&LabelRegistry)| {
            let registry = registry.clone();
            std::thread::spawn(move || f(&registry)).join().unwrap();
        };
        on_another_thread(|registry| {
            registry.register(LabelsKey(2), PackedLabels::new(&[("request", "2")]), 8)
        });
        let labels =
            |value: &str| -> Labels { [("request".to_string(), value.to_string())].into() };
        assert_eq!(registry.get(a), Some((labels("1"), 7)));
        assert_eq!(registry.get(b), Some((labels("2"), 8)));
        // The ended thread's shard, emptied, is let go; this thread's stays.
        assert_eq!(lock(&registry.shards).len(), 1);

        on_another_thread(|registry| registry.retire(retired(LabelsKey(1))));
        registry.retire(retired(b));
        registry.forget(|set| set.key == a);
        assert_eq!(registry.get(a), None);
        assert_eq!(
            registry.get(b),
            Some((labels("2"), 8)),
            "retired, not forgotten"
        );
        registry.forget(|_| true);
        assert_eq!(registry.get(b), None);
    }

    #[test]
    fn a_set_forgotten_before_its_registration_was_taken_in_is_not_kept() {
        let registry = LabelRegistry::default();
        let key = LabelsKey(3);
        registry.retire(retired(key));
        registry.forget(|_| true);
        registry.register(key, PackedLabels::new(&[("request", "3")]), 9);
        assert_eq!(registry.get(key), None);
        assert!(lock(&registry.known).forgotten.is_empty());
        assert!(lock(&registry.known).registered.is_empty());
    }
}
