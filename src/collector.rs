//! Turns raw samples into the [`profile`](crate::profile) model. Each distinct code address is
//! symbolized once; stacks and functions are interned.

use std::ops::Range;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Module, WasmBacktrace};

use crate::clock::{monotonic_ns, sampling_period, Clock};
use crate::code_map::{CodeLocation, CodeMap, CodeOwner};
use crate::component::core_modules;
use crate::memory::component::RewrittenComponent;
use crate::memory::heap::{Heap, HeapSampler};
use crate::memory::rewrite::Rewritten;
use crate::profile::{
    Frame, FrameId, Function, FunctionId, Line, Mapping, MappingId, Profile, ProfileBuilder,
    ProfileHeader, Sample, StackId, ValueType, RUNTIME_FRAME, UNKNOWN_HOST_CALL_FRAME,
};
use crate::sampler::{RawFrame, SampleValues};
use crate::symbolize::{FunctionName, ModuleSymbolizer};
use crate::timeline::{Tally, Timeline};

/// Value indices of a sample: `samples`, `cpu`, and in wall-clock mode `wall`.
pub const SAMPLES: usize = 0;
pub const CPU: usize = 1;
pub const WALL: usize = 2;

/// Value indices of a heap profile's samples, as Go's.
pub const ALLOC_OBJECTS: usize = 0;
pub const ALLOC_SPACE: usize = 1;
pub const INUSE_OBJECTS: usize = 2;
pub const INUSE_SPACE: usize = 3;

/// A heap profile's comment when garbage-collected allocations (Go's, TinyGo's) are in it.
pub const COLLECTED_NOTE: &str = "garbage-collected blocks (Go, TinyGo) are freed without a call: \
     they count in alloc_objects/alloc_space, not in the in-use values";

/// A sample as a native-code sampler took it: program counters, leaf first.
pub enum NativeSample<'a> {
    /// The interrupted PC is in a module's code; the rest are return addresses.
    Guest(&'a [usize]),
    /// The interrupted PC is outside Wasm code (a host function, a libcall, Wasmtime); the
    /// rest, if any, are return addresses, the first into the Wasm code that left for the host.
    Host(&'a [usize]),
}

/// How many samples landed where; `lost` ones never reached the collector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCounts {
    pub guest: u64,
    pub host_call: u64,
    pub runtime: u64,
    pub lost: u64,
}

struct RegisteredModule {
    compiled: Compiled,
    /// Where the module's binary starts in the binary compiled (0 unless in a component):
    /// Wasmtime's offsets count from there.
    start: u32,
    symbolizer: ModuleSymbolizer,
    mapping: MappingId,
    /// Set when the compiled module is a rewrite of the one symbolized: where its code came
    /// from.
    rewritten: Option<Arc<Rewritten>>,
}

/// What Wasmtime compiled a registered module as.
enum Compiled {
    Module(Module),
    /// Core module `index` (Wasmtime's static module index) of a component whose code is
    /// `text`.
    InComponent {
        text: Range<usize>,
        index: u32,
    },
}

/// What a module in a backtrace is to the collector.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    Registered(u32),
    /// A module of a registered component's code that is none of its core modules: an
    /// adapter Wasmtime generated between the component's components.
    Adapter,
    Unknown,
}

/// A frame in a registered module's code, symbolized when a profile is built.
struct WasmFrame {
    id: FrameId,
    module: u32,
    func_index: u32,
    offset: u32,
}

