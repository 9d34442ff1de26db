//! The record stage: aggregates resolved samples (frames of registered modules, from
//! [`crate::resolve`]) into the [`profile`](crate::profile) model, in memory that grows with
//! the distinct stacks, not with time: totals by stack, the [`timeline`] within a budget, the
//! [`heap`] profile. Frames are interned; each distinct address is symbolized once, when a
//! profile is built.

pub mod heap;
mod host_frames;
pub mod label_registry;
pub mod labels;
mod machine_code;
pub mod packed_labels;
pub mod timeline;

use std::time::{SystemTime, UNIX_EPOCH};

use rustc_hash::FxHashMap;

use crate::capture::{SampleValues, StoreKey, Taken};
use crate::clock::{monotonic_ns, sampling_period, Clock};
use crate::profile::{
    Frame, FrameId, Function, FunctionId, Labels, Line, MachineCode, MappingId, Profile,
    ProfileBuilder, ProfileHeader, Sample, StackId, Table, ThreadId, ValueType, ALLOC_SPACE, CPU,
    HOST_ROOT_FRAME, INUSE_SPACE, RUNTIME_FRAME, UNKNOWN_HOST_CALL_FRAME, WALL,
};
use crate::resolve::symbolize::FunctionName;
use crate::resolve::Resolver;
use crate::shared::{ModuleId, RawFrame};
use heap::{Block, Heap};
use host_frames::HostFrames;
use labels::{LabelSets, LabelsId};
use machine_code::CodeTallies;
use timeline::{Tally, Timeline};

/// An interpreted frame of a runtime that names none.
const INTERPRETED_UNKNOWN: &str = "<interpreted>";

/// A heap profile's comment when garbage-collected allocations (Go's, TinyGo's) are in it.
pub const COLLECTED_NOTE: &str = "garbage-collected blocks (Go, TinyGo) are freed without a call: \
     they count in alloc_objects/alloc_space, not in the in-use values";

/// How many samples landed where; `lost` ones (samples, or sampled allocations) never
/// reached the recorder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KindCounts {
    /// Samples in the guest's code: its Wasm, or the interpreted code of a runtime in it.
    pub guest: u64,
    /// Samples in a host function the guest called (or reached another way).
    pub host_call: u64,
    /// Samples in Wasmtime's own code, or with no frame.
    pub runtime: u64,
    /// Samples, or sampled allocations, dropped before the recorder (a full buffer).
    pub lost: u64,
}

/// A frame in a registered module's code, symbolized when a profile is built.
struct WasmFrame {
    id: FrameId,
    module: ModuleId,
    func_index: u32,
    offset: u32,
}

crate::profile::ids! {
    /// A stack with its labels and thread: what totals and the timeline are kept by.
    KeyId;
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    stack: StackId,
    labels: LabelsId,
    thread: Option<ThreadId>,
}

pub struct Recorder {
    builder: ProfileBuilder,
    label_sets: LabelSets,
    /// Labeled stacks, by key id.
    keys: Table<KeyId, Key>,
    key_ids: FxHashMap<Key, KeyId>,
    /// The mapping of each registered module, in the resolver's order.
    mappings: Table<ModuleId, MappingId>,
    frame_ids: FxHashMap<RawFrame, FrameId>,
    wasm_frames: Vec<WasmFrame>,
    host_frames: HostFrames,
    stack: Vec<FrameId>,
    /// What the samples of each labeled stack add up to, by key id: memory grows with the
    /// distinct labeled stacks, not with time.
    totals: Table<KeyId, Tally>,
    /// What the samples taken at each machine instruction add up to.
    code: CodeTallies,
    /// The samples in time order, within a budget, when a format that shows time is wanted.
    timeline: Option<Timeline>,
    counts: KindCounts,
    /// Sampled allocations by stack, and which to sample, when memory is profiled.
    /// By labeled stack (the thread left out).
    heap: Option<Heap<KeyId>>,
    rate_hz: u32,
    clock: Clock,
    /// On the instructions clock, the mean interval between samples.
    instruction_interval: u64,
    sampler: &'static str,
    started_ns: u64,
    started_unix_ns: i64,
    stopped_ns: Option<u64>,
}

