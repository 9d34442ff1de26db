//! `report --opcodes`: where Pulley's interpreter spends its time by bytecode instruction, what
//! Wasmtime's `profile-pulley` is for (finding hot opcodes, and adjacent pairs to fuse into
//! macro-instructions), read from the opcode labels of a profile's samples (see
//! [`crate::profile::PULLEY_OP_LABEL`]).
//!
//! A pair `a b` is an instruction `a` followed by `b` in a function's bytecode; its time is
//! the self time of both: that of each `a` followed by a `b`, and of each `b` after an `a`,
//! what one fused instruction would run in place of the two.

use std::collections::HashMap;
use std::hash::Hash;

use super::top::{Row, Top};
use crate::profile::{Profile, Sample, PULLEY_NEXT_LABEL, PULLEY_OP_LABEL, PULLEY_PREV_LABEL};

/// Self time by opcode and by adjacent pair (`a b`) of some of a profile's samples.
#[derive(Default)]
pub struct OpcodeValues {
    pub ops: HashMap<String, i64>,
    pub pairs: HashMap<String, i64>,
}

/// The [`OpcodeValues`] of the samples with an opcode, by sample type `index`, in the groups
/// `group` puts them in (`None`: in none); empty when no sample has an opcode (the profile is
/// not of Pulley, or not from the signal sampler).
pub fn opcode_values<K: Hash + Eq>(
    profile: &Profile,
    index: usize,
    group: impl Fn(&Sample) -> Option<K>,
) -> HashMap<K, OpcodeValues> {
    let mut groups: HashMap<K, OpcodeValues> = HashMap::new();
    for sample in &profile.samples {
        let value = sample.values[index];
        let label = |key: &str| {
            sample
                .labels
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let Some(op) = label(PULLEY_OP_LABEL) else {
            continue;
        };
        let Some(key) = group(sample) else {
            continue;
        };
        let values = groups.entry(key).or_default();
        *values.ops.entry(op.to_string()).or_default() += value;
        if let Some(prev) = label(PULLEY_PREV_LABEL) {
            *values.pairs.entry(format!("{prev} {op}")).or_default() += value;
        }
        if let Some(next) = label(PULLEY_NEXT_LABEL) {
            *values.pairs.entry(format!("{op} {next}")).or_default() += value;
        }
    }
    groups
}

/// Tables of self time per opcode and per adjacent pair, by sample type `index`; `None` when
/// no sample has an opcode (the profile is not of Pulley, or not from the signal sampler).
pub fn opcodes(profile: &Profile, index: usize) -> Option<(Top, Top)> {
    let total = profile.samples.iter().map(|s| s.values[index].abs()).sum();
    let OpcodeValues { ops, pairs } = opcode_values(profile, index, |_| Some(())).remove(&())?;
    let table = |values: Vec<(String, i64)>| {
        let mut rows: Vec<Row> = values
            .into_iter()
            .map(|(name, value)| Row {
                name,
                inline: "",
                location: String::new(),
                source: None,
                text: String::new(),
                flat: value,
                cum: value,
            })
            .collect();
        rows.sort_by(|a, b| b.flat.cmp(&a.flat).then_with(|| a.name.cmp(&b.name)));
        Top {
            sample_type: profile.sample_types[index].clone(),
            total,
            rows,
            dropped: 0,
            cutoff: 0,
        }
    };
    Some((
        table(ops.into_iter().collect()),
        table(pairs.into_iter().collect()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Id, Labels, Sample, StackId, ValueType};

    fn sample(value: i64, labels: &[(&str, &str)]) -> Sample {
        let labels: Labels = labels
            .iter()
            .map(|&(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
            .into();
        Sample {
            stack: StackId::from_index(0),
            labels,
            thread: None,
            time_ns: 0,
            values: vec![value],
        }
    }

    #[test]
    fn a_pairs_time_is_both_of_its_instructions() {
        let profile = Profile {
            sample_types: vec![ValueType::new("cpu", "nanoseconds")],
            samples: vec![
                sample(
                    30,
                    &[
                        (PULLEY_OP_LABEL, "xload32"),
                        (PULLEY_PREV_LABEL, "push_frame"),
                        (PULLEY_NEXT_LABEL, "xadd32"),
                    ],
                ),
                sample(
                    20,
                    &[(PULLEY_OP_LABEL, "xadd32"), (PULLEY_PREV_LABEL, "xload32")],
                ),
                sample(50, &[]),
            ],
            ..Profile::default()
        };
        let (ops, pairs) = opcodes(&profile, 0).unwrap();
        let rows = |t: &Top| -> Vec<(String, i64)> {
            t.rows.iter().map(|r| (r.name.clone(), r.flat)).collect()
        };
        assert_eq!(
            rows(&ops),
            [("xload32".to_string(), 30), ("xadd32".to_string(), 20)]
        );
        assert_eq!(
            rows(&pairs),
            [
                ("xload32 xadd32".to_string(), 50),
                ("push_frame xload32".to_string(), 30)
            ]
        );
        assert_eq!(ops.total, 100);
    }

    #[test]
    fn a_profile_without_opcodes_has_no_tables() {
        let profile = Profile {
            sample_types: vec![ValueType::new("cpu", "nanoseconds")],
            samples: vec![sample(5, &[])],
            ..Profile::default()
        };
        assert!(opcodes(&profile, 0).is_none());
    }
}
