//! Label sets, interned, within a budget: a server labels each request's samples with its own
//! set, and a recorder that kept every set would grow with every request. Past
//! [`MAX_LABEL_SETS`] distinct sets, a new set loses its labels whose key has had more than
//! [`MANY_VALUES`] values (a request number, an id in a path), and the profile says which.

use std::collections::BTreeSet;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::profile::Labels;

/// Distinct label sets kept whole.
pub const MAX_LABEL_SETS: usize = 10_000;
/// Values of one key beyond which, past the budget, the key is dropped from new sets.
pub const MANY_VALUES: usize = 100;

/// A set of labels, interned; [`LabelsId::NONE`] is the empty set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LabelsId(u32);

impl LabelsId {
    pub const NONE: LabelsId = LabelsId(0);
}

pub struct LabelSets {
    /// By id; the first is the empty set.
    sets: Vec<Labels>,
    ids: FxHashMap<Labels, LabelsId>,
    /// The values seen of each key, up to one more than [`MANY_VALUES`].
    values: FxHashMap<String, FxHashSet<String>>,
    /// Keys dropped from sets past the budget.
    dropped: BTreeSet<String>,
}

impl Default for LabelSets {
    fn default() -> Self {
        LabelSets {
            sets: vec![Labels::default()],
            ids: FxHashMap::default(),
            values: FxHashMap::default(),
            dropped: BTreeSet::new(),
        }
    }
}

impl LabelSets {
    pub fn intern(&mut self, labels: &Labels) -> LabelsId {
        if labels.is_empty() {
            return LabelsId::NONE;
        }
        if let Some(&id) = self.ids.get(labels) {
            return id;
        }
        if self.sets.len() > MAX_LABEL_SETS {
            let many = |key: &str| self.values.get(key).is_some_and(|v| v.len() > MANY_VALUES);
            if labels.iter().any(|(k, _)| many(k)) {
                let kept: Labels = labels.iter().filter(|(k, _)| !many(k)).cloned().collect();
                self.dropped.extend(
                    labels
                        .iter()
                        .filter(|(k, _)| many(k))
                        .map(|(k, _)| k.clone()),
                );
                return self.intern(&kept);
            }
        }
        for (key, value) in labels.iter() {
            let values = self.values.entry(key.clone()).or_default();
            if values.len() <= MANY_VALUES {
                values.insert(value.clone());
            }
        }
        let id = LabelsId(self.sets.len() as u32);
        self.sets.push(labels.clone());
        self.ids.insert(labels.clone(), id);
        id
    }

    pub fn get(&self, id: LabelsId) -> &Labels {
        &self.sets[id.0 as usize]
    }

    /// What the profile says when keys were dropped.
    pub fn note(&self) -> Option<String> {
        (!self.dropped.is_empty()).then(|| {
            let keys: Vec<&str> = self.dropped.iter().map(String::as_str).collect();
            format!(
                "labels {} left out of samples past {MAX_LABEL_SETS} distinct label sets (more than {MANY_VALUES} values each)",
                keys.join(", ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(i: usize) -> Labels {
        [
            ("request".to_string(), i.to_string()),
            ("method".to_string(), "GET".to_string()),
        ]
        .into()
    }

    #[test]
    fn past_the_budget_keys_of_many_values_are_dropped() {
        let mut sets = LabelSets::default();
        let ids: Vec<LabelsId> = (0..MAX_LABEL_SETS + 500)
            .map(|i| sets.intern(&request(i)))
            .collect();
        assert_eq!(sets.note(), Some(format!("labels request left out of samples past {MAX_LABEL_SETS} distinct label sets (more than {MANY_VALUES} values each)")));
        // Every set up to the budget kept whole; after it, one set for all: method alone.
        assert_eq!(
            *sets.get(ids[MAX_LABEL_SETS - 1]),
            request(MAX_LABEL_SETS - 1)
        );
        let method: Labels = [("method".to_string(), "GET".to_string())].into();
        assert_eq!(*sets.get(ids[MAX_LABEL_SETS + 499]), method);
        assert!(sets.sets.len() <= MAX_LABEL_SETS + 2);
        // A set seen before the budget was reached keeps its id.
        assert_eq!(sets.intern(&request(7)), ids[7]);
    }
}