impl Recorder {
    pub fn new(rate_hz: u32, clock: Clock, sampler: &'static str) -> Self {
        Recorder {
            builder: ProfileBuilder::default(),
            label_sets: LabelSets::default(),
            keys: Table::default(),
            key_ids: FxHashMap::default(),
            mappings: Table::default(),
            frame_ids: FxHashMap::default(),
            wasm_frames: Vec::new(),
            host_frames: HostFrames::default(),
            stack: Vec::new(),
            totals: Table::default(),
            code: CodeTallies::default(),
            timeline: None,
            counts: KindCounts::default(),
            heap: None,
            rate_hz,
            clock,
            instruction_interval: 0,
            sampler,
            started_ns: monotonic_ns(),
            started_unix_ns: unix_now_ns(),
            stopped_ns: None,
        }
    }

    /// Adds a sample of `frames` (leaf first), with `labels`, taken as `taken` says; `code`:
    /// the offset of the machine instruction it was taken at in its leaf function's code,
    /// where known.
    pub fn add_sample(
        &mut self,
        resolver: &Resolver,
        frames: &[RawFrame],
        labels: Option<&Labels>,
        taken: &Taken,
        code: Option<u32>,
        values: SampleValues,
    ) {
        let (thread, time_ns) = (Some(taken.thread), taken.time_ns);
        if let (
            Some(offset),
            Some(&RawFrame::Wasm {
                module: Some(module),
                func_index,
                ..
            }),
        ) = (code, frames.first())
        {
            self.code
                .add((module, func_index, offset), Tally::one(values));
        }
        let labels = labels.map_or(LabelsId::NONE, |l| self.label_sets.intern(l));
        // The host's frames count as what they were called from.
        match frames.iter().find(|f| !matches!(f, RawFrame::Host { .. })) {
            Some(RawFrame::Wasm { .. } | RawFrame::Interpreted { .. }) => self.counts.guest += 1,
            Some(RawFrame::Runtime | RawFrame::HostRoot) | None => self.counts.runtime += 1,
            Some(_) => self.counts.host_call += 1,
        }
        let stack = self.stack_of(resolver, frames);
        let key = Key {
            stack,
            labels,
            thread,
        };
        self.record(key, values, time_ns);
    }

    /// Makes a mapping of each module registered since the last call, in the resolver's order.
    fn add_mappings(&mut self, resolver: &Resolver) {
        for module in resolver.modules().skip(self.mappings.len()) {
            let mapping = self.builder.add_mapping(resolver.mapping(module));
            self.mappings.push(mapping);
        }
    }

    pub fn add_lost(&mut self, lost: u64) {
        self.counts.lost += lost;
    }

    pub fn counts(&self) -> KindCounts {
        self.counts
    }

    fn values(&self, t: Tally) -> Vec<i64> {
        let clamp = |n: u64| n.min(i64::MAX as u64) as i64;
        let mut values = vec![clamp(t.samples), clamp(t.measured)];
        if self.clock == Clock::Wall {
            values.push(clamp(t.wall_ns));
        }
        values
    }

    /// The stack of `frames` (leaf first).
    fn stack_of(&mut self, resolver: &Resolver, frames: &[RawFrame]) -> StackId {
        self.add_mappings(resolver);
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        stack.extend(frames.iter().map(|raw| self.frame_id(resolver, raw)));
        let stack_id = self.builder.stack(&stack);
        self.stack = stack;
        stack_id
    }

    fn key_id(&mut self, key: Key) -> KeyId {
        *self.key_ids.entry(key).or_insert_with(|| {
            self.totals.push(Tally::default());
            self.keys.push(key)
        })
    }

