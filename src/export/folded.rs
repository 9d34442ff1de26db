//! Folded stacks, as `stackcollapse` scripts write them for flame graphs: one line per
//! distinct stack, `root;…;leaf value`, for one sample type. Inlined functions are frames of
//! their own. A `;` inside a name (Rust's `[u8; 4]`) would split it: it is written `,`.

use std::collections::BTreeMap;
use std::io::Write;

use super::{ReadError, WriteError};
use crate::profile::{
    FrameId, Function, Profile, ProfileBuilder, ProfileHeader, Sample, StackId, Table, ValueType,
};

/// Each distinct stack's `root;…;leaf` and its total of sample type `index`, zero totals left
/// out, sorted.
pub fn stacks(profile: &Profile, index: usize) -> BTreeMap<String, i64> {
    let mut by_stack: Table<StackId, i64> = profile.stacks.iter().map(|_| 0).collect();
    for sample in &profile.samples {
        by_stack[sample.stack] += sample.values[index];
    }
    let mut folded = BTreeMap::new();
    for (stack, &total) in by_stack.iter_ids() {
        if total == 0 {
            continue;
        }
        let names: Vec<String> = profile.stacks[stack]
            .iter()
            .rev()
            .flat_map(|&f| profile.frames[f].lines.iter().rev())
            .map(|l| profile.functions[l.function].name.replace(';', ","))
            .collect();
        *folded.entry(names.join(";")).or_insert(0) += total;
    }
    folded
}

/// Writes the profile's default sample type as folded stacks.
pub fn write(profile: &Profile, out: &mut dyn Write) -> Result<(), WriteError> {
    for (stack, value) in stacks(profile, profile.default_sample_type) {
        writeln!(out, "{stack} {value}")?;
    }
    Ok(())
}

/// Reads folded stacks: a profile of one sample type, `value/count`, each frame a function
/// known by its name alone. The format names no unit, and its values are whatever the writer
/// summed: sample counts from `stackcollapse` scripts, but from [`write()`] the profile's
/// default type (CPU nanoseconds, instructions, bytes). Any name the reader gave them could be
/// wrong, so they are only numbers.
pub fn read(text: &str) -> Result<Profile, ReadError> {
    let mut builder = ProfileBuilder::default();
    let mut samples = Vec::new();
    let lines = text.lines().count();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() {
            continue;
        }
        let Some((stack, value)) = line
            .rsplit_once(' ')
            .and_then(|(stack, value)| Some((stack, value.parse::<i64>().ok()?)))
        else {
            if n + 1 == lines && n > 0 && !text.ends_with('\n') {
                return Err(ReadError::EndsEarly {
                    part: "its last line",
                });
            }
            return Err(ReadError::Foreign {
                detail: Some(format!("line {} is not `frame;…;frame count`", n + 1)),
            });
        };
        let frames: Vec<FrameId> = stack
            .split(';')
            .rev()
            .map(|name| {
                let function = Function {
                    name: name.to_string(),
                    system_name: name.to_string(),
                    file: String::new(),
                    start_line: 0,
                };
                builder.function_frame(&function, None, 0)
            })
            .collect();
        samples.push(Sample {
            stack: builder.stack(&frames),
            labels: Default::default(),
            thread: None,
            time_ns: 0,
            values: vec![value],
        });
    }
    if samples.is_empty() {
        return Err(ReadError::Empty);
    }
    let header = ProfileHeader {
        sample_types: vec![ValueType::new("value", "count")],
        period_type: ValueType::new("value", "count"),
        period: 1,
        ..ProfileHeader::default()
    };
    Ok(builder.build(header, samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_root_first_and_merged() {
        let text = "main;work;[u8, 4] 3\nmain;idle 1\nmain;work;[u8, 4] 2\n";
        let profile = read(text).unwrap();
        let mut out = Vec::new();
        write(&profile, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "main;idle 1\nmain;work;[u8, 4] 5\n"
        );
        assert!(read("main;work three\n").is_err());
        assert!(read("\n").is_err());
    }
}
