//! The resolve stage: maps what [`crate::capture`] captured (native program counters, Wasmtime
//! backtraces) to frames of the registered modules' code ([`RawFrame`]): the code map, the
//! import (or WIT function) a host call calls, the allocator rewrite's offsets mapped back to
//! the original module; and, when a profile is built, symbolization ([`symbolize`]). The same
//! symbolization names V8's frames of Wasm modules in its profiles ([`v8_wasm`]).

mod build_id;
pub mod code_map;
pub mod pulley_ops;
pub mod symbolize;
#[cfg(feature = "cli")]
pub mod v8_wasm;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use anyhow::{Context, Result};
use rustc_hash::FxHashMap;
use wasmtime::component::Component;
use wasmtime::{FrameInfo, Module};

use crate::capture::{GuestStack, NativeSample, Splice, PULLEY_PC_CANDIDATES};
use crate::memory::component::RewrittenComponent;
use crate::memory::rewrite::Rewritten;
use crate::profile::{Function, Id, Mapping, Table};
use crate::runtimes::in_component::PROBE_MODULE;
use crate::runtimes::{id_of, Runtime, SpliceContext};
use crate::warning::{Warning, WarningKind};
use crate::wasm::component::core_modules;
use build_id::BuildId;
use code_map::{CodeLocation, CodeMap, CodeOwner, CompiledFunction};
use pulley_ops::{FunctionOps, OpcodeAt};
use symbolize::{FunctionName, ModuleBytes, ModuleSymbolizer, SourceFrame};

crate::profile::ids! {
    /// A module registered with the [`Resolver`], in the order of registration (each core
    /// module of a component is one).
    ModuleId;
}

/// A compiled function as `ProfilerHandle::code_listing` lists it.
#[non_exhaustive]
pub struct ListedFunction {
    /// Where its compiled code is in the process's memory.
    pub code: Range<usize>,
    /// Its name, demangled.
    pub name: String,
    /// Where each stretch of code of one source line starts, by address.
    pub lines: Vec<SourceLine>,
}

/// Where a stretch of compiled code of one source line starts.
pub struct SourceLine {
    /// The address of its first instruction.
    pub address: usize,
    /// The source file.
    pub file: String,
    /// The line in `file`, from 1.
    pub line: u32,
}

/// A frame of a sample, resolved to a registered module's code, before symbolization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RawFrame {
    /// An instruction of a Wasm function: the sampled one for the leaf, the call for callers.
    Wasm {
        /// Index in the resolver's registry; `None` for a module nobody registered.
        module: Option<ModuleId>,
        /// Index in the module's function index space (imports first).
        func_index: u32,
        /// Offset of the instruction in the module's bytes.
        offset: u32,
    },
    /// Inside the host function that import `func_index` resolved to.
    HostCall {
        module: Option<ModuleId>,
        func_index: u32,
    },
    /// Inside the host function a component's shim reaches with the `call_indirect` at
    /// `offset` (see [`crate::wasm::component`]).
    LoweredCall { module: ModuleId, offset: u32 },
    /// Inside a host function the guest reached other than by a direct call.
    UnknownHostCall,
    /// Inside Wasmtime's own code: trampolines, libcalls such as `memory.grow`.
    Runtime,
    /// A frame of the interpreted language of a runtime (see [`crate::runtimes`]) in module
    /// `module`: its code, as the runtime numbers it, and its line (0: unknown).
    Interpreted {
        module: ModuleId,
        code: u32,
        line: u32,
    },
}

struct RegisteredModule {
    compiled: Compiled,
    /// Where the module's binary starts in the binary compiled (0 unless in a component):
    /// Wasmtime's offsets count from there.
    start: u32,
    symbolizer: ModuleSymbolizer,
    /// The module as a profile's mapping names it.
    file_name: String,
    build_id: BuildId,
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

/// What a module in a backtrace is to the resolver.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    Registered(ModuleId),
    /// A module of a registered component's code that is none of its core modules: an
    /// adapter Wasmtime generated between the component's components.
    Adapter,
    Unknown,
}