    fn record(&mut self, key: Key, values: SampleValues, time_ns: u64) {
        let time_ns = time_ns.saturating_sub(self.started_ns);
        let key = self.key_id(key);
        let tally = Tally::one(values);
        self.totals[key].add(tally);
        if let Some(timeline) = &mut self.timeline {
            timeline.push(key, time_ns, tally);
        }
    }

    /// A sample of labeled stack `key`.
    fn sample(&self, key: KeyId, time_ns: u64, tally: Tally) -> Sample {
        let key = self.keys[key];
        Sample {
            stack: key.stack,
            labels: self.label_sets.get(key.labels).clone(),
            thread: key.thread,
            time_ns,
            values: self.values(tally),
        }
    }

    fn frame_id(&mut self, resolver: &Resolver, raw: &RawFrame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(raw) {
            return id;
        }
        let registered =
            |module: Option<ModuleId>| module.and_then(|m| Some((m, *self.mappings.get(m)?)));
        let id = match *raw {
            RawFrame::Wasm {
                module,
                func_index,
                offset,
            } => match registered(module) {
                // Source lines are filled in when a profile is built: only the addresses that
                // samples show are ever symbolized, and the run does not wait for DWARF.
                Some((module, mapping)) => {
                    let id = self.builder.frame(&Frame {
                        mapping: Some(mapping),
                        address: u64::from(offset),
                        lines: Vec::new(),
                    });
                    self.wasm_frames.push(WasmFrame {
                        id,
                        module,
                        func_index,
                        offset,
                    });
                    id
                }
                None => self.named_frame(
                    None,
                    u64::from(offset),
                    plain_name(&format!("wasm-function[{func_index}]")),
                ),
            },
            RawFrame::HostCall { module, func_index } => match registered(module) {
                Some((module, mapping)) => {
                    let name = resolver.function_name(module, func_index);
                    self.named_frame(Some(mapping), 0, name)
                }
                None => {
                    self.named_frame(None, 0, plain_name(&format!("wasm-function[{func_index}]")))
                }
            },
            RawFrame::LoweredCall { module, offset } => {
                let name = plain_name(
                    resolver
                        .lowered_call_name(module, offset)
                        .unwrap_or_default(),
                );
                self.named_frame(Some(self.mappings[module]), 0, name)
            }
            RawFrame::Interpreted { module, code, line } => {
                let function = resolver
                    .interpreted_function(module, code)
                    .unwrap_or_else(|| Function {
                        name: INTERPRETED_UNKNOWN.to_string(),
                        system_name: String::new(),
                        file: String::new(),
                        start_line: 0,
                    });
                let mapping = self.mappings.get(module).copied();
                self.builder.line_frame(&function, line, mapping, 0)
            }
            RawFrame::Runtime => self.named_frame(None, 0, plain_name(RUNTIME_FRAME)),
            RawFrame::Host { address } => self.host_frames.frame(&mut self.builder, address),
            RawFrame::HostRoot => self.named_frame(None, 0, plain_name(HOST_ROOT_FRAME)),
            RawFrame::UnknownHostCall => {
                self.named_frame(None, 0, plain_name(UNKNOWN_HOST_CALL_FRAME))
            }
        };
        self.frame_ids.insert(*raw, id);
        id
    }

    /// A frame that is a function's name alone.
    fn named_frame(
        &mut self,
        mapping: Option<MappingId>,
        address: u64,
        name: FunctionName,
    ) -> FrameId {
        let function = Function {
            name: name.name,
            system_name: name.system_name,
            file: String::new(),
            start_line: 0,
        };
        self.builder.function_frame(&function, mapping, address)
    }

