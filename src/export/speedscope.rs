//! speedscope's file format (`file-format-spec.ts` in speedscope's sources): frames shared by
//! all profiles, and one "sampled" profile per sample type, each a list of root-first stacks
//! of frame indices with their weights, in the order the samples were taken (speedscope's
//! "Time Order" view). A frame is a function (name, file, first line); inlined functions are
//! frames of their own.

use std::collections::HashMap;
use std::io::Write;

use serde::{Deserialize, Serialize};

use super::read_error::damaged;
use super::{ReadError, WriteError};
use crate::profile::{
    FrameId, Function, FunctionId, Profile, ProfileBuilder, ProfileHeader, Sample, ValueType,
};

const SCHEMA: &str = "https://www.speedscope.app/file-format-schema.json";

#[derive(Serialize, Deserialize)]
struct File {
    #[serde(rename = "$schema")]
    schema: String,
    shared: Shared,
    profiles: Vec<SampledProfile>,
    #[serde(default)]
    name: String,
    #[serde(rename = "activeProfileIndex", default)]
    active_profile_index: usize,
    #[serde(default)]
    exporter: String,
}

#[derive(Serialize, Deserialize)]
struct Shared {
    frames: Vec<SpeedscopeFrame>,
}

#[derive(Serialize, Deserialize)]
struct SpeedscopeFrame {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    line: Option<u32>,
}

#[derive(Serialize, Deserialize)]
struct SampledProfile {
    #[serde(rename = "type")]
    kind: String,
    name: String,
    unit: String,
    #[serde(rename = "startValue")]
    start_value: i64,
    #[serde(rename = "endValue")]
    end_value: i64,
    #[serde(default)]
    samples: Vec<Vec<usize>>,
    #[serde(default)]
    weights: Vec<i64>,
}

/// speedscope's units; any other (`count`) is `none`.
fn unit(unit: &str) -> &str {
    match unit {
        "nanoseconds" | "microseconds" | "milliseconds" | "seconds" | "bytes" => unit,
        _ => "none",
    }
}

/// Writes the profile as a speedscope file: a sampled profile per sample type, the default
/// one active.
pub fn write(profile: &Profile, out: &mut dyn Write) -> Result<(), WriteError> {
    let mut frames = Vec::new();
    let mut frame_of: HashMap<FunctionId, usize> = HashMap::new();
    let stacks: Vec<Vec<usize>> = profile
        .samples
        .iter()
        .map(|sample| {
            profile.stacks[sample.stack]
                .iter()
                .rev()
                .flat_map(|&f| profile.frames[f].lines.iter().rev())
                .map(|line| {
                    *frame_of.entry(line.function).or_insert_with(|| {
                        let f = &profile.functions[line.function];
                        frames.push(SpeedscopeFrame {
                            name: f.name.clone(),
                            file: (!f.file.is_empty()).then(|| f.file.clone()),
                            line: (f.start_line != 0).then_some(f.start_line),
                        });
                        frames.len() - 1
                    })
                })
                .collect()
        })
        .collect();
    let profiles = profile
        .sample_types
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            let weights: Vec<i64> = profile.samples.iter().map(|s| s.values[i]).collect();
            SampledProfile {
                kind: "sampled".into(),
                name: kind.kind.clone(),
                unit: unit(&kind.unit).into(),
                start_value: 0,
                end_value: weights.iter().sum(),
                samples: stacks.clone(),
                weights,
            }
        })
        .collect();
    let file = File {
        schema: SCHEMA.into(),
        shared: Shared { frames },
        profiles,
        name: profile
            .mappings
            .first()
            .map_or_else(|| "wasmspy".into(), |m| m.file_name.clone()),
        active_profile_index: profile.default_sample_type,
        exporter: format!("wasmspy {}", env!("CARGO_PKG_VERSION")),
    };
    serde_json::to_writer(out, &file).map_err(|e| WriteError::Io(e.into()))
}

/// Reads a speedscope file of sampled profiles with the same stacks (as this module and
/// py-spy write them): one sample type per profile.
pub fn read(bytes: &[u8]) -> Result<Profile, ReadError> {
    let file: File = match serde_json::from_slice(bytes) {
        Ok(file) => file,
        Err(e) if e.is_eof() => return Err(ReadError::EndsEarly { part: "its JSON" }),
        Err(e) => {
            return Err(ReadError::Unsupported(format!(
                "is not a speedscope profile wasmspy can read ({e})"
            )))
        }
    };
    let Some(first) = file.profiles.first() else {
        return Err(ReadError::Unsupported(
            "is a speedscope file without profiles".into(),
        ));
    };
    for p in &file.profiles {
        if p.kind != "sampled" || p.samples != first.samples || p.weights.len() != p.samples.len() {
            return Err(ReadError::Unsupported("holds speedscope profiles wasmspy cannot read: only sampled profiles over the same samples".into()));
        }
    }
    let mut builder = ProfileBuilder::default();
    let mut frame_ids = Vec::with_capacity(file.shared.frames.len());
    for f in &file.shared.frames {
        let function = Function {
            name: f.name.clone(),
            system_name: f.name.clone(),
            file: f.file.clone().unwrap_or_default(),
            start_line: f.line.unwrap_or(0),
        };
        frame_ids.push(builder.function_frame(&function, None, 0));
    }
    let mut samples = Vec::with_capacity(first.samples.len());
    for (i, stack) in first.samples.iter().enumerate() {
        let frames: Vec<FrameId> = stack
            .iter()
            .rev()
            .map(|&f| {
                frame_ids
                    .get(f)
                    .copied()
                    .ok_or_else(|| damaged!("a sample names frame {f}, which it does not have"))
            })
            .collect::<Result<_, _>>()?;
        samples.push(Sample {
            stack: builder.stack(&frames),
            labels: Default::default(),
            thread: None,
            time_ns: 0,
            values: file.profiles.iter().map(|p| p.weights[i]).collect(),
        });
    }
    let sample_types: Vec<ValueType> = file
        .profiles
        .iter()
        .map(|p| ValueType::new(&p.name, if p.unit == "none" { "count" } else { &p.unit }))
        .collect();
    let header = ProfileHeader {
        default_sample_type: file.active_profile_index.min(sample_types.len() - 1),
        period_type: sample_types[0].clone(),
        sample_types,
        period: 1,
        ..ProfileHeader::default()
    };
    Ok(builder.build(header, samples))
}
