//! Locking shared by the stages.

use std::sync::{Mutex, MutexGuard};

/// The lock, even if a thread panicked holding it: the data behind wasmspy's locks (samples,
/// profiles, registries) stays usable, and a profile is better kept than lost to a poison.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