pub struct Collector {
    modules: Vec<RegisteredModule>,
    /// The core modules of components that backtraces showed, and what each is.
    component_modules: Vec<(Module, Owner)>,
    code_map: CodeMap,
    builder: ProfileBuilder,
    frame_ids: FxHashMap<RawFrame, FrameId>,
    wasm_frames: Vec<WasmFrame>,
    /// Native code address → its frame (`None`: not in a Wasm function); the signal sampler's
    /// samples repeat the same addresses, so each is looked up in the code map once.
    native_frame_ids: FxHashMap<usize, Option<(FrameId, bool)>>,
    /// Return address into Wasm code that left for the host → the frame of what it called, and
    /// whether that is a host call.
    exit_frame_ids: FxHashMap<usize, (FrameId, bool)>,
    stack: Vec<FrameId>,
    /// What the samples of each stack add up to, by stack id: memory grows with the distinct
    /// stacks, not with time.
    totals: Vec<Tally>,
    /// The samples in time order, within a budget, when a format that shows time is wanted.
    timeline: Option<Timeline>,
    counts: KindCounts,
    /// Sampled allocations by stack, and which to sample, when memory is profiled.
    heap: Option<(HeapSampler, Heap<StackId>)>,
    warnings: Vec<String>,
    use_dwarf: bool,
    rate_hz: u32,
    clock: Clock,
    sampler: &'static str,
    started_ns: u64,
    started_unix_ns: i64,
    stopped_ns: Option<u64>,
}

impl Collector {
    /// `use_dwarf`: map code to source lines with the modules' DWARF, not only to functions.
    pub fn new(rate_hz: u32, clock: Clock, sampler: &'static str, use_dwarf: bool) -> Self {
        Collector {
            modules: Vec::new(),
            component_modules: Vec::new(),
            code_map: CodeMap::default(),
            builder: ProfileBuilder::default(),
            frame_ids: FxHashMap::default(),
            wasm_frames: Vec::new(),
            native_frame_ids: FxHashMap::default(),
            exit_frame_ids: FxHashMap::default(),
            stack: Vec::new(),
            totals: Vec::new(),
            timeline: None,
            counts: KindCounts::default(),
            heap: None,
            warnings: Vec::new(),
            use_dwarf,
            rate_hz,
            clock,
            sampler,
            started_ns: monotonic_ns(),
            started_unix_ns: unix_now_ns(),
            stopped_ns: None,
        }
    }

    /// Registers a module whose frames samples may contain; `wasm` is its binary, kept (not
    /// copied) to read call instructions and debug info from. When `module` was compiled from
    /// a rewrite of `wasm`, `rewritten` maps its code back.
    pub fn add_module(
        &mut self,
        file_name: &str,
        module: &Module,
        wasm: Arc<[u8]>,
        rewritten: Option<Arc<Rewritten>>,
    ) -> Result<()> {
        self.code_map.add(self.modules.len() as u32, module);
        let compiled = Compiled::Module(module.clone());
        let symbolizer = ModuleSymbolizer::new(file_name, wasm, self.use_dwarf)?;
        self.register(file_name, compiled, 0, symbolizer, rewritten);
        Ok(())
    }

    /// Registers a component: each of its core modules is a module of its own, named
    /// `FILE/NAME` by its `name` section's module name (`FILE/module0` without one), its
    /// imports named by the WIT functions they lower. When `component` was compiled from
    /// `rewritten`, the allocator rewrite of `wasm`, its code is mapped back to `wasm`'s.
    pub fn add_component(
        &mut self,
        file_name: &str,
        component: &Component,
        wasm: &[u8],
        rewritten: Option<&RewrittenComponent>,
    ) -> Result<()> {
        let text = component.text().as_ptr_range();
        let text = text.start as usize..text.end as usize;
        // Where each core module is in the binary compiled.
        let compiled = match rewritten {
            Some(r) => core_modules(&r.wasm)?,
            None => Vec::new(),
        };
        let mut owners = Vec::new();
        for (index, core) in core_modules(wasm)?.into_iter().enumerate() {
            let module_name = match &core.name {
                Some(name) => name.clone(),
                None => format!("module{index}"),
            };
            let name = format!("{file_name}/{module_name}");
            let bytes: Arc<[u8]> = wasm[core.range.clone()].into();
            let mut symbolizer = ModuleSymbolizer::new(&name, bytes, self.use_dwarf)?;
            symbolizer.qualify_unnamed(&module_name);
            // wit-component's adapters, shims and fixups carry no debug info.
            if module_name.starts_with("wit-component:") {
                symbolizer.expect_no_dwarf();
            }
            symbolizer.name_imports(&core.lowered_imports);
            symbolizer.name_functions(&core.stub_names);
            symbolizer.name_lowered_indirect_calls(core.lowered_indirect_calls);
            let start = compiled
                .get(index)
                .map_or(core.range.start, |c| c.range.start) as u32;
            let rewrite = rewritten.and_then(|r| r.modules.get(index).cloned().flatten());
            owners.push(CodeOwner {
                module: self.modules.len() as u32,
                start,
            });
            let compiled_as = Compiled::InComponent {
                text: text.clone(),
                index: index as u32,
            };
            self.register(&name, compiled_as, start, symbolizer, rewrite);
        }
        self.code_map.add_component(component, owners);
        Ok(())
    }

