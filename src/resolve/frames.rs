//! Captured code to frames of the registered modules: a signal sample's native PCs (Wasm
//! code, host calls by the import or WIT function called, Pulley's bytecode), a backtrace
//! taken on the guest's thread, and a language runtime's words spliced into either; a
//! rewrite's offsets mapped back to the original module.

use std::ops::Range;

use wasmtime::{FrameInfo, Module};

use super::code_map::CodeLocation;
use super::machine_code::LeafCode;
use super::pulley_ops::{FunctionOps, OpcodeAt};
use super::{Compiled, Owner, RegisteredRuntime, Resolver};
use crate::capture::{NativeSample, Splice, PULLEY_PC_CANDIDATES};
use crate::runtimes::SpliceContext;
use crate::shared::{GuestStack, ModuleId, RawFrame};

impl Resolver {
    /// The frames of a native sample, leaf first, into `frames`; where the leaf is in a Wasm
    /// function, where in its code: for a sample of Pulley's bytecode, the opcode it ran,
    /// with its neighbours'.
    pub fn native_frames(
        &mut self,
        sample: NativeSample<'_>,
        frames: &mut Vec<RawFrame>,
    ) -> Option<LeafCode> {
        frames.clear();
        let mut code = None;
        let (leaf, callers, pcs) = match sample {
            // A leaf outside Wasm functions (a trampoline) is Wasmtime's.
            NativeSample::Guest(pcs) => {
                let pc = pcs.native[0];
                let leaf = self
                    .native_frame(pc)
                    .map_or(RawFrame::Runtime, |(frame, _)| frame);
                code = self.machine_offset(pc, leaf).map(LeafCode::Machine);
                (leaf, &pcs.native[1..], pcs)
            }
            NativeSample::Host(pcs) => {
                // The host's frames, leaf first: a return address less one is in its call.
                let host = &pcs.native[..pcs.host.min(pcs.native.len())];
                frames.extend(host.iter().enumerate().map(|(i, &pc)| RawFrame::Host {
                    address: (pc - usize::from(i > 0)) as u64,
                }));
                let under = pcs.host.max(1);
                let leaf = match pcs.native.get(under) {
                    Some(&exit) => self.exit_frame(exit),
                    None if host.is_empty() => RawFrame::Runtime,
                    None => RawFrame::HostRoot,
                };
                (leaf, pcs.native.get(under..).unwrap_or_default(), pcs)
            }
            NativeSample::Pulley(pcs) => {
                let (candidates, lr_and_records) = pcs
                    .native
                    .split_at(PULLEY_PC_CANDIDATES.min(pcs.native.len()));
                let leaf = self.pulley_leaf(candidates).and_then(|(pc, at)| {
                    code = Some(LeafCode::Pulley(at));
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
        code
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

    /// The original function index and code offset of code in a registered module, and whether
    /// it is an allocator's wrapper (see [`crate::memory::rewrite`]).
    pub(super) fn original(
        &self,
        module: ModuleId,
        func_index: u32,
        offset: u32,
    ) -> (u32, u32, bool) {
        self.modules[module]
            .rewritten
            .as_ref()
            .and_then(|r| r.original(func_index, offset))
            .unwrap_or((func_index, offset, false))
    }
}
