//! pprof output: gzipped `profile.proto`, as `go tool pprof` reads it.
//!
//! Samples with the same stack are merged (their values added); model ids become pprof ids
//! by adding one, since pprof reserves id 0.

use std::collections::HashMap;
use std::io::{Read, Write};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use prost::Message;

use super::pprof_proto as proto;
use super::read_error::damaged;
use super::{ReadError, WriteError};
use crate::profile::{
    Frame, FrameId, Function, Id, Labels, Line, MachineCode, Mapping, Profile, ProfileBuilder,
    ProfileHeader, Sample, StackId, ValueType,
};

/// pprof's id of an item: its place in its table, from 1 (0 means none).
fn pprof_id(id: impl Id) -> u64 {
    id.index() as u64 + 1
}

#[derive(Default)]
struct StringTable {
    strings: Vec<String>,
    ids: HashMap<String, i64>,
}

impl StringTable {
    fn new() -> Self {
        let mut table = StringTable::default();
        table.id(""); // pprof requires string 0 to be empty
        table
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.ids.insert(s.to_string(), id);
        id
    }

    fn value_type(&mut self, vt: &ValueType) -> proto::ValueType {
        proto::ValueType {
            r#type: self.id(&vt.kind),
            unit: self.id(&vt.unit),
        }
    }
}

/// The profile as a pprof message.
pub fn to_proto(profile: &Profile) -> proto::Profile {
    let mut strings = StringTable::new();
    let mut out = proto::Profile {
        sample_type: profile
            .sample_types
            .iter()
            .map(|vt| strings.value_type(vt))
            .collect(),
        period_type: Some(strings.value_type(&profile.period_type)),
        period: profile.period,
        time_nanos: profile.start_unix_ns,
        duration_nanos: profile.duration_ns,
        ..Default::default()
    };
    if let Some(default) = profile.sample_types.get(profile.default_sample_type) {
        out.default_sample_type = strings.id(&default.kind);
    }
    out.comment = profile.comments.iter().map(|c| strings.id(c)).collect();
    out.mapping = profile
        .mappings
        .iter_ids()
        .map(|(i, m)| proto::Mapping {
            id: pprof_id(i),
            memory_start: m.start,
            memory_limit: m.start + m.size,
            filename: strings.id(&m.file_name),
            build_id: strings.id(&m.build_id),
            has_functions: true,
            has_filenames: profile.functions.iter().any(|f| !f.file.is_empty()),
            has_line_numbers: profile
                .frames
                .iter()
                .any(|f| f.lines.iter().any(|l| l.line != 0)),
            has_inline_frames: profile.frames.iter().any(|f| f.lines.len() > 1),
            ..Default::default()
        })
        .collect();
    out.function = profile
        .functions
        .iter_ids()
        .map(|(i, f)| proto::Function {
            id: pprof_id(i),
            name: strings.id(&f.name),
            system_name: strings.id(&f.system_name),
            filename: strings.id(&f.file),
            start_line: i64::from(f.start_line),
        })
        .collect();
    out.location = profile
        .frames
        .iter_ids()
        .map(|(i, f)| proto::Location {
            id: pprof_id(i),
            mapping_id: f.mapping.map_or(0, pprof_id),
            address: f.address,
            line: f
                .lines
                .iter()
                .map(|l| proto::Line {
                    function_id: pprof_id(l.function),
                    line: i64::from(l.line),
                    column: i64::from(l.column),
                })
                .collect(),
            is_folded: false,
        })
        .collect();
    let mut merged: HashMap<(StackId, &Labels), usize> = HashMap::new();
    for sample in &profile.samples {
        match merged.get(&(sample.stack, &sample.labels)) {
            Some(&i) => {
                let values: &mut Vec<i64> = &mut out.sample[i].value;
                for (total, v) in values.iter_mut().zip(&sample.values) {
                    *total = total.saturating_add(*v);
                }
            }
            None => {
                merged.insert((sample.stack, &sample.labels), out.sample.len());
                let label = sample
                    .labels
                    .iter()
                    .map(|(key, value)| proto::Label {
                        key: strings.id(key),
                        str: strings.id(value),
                        ..Default::default()
                    })
                    .collect();
                out.sample.push(proto::Sample {
                    location_id: profile.stacks[sample.stack]
                        .iter()
                        .map(|&f| pprof_id(f))
                        .collect(),
                    value: sample.values.clone(),
                    label,
                });
            }
        }
    }
    out.wasmspy_code = profile
        .code
        .iter()
        .map(|c| proto::MachineCode {
            mapping_id: pprof_id(c.mapping),
            func_index: c.func_index,
            arch: strings.id(&c.arch),
            bytes: c.bytes.clone(),
            instructions: c.instructions.iter().flat_map(|&(a, b)| [a, b]).collect(),
            sampled_offsets: c.sampled.iter().map(|(offset, _)| *offset).collect(),
            sampled_values: c
                .sampled
                .iter()
                .flat_map(|(_, v)| v.iter().copied())
                .collect(),
        })
        .collect();
    out.string_table = strings.strings;
    out
}