    /// Gives the frames in registered modules their source lines (innermost first), from
    /// DWARF where the module has it, else the function's name; the host's frames theirs.
    fn symbolize_frames(&self, resolver: &mut Resolver, profile: &mut Profile) {
        let mut function_ids: FxHashMap<Function, FunctionId> = profile
            .functions
            .iter_ids()
            .map(|(id, f)| (f.clone(), id))
            .collect();
        for module in self.mappings.ids() {
            let addresses: Vec<(u32, u32)> = self
                .wasm_frames
                .iter()
                .filter(|f| f.module == module)
                .map(|f| (f.func_index, f.offset))
                .collect();
            resolver.symbolize(module, &addresses);
        }
        let wasm = self.wasm_frames.iter().map(|frame| {
            let source = resolver.source_frames(frame.module, frame.func_index, frame.offset);
            (frame.id, source)
        });
        let mut named: Vec<_> = wasm.collect();
        named.extend(self.host_frames.source_frames(resolver));
        for (frame, source) in named {
            profile.frames[frame].lines = source
                .iter()
                .map(|s| {
                    let function = Function {
                        name: s.function.name.clone(),
                        system_name: s.function.system_name.clone(),
                        file: s.file.clone(),
                        start_line: s.start_line,
                    };
                    let id = *function_ids
                        .entry(function)
                        .or_insert_with_key(|f| profile.functions.push(f.clone()));
                    Line {
                        function: id,
                        line: s.line,
                        column: s.column,
                    }
                })
                .collect();
        }
    }

    /// On the instructions clock: samples taken every `interval` instructions on average.
    pub fn count_instructions(&mut self, interval: u64) {
        self.instruction_interval = interval;
    }

    /// Keeps a heap profile too, of allocations sampled at `rate` bytes.
    pub fn profile_heap(&mut self, rate: u64) {
        self.heap = Some(Heap::new(rate));
    }

    /// Whether a heap profile is kept.
    pub fn profiles_memory(&self) -> bool {
        self.heap.is_some()
    }

    /// A sampled allocation of `size` bytes at `block`, made by `frames` (leaf first: the
    /// allocator's wrapper, standing for the allocator) in a store with `labels`; `collected`
    /// if a garbage collector frees it.
    pub fn heap_allocated(
        &mut self,
        resolver: &Resolver,
        frames: &[RawFrame],
        labels: Option<&Labels>,
        block: Block,
        size: u64,
        collected: bool,
    ) {
        let labels = labels.map_or(LabelsId::NONE, |l| self.label_sets.intern(l));
        let stack = self.stack_of(resolver, frames);
        let key = self.key_id(Key {
            stack,
            labels,
            thread: None,
        });
        if let Some(heap) = &mut self.heap {
            heap.allocated(key, block, size, collected);
        }
    }

    /// `block` was freed.
    pub fn heap_freed(&mut self, block: Block) {
        if let Some(heap) = &mut self.heap {
            heap.freed(block);
        }
    }

    /// `store`'s memory is gone, with its blocks.
    pub fn heap_store_dropped(&mut self, store: StoreKey) {
        if let Some(heap) = &mut self.heap {
            heap.store_dropped(store);
        }
    }

    /// The heap profile so far (`alloc_objects`, `alloc_space`, `inuse_objects`,
    /// `inuse_space`, as Go's), if memory is profiled.
    pub fn heap_profile(&mut self, resolver: &mut Resolver) -> Option<Profile> {
        let heap = self.heap.as_ref()?;
        let rate = heap.rate();
        let mut samples: Vec<Sample> = heap
            .values()
            .map(|(key, v)| Sample {
                stack: self.keys[key].stack,
                labels: self.label_sets.get(self.keys[key].labels).clone(),
                thread: None,
                time_ns: 0,
                values: [
                    v.alloc_objects,
                    v.alloc_space,
                    v.inuse_objects,
                    v.inuse_space,
                ]
                .map(|x| x.round() as i64)
                .to_vec(),
            })
            .collect();
        samples.sort_by(|a, b| (a.stack, &a.labels).cmp(&(b.stack, &b.labels)));
        let mut comments = vec![format!(
            "wasmspy {}: allocations sampled every {rate} bytes on average",
            env!("CARGO_PKG_VERSION")
        )];
        // In-use values without the garbage-collected blocks would mislead as a default view.
        let default_sample_type = if heap.has_collected() {
            comments.push(COLLECTED_NOTE.to_string());
            ALLOC_SPACE
        } else {
            INUSE_SPACE
        };
        let header = ProfileHeader {
            sample_types: vec![
                ValueType::new("alloc_objects", "count"),
                ValueType::new("alloc_space", "bytes"),
                ValueType::new("inuse_objects", "count"),
                ValueType::new("inuse_space", "bytes"),
            ],
            default_sample_type,
            period_type: ValueType::new("space", "bytes"),
            period: rate as i64,
            comments,
            ..self.timing()
        };
        Some(self.build_profile(resolver, header, samples))
    }