    fn register(
        &mut self,
        file_name: &str,
        compiled: Compiled,
        start: u32,
        mut symbolizer: ModuleSymbolizer,
        rewritten: Option<Arc<Rewritten>>,
    ) {
        let wasm = symbolizer.wasm();
        let mapping = Mapping {
            file_name: file_name.to_string(),
            build_id: hex(&Sha256::digest(wasm)),
            size: wasm.len() as u64,
        };
        self.warnings.extend(symbolizer.take_warnings());
        let mapping = self.builder.add_mapping(mapping);
        self.modules.push(RegisteredModule {
            compiled,
            start,
            symbolizer,
            mapping,
            rewritten,
        });
    }

    /// Warnings about the modules' symbols not taken yet.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// What Wasmtime's `module` is: a registered module, an adapter in a registered
    /// component, or unknown.
    fn owner(&mut self, module: &Module) -> Owner {
        let alone = self.modules.iter().position(|m| match &m.compiled {
            Compiled::Module(registered) => Module::same(registered, module),
            Compiled::InComponent { .. } => false,
        });
        if let Some(i) = alone {
            return Owner::Registered(i as u32);
        }
        if let Some(&(_, owner)) = self
            .component_modules
            .iter()
            .find(|(seen, _)| Module::same(seen, module))
        {
            return owner;
        }
        // A core module of a component: in the component's code, and numbered there.
        let code = module.text().as_ptr() as usize;
        let index = module.functions().next().map(|f| f.module.as_u32());
        let mut owner = Owner::Unknown;
        for (i, m) in self.modules.iter().enumerate() {
            if let Compiled::InComponent { text, index: n } = &m.compiled {
                if Some(*n) == index && text.contains(&code) {
                    owner = Owner::Registered(i as u32);
                    break;
                }
                if text.contains(&code) {
                    owner = Owner::Adapter;
                }
            }
        }
        self.component_modules.push((module.clone(), owner));
        owner
    }

    /// A backtrace Wasmtime captured, as raw frames, leaf first.
    pub fn backtrace_frames(&mut self, backtrace: &WasmBacktrace) -> Vec<RawFrame> {
        let mut frames = Vec::with_capacity(backtrace.frames().len());
        for (depth, f) in backtrace.frames().iter().enumerate() {
            let module = match self.owner(f.module()) {
                Owner::Registered(m) => Some(m),
                Owner::Unknown => None,
                // The runtime's code, as trampolines are.
                Owner::Adapter => {
                    if depth == 0 {
                        frames.push(RawFrame::Runtime);
                    }
                    continue;
                }
            };
            let offset = f.module_offset().unwrap_or(0) as u32;
            let (func_index, offset, wrapper) = match module {
                Some(m) => {
                    let offset = offset.saturating_sub(self.modules[m as usize].start);
                    self.original(m, f.func_index(), offset)
                }
                None => (f.func_index(), offset, false),
            };
            // A wrapper above the leaf only called its allocator's original body.
            if !(wrapper && depth > 0) {
                frames.push(RawFrame::Wasm {
                    module,
                    func_index,
                    offset,
                });
            }
        }
        frames
    }

