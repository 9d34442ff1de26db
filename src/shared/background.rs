//! A value computed on a thread of its own, from its creation on, and waited for where it is
//! first needed: what a start need not wait for (a module's build id, the probe module that
//! finds a store's context), made while the rest of the start goes on.

use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use crate::sync::lock;

pub struct Background<T> {
    value: OnceLock<Option<T>>,
    running: Mutex<Option<JoinHandle<T>>>,
}

impl<T: Send + 'static> Background<T> {
    /// Starts computing `make` on a thread named `name`; where no thread can be had, computes
    /// it now.
    pub fn spawn(name: &str, make: impl Fn() -> T + Send + Sync + 'static) -> Self {
        // Shared with the thread, so that it is still here to be run if the thread is not.
        let make = Arc::new(make);
        let running = std::thread::Builder::new().name(name.into()).spawn({
            let make = make.clone();
            move || make()
        });
        match running {
            Ok(running) => Background {
                value: OnceLock::new(),
                running: Mutex::new(Some(running)),
            },
            Err(_) => Self::ready(make()),
        }
    }

    /// A value there is nothing left to compute for.
    pub fn ready(value: T) -> Self {
        Background {
            value: OnceLock::from(Some(value)),
            running: Mutex::new(None),
        }
    }

    /// The value, once computed; `None` if its thread panicked.
    pub fn get(&self) -> Option<&T> {
        let value = self.value.get_or_init(|| {
            let running = lock(&self.running).take();
            running.and_then(|r| r.join().ok())
        });
        value.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_computed_once_and_kept() {
        let value = Background::spawn("test", || 6 * 7);
        assert_eq!(value.get(), Some(&42));
        assert_eq!(value.get(), Some(&42));
        assert_eq!(Background::ready("x").get(), Some(&"x"));
    }

    #[test]
    fn a_panicked_computation_has_no_value() {
        let value: Background<u32> = Background::spawn("test", || panic!("on purpose"));
        assert_eq!(value.get(), None);
    }
}