    /// The recording's start and its duration so far (to [`stop`](Self::stop)).
    fn timing(&self) -> ProfileHeader {
        let end = self.stopped_ns.unwrap_or_else(monotonic_ns);
        ProfileHeader {
            start_unix_ns: self.started_unix_ns,
            duration_ns: end.saturating_sub(self.started_ns) as i64,
            ..ProfileHeader::default()
        }
    }

    /// Marks the start of the recording: sample times and the profile's duration count from
    /// here.
    pub fn start(&mut self) {
        self.started_ns = monotonic_ns();
        self.started_unix_ns = unix_now_ns();
    }

    /// Keeps the samples in time order too (within [`crate::record::timeline::BUDGET`]), for the
    /// formats that show a timeline; else only their totals by stack are kept.
    pub fn keep_timeline(&mut self) {
        self.timeline
            .get_or_insert_with(|| Timeline::new(sampling_period(self.rate_hz).as_nanos() as u64));
    }

    /// Marks the end of the recording: the profile's duration stops here.
    pub fn stop(&mut self) {
        self.stopped_ns.get_or_insert_with(monotonic_ns);
    }

    /// The profile so far (complete once [`stop`](Self::stop) was called): the samples in time
    /// order when a timeline is kept ([`keep_timeline`](Self::keep_timeline)), else one per
    /// stack.
    pub fn profile(&mut self, resolver: &mut Resolver) -> Profile {
        let samples: Vec<Sample> = match &self.timeline {
            Some(timeline) => timeline
                .entries()
                .into_iter()
                .map(|e| self.sample(e.key, e.time_ns, e.tally))
                .collect(),
            None => self.samples_since(&Table::default()),
        };
        let header = self.cpu_header(self.timing());
        let mut profile = self.build_profile(resolver, header, samples);
        profile.code = self.kept_code(resolver, &CodeTallies::default());
        profile
    }

    /// Where the recording stands now: [`profile_since`](Self::profile_since) keeps what comes
    /// after.
    pub fn mark(&self) -> Mark {
        Mark {
            at_ns: monotonic_ns(),
            totals: self.totals.clone(),
            code: self.code.clone(),
        }
    }

    /// The profile of the samples taken since `mark`, one per stack.
    pub fn profile_since(&mut self, resolver: &mut Resolver, mark: &Mark) -> Profile {
        let samples = self.samples_since(&mark.totals);
        let timing = self.timing();
        // A mark made before the recording started (a live request that came first) counts
        // from the start: no sample is older.
        let since_start = mark.at_ns.saturating_sub(self.started_ns);
        let header = ProfileHeader {
            start_unix_ns: timing.start_unix_ns + since_start as i64,
            duration_ns: timing.duration_ns - since_start as i64,
            ..timing
        };
        let header = self.cpu_header(header);
        let mut profile = self.build_profile(resolver, header, samples);
        profile.code = self.kept_code(resolver, &mark.code);
        profile
    }

    /// The code of the hottest functions samples were taken in since `earlier`, with the
    /// samples on its instructions.
    fn kept_code(&self, resolver: &Resolver, earlier: &CodeTallies) -> Vec<MachineCode> {
        let values = |t| self.values(t);
        machine_code::kept_code(&self.code, earlier, values, &self.mappings, resolver)
    }

