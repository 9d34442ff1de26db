//! Locking and queueing shared by the stages.

use std::sync::atomic::{AtomicUsize, Ordering};
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
}

impl<T> BoundedQueue<T> {
    pub fn new(capacity: usize) -> Self {
        let (sender, receiver) = std::sync::mpsc::channel();
        BoundedQueue {
            sender,
            receiver: Mutex::new(receiver),
            len: AtomicUsize::new(0),
            capacity,
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
    }
}