    /// The original function index and code offset of code in a registered module, and whether
    /// it is an allocator's wrapper (see [`crate::memory::rewrite`]).
    fn original(&self, module: u32, func_index: u32, offset: u32) -> (u32, u32, bool) {
        self.modules[module as usize]
            .rewritten
            .as_ref()
            .and_then(|r| r.original(func_index, offset))
            .unwrap_or((func_index, offset, false))
    }

    /// The native code of every registered module.
    pub fn code_ranges(&self) -> Vec<Range<usize>> {
        self.code_map.text_ranges().collect()
    }

    /// Adds a sample of Wasm `frames` (leaf first).
    pub fn add_sample(&mut self, frames: &[RawFrame], values: SampleValues, time_ns: u64) {
        self.counts.guest += 1;
        self.push_sample(frames, values, time_ns);
    }

    pub fn add_native_sample(
        &mut self,
        sample: NativeSample<'_>,
        values: SampleValues,
        time_ns: u64,
    ) {
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        let callers = match sample {
            NativeSample::Guest(pcs) => {
                // A leaf outside Wasm functions (a trampoline) is Wasmtime's.
                match self.native_frame_id(pcs[0]) {
                    Some((id, _)) => {
                        self.counts.guest += 1;
                        stack.push(id);
                    }
                    None => {
                        self.counts.runtime += 1;
                        stack.push(self.frame_id(&RawFrame::Runtime));
                    }
                }
                &pcs[1..]
            }
            NativeSample::Host(pcs) => {
                let (id, host_call) = match pcs.get(1) {
                    Some(&exit) => self.exit_frame_id(exit),
                    None => (self.frame_id(&RawFrame::Runtime), false),
                };
                match host_call {
                    true => self.counts.host_call += 1,
                    false => self.counts.runtime += 1,
                }
                stack.push(id);
                &pcs[1..]
            }
        };
        for &pc in callers {
            // A return address follows its call instruction; trampolines are not guest frames;
            // a wrapper above the leaf only called its allocator's original body.
            if let Some((id, false)) = self.native_frame_id(pc - 1) {
                stack.push(id);
            }
        }
        let stack_id = self.intern_stack(stack);
        self.record(stack_id, values, time_ns);
    }

    /// The frame of what the Wasm code that `exit` returns to called (an import, or the
    /// runtime for a libcall), and whether it is a host call.
    fn exit_frame_id(&mut self, exit: usize) -> (FrameId, bool) {
        if let Some(&found) = self.exit_frame_ids.get(&exit) {
            return found;
        }
        let called = match self.native_raw_frame(exit - 1) {
            Some((caller, _)) => self.called_import(Some(&caller)),
            None => RawFrame::Runtime,
        };
        let found = (self.frame_id(&called), called != RawFrame::Runtime);
        self.exit_frame_ids.insert(exit, found);
        found
    }

    /// The Wasm frame of a native code address, and whether it is in an allocator's wrapper.
    fn native_raw_frame(&self, pc: usize) -> Option<(RawFrame, bool)> {
        match self.code_map.lookup(pc) {
            CodeLocation::Wasm {
                module,
                func_index,
                offset,
            } => {
                let (func_index, offset, wrapper) = self.original(module, func_index, offset);
                let frame = RawFrame::Wasm {
                    module: Some(module),
                    func_index,
                    offset,
                };
                Some((frame, wrapper))
            }
            CodeLocation::Trampoline | CodeLocation::Elsewhere => None,
        }
    }

    /// The frame of a native code address, and whether it is in an allocator's wrapper.
    fn native_frame_id(&mut self, pc: usize) -> Option<(FrameId, bool)> {
        if let Some(&id) = self.native_frame_ids.get(&pc) {
            return id;
        }
        let id = self
            .native_raw_frame(pc)
            .map(|(frame, wrapper)| (self.frame_id(&frame), wrapper));
        self.native_frame_ids.insert(pc, id);
        id
    }