    /// A sample per labeled stack of what it gained since `earlier` (totals by key id).
    fn samples_since(&self, earlier: &Table<KeyId, Tally>) -> Vec<Sample> {
        self.totals
            .iter_ids()
            .filter_map(|(key, t)| {
                let gained = t.since(earlier.get(key).copied().unwrap_or_default());
                (gained.samples > 0).then(|| self.sample(key, 0, gained))
            })
            .collect()
    }

    /// A CPU profile's header: its sample types, period and comment, with `timing`.
    fn cpu_header(&self, timing: ProfileHeader) -> ProfileHeader {
        let cpu = ValueType::new("cpu", "nanoseconds");
        let mut sample_types = vec![ValueType::new("samples", "count")];
        let (default_sample_type, period_type, period, rate) = match self.clock {
            Clock::Cpu => {
                sample_types.push(cpu.clone());
                (
                    CPU,
                    cpu,
                    self.period_ns(),
                    format!("at {} Hz", self.rate_hz),
                )
            }
            Clock::Wall => {
                let wall = ValueType::new("wall", "nanoseconds");
                sample_types.extend([cpu, wall.clone()]);
                (
                    WALL,
                    wall,
                    self.period_ns(),
                    format!("at {} Hz", self.rate_hz),
                )
            }
            Clock::Instructions => {
                let instructions = ValueType::new("instructions", "count");
                sample_types.push(instructions.clone());
                let interval = self.instruction_interval;
                let rate = format!("every {interval} instructions on average (intervals from a fixed seed; host calls not counted)");
                (CPU, instructions, interval as i64, rate)
            }
        };
        ProfileHeader {
            sample_types,
            default_sample_type,
            period_type,
            period,
            comments: std::iter::once(format!(
                "wasmspy {}: {} sampler {} on the {} clock",
                env!("CARGO_PKG_VERSION"),
                self.sampler,
                rate,
                self.clock
            ))
            .chain(self.label_sets.note())
            .collect(),
            ..timing
        }
    }

    fn period_ns(&self) -> i64 {
        sampling_period(self.rate_hz).as_nanos() as i64
    }

    /// The profile of `samples`, its frames symbolized.
    fn build_profile(
        &mut self,
        resolver: &mut Resolver,
        header: ProfileHeader,
        samples: Vec<Sample>,
    ) -> Profile {
        self.add_mappings(resolver);
        let mut profile = self.builder.build(header, samples);
        self.symbolize_frames(resolver, &mut profile);
        profile
    }
}

/// Where a recording stood at some moment, by stack (see `ProfilerHandle::mark`).
#[derive(Clone, Debug)]
pub struct Mark {
    /// When, on `CLOCK_MONOTONIC`.
    at_ns: u64,
    totals: Table<KeyId, Tally>,
    code: CodeTallies,
}

fn plain_name(name: &str) -> FunctionName {
    FunctionName {
        name: name.to_string(),
        system_name: name.to_string(),
    }
}

fn unix_now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window marked before the recording started (a live request that came first) spans
    /// the recording, no more: its start and duration are the whole profile's.
    #[test]
    fn a_mark_before_the_start_counts_from_the_start() {
        // Made, then marked (while the guest compiles), then started: the mark's distance
        // from either is not the window's.
        let mut recorder = Recorder::new(1000, Clock::Cpu, "signal");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mark = recorder.mark();
        std::thread::sleep(std::time::Duration::from_millis(20));
        recorder.start();
        recorder.stop();
        let mut resolver = Resolver::new(true, false);
        let whole = recorder.profile(&mut resolver);
        let since = recorder.profile_since(&mut resolver, &mark);
        assert_eq!(
            (since.start_unix_ns, since.duration_ns),
            (whole.start_unix_ns, whole.duration_ns)
        );
    }
}
