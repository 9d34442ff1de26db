//! Samples in time order, for the formats that show a timeline (Firefox Profiler, speedscope),
//! within a fixed memory budget: [`BUDGET`] entries of 32 bytes.
//!
//! Policy: each sample is its own entry until the budget is reached. Then time is cut into
//! buckets (first one sampling period wide) and the samples of one stack within one bucket
//! merge into one entry that carries their count and summed values, at the time of the first
//! of them; whenever the budget is reached again the buckets double in width. A run of any
//! length keeps the whole run, at a resolution that coarsens with its length: at 1 kHz, about
//! two minutes at full resolution; after an hour, buckets of 64 ms for a guest in one stack
//! (3.6 million samples in at most half the budget), wider for one that moves between several
//! stacks within each bucket.

use rustc_hash::FxHashMap;

use super::KeyId;
use crate::capture::SampleValues;

/// Entries kept at most (4 MiB).
pub const BUDGET: usize = 1 << 17;

/// What samples of one stack measured, added up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub samples: u64,
    pub measured: u64,
    pub wall_ns: u64,
}

impl Tally {
    pub fn one(values: SampleValues) -> Self {
        Tally {
            samples: 1,
            measured: values.measured,
            wall_ns: values.wall_ns,
        }
    }

    pub fn add(&mut self, other: Tally) {
        self.samples = self.samples.saturating_add(other.samples);
        self.measured = self.measured.saturating_add(other.measured);
        self.wall_ns = self.wall_ns.saturating_add(other.wall_ns);
    }

    /// What was added since `earlier`, a copy of this tally taken before.
    pub fn since(self, earlier: Tally) -> Tally {
        Tally {
            samples: self.samples.saturating_sub(earlier.samples),
            measured: self.measured.saturating_sub(earlier.measured),
            wall_ns: self.wall_ns.saturating_sub(earlier.wall_ns),
        }
    }
}

/// Samples of one labeled stack from `time_ns` on (one sample, or those of a bucket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: KeyId,
    pub time_ns: u64,
    pub tally: Tally,
}

pub struct Timeline {
    entries: Vec<Entry>,
    budget: usize,
    /// Width of the buckets samples merge in; 0 until the budget is first reached.
    bucket_ns: u64,
    first_bucket_ns: u64,
    /// The bucket new samples fall in, and where its entries are, by stack.
    current: u64,
    current_entries: FxHashMap<KeyId, usize>,
}

impl Timeline {
    /// `period_ns`: the sampling period, the buckets' first width.
    pub fn new(period_ns: u64) -> Self {
        Self::with_budget(BUDGET, period_ns)
    }

    fn with_budget(budget: usize, period_ns: u64) -> Self {
        Timeline {
            entries: Vec::new(),
            budget: budget.max(2),
            bucket_ns: 0,
            first_bucket_ns: period_ns.max(1),
            current: 0,
            current_entries: FxHashMap::default(),
        }
    }

    pub fn push(&mut self, key: KeyId, time_ns: u64, tally: Tally) {
        if let Some(bucket) = time_ns.checked_div(self.bucket_ns) {
            if bucket == self.current {
                if let Some(&i) = self.current_entries.get(&key) {
                    self.entries[i].tally.add(tally);
                    return;
                }
            } else if bucket > self.current {
                self.current = bucket;
                self.current_entries.clear();
            }
            if bucket == self.current {
                self.current_entries.insert(key, self.entries.len());
            }
        }
        self.entries.push(Entry {
            key,
            time_ns,
            tally,
        });
        if self.entries.len() >= self.budget {
            self.coarsen();
        }
    }

    /// Doubles the buckets' width until the entries fill at most half the budget.
    fn coarsen(&mut self) {
        while self.entries.len() > self.budget / 2 {
            self.bucket_ns = match self.bucket_ns {
                0 => self.first_bucket_ns,
                w => w.saturating_mul(2),
            };
            let width = self.bucket_ns;
            let mut index: FxHashMap<(u64, KeyId), usize> = FxHashMap::default();
            let mut merged: Vec<Entry> = Vec::with_capacity(self.entries.len() / 2);
            for e in self.entries.drain(..) {
                let key = (e.time_ns / width, e.key);
                match index.get(&key) {
                    Some(&i) => {
                        let m: &mut Entry = &mut merged[i];
                        m.time_ns = m.time_ns.min(e.time_ns);
                        m.tally.add(e.tally);
                    }
                    None => {
                        index.insert(key, merged.len());
                        merged.push(e);
                    }
                }
            }
            self.entries = merged;
            self.current = self
                .entries
                .iter()
                .map(|e| e.time_ns / width)
                .max()
                .unwrap_or(0);
            self.current_entries = index
                .into_iter()
                .filter(|&((bucket, _), _)| bucket == self.current)
                .map(|((_, key), i)| (key, i))
                .collect();
        }
    }

    /// The entries, oldest first (samples that arrive late, as those of a host call resolved
    /// when it returns, take their place by time).
    pub fn entries(&self) -> Vec<Entry> {
        let mut entries = self.entries.clone();
        entries.sort_by_key(|e| e.time_ns);
        entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Id;

    fn key(i: usize) -> KeyId {
        KeyId::from_index(i)
    }

    fn one(measured: u64) -> Tally {
        Tally::one(SampleValues {
            measured,
            wall_ns: measured,
        })
    }

    #[test]
    fn keeps_every_sample_within_the_budget() {
        let mut t = Timeline::with_budget(100, 10);
        for i in 0..99 {
            t.push(key(i % 3), i as u64 * 10, one(10));
        }
        assert_eq!(t.bucket_ns, 0);
        let e = t.entries();
        assert_eq!(e.len(), 99);
        assert_eq!(
            e[5],
            Entry {
                key: key(2),
                time_ns: 50,
                tally: one(10)
            }
        );
    }

    #[test]
    fn past_the_budget_merges_stacks_within_coarser_buckets_and_keeps_totals() {
        let budget = 64;
        let mut t = Timeline::with_budget(budget, 10);
        let mut totals = [Tally::default(); 3];
        // Three stacks taking turns, one sample every 10 ns, 5,000 samples.
        for i in 0..5_000u64 {
            let stack = (i % 3) as usize;
            t.push(key(stack), i * 10, one(i));
            totals[stack].add(one(i));
            assert!(t.entries.len() < budget);
        }
        let entries = t.entries();
        assert!(t.bucket_ns > 0);
        let mut sums = [Tally::default(); 3];
        for e in &entries {
            sums[e.key.index()].add(e.tally);
        }
        assert_eq!(sums, totals);
        // Still a timeline: time order, and every stack present all along.
        assert!(entries.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
        let last_third = &entries[entries.len() * 2 / 3..];
        assert!((0..3).all(|s| last_third.iter().any(|e| e.key == key(s))));
        // One entry per stack and bucket.
        let w = t.bucket_ns;
        let mut seen = std::collections::HashSet::new();
        assert!(entries.iter().all(|e| seen.insert((e.time_ns / w, e.key))));
    }

    #[test]
    fn a_late_sample_takes_its_place_by_time() {
        let mut t = Timeline::with_budget(8, 10);
        for i in 0..20u64 {
            t.push(key(0), 100 + i * 10, one(1));
        }
        t.push(key(1), 5, one(1));
        let e = t.entries();
        assert_eq!((e[0].key, e[0].time_ns), (key(1), 5));
        assert_eq!(e.iter().map(|e| e.tally.samples).sum::<u64>(), 21);
    }
}
