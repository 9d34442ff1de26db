//! A fixed-size single-producer single-consumer ring whose slots are filled and read in place,
//! so that the producer (a signal handler) neither allocates nor copies a large sample.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Ring<T> {
    slots: Box<[UnsafeCell<T>]>,
    /// Slots written so far; only the producer stores it.
    head: AtomicUsize,
    /// Slots read so far; only the consumer stores it.
    tail: AtomicUsize,
}

// SAFETY: a slot is accessed by the producer only while it is not published (between the
// producer's head load and its head store) and by the consumer only while published and not
// yet released (between its tail load and tail store), so no slot is ever shared.
unsafe impl<T: Send> Sync for Ring<T> {}

/// A type whose every value may start as zero bytes.
///
/// # Safety
/// All-zero bytes must be a valid value of the type.
pub unsafe trait Zeroed {}

impl<T: Zeroed> Ring<T> {
    /// `capacity` slots of zero bytes (all allocation happens here). Allocated zeroed, their
    /// pages are mapped as samples first fill them: a thread's ring is 4 MB, and writing
    /// its slots when made took 2 ms of every start (and of every thread `serve` samples).
    pub fn zeroed(capacity: usize) -> Self {
        let slots = Box::<[UnsafeCell<T>]>::new_zeroed_slice(capacity.max(1));
        Ring {
            // SAFETY: zero bytes are a valid `T` (`T: Zeroed`), so a valid `UnsafeCell<T>`,
            // which has `T`'s layout.
            slots: unsafe { slots.assume_init() },
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }
}

impl<T> Ring<T> {
    /// Producer: fills the next free slot; false when the ring is full. Callers must not run
    /// `push_with` concurrently with itself.
    pub fn push_with(&self, fill: impl FnOnce(&mut T)) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        if head - tail == self.slots.len() {
            return false;
        }
        // SAFETY: slot `head` is free (the consumer released it, Acquire above) and unpublished.
        fill(unsafe { &mut *self.slots[head % self.slots.len()].get() });
        self.head.store(head + 1, Ordering::Release);
        true
    }

    /// Consumer: reads the oldest filled slot; false when the ring is empty. Callers must not
    /// run `pop_with` concurrently with itself.
    pub fn pop_with(&self, read: impl FnOnce(&T)) -> bool {
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        if tail == head {
            return false;
        }
        // SAFETY: slot `tail` was published by the producer (Acquire above) and not released.
        read(unsafe { &*self.slots[tail % self.slots.len()].get() });
        self.tail.store(tail + 1, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::{Ring, Zeroed};
    use std::sync::Arc;

    // SAFETY: integers.
    unsafe impl Zeroed for u64 {}
    // SAFETY: integers.
    unsafe impl Zeroed for [u64; 4] {}

    #[test]
    fn fifo_and_full() {
        let ring = Ring::<u64>::zeroed(2);
        assert!(ring.push_with(|s| *s = 1));
        assert!(ring.push_with(|s| *s = 2));
        assert!(!ring.push_with(|s| *s = 3), "full");
        let mut got = Vec::new();
        while ring.pop_with(|s| got.push(*s)) {}
        assert_eq!(got, [1, 2]);
        assert!(ring.push_with(|s| *s = 4));
        assert!(ring.pop_with(|s| assert_eq!(*s, 4)));
    }

    #[test]
    fn producer_and_consumer_threads_see_every_value_once_in_order() {
        let ring = Arc::new(Ring::<[u64; 4]>::zeroed(8));
        let producer = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                for i in 0..100_000u64 {
                    while !ring.push_with(|s| *s = [i; 4]) {
                        std::hint::spin_loop();
                    }
                }
            })
        };
        let mut next = 0;
        while next < 100_000 {
            ring.pop_with(|s| {
                assert_eq!(*s, [next; 4]);
                next += 1;
            });
        }
        producer.join().unwrap();
    }
}