/// The registered modules, and what maps captured code to them.
pub struct Resolver {
    modules: Table<ModuleId, RegisteredModule>,
    /// The core modules of components that backtraces showed, and what each is.
    component_modules: Vec<(Module, Owner)>,
    code_map: CodeMap,
    /// Native code address → its frame (`None`: not in a Wasm function).
    native_frames: FxHashMap<usize, Option<(RawFrame, bool)>>,
    /// Return address into Wasm code that left for the host → the frame of what it called.
    exit_frames: FxHashMap<usize, RawFrame>,
    use_dwarf: bool,
    /// Whether interpreted runtimes' samples show their native frames with their own.
    runtime_native: bool,
    /// The registered modules of a language runtime, by the runtime's id (as samples name it,
    /// [`id_of`]).
    runtimes: FxHashMap<usize, RegisteredRuntime>,
    /// Pulley functions' instructions, by the address of their code, once decoded.
    function_ops: FxHashMap<usize, FunctionOps>,
    opcode_names: HashMap<&'static str, Arc<str>>,
}

/// A language runtime, in the registered module it is detected in.
#[derive(Clone)]
struct RegisteredRuntime {
    module: ModuleId,
    runtime: Arc<dyn Runtime>,
    /// The modules its code may be in, its own first (see [`SpliceContext::code`]).
    code: Arc<[(ModuleId, ModuleBytes)]>,
}

