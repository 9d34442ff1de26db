//! Labels that change while a store runs. A server that answers request after request in one
//! instance, or several at once (a task of the component model's async ABI each), labels each
//! request's samples and allocations with its own: [`ProfilerHandle::labels`] makes a set once,
//! [`StoreLabels::set`] gives it to the store as it switches (an atomic store, under a lock of
//! the store's own, when the set changes; an atomic load when it does not), and the samplers
//! read it as they take a sample.
//!
//! [`ProfilerHandle::labels`]: crate::ProfilerHandle::labels

use std::sync::{Arc, Mutex};

use crate::capture::{LabelsKey, LabelsNow};
use crate::record::label_registry::LabelSet;
use crate::sync::lock;

/// A set of labels for samples (pprof's string labels), made by
/// [`ProfilerHandle::labels`](crate::ProfilerHandle::labels) and given to any number of stores
/// with [`StoreLabels::set`]. The profile keeps the set while a clone of it lives, and for the
/// samples still on their way after.
#[derive(Clone, Default)]
pub struct SampleLabels(Option<Arc<LabelSet>>);

impl SampleLabels {
    pub(crate) fn new(registered: Option<Arc<LabelSet>>) -> Self {
        SampleLabels(registered)
    }

    fn key(&self) -> Option<LabelsKey> {
        self.0.as_ref().map(|set| set.key())
    }
}

/// The labels of an attached store, returned by
/// [`ProfilerHandle::attach_with_labels`](crate::ProfilerHandle::attach_with_labels): changed
/// with [`set`](Self::set) as the store goes on to other work. Cloned freely; setting labels
/// after the store is dropped does nothing.
#[derive(Clone)]
pub struct StoreLabels {
    now: Arc<LabelsNow>,
    /// The set `now` names, kept registered while the store has it.
    held: Arc<Mutex<SampleLabels>>,
}

impl StoreLabels {
    pub(crate) fn new(labels: SampleLabels) -> Self {
        let now = Arc::new(LabelsNow::default());
        now.set(labels.key());
        StoreLabels {
            now,
            held: Arc::new(Mutex::new(labels)),
        }
    }

    /// What the samplers read.
    pub(crate) fn now(&self) -> Arc<LabelsNow> {
        self.now.clone()
    }

    /// From now on, the samples taken in the store and the allocations it makes carry
    /// `labels` (in place of those it had).
    pub fn set(&self, labels: &SampleLabels) {
        let key = labels.key();
        if self.now.get() == key {
            return;
        }
        let mut held = lock(&self.held);
        self.now.set(key);
        *held = labels.clone();
    }
}