/// The profile as a gzipped pprof file's bytes.
pub fn encode(profile: &Profile) -> Result<Vec<u8>, WriteError> {
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&to_proto(profile).encode_to_vec())?;
    Ok(gz.finish()?)
}

/// Reads a pprof file's bytes, gzipped or not. Errors are phrases about the file (see
/// [`super::read`]).
pub fn decode(bytes: &[u8]) -> Result<proto::Profile, ReadError> {
    let gzipped = bytes.starts_with(&[0x1f, 0x8b]);
    let raw = if gzipped {
        let mut raw = Vec::new();
        if let Err(e) = GzDecoder::new(bytes).read_to_end(&mut raw) {
            match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    return Err(ReadError::EndsEarly {
                        part: "its gzip stream",
                    })
                }
                _ => {
                    return Err(ReadError::Unsupported(format!(
                        "is a damaged gzip file ({e})"
                    )))
                }
            }
        }
        raw
    } else {
        bytes.to_vec()
    };
    let profile = match proto::Profile::decode(raw.as_slice()) {
        Ok(profile) => profile,
        // pprof writers (Go's, ours) begin with the sample types, field 1.
        Err(e) if e.to_string().contains("buffer underflow") && raw.first() == Some(&0x0a) => {
            return Err(ReadError::EndsEarly {
                part: "its pprof message",
            });
        }
        Err(_) if gzipped => {
            return Err(ReadError::Unsupported(
                "is gzipped, but not a pprof profile".into(),
            ))
        }
        Err(_) => return Err(ReadError::Foreign { detail: None }),
    };
    // Every pprof string table starts with "": a message without one is something else that
    // happened to parse.
    if profile.string_table.first().map(String::as_str) != Some("") {
        return Err(ReadError::Foreign { detail: None });
    }
    Ok(profile)
}

/// A pprof file (ours, Go's, pprof-rs's…) as a profile model.
pub fn read(bytes: &[u8]) -> Result<Profile, ReadError> {
    from_proto(&decode(bytes)?)
}