impl Resolver {
    /// `use_dwarf`: map code to source lines with the modules' DWARF, not only to functions;
    /// `runtime_native`: show an interpreter's native frames (CPython's C functions) with the
    /// frames of the language it runs.
    pub fn new(use_dwarf: bool, runtime_native: bool) -> Self {
        Resolver {
            modules: Table::default(),
            component_modules: Vec::new(),
            code_map: CodeMap::default(),
            native_frames: FxHashMap::default(),
            exit_frames: FxHashMap::default(),
            function_ops: FxHashMap::default(),
            opcode_names: HashMap::new(),
            use_dwarf,
            runtime_native,
            runtimes: FxHashMap::default(),
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
    ) -> Result<ModuleId> {
        let id = self.next_module();
        self.code_map.add(id, module);
        let compiled = Compiled::Module(module.clone());
        let symbolizer =
            ModuleSymbolizer::new(file_name, ModuleBytes::whole(wasm), self.use_dwarf)?;
        if let Some(runtime) = symbolizer.runtime() {
            runtime.compiled(module, &|index| match &rewritten {
                Some(r) => r.original_function(index),
                None => Some(index),
            });
        }
        self.register(file_name, compiled, 0, symbolizer, rewritten);
        Ok(id)
    }

    /// The language runtime of registered module `module`, where wasmspy reads one.
    pub fn runtime(&self, module: ModuleId) -> Option<Arc<dyn Runtime>> {
        self.modules[module].symbolizer.runtime().cloned()
    }

    /// The runtime of core module `index` of the registered component whose code is `text`.
    pub fn runtime_in_component(
        &self,
        text: &Range<usize>,
        index: u32,
    ) -> Option<Arc<dyn Runtime>> {
        self.modules
            .iter()
            .find(|m| {
                matches!(&m.compiled, Compiled::InComponent { text: t, index: i }
                    if t == text && *i == index)
            })?
            .symbolizer
            .runtime()
            .cloned()
    }

    /// The function of an interpreted frame (see [`RawFrame::Interpreted`]).
    pub fn interpreted_function(&self, module: ModuleId, code: u32) -> Option<Function> {
        self.modules[module].symbolizer.runtime()?.function(code)
    }

    /// Registers a component: each of its core modules is a module of its own, named
    /// `FILE/NAME` by its `name` section's module name (`FILE/module0` without one), its
    /// imports named by the WIT functions they lower. When `component` was compiled from
    /// `rewritten`, the allocator rewrite of `wasm`, its code is mapped back to `wasm`'s.
    pub fn add_component(
        &mut self,
        file_name: &str,
        component: &Component,
        wasm: Arc<[u8]>,
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
        let mut registered = Vec::new();
        for (index, core) in core_modules(&wasm)?.into_iter().enumerate() {
            let module_name = match &core.name {
                Some(name) => name.clone(),
                None => format!("module{index}"),
            };
            let name = format!("{file_name}/{module_name}");
            let bytes = ModuleBytes::within(wasm.clone(), core.range.clone())
                .context("a core module beyond the component's end")?;
            let mut symbolizer = ModuleSymbolizer::new(&name, bytes, self.use_dwarf)?;
            symbolizer.qualify_unnamed(&module_name);
            // wit-component's adapters, shims and fixups carry no debug info, nor do the
            // modules that show wasmspy a runtime's instance.
            if module_name.starts_with("wit-component:") || module_name == PROBE_MODULE {
                symbolizer.expect_no_dwarf();
            }
            symbolizer.name_imports(&core.lowered_imports);
            symbolizer.name_functions(&core.stub_names);
            symbolizer.name_lowered_indirect_calls(core.lowered_indirect_calls);
            let start = compiled
                .get(index)
                .map_or(core.range.start, |c| c.range.start) as u32;
            let rewrite = rewritten.and_then(|r| r.modules.get(index).cloned().flatten());
            // Registered in this order, after the whole component is read.
            owners.push(CodeOwner {
                module: ModuleId::from_index(self.modules.len() + index),
                start,
            });
            let compiled_as = Compiled::InComponent {
                text: text.clone(),
                index: index as u32,
            };
            registered.push((name, compiled_as, start, symbolizer, rewrite));
        }
        if registered.iter().any(|(.., s, _)| s.runtime().is_some()) {
            for (.., symbolizer, _) in &mut registered {
                symbolizer.runtime_shown_elsewhere();
            }
        }
        let first = self.modules.len();
        for (name, compiled_as, start, symbolizer, rewrite) in registered {
            self.register(&name, compiled_as, start, symbolizer, rewrite);
        }
        // A runtime's code may be in any module of the component.
        let modules = &self.modules;
        let ids = (first..modules.len()).map(ModuleId::from_index);
        for registered in self.runtimes.values_mut() {
            if registered.module.index() >= first {
                let own = registered.code[0].clone();
                let own_id = own.0;
                let others = ids.clone().filter(|&m| m != own_id);
                let others = others.map(|m| (m, modules[m].symbolizer.shared_wasm()));
                registered.code = std::iter::once(own).chain(others).collect();
            }
        }
        self.code_map.add_component(component, owners);
        Ok(())
    }

    fn register(
        &mut self,
        file_name: &str,
        compiled: Compiled,
        start: u32,
        symbolizer: ModuleSymbolizer,
        rewritten: Option<Arc<Rewritten>>,
    ) {
        if let Some(runtime) = symbolizer.runtime() {
            let module = self.next_module();
            let registered = RegisteredRuntime {
                module,
                runtime: runtime.clone(),
                code: Arc::new([(module, symbolizer.shared_wasm())]),
            };
            self.runtimes.insert(id_of(runtime), registered);
        }
        self.modules.push(RegisteredModule {
            compiled,
            start,
            build_id: BuildId::of(symbolizer.shared_wasm()),
            symbolizer,
            file_name: file_name.to_string(),
            rewritten,
        });
    }

    /// Warnings about the modules' symbols, and the runtimes' walks, not taken yet.
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        let mut warnings: Vec<Warning> = self
            .modules
            .iter_mut()
            .flat_map(|m| m.symbolizer.take_warnings())
            .collect();
        for registered in self.runtimes.values() {
            if let Some(why) = registered.runtime.walks_warning() {
                let file_name = &self.modules[registered.module].file_name;
                warnings.push(Warning::about(file_name, WarningKind::RuntimeWalks { why }));
            }
        }
        warnings
    }

    /// The registered modules, in the order of registration.
    pub fn modules(&self) -> impl Iterator<Item = ModuleId> {
        self.modules.ids()
    }

    /// The id the next module registered gets.
    fn next_module(&self) -> ModuleId {
        ModuleId::from_index(self.modules.len())
    }

    /// Registered module `module` as a profile's mapping names it.
    pub fn mapping(&self, module: ModuleId) -> Mapping {
        let m = &self.modules[module];
        Mapping {
            file_name: m.file_name.clone(),
            build_id: m.build_id.get().to_string(),
            size: m.symbolizer.wasm().len() as u64,
        }
    }

