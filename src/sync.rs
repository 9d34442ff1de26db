//! Locking and queueing shared by the stages.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The lock, even if a thread panicked holding it: the data behind wasmspy's locks (samples,
/// profiles, registries) stays usable, and a profile is better kept than lost to a poison.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A queue of at most `capacity` items whose memory grows with what is in it: a bounded
/// channel sets all its slots up when made (the pipeline's 16 k events, 2.6 MB, took 1.5 ms
/// of every start).
pub struct BoundedQueue<T> {
    sender: std::sync::mpsc::Sender<T>,
    receiver: Mutex<std::sync::mpsc::Receiver<T>>,
    len: AtomicUsize,
    capacity: usize,
    /// Drains ended, each counted before the next begins.
    drains: Passes,
}

impl<T> BoundedQueue<T> {
    pub fn new(capacity: usize) -> Self {
        let (sender, receiver) = std::sync::mpsc::channel();
        BoundedQueue {
            sender,
            receiver: Mutex::new(receiver),
            len: AtomicUsize::new(0),
            capacity,
            drains: Passes::default(),
        }
    }

    /// Queues `item`, or gives it back when the queue is full.
    pub fn try_push(&self, item: T) -> Result<(), T> {
        if self.len.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.len.fetch_sub(1, Ordering::AcqRel);
            return Err(item);
        }
        // The receiver lives as long as the sender, in `self`.
        let _ = self.sender.send(item);
        Ok(())
    }

    /// Takes every item queued so far, in order, to `each`; one taker at a time.
    pub fn drain(&self, mut each: impl FnMut(T)) {
        let receiver = lock(&self.receiver);
        while let Ok(item) = receiver.try_recv() {
            self.len.fetch_sub(1, Ordering::AcqRel);
            each(item);
        }
        // Under the lock: drains are counted in the order they ran.
        self.drains.ended();
    }

    /// The drains ended so far: see [`Passes`].
    pub fn drains(&self) -> &Passes {
        &self.drains
    }
}

/// Counts the passes of a job that runs one pass at a time (a drain of a queue or of rings),
/// each counted as it ends, to tell when everything there was at some instant has been
/// through one: at most one pass was under way when [`count`](Self::count) read `then`, so a
/// pass ended after it ([`covered`](Self::covered)) began after that instant.
#[derive(Default)]
pub struct Passes(AtomicU64);

impl Passes {
    pub fn ended(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }

    pub fn count(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Whether a whole pass began and ended between the counts `then` and `now`.
    pub fn covered(then: u64, now: u64) -> bool {
        now >= then + 2
    }
}
