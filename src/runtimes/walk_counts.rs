//! How a runtime's walks of guest memory went, for the one warning a run gets when a guest's
//! memory misled them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How many walks there were, and how many found a chain that did not check out (a loop, a
/// pointer outside memory, an object of the wrong type, a frame of no known function, more
/// frames than a walk follows): those samples keep their Wasm frames. A guest that corrupts
/// its runtime's memory, or writes it to mislead, shows here.
#[derive(Default)]
pub struct WalkCounts {
    walks: AtomicU64,
    unreadable: AtomicU64,
    warned: AtomicBool,
}

impl WalkCounts {
    /// Counts a walk (`None`: its chain did not check out) and passes its result on.
    /// Async-signal-safe.
    pub fn count<T>(&self, walked: Option<T>) -> Option<T> {
        self.walks.fetch_add(1, Ordering::Relaxed);
        if walked.is_none() {
            self.unreadable.fetch_add(1, Ordering::Relaxed);
        }
        walked
    }

    /// The warning, once a run, where more than 1 % of the walks did not check out (one now
    /// and then is a runtime caught between two writes). `what`: what the walks read, e.g.
    /// "the Python interpreter's frames".
    pub fn warning(&self, what: &str) -> Option<String> {
        let (walks, unreadable) = (
            self.walks.load(Ordering::Relaxed),
            self.unreadable.load(Ordering::Relaxed),
        );
        if unreadable == 0 || unreadable * 100 < walks || self.warned.swap(true, Ordering::Relaxed)
        {
            return None;
        }
        Some(format!(
            "{unreadable} of {walks} samples found {what} unreadable (a loop, a pointer outside memory, an object of the wrong type, or too many frames): they show its Wasm frames"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_once_over_one_percent() {
        let counts = WalkCounts::default();
        for i in 0..200 {
            counts.count((i != 0).then_some(()));
        }
        assert_eq!(counts.warning("x"), None, "1 in 200 is no warning");
        counts.count(None::<()>);
        counts.count(None::<()>);
        let said = counts.warning("Go's goroutine stacks").unwrap();
        assert!(
            said.starts_with("3 of 202 samples found Go's goroutine stacks unreadable"),
            "{said}"
        );
        assert_eq!(counts.warning("x"), None, "said once");
    }
}
