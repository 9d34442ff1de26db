//! The Firefox Profiler's processed format, through `fxprof-processed-profile`: the module as
//! a library with its symbols, one thread of samples with their CPU time, categories telling
//! the guest's code, host calls and Wasmtime apart, and each run of samples in one host call
//! as an interval marker named by the import.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use fxprof_processed_profile::debugid::DebugId;
use fxprof_processed_profile::{
    CategoryColor, CategoryHandle, CpuDelta, Frame as FxFrame, FrameFlags, FrameInfo, LibraryInfo,
    MarkerFieldFlags, MarkerFieldFormat, MarkerTiming, Profile as FxProfile, ReferenceTimestamp,
    SamplingInterval, StaticSchemaMarker, StaticSchemaMarkerField, StringHandle, Symbol,
    SymbolTable, ThreadHandle, Timestamp, WeightType,
};

use super::WriteError;
use crate::profile::{FrameId, FrameKind, MappingId, Profile, ThreadId};

/// A stretch of samples spent in one host call.
struct HostCallMarker {
    name: StringHandle,
    category: CategoryHandle,
}

impl StaticSchemaMarker for HostCallMarker {
    const UNIQUE_MARKER_TYPE_NAME: &'static str = "HostCall";
    const CHART_LABEL: Option<&'static str> = Some("{marker.name}");
    const TABLE_LABEL: Option<&'static str> = Some("host call {marker.name}");
    const FIELDS: &'static [StaticSchemaMarkerField] = &[StaticSchemaMarkerField {
        key: "import",
        label: "Import",
        format: MarkerFieldFormat::String,
        flags: MarkerFieldFlags::SEARCHABLE,
    }];

    fn name(&self, _: &mut FxProfile) -> StringHandle {
        self.name
    }

    fn category(&self, _: &mut FxProfile) -> CategoryHandle {
        self.category
    }

    fn string_field_value(&self, _: u32) -> StringHandle {
        self.name
    }

    fn number_field_value(&self, _: u32) -> f64 {
        0.0
    }
}

