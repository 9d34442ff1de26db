//! A profile's values by Wasm instruction and by Wasm function: flat (the samples whose leaf
//! is there) and cumulative (the samples with it anywhere on their stack, once per sample).

use rustc_hash::{FxHashMap, FxHashSet};

use crate::profile::{Frame, MappingId, Profile};

/// An instruction of a module: its mapping and its offset in the module's bytes.
pub type Instruction = (MappingId, u64);

/// A function of a module: its mapping and its index.
pub type Function = (MappingId, u32);

/// Flat and cumulative values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Value {
    pub flat: i64,
    pub cum: i64,
}

/// What the profile's samples add up to, by instruction and by function.
#[derive(Default)]
pub struct Counts {
    pub instructions: FxHashMap<Instruction, Value>,
    pub functions: FxHashMap<Function, Value>,
    /// The sum of every sample's value (as absolute values), which percentages are of.
    pub total: i64,
}

/// The frame's instruction, where it is one: a frame of a Wasm module's code has its
/// mapping (a module's, not a host object's) and the instruction's offset; a host call or
/// an interpreted language's frame has none.
pub fn instruction(profile: &Profile, frame: &Frame) -> Option<Instruction> {
    let mapping = frame.mapping?;
    (profile.mappings[mapping].start == 0 && frame.address != 0).then_some((mapping, frame.address))
}

/// Counts sample type `index` of `profile`, each instruction given to its function by
/// `function_of` (`None`: a module left out).
pub fn count(
    profile: &Profile,
    index: usize,
    function_of: impl Fn(Instruction) -> Option<u32>,
) -> Counts {
    let mut counts = Counts::default();
    let mut seen_instructions = FxHashSet::default();
    let mut seen_functions = FxHashSet::default();
    for sample in &profile.samples {
        let value = sample.values[index];
        if value == 0 {
            continue;
        }
        counts.total += value.abs();
        seen_instructions.clear();
        seen_functions.clear();
        for (depth, &frame) in profile.stacks[sample.stack].iter().enumerate() {
            let Some(at) = instruction(profile, &profile.frames[frame]) else {
                continue;
            };
            let Some(function) = function_of(at) else {
                continue;
            };
            let function = (at.0, function);
            let leaf = depth == 0;
            let i = counts.instructions.entry(at).or_default();
            if leaf {
                i.flat += value;
            }
            if seen_instructions.insert(at) {
                i.cum += value;
            }
            let f = counts.functions.entry(function).or_default();
            if leaf {
                f.flat += value;
            }
            if seen_functions.insert(function) {
                f.cum += value;
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Labels, Mapping, ProfileBuilder, ProfileHeader, Sample, ValueType};

    #[test]
    fn recursion_counts_once_and_only_the_leaf_is_flat() {
        let mut builder = ProfileBuilder::default();
        let m = builder.add_mapping(Mapping {
            file_name: "a.wasm".into(),
            build_id: "ab".into(),
            size: 100,
            start: 0,
        });
        let mut frame = |address| {
            builder.frame(&Frame {
                mapping: Some(m),
                address,
                lines: Vec::new(),
            })
        };
        let (leaf, call, other) = (frame(40), frame(30), frame(60));
        // 40 in the function at 30..50, called recursively from 30; then 60 in another.
        let deep = builder.stack(&[leaf, call, call]);
        let shallow = builder.stack(&[other, call]);
        let samples = [(deep, 3), (shallow, 2)].map(|(stack, value)| Sample {
            stack,
            labels: Labels::from([]),
            thread: None,
            time_ns: 0,
            values: vec![value],
        });
        let header = ProfileHeader {
            sample_types: vec![ValueType::new("samples", "count")],
            ..ProfileHeader::default()
        };
        let profile = builder.build(header, samples.to_vec());
        let counts = count(&profile, 0, |(_, at)| Some(if at < 50 { 1 } else { 2 }));
        assert_eq!(counts.total, 5);
        assert_eq!(counts.instructions[&(m, 40)], Value { flat: 3, cum: 3 });
        assert_eq!(counts.instructions[&(m, 30)], Value { flat: 0, cum: 5 });
        assert_eq!(counts.functions[&(m, 1)], Value { flat: 3, cum: 5 });
        assert_eq!(counts.functions[&(m, 2)], Value { flat: 2, cum: 2 });
    }
}