    /// The name of function `func_index` of registered module `module` (an import's: the
    /// function it imports).
    pub fn function_name(&self, module: ModuleId, func_index: u32) -> FunctionName {
        self.modules[module].symbolizer.function_name(func_index)
    }

    /// The WIT function that the `call_indirect` at `offset` of a component's shim reaches.
    pub fn lowered_call_name(&self, module: ModuleId, offset: u32) -> Option<&str> {
        self.modules[module]
            .symbolizer
            .lowered_indirect_call(offset)
    }

    /// Symbolizes `addresses` (function index, offset) of registered module `module` at once,
    /// for [`source_frames`](Self::source_frames).
    pub fn symbolize(&mut self, module: ModuleId, addresses: &[(u32, u32)]) {
        self.modules[module].symbolizer.symbolize(addresses);
    }

    /// The source frames of an address of registered module `module`, innermost first.
    pub fn source_frames(
        &mut self,
        module: ModuleId,
        func_index: u32,
        offset: u32,
    ) -> Arc<[SourceFrame]> {
        self.modules[module]
            .symbolizer
            .source_frames(func_index, offset)
    }

    /// The frames of a native sample, leaf first, into `frames`; for a sample of Pulley's
    /// bytecode, the opcode it ran, with its neighbours'.
    pub fn native_frames(
        &mut self,
        sample: NativeSample<'_>,
        frames: &mut Vec<RawFrame>,
    ) -> Option<OpcodeAt> {
        frames.clear();
        let mut opcode = None;
        let (leaf, callers, pcs) = match sample {
            // A leaf outside Wasm functions (a trampoline) is Wasmtime's.
            NativeSample::Guest(pcs) => (
                self.native_frame(pcs.native[0])
                    .map_or(RawFrame::Runtime, |(frame, _)| frame),
                &pcs.native[1..],
                pcs,
            ),
            NativeSample::Host(pcs) => (
                pcs.native
                    .get(1)
                    .map_or(RawFrame::Runtime, |&exit| self.exit_frame(exit)),
                &pcs.native[1..],
                pcs,
            ),
            NativeSample::Pulley(pcs) => {
                let (candidates, lr_and_records) = pcs
                    .native
                    .split_at(PULLEY_PC_CANDIDATES.min(pcs.native.len()));
                let leaf = self.pulley_leaf(candidates).and_then(|(pc, at)| {
                    opcode = Some(at);
                    self.native_frame(pc)
                });
                let callers = match self.link_register_is_caller(leaf, lr_and_records) {
                    true => lr_and_records,
                    false => lr_and_records.get(1..).unwrap_or_default(),
                };
                (
                    leaf.map_or(RawFrame::Runtime, |(frame, _)| frame),
                    callers,
                    pcs,
                )
            }
        };
        frames.push(leaf);
        for &pc in callers {
            // A return address follows its call instruction; trampolines are not guest frames;
            // a wrapper above the leaf only called its allocator's original body.
            if let Some((frame, false)) = self.native_frame(pc - 1) {
                frames.push(frame);
            }
        }
        if let Some(splice) = pcs.splice {
            self.splice(splice, frames);
        }
        opcode
    }

    /// The frames of a stack taken on the guest thread, leaf first: the backtrace's, and a
    /// runtime's stack spliced in where one was read.
    pub fn stack_frames(&mut self, stack: &GuestStack) -> Vec<RawFrame> {
        let all = stack.backtrace.frames();
        let Some(spliced) = &stack.splice else {
            return self.backtrace_frames(all);
        };
        let mut frames = self.backtrace_frames(&all[..spliced.at.min(all.len())]);
        let splice = Splice {
            runtime: spliced.runtime,
            words: &spliced.words,
        };
        self.splice(splice, &mut frames);
        frames
    }

    /// Has the runtime that read `splice` put it into `frames`, the sample's resolved native
    /// frames, leaf first.
    fn splice(&mut self, splice: Splice<'_>, frames: &mut Vec<RawFrame>) {
        let Some(RegisteredRuntime {
            module,
            runtime,
            code,
        }) = self.runtimes.get(&splice.runtime).cloned()
        else {
            return;
        };
        let native = self.runtime_native;
        let mut native_frame = |pc| self.native_frame(pc);
        let mut cx = SpliceContext {
            module,
            code: &code,
            native,
            native_frame: &mut native_frame,
        };
        runtime.splice(&mut cx, splice.words, frames);
    }