/// Writes the profile as the Firefox Profiler's processed JSON: a track per thread sampled,
/// each sample weighted by its count (in a profile of no `samples`, by its default value) and
/// carrying its CPU time.
pub fn write(profile: &Profile, out: &mut dyn Write) -> Result<(), WriteError> {
    let name = profile
        .mappings
        .first()
        .map_or_else(|| "wasmspy".to_string(), |m| m.file_name.clone());
    let index = |kind: &str, unit: &str| {
        profile
            .sample_types
            .iter()
            .position(|t| t.kind == kind && t.unit == unit)
    };
    let (samples, cpu) = (index("samples", "count"), index("cpu", "nanoseconds"));
    let interval_ns = match profile.period_type.unit.as_str() {
        "nanoseconds" if profile.period > 0 => profile.period as u64,
        _ => 1_000_000,
    };
    let mut fx = FxProfile::new(
        &name,
        ReferenceTimestamp::from_millis_since_unix_epoch(profile.start_unix_ns as f64 / 1e6),
        SamplingInterval::from_nanos(interval_ns),
    );
    fx.set_symbolicated(true);
    let categories = [
        fx.add_category("Wasm", CategoryColor::Blue),
        fx.add_category("Host call", CategoryColor::Orange),
        fx.add_category("Wasmtime", CategoryColor::Gray),
    ];
    let category = |kind: FrameKind| match kind {
        FrameKind::Guest => categories[0],
        FrameKind::HostCall => categories[1],
        FrameKind::Runtime => categories[2],
    };
    let start = Timestamp::from_nanos_since_reference(0);
    let process = fx.add_process(&name, 0, start);
    // Sample types that are not CPU samples (heap profiles, or a single-valued profile read
    // from elsewhere) weigh each sample by the default one.
    let weight_index = samples.unwrap_or(profile.default_sample_type);
    let bytes = samples.is_none() && profile.sample_types[weight_index].unit == "bytes";
    // A track per thread the samples were taken on, in the order of their first sample; the
    // first one is the main thread. Samples of no known thread go to the first track.
    let mut threads: BTreeMap<Option<ThreadId>, Track> = BTreeMap::new();
    let several = profile
        .samples
        .iter()
        .any(|s| s.thread != profile.samples[0].thread);
    for sample in &profile.samples {
        if threads.contains_key(&sample.thread) {
            continue;
        }
        let tid = sample.thread.map_or(0, |t| t.0);
        let handle = fx.add_thread(process, tid, start, threads.is_empty());
        match sample.thread {
            Some(t) if several => fx.set_thread_name(handle, &format!("guest thread {}", t.0)),
            _ => fx.set_thread_name(handle, "guest"),
        }
        if bytes {
            fx.set_thread_samples_weight_type(handle, WeightType::Bytes);
        }
        threads.insert(
            sample.thread,
            Track {
                handle,
                host_call: None,
            },
        );
    }

    // Each module a library whose symbols are its functions at the addresses sampled.
    let mut symbols: BTreeMap<MappingId, BTreeMap<u32, String>> = BTreeMap::new();
    for (id, frame) in profile.frames.iter_ids() {
        if let (Some(m), FrameKind::Guest) = (frame.mapping, profile.frame_kind(id)) {
            let outermost = frame
                .lines
                .last()
                .map_or("", |l| profile.functions[l.function].name.as_str());
            symbols
                .entry(m)
                .or_default()
                .insert(frame.address as u32, outermost.to_string());
        }
    }
    let libs: BTreeMap<MappingId, _> = symbols
        .into_iter()
        .map(|(m, symbols)| {
            let mapping = &profile.mappings[m];
            let table = SymbolTable::new(
                symbols
                    .into_iter()
                    .map(|(address, name)| Symbol {
                        address,
                        size: Some(1),
                        name,
                    })
                    .collect(),
            );
            let lib = fx.add_lib(LibraryInfo {
                name: mapping.file_name.clone(),
                debug_name: mapping.file_name.clone(),
                path: mapping.file_name.clone(),
                debug_path: mapping.file_name.clone(),
                debug_id: debug_id(&mapping.build_id),
                code_id: Some(mapping.build_id.clone()),
                arch: Some("wasm32".into()),
                symbol_table: Some(Arc::new(table)),
            });
            (m, lib)
        })
        .collect();

    // Root-first frames of a stack: a module's code by its address in the library, with the
    // functions inlined there as labels above it.
    let frames_of = |fx: &mut FxProfile, frame: FrameId| -> Vec<FrameInfo> {
        let f = &profile.frames[frame];
        let kind = profile.frame_kind(frame);
        let category_pair = category(kind).into();
        let flags = FrameFlags::empty();
        let mut out = Vec::with_capacity(f.lines.len());
        for (depth, line) in f.lines.iter().rev().enumerate() {
            let lib = f.mapping.and_then(|m| libs.get(&m));
            let frame = match lib {
                Some(&lib) if depth == 0 && kind == FrameKind::Guest => {
                    FxFrame::RelativeAddressFromInstructionPointer(lib, f.address as u32)
                }
                _ => FxFrame::Label(fx.intern_string(&profile.functions[line.function].name)),
            };
            out.push(FrameInfo {
                frame,
                category_pair,
                flags,
            });
        }
        out
    };
    let untimed = profile.samples.iter().all(|s| s.time_ns == 0);
    let add_marker = |fx: &mut FxProfile, thread, (frame, from, to): (FrameId, u64, u64)| {
        let name = fx.intern_string(profile.frame_name(frame));
        fx.add_marker(
            thread,
            MarkerTiming::Interval(
                Timestamp::from_nanos_since_reference(from),
                Timestamp::from_nanos_since_reference(to),
            ),
            HostCallMarker {
                name,
                category: categories[1],
            },
        );
    };
    for (i, sample) in profile.samples.iter().enumerate() {
        let time = if untimed {
            i as u64 * interval_ns
        } else {
            sample.time_ns
        };
        let stack = &profile.stacks[sample.stack];
        let track = threads.get_mut(&sample.thread).expect("a track per thread");
        let thread = track.handle;
        let mut frames = Vec::new();
        for &frame in stack.iter().rev() {
            frames.extend(frames_of(&mut fx, frame));
        }
        let stack_handle = fx.intern_stack_frames(thread, frames.into_iter());
        let cpu_delta = cpu.map_or(CpuDelta::ZERO, |c| {
            CpuDelta::from_nanos(sample.values[c].max(0) as u64)
        });
        let weight = sample.values[weight_index].clamp(0, i64::from(i32::MAX)) as i32;
        fx.add_sample(
            thread,
            Timestamp::from_nanos_since_reference(time),
            stack_handle,
            cpu_delta,
            weight,
        );
        // Consecutive samples in the same host call make one marker; the host's own frames
        // in it above its frame.
        let leaf = stack
            .iter()
            .copied()
            .find(|&f| !profile.is_host_frame(f))
            .filter(|&f| profile.frame_kind(f) == FrameKind::HostCall && !untimed);
        match (track.host_call, leaf) {
            (Some((frame, from, _)), Some(l)) if frame == l => {
                track.host_call = Some((frame, from, time + interval_ns))
            }
            (current, leaf) => {
                if let Some(done) = current {
                    add_marker(&mut fx, thread, done);
                }
                track.host_call = leaf.map(|l| (l, time, time + interval_ns));
            }
        }
    }
    for track in threads.values() {
        if let Some(done) = track.host_call {
            add_marker(&mut fx, track.handle, done);
        }
    }
    serde_json::to_writer(out, &fx).map_err(|e| WriteError::Io(e.into()))
}

/// A thread's track, and the host call its last samples were in (frame, from, to), drawn as
/// one marker once it ends.
struct Track {
    handle: ThreadHandle,
    host_call: Option<(FrameId, u64, u64)>,
}

/// A debug id from the module's hash (its first 16 bytes), as symbol servers key libraries.
fn debug_id(build_id: &str) -> DebugId {
    let bytes: Vec<u8> = (0..build_id.len().min(32))
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(build_id.get(i..i + 2)?, 16).ok())
        .collect();
    DebugId::from_guid_age(&bytes, 0).unwrap_or_default()
}
