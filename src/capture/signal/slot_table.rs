//! The one protocol by which the signal handler is shown what lives elsewhere (a store's
//! context, a fiber stack, an instance of a language runtime): a fixed table of slots, each
//! published by the owner of what it describes and withdrawn before that goes away.
//!
//! A slot is claimed (`taken`, by compare-and-swap), its payload written (relaxed atomics),
//! then its `live` word stored with release ordering: a reader that loads a non-zero `live`
//! with acquire ordering reads the payload written with it. Withdrawing clears `live`, then
//! waits for the handlers running (one may have loaded the old word) before the slot can be
//! claimed again and what it described freed. Readers scan the slots up to the highest ever
//! taken ([`SlotTable::for_each`]): atomic loads over a fixed table, async-signal-safe.
//!
//! A [`Publication`] withdraws its slot when dropped: whoever publishes must keep it exactly
//! as long as what the slot describes (a store owns its own, see
//! [`crate::capture::StoreKeeper`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A slot's payload: atomics, with an empty value to build the table from.
pub trait Payload: Sync + 'static {
    const EMPTY: Self;
}

/// A cache line each: the threads that publish and withdraw neighbouring slots (a server's
/// workers, a store and a fiber stack a request each) would otherwise write to one another's
/// lines.
#[repr(align(64))]
struct Slot<S> {
    taken: AtomicBool,
    /// Non-zero while published: what the slot describes (a context's address, a stack's end).
    live: AtomicUsize,
    payload: S,
}

pub struct SlotTable<S, const N: usize> {
    slots: [Slot<S>; N],
    /// One past the highest slot ever taken: readers read no further, so that with one slot
    /// in use a scan reads one cache line, not the whole table.
    used: AtomicUsize,
}

impl<S: Payload, const N: usize> SlotTable<S, N> {
    pub const fn new() -> Self {
        SlotTable {
            slots: [const {
                Slot {
                    taken: AtomicBool::new(false),
                    live: AtomicUsize::new(0),
                    payload: S::EMPTY,
                }
            }; N],
            used: AtomicUsize::new(0),
        }
    }

    /// Publishes `live` (non-zero) with the payload `fill` writes; `None` when all `N` slots
    /// are taken.
    pub fn publish(&'static self, live: usize, fill: impl FnOnce(&S)) -> Option<Publication> {
        debug_assert_ne!(live, 0);
        // A taken slot is passed by a load: a compare-and-swap, failed or not, takes its cache
        // line from the threads that read it.
        let i = self.slots.iter().position(|slot| {
            !slot.taken.load(Ordering::Relaxed)
                && slot
                    .taken
                    .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
        })?;
        let slot = &self.slots[i];
        fill(&slot.payload);
        slot.live.store(live, Ordering::Release);
        if self.used.load(Ordering::SeqCst) <= i {
            self.used.fetch_max(i + 1, Ordering::SeqCst);
        }
        Some(Publication {
            live: &slot.live,
            taken: &slot.taken,
        })
    }

    /// Calls `f` with each published slot's live word and payload. Async-signal-safe.
    pub fn for_each(&self, mut f: impl FnMut(usize, &S)) {
        for slot in &self.slots[..self.used.load(Ordering::Acquire).min(N)] {
            let live = slot.live.load(Ordering::Acquire);
            if live != 0 {
                f(live, &slot.payload);
            }
        }
    }

    /// The first of `f`'s answers for the published slots. Async-signal-safe.
    pub fn find_map<R>(&self, mut f: impl FnMut(usize, &S) -> Option<R>) -> Option<R> {
        self.slots[..self.used.load(Ordering::Acquire).min(N)]
            .iter()
            .find_map(|slot| match slot.live.load(Ordering::Acquire) {
                0 => None,
                live => f(live, &slot.payload),
            })
    }
}

/// A published slot, withdrawn when this is dropped: on return from the drop no handler reads
/// it any more.
pub struct Publication {
    live: &'static AtomicUsize,
    taken: &'static AtomicBool,
}

impl Drop for Publication {
    fn drop(&mut self) {
        self.live.store(0, Ordering::SeqCst);
        super::handler::wait_for_running_handlers();
        self.taken.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    struct Word(AtomicU64);

    impl Payload for Word {
        const EMPTY: Self = Word(AtomicU64::new(0));
    }

    static TABLE: SlotTable<Word, 4> = SlotTable::new();

    fn published() -> Vec<(usize, u64)> {
        let mut all = Vec::new();
        TABLE.for_each(|live, w| all.push((live, w.0.load(Ordering::Relaxed))));
        all
    }

    #[test]
    fn slots_are_read_while_published_and_reused_after() {
        let first = TABLE
            .publish(10, |w| w.0.store(1, Ordering::Relaxed))
            .unwrap();
        let second = TABLE
            .publish(20, |w| w.0.store(2, Ordering::Relaxed))
            .unwrap();
        assert_eq!(published(), [(10, 1), (20, 2)]);
        drop(first);
        assert_eq!(published(), [(20, 2)]);
        let mut held: Vec<Publication> = (0..3)
            .map(|i| TABLE.publish(30 + i, |_| {}).unwrap())
            .collect();
        assert!(
            TABLE.publish(40, |_| {}).is_none(),
            "all four slots are taken"
        );
        assert_eq!(
            TABLE.find_map(|live, _| (live == 31).then_some(live)),
            Some(31)
        );
        held.clear();
        drop(second);
        assert_eq!(published(), []);
    }
}