    /// The import that the call instruction at `caller` calls; the runtime where the
    /// instruction is not a call (a libcall: `memory.grow`, a GC allocation).
    fn called_import(&self, caller: Option<&RawFrame>) -> RawFrame {
        let Some(&RawFrame::Wasm {
            module: Some(module),
            func_index: caller_index,
            offset,
        }) = caller
        else {
            return RawFrame::UnknownHostCall;
        };
        let registered = &self.modules[module as usize];
        // An allocator's wrapper calls the allocator hook through its table; its frame's
        // offset is its allocator's first byte, not that call.
        if registered
            .rewritten
            .as_ref()
            .is_some_and(|r| r.is_wrapper(caller_index))
        {
            return RawFrame::UnknownHostCall;
        }
        let m = &registered.symbolizer;
        let Some(code) = m.wasm().get(offset as usize..) else {
            return RawFrame::UnknownHostCall;
        };
        let mut reader = wasmparser::BinaryReader::new(code, offset as usize);
        // `call` and `return_call` name their callee; indirect calls do not, but for those of
        // a component's shim, whose targets are known.
        match (reader.read_u8(), reader.read_var_u32()) {
            (Ok(0x10 | 0x12), Ok(func_index)) if func_index < m.imported_function_count() => {
                RawFrame::HostCall {
                    module: Some(module),
                    func_index,
                }
            }
            (Ok(0x11 | 0x13), _) if m.lowered_indirect_call(offset).is_some() => {
                RawFrame::LoweredCall { module, offset }
            }
            // call, call_indirect, return_call, return_call_indirect, call_ref, return_call_ref
            (Ok(0x10..=0x15), _) => RawFrame::UnknownHostCall,
            _ => RawFrame::Runtime,
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
        let mut values = vec![clamp(t.samples), clamp(t.cpu_ns)];
        if self.clock == Clock::Wall {
            values.push(clamp(t.wall_ns));
        }
        values
    }

    fn push_sample(&mut self, frames: &[RawFrame], values: SampleValues, time_ns: u64) {
        let stack_id = self.stack_of(frames);
        self.record(stack_id, values, time_ns);
    }

    /// The stack of `frames` (leaf first).
    fn stack_of(&mut self, frames: &[RawFrame]) -> StackId {
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        stack.extend(frames.iter().map(|raw| self.frame_id(raw)));
        self.intern_stack(stack)
    }

    /// Interns `stack` (frame ids, leaf first), whose buffer is kept for the next one.
    fn intern_stack(&mut self, stack: Vec<FrameId>) -> StackId {
        let stack_id = self.builder.stack(&stack);
        self.stack = stack;
        stack_id
    }

    fn record(&mut self, stack: StackId, values: SampleValues, time_ns: u64) {
        let time_ns = time_ns.saturating_sub(self.started_ns);
        self.add_tally(stack, Tally::one(values), time_ns);
    }

    /// `time_ns` since the start of the recording.
    fn add_tally(&mut self, stack: StackId, tally: Tally, time_ns: u64) {
        if self.totals.len() <= stack {
            self.totals.resize(stack + 1, Tally::default());
        }
        self.totals[stack].add(tally);
        if let Some(timeline) = &mut self.timeline {
            timeline.push(stack, time_ns, tally);
        }
    }

    fn frame_id(&mut self, raw: &RawFrame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(raw) {
            return id;
        }
        let registered =
            |module: Option<u32>| module.filter(|&m| (m as usize) < self.modules.len());
        let id = match *raw {
            RawFrame::Wasm {
                module,
                func_index,
                offset,
            } => match registered(module) {
                // Source lines are filled in when a profile is built: only the addresses that
                // samples show are ever symbolized, and the run does not wait for DWARF.
                Some(module) => {
                    let id = self.builder.frame(&Frame {
                        mapping: Some(self.modules[module as usize].mapping),
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
                Some(module) => {
                    let m = &self.modules[module as usize];
                    let (mapping, name) = (m.mapping, m.symbolizer.function_name(func_index));
                    self.named_frame(Some(mapping), 0, name)
                }
                None => {
                    self.named_frame(None, 0, plain_name(&format!("wasm-function[{func_index}]")))
                }
            },
            RawFrame::LoweredCall { module, offset } => {
                let m = &self.modules[module as usize];
                let name = m
                    .symbolizer
                    .lowered_indirect_call(offset)
                    .unwrap_or_default();
                let (mapping, name) = (m.mapping, plain_name(name));
                self.named_frame(Some(mapping), 0, name)
            }
            RawFrame::Runtime => self.named_frame(None, 0, plain_name(RUNTIME_FRAME)),
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
    /// DWARF where the module has it, else the function's name.
    fn symbolize_wasm_frames(&mut self, profile: &mut Profile) {
        let mut function_ids: FxHashMap<Function, FunctionId> = profile
            .functions
            .iter()
            .cloned()
            .enumerate()
            .map(|(id, f)| (f, id))
            .collect();
        for (index, module) in self.modules.iter_mut().enumerate() {
            let addresses: Vec<(u32, u32)> = self
                .wasm_frames
                .iter()
                .filter(|f| f.module as usize == index)
                .map(|f| (f.func_index, f.offset))
                .collect();
            module.symbolizer.symbolize(&addresses);
        }
        for frame in &self.wasm_frames {
            let symbolizer = &mut self.modules[frame.module as usize].symbolizer;
            let source = symbolizer.source_frames(frame.func_index, frame.offset);
            profile.frames[frame.id].lines = source
                .iter()
                .map(|s| {
                    let function = Function {
                        name: s.function.name.clone(),
                        system_name: s.function.system_name.clone(),
                        file: s.file.clone(),
                        start_line: s.start_line,
                    };
                    let id = *function_ids.entry(function).or_insert_with_key(|f| {
                        profile.functions.push(f.clone());
                        profile.functions.len() - 1
                    });
                    Line {
                        function: id,
                        line: s.line,
                        column: s.column,
                    }
                })
                .collect();
        }
        for m in &mut self.modules {
            self.warnings.extend(m.symbolizer.take_warnings());
        }
    }

    /// Keeps a heap profile too, of allocations sampled at `rate` bytes.
    pub fn profile_heap(&mut self, rate: u64) {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        self.heap = Some((HeapSampler::new(rate, seed), Heap::new(rate)));
    }

    /// Time since the recording started, on the clock of the samples' `time_ns`.
    fn elapsed_ns(&self) -> u64 {
        monotonic_ns().saturating_sub(self.started_ns)
    }

    /// Whether a heap profile is kept.
    pub fn profiles_memory(&self) -> bool {
        self.heap.is_some()
    }

    /// The bytes the guest is to allocate before its next sampled allocation (never, if
    /// memory is not profiled).
    pub fn heap_next_interval(&mut self) -> i64 {
        self.heap
            .as_mut()
            .map_or(i64::MAX, |(sampler, _)| sampler.next_interval())
    }

    /// A sampled allocation of `size` bytes at `address`, made by `frames` (leaf first: the
    /// allocator's wrapper, standing for the allocator); `collected` if a garbage collector
    /// frees it.
    pub fn heap_allocated(
        &mut self,
        frames: &[RawFrame],
        address: u32,
        size: u64,
        collected: bool,
    ) {
        let id = self.stack_of(frames);
        if let Some((_, heap)) = &mut self.heap {
            heap.allocated(id, address, size, collected);
        }
    }

    /// The block at `address` was freed.
    pub fn heap_freed(&mut self, address: u32) {
        if let Some((_, heap)) = &mut self.heap {
            heap.freed(address);
        }
    }

    /// Whether a live sampled block shares `address`'s slot of
    /// rewritten allocators' flags ([`crate::memory::rewrite::report`]).
    pub fn heap_slot_is_live(&self, address: u32) -> bool {
        self.heap
            .as_ref()
            .is_some_and(|(_, heap)| heap.slot_is_live(address))
    }

    /// The heap profile so far (`alloc_objects`, `alloc_space`, `inuse_objects`,
    /// `inuse_space`, as Go's), if memory is profiled.
    pub fn heap_profile(&mut self) -> Option<Profile> {
        let (_, heap) = self.heap.as_ref()?;
        let rate = heap.rate();
        let mut samples: Vec<Sample> = heap
            .values()
            .map(|(stack, v)| Sample {
                stack,
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
        samples.sort_by_key(|s| s.stack);
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
        let mut profile = self.builder.build(header, samples);
        self.symbolize_wasm_frames(&mut profile);
        Some(profile)
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

    /// Keeps the samples in time order too (within [`crate::timeline::BUDGET`]), for the
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
    pub fn profile(&mut self) -> Profile {
        let samples: Vec<Sample> = match &self.timeline {
            Some(timeline) => timeline
                .entries()
                .into_iter()
                .map(|e| Sample {
                    stack: e.stack,
                    time_ns: e.time_ns,
                    values: self.values(e.tally),
                })
                .collect(),
            None => self.samples_since(&[]),
        };
        let header = self.cpu_header(self.timing());
        self.cpu_profile(header, samples)
    }

    /// Where the recording stands now: [`profile_since`](Self::profile_since) keeps what comes
    /// after.
    pub fn mark(&self) -> Mark {
        Mark {
            elapsed_ns: self.elapsed_ns(),
            totals: self.totals.clone(),
        }
    }

    /// The profile of the samples taken since `mark`, one per stack.
    pub fn profile_since(&mut self, mark: &Mark) -> Profile {
        let samples = self.samples_since(&mark.totals);
        let timing = self.timing();
        let header = ProfileHeader {
            start_unix_ns: timing.start_unix_ns + mark.elapsed_ns as i64,
            duration_ns: timing.duration_ns - mark.elapsed_ns as i64,
            ..timing
        };
        let header = self.cpu_header(header);
        self.cpu_profile(header, samples)
    }

    /// A sample per stack of what it gained since `earlier` (totals by stack id).
    fn samples_since(&self, earlier: &[Tally]) -> Vec<Sample> {
        self.totals
            .iter()
            .enumerate()
            .filter_map(|(stack, t)| {
                let gained = t.since(earlier.get(stack).copied().unwrap_or_default());
                (gained.samples > 0).then(|| Sample {
                    stack,
                    time_ns: 0,
                    values: self.values(gained),
                })
            })
            .collect()
    }

    /// A CPU profile's header: its sample types, period and comment, with `timing`.
    fn cpu_header(&self, timing: ProfileHeader) -> ProfileHeader {
        let cpu = ValueType::new("cpu", "nanoseconds");
        let wall = ValueType::new("wall", "nanoseconds");
        let mut sample_types = vec![ValueType::new("samples", "count"), cpu.clone()];
        let (default_sample_type, period_type) = match self.clock {
            Clock::Cpu => (CPU, cpu),
            Clock::Wall => {
                sample_types.push(wall.clone());
                (WALL, wall)
            }
        };
        ProfileHeader {
            sample_types,
            default_sample_type,
            period_type,
            period: sampling_period(self.rate_hz).as_nanos() as i64,
            comments: vec![format!(
                "wasmspy {}: {} sampler at {} Hz on the {} clock",
                env!("CARGO_PKG_VERSION"),
                self.sampler,
                self.rate_hz,
                self.clock
            )],
            ..timing
        }
    }

    fn cpu_profile(&mut self, header: ProfileHeader, samples: Vec<Sample>) -> Profile {
        let mut profile = self.builder.build(header, samples);
        self.symbolize_wasm_frames(&mut profile);
        profile
    }
}

/// Where a recording stood at some moment, by stack (see [`Collector::mark`]).
#[derive(Clone, Debug)]
pub struct Mark {
    elapsed_ns: u64,
    totals: Vec<Tally>,
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