/// The profile model of a pprof message. Locations without lines (unsymbolized addresses) get
/// a function named as pprof prints them: the address, and the mapping's file.
pub fn from_proto(p: &proto::Profile) -> Result<Profile, ReadError> {
    let str = |i: i64| -> Result<String, ReadError> {
        usize::try_from(i)
            .ok()
            .and_then(|i| p.string_table.get(i))
            .cloned()
            .ok_or_else(|| damaged!("string {i} is not in its string table"))
    };
    let value_type = |vt: &proto::ValueType| -> Result<ValueType, ReadError> {
        Ok(ValueType {
            kind: str(vt.r#type)?,
            unit: str(vt.unit)?,
        })
    };
    let sample_types = p
        .sample_type
        .iter()
        .map(value_type)
        .collect::<Result<Vec<_>, _>>()?;
    let default_kind = str(p.default_sample_type)?;
    let mut builder = ProfileBuilder::default();
    let mut mappings = HashMap::new();
    for m in &p.mapping {
        let id = builder.add_mapping(Mapping {
            file_name: str(m.filename)?,
            build_id: str(m.build_id)?,
            size: m.memory_limit.saturating_sub(m.memory_start),
            start: m.memory_start,
        });
        mappings.insert(m.id, (id, str(m.filename)?));
    }
    let mut functions = HashMap::new();
    for f in &p.function {
        let id = builder.function(&Function {
            name: str(f.name)?,
            system_name: str(f.system_name)?,
            file: str(f.filename)?,
            start_line: f.start_line.try_into().unwrap_or(0),
        });
        functions.insert(f.id, id);
    }
    let mut frames = HashMap::new();
    for l in &p.location {
        let mapping = mappings.get(&l.mapping_id);
        let mut lines = Vec::with_capacity(l.line.len().max(1));
        for line in &l.line {
            lines.push(Line {
                function: *functions.get(&line.function_id).ok_or_else(|| {
                    damaged!(
                        "a location names function {}, which it does not have",
                        line.function_id
                    )
                })?,
                line: line.line.try_into().unwrap_or(0),
                column: line.column.try_into().unwrap_or(0),
            });
        }
        if lines.is_empty() {
            let object = mapping.map_or(String::new(), |(_, file)| {
                format!(" [{}]", file.rsplit('/').next().unwrap_or(file))
            });
            let name = format!("{:016x}{object}", l.address);
            let function = builder.function(&Function {
                system_name: name.clone(),
                name,
                file: String::new(),
                start_line: 0,
            });
            lines.push(Line {
                function,
                line: 0,
                column: 0,
            });
        }
        let frame = builder.frame(&Frame {
            mapping: mapping.map(|&(id, _)| id),
            address: l.address,
            lines,
        });
        frames.insert(l.id, frame);
    }
    let mut samples = Vec::with_capacity(p.sample.len());
    for s in &p.sample {
        if s.value.len() != sample_types.len() {
            return Err(damaged!(
                "a sample has {} values for {} sample types",
                s.value.len(),
                sample_types.len()
            ));
        }
        let stack: Vec<FrameId> =
            s.location_id
                .iter()
                .map(|id| {
                    frames.get(id).copied().ok_or_else(|| {
                        damaged!("a sample names location {id}, which it does not have")
                    })
                })
                .collect::<Result<_, _>>()?;
        // String labels; numeric ones (pprof's `num`) are not kept.
        let labels: Vec<(String, String)> = s
            .label
            .iter()
            .filter(|l| l.str != 0)
            .map(|l| Ok((str(l.key)?, str(l.str)?)))
            .collect::<Result<_, ReadError>>()?;
        samples.push(Sample {
            stack: builder.stack(&stack),
            labels: labels.into(),
            thread: None,
            time_ns: 0,
            values: s.value.clone(),
        });
    }
    let header = ProfileHeader {
        // pprof's default when none is named: the last.
        default_sample_type: sample_types
            .iter()
            .position(|t| !default_kind.is_empty() && t.kind == default_kind)
            .unwrap_or(sample_types.len().saturating_sub(1)),
        sample_types,
        period_type: p
            .period_type
            .as_ref()
            .map(value_type)
            .transpose()?
            .unwrap_or_default(),
        period: p.period,
        start_unix_ns: p.time_nanos,
        duration_ns: p.duration_nanos,
        comments: p
            .comment
            .iter()
            .map(|&c| str(c))
            .collect::<Result<_, _>>()?,
    };
    let mut profile = builder.build(header, samples);
    let types = profile.sample_types.len();
    for c in &p.wasmspy_code {
        if c.sampled_values.len() != c.sampled_offsets.len() * types {
            return Err(damaged!(
                "machine code has {} values for {} instructions of {types} sample types",
                c.sampled_values.len(),
                c.sampled_offsets.len()
            ));
        }
        let (mapping, _) = mappings.get(&c.mapping_id).ok_or_else(|| {
            damaged!(
                "machine code names mapping {}, which it does not have",
                c.mapping_id
            )
        })?;
        profile.code.push(MachineCode {
            mapping: *mapping,
            func_index: c.func_index,
            arch: str(c.arch)?,
            bytes: c.bytes.clone(),
            instructions: c
                .instructions
                .chunks_exact(2)
                .map(|p| (p[0], p[1]))
                .collect(),
            sampled: c
                .sampled_offsets
                .iter()
                .zip(c.sampled_values.chunks_exact(types.max(1)))
                .map(|(&offset, values)| (offset, values.to_vec()))
                .collect(),
        });
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, Function, Line, Mapping, ProfileBuilder, ProfileHeader};

    #[test]
    fn round_trip_merges_equal_stacks() {
        let mut b = ProfileBuilder::default();
        let m = b.add_mapping(Mapping {
            file_name: "app.wasm".into(),
            build_id: "abcd".into(),
            size: 100,
            start: 0,
        });
        let frame = |b: &mut ProfileBuilder, name: &str, addr| {
            let function = b.function(&Function {
                name: name.into(),
                system_name: format!("_{name}"),
                file: String::new(),
                start_line: 0,
            });
            b.frame(&Frame {
                mapping: Some(m),
                address: addr,
                lines: vec![Line {
                    function,
                    line: 0,
                    column: 0,
                }],
            })
        };
        let leaf = frame(&mut b, "leaf", 40);
        let root = frame(&mut b, "root", 10);
        let s1 = b.stack(&[leaf, root]);
        let s2 = b.stack(&[root]);
        let sample = |stack, time_ns, cpu| Sample {
            stack,
            labels: Default::default(),
            thread: None,
            time_ns,
            values: vec![1, cpu],
        };
        let samples = vec![sample(s1, 0, 100), sample(s2, 1, 50), sample(s1, 2, 70)];
        let header = ProfileHeader {
            sample_types: vec![
                ValueType::new("samples", "count"),
                ValueType::new("cpu", "nanoseconds"),
            ],
            default_sample_type: 1,
            period_type: ValueType::new("cpu", "nanoseconds"),
            period: 1_000_000,
            start_unix_ns: 5,
            duration_ns: 9,
            comments: vec!["hello".into()],
        };
        let mut profile = b.build(header, samples);
        profile.code.push(MachineCode {
            mapping: m,
            func_index: 3,
            arch: "x86_64".into(),
            bytes: vec![0x55, 0xc3],
            instructions: vec![(0, 38), (1, 40)],
            sampled: vec![(1, vec![2, 170])],
        });

        let encoded = encode(&profile).unwrap();
        // The machine code comes back as it was written.
        assert_eq!(read(&encoded).unwrap().code, profile.code);
        let p = decode(&encoded).unwrap();
        let s = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(s(0), "");
        assert_eq!(p.sample.len(), 2);
        assert_eq!(p.sample[0].value, vec![2, 170]);
        assert_eq!(p.sample[1].value, vec![1, 50]);
        let leaf_loc = &p.location[(p.sample[0].location_id[0] - 1) as usize];
        assert_eq!(leaf_loc.address, 40);
        assert_eq!(leaf_loc.mapping_id, 1);
        let f = &p.function[(leaf_loc.line[0].function_id - 1) as usize];
        assert_eq!((s(f.name), s(f.system_name)), ("leaf", "_leaf"));
        assert_eq!(s(p.default_sample_type), "cpu");
        assert_eq!(s(p.period_type.as_ref().unwrap().r#type), "cpu");
        assert_eq!(
            (p.period, p.time_nanos, p.duration_nanos),
            (1_000_000, 5, 9)
        );
        assert_eq!(s(p.mapping[0].filename), "app.wasm");
        assert_eq!(s(p.mapping[0].build_id), "abcd");
        assert!(p.mapping[0].has_functions);
        assert_eq!(s(p.comment[0]), "hello");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(decode(&[0x1f, 0x8b, 1, 2, 3]).is_err());
    }
}