    /// What Wasmtime's `module` is: a registered module, an adapter in a registered
    /// component, or unknown.
    fn owner(&mut self, module: &Module) -> Owner {
        let alone = self
            .modules
            .iter_ids()
            .find_map(|(i, m)| match &m.compiled {
                Compiled::Module(registered) => Module::same(registered, module).then_some(i),
                Compiled::InComponent { .. } => None,
            });
        if let Some(i) = alone {
            return Owner::Registered(i);
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
        for (i, m) in self.modules.iter_ids() {
            if let Compiled::InComponent { text, index: n } = &m.compiled {
                if Some(*n) == index && text.contains(&code) {
                    owner = Owner::Registered(i);
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

    /// Frames of a backtrace Wasmtime captured, as raw frames, leaf first.
    fn backtrace_frames(&mut self, backtrace: &[FrameInfo]) -> Vec<RawFrame> {
        let mut frames = Vec::with_capacity(backtrace.len());
        for (depth, f) in backtrace.iter().enumerate() {
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
                    let offset = offset.saturating_sub(self.modules[m].start);
                    self.original(m, f.func_index(), offset)
                }
                None => (f.func_index(), offset, false),
            };
            // A wrapper above the leaf only called its allocator's original body. Under an
            // adapter's frame at the leaf, it is the leaf: in a component, a wrapper reports
            // through the gate the component was given (see `crate::memory::component`).
            if wrapper && depth == 1 && frames == [RawFrame::Runtime] {
                frames.clear();
            }
            if !wrapper || frames.is_empty() {
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
    fn original(&self, module: ModuleId, func_index: u32, offset: u32) -> (u32, u32, bool) {
        self.modules[module]
            .rewritten
            .as_ref()
            .and_then(|r| r.original(func_index, offset))
            .unwrap_or((func_index, offset, false))
    }

    /// Every compiled function of the registered modules, named, with the source line of
    /// each stretch of its code where DWARF (or Go's table) gives one: what Linux perf is told
    /// of JIT code (see [`crate::perf`]).
    pub fn code_listing(&mut self) -> Vec<ListedFunction> {
        let functions: Vec<CompiledFunction> = self.code_map.functions().collect();
        // Each instruction as its original module's (function index, offset).
        let originals: Vec<Vec<(u32, u32)>> = functions
            .iter()
            .map(|f| {
                f.instructions
                    .iter()
                    .map(|&(_, offset)| {
                        let (index, offset, _) = self.original(f.module, f.func_index, offset);
                        (index, offset)
                    })
                    .collect()
            })
            .collect();
        // Symbolized a module at a time: one pass over its DWARF.
        for module in self.modules.ids().collect::<Vec<_>>() {
            let addresses: Vec<(u32, u32)> = functions
                .iter()
                .zip(&originals)
                .filter(|(f, _)| f.module == module)
                .flat_map(|(_, a)| a.iter().copied())
                .collect();
            self.symbolize(module, &addresses);
        }
        let mut listing = Vec::with_capacity(functions.len());
        for (f, originals) in functions.into_iter().zip(originals) {
            let Some(&(func_index, _)) = originals.first() else {
                continue;
            };
            let name = self.function_name(f.module, func_index).name;
            let mut lines: Vec<SourceLine> = Vec::new();
            for (&(address, _), &(index, offset)) in f.instructions.iter().zip(&originals) {
                let source = self.source_frames(f.module, index, offset);
                // The innermost frame's: perf shows no inlined calls of JIT code.
                let Some(s) = source.first().filter(|s| s.line > 0 && !s.file.is_empty()) else {
                    continue;
                };
                if lines
                    .last()
                    .is_some_and(|l| l.line == s.line && l.file == s.file)
                {
                    continue;
                }
                lines.push(SourceLine {
                    address,
                    file: s.file.clone(),
                    line: s.line,
                });
            }
            listing.push(ListedFunction {
                code: f.code,
                name,
                lines,
            });
        }
        listing
    }

    /// The native code of every registered module.
    pub fn code_ranges(&self) -> Vec<Range<usize>> {
        self.code_map.text_ranges().collect()
    }

    /// The frame of what the Wasm code that `exit` returns to called: an import, or the
    /// runtime for a libcall.
    fn exit_frame(&mut self, exit: usize) -> RawFrame {
        if let Some(&found) = self.exit_frames.get(&exit) {
            return found;
        }
        let called = match self.native_frame(exit - 1) {
            Some((
                RawFrame::Wasm {
                    module: Some(module),
                    offset,
                    ..
                },
                false,
            )) => self.called_import(module, offset),
            // An allocator's wrapper calls the allocator hook through its table; its frame's
            // offset is its allocator's first byte, not that call.
            Some(_) => RawFrame::UnknownHostCall,
            None => RawFrame::Runtime,
        };
        self.exit_frames.insert(exit, called);
        called
    }

    /// The Wasm frame of a native code address, and whether it is in an allocator's wrapper;
    /// the signal sampler's samples repeat the same addresses, so each is looked up once.
    /// A Pulley sample's PC and the instruction there: of the `candidates` (see
    /// [`PULLEY_PC_CANDIDATES`]) in Wasm functions, the instruction most of them are in, the
    /// first's on a tie.
    fn pulley_leaf(&mut self, candidates: &[usize]) -> Option<(usize, OpcodeAt)> {
        let mut votes: Vec<(usize, OpcodeAt, usize)> = Vec::with_capacity(candidates.len());
        for &candidate in candidates.iter().filter(|&&c| c != 0) {
            let Some(code) = self.code_map.function_code(candidate) else {
                continue;
            };
            let Some(at) = self
                .function_ops(code.clone())
                .at((candidate - code.start) as u32)
            else {
                continue;
            };
            let start = code.start + at.offset as usize;
            match votes.iter_mut().find(|(pc, ..)| *pc == start) {
                Some((.., n)) => *n += 1,
                None => votes.push((start, at, 1)),
            }
        }
        let most = votes.iter().map(|&(.., n)| n).max()?;
        votes
            .into_iter()
            .find(|&(.., n)| n == most)
            .map(|(pc, at, _)| (pc, at))
    }

    /// The decoded instructions of the Pulley function whose bytecode is `code`.
    fn function_ops(&mut self, code: Range<usize>) -> &FunctionOps {
        let names = &mut self.opcode_names;
        self.function_ops.entry(code.start).or_insert_with(|| {
            // SAFETY: `code` is a function of a registered module's text, which the resolver
            // keeps alive with the module, and which Wasmtime never writes after loading.
            let bytes = unsafe { std::slice::from_raw_parts(code.start as *const u8, code.len()) };
            FunctionOps::decode(bytes, names)
        })
    }

    /// Whether a Pulley sample's link register (`pcs[0]`, before its frame records' return
    /// addresses) is its caller's return address: it is, before the leaf's frame record is
    /// pushed and after it is popped, unless it is the return address the record holds
    /// (`pcs[1]`, pushed) or one into the leaf's own function (left by a call the leaf made).
    fn link_register_is_caller(&mut self, leaf: Option<(RawFrame, bool)>, pcs: &[usize]) -> bool {
        let [lr, record @ ..] = pcs else {
            return false;
        };
        if record.first() == Some(lr) {
            return false;
        }
        let function = |frame: Option<(RawFrame, bool)>| match frame {
            Some((
                RawFrame::Wasm {
                    module, func_index, ..
                },
                _,
            )) => Some((module, func_index)),
            _ => None,
        };
        let caller = function(self.native_frame(lr.wrapping_sub(1)));
        caller.is_some() && caller != function(leaf)
    }

    fn native_frame(&mut self, pc: usize) -> Option<(RawFrame, bool)> {
        if let Some(&found) = self.native_frames.get(&pc) {
            return found;
        }
        let found = match self.code_map.lookup(pc) {
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
        };
        self.native_frames.insert(pc, found);
        found
    }

    /// The import that the call instruction at `offset` of registered module `module` calls; the runtime where the
    /// instruction is not a call (a libcall: `memory.grow`, a GC allocation).
    fn called_import(&self, module: ModuleId, offset: u32) -> RawFrame {
        let m = &self.modules[module].symbolizer;
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
}
