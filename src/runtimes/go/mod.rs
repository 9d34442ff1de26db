//! Go (`GOOS=wasip1 GOARCH=wasm`): its own symbol table names the functions ([`module`]),
//! and its goroutine stacks, kept in linear memory, are read as Go's traceback reads them
//! ([`stack`]). Go's PCs replace the Wasm frames under the innermost Go frame, which Go
//! unwinds at every goroutine switch.

mod body;
pub mod module;
mod pclntab;
pub mod stack;

use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::FxHashMap;
use wasmtime::WasmBacktrace;

use super::walk_counts::WalkCounts;
use super::{
    GuestPoint, InstanceView, ModuleFacts, NamedFrame, NamedFunction, Runtime, SpliceContext,
};
use crate::shared::RawFrame;
use crate::warning::{Warning, WarningKind};
pub use module::{GoModule, Role, BUILD_ID_SECTION, FIRST_PC_F};
use stack::{GoCode, GoFrames, Registers, Start, NATIVE_RETURN};

/// A module built by Go.
pub struct Go {
    module: GoModule,
    /// Its native code, once compiled.
    code: OnceLock<GoCode>,
    /// Go PC → its Wasm function and offset, as resolved.
    locations: Mutex<FxHashMap<u64, Option<(u32, u32)>>>,
    counts: WalkCounts,
}

/// The Wasm frames of a Go module a sample keeps for its walk of Go's stack.
const MAX_WASM_FRAMES: usize = 64;

/// Go's runtime in `wasm`, if Go's compiler built it.
pub fn detect(
    file_name: &str,
    wasm: &[u8],
    facts: &ModuleFacts<'_>,
    warnings: &mut Vec<Warning>,
) -> Option<Arc<dyn Runtime>> {
    if !facts.custom_sections.contains(&BUILD_ID_SECTION) {
        return None;
    }
    let Some(module) = GoModule::read(wasm) else {
        warnings.push(Warning::about(file_name, WarningKind::RuntimeUnreadable {
            why: "built by Go, but its symbol table (pclntab) is unreadable: functions named by its name section".into(),
        }));
        return None;
    };
    Some(Arc::new(Go {
        module,
        code: OnceLock::new(),
        locations: Mutex::default(),
        counts: WalkCounts::default(),
    }))
}

impl Go {
    /// An instance's Go registers: global 0 (SP), global 2 (`g`); `None` before Go's runtime
    /// has started (either is 0), when the Wasm stack is all there is.
    ///
    /// # Safety
    /// As [`InstanceView::global`].
    unsafe fn registers(instance: &InstanceView) -> Option<Registers> {
        // SAFETY: the caller's contract; SP is an i32, `g` an i64.
        let registers = unsafe {
            Registers {
                sp: u64::from(instance.global::<u32>(0)),
                g: instance.global::<u64>(1),
            }
        };
        (registers.sp != 0 && registers.g != 0).then_some(registers)
    }
}

impl Runtime for Go {
    fn compiled(&self, module: &wasmtime::Module, original: &dyn Fn(u32) -> Option<u32>) {
        let imported = self.module.imported_functions();
        let _ = self
            .code
            .set(GoCode::new(module, GoFrames::of(&self.module), |index| {
                Some(original(index)?.checked_sub(imported)? + FIRST_PC_F)
            }));
    }

    fn globals(&self) -> &'static [u32] {
        &[0, 2]
    }

    unsafe fn walk(
        &self,
        instance: &InstanceView,
        pcs: &mut [usize],
        depth: &mut usize,
        leaf_at: Option<usize>,
    ) -> Option<usize> {
        let code = self.code.get()?;
        let leaf_at = leaf_at?;
        if !code.text().contains(pcs.get(leaf_at)?) {
            return None;
        }
        // SAFETY: the caller's contract.
        let (registers, memory) = unsafe { (Self::registers(instance)?, instance.memory()) };
        // The Go function of each Wasm frame, with its return address: the leaf at its PC,
        // callers at their calls. An allocator's wrapper is none.
        let mut wasm = [(0u32, 0usize); MAX_WASM_FRAMES];
        let mut count = 0;
        let mut first = None;
        for (i, &pc) in pcs[..*depth].iter().enumerate().skip(leaf_at) {
            let Some(pc_f) = code.pc_f_at(if i == 0 { pc } else { pc.wrapping_sub(1) }) else {
                continue;
            };
            // A function called as plain Wasm, innermost, has no frame on Go's stack: its
            // caller is the innermost Go frame.
            if count == 0 && code.frames.role(pc_f) == Some(Role::Plain) {
                continue;
            }
            first.get_or_insert(i);
            wasm[count] = (pc_f, pc);
            count += 1;
            if count == MAX_WASM_FRAMES {
                break;
            }
        }
        let at = first?;
        let start = match code.frames.role(wasm[0].0) {
            Some(Role::ResumeLoop) => Start::Resume,
            _ => Start::Leaf,
        };
        let go_at = at + 1;
        let walked = stack::walk(
            &code.frames,
            &memory,
            registers,
            &wasm[..count],
            start,
            &mut pcs[go_at..],
        );
        match self.counts.count(walked) {
            Some(written) => {
                *depth = go_at + written;
                Some(go_at)
            }
            // The Wasm frames, as many as were kept, for a stack that does not check out.
            None => {
                for (i, &(_, pc)) in wasm[..count].iter().enumerate() {
                    pcs[at + i] = pc;
                }
                *depth = at + count;
                None
            }
        }
    }

    unsafe fn at_guest_thread(
        &self,
        instance: &InstanceView,
        backtrace: &WasmBacktrace,
        at: GuestPoint,
    ) -> Option<(usize, Vec<usize>)> {
        let code = self.code.get()?;
        // SAFETY: the caller's contract.
        let (registers, memory) = unsafe { (Self::registers(instance)?, instance.memory()) };
        match at {
            GuestPoint::Epoch => stack::at_epoch(backtrace, code, &self.counts, registers, &memory),
            GuestPoint::Allocator => stack::at_allocator(code, &self.counts, registers, &memory),
        }
    }

    fn walks_warning(&self) -> Option<String> {
        self.counts.warning("Go's goroutine stacks")
    }

    fn splice(&self, cx: &mut SpliceContext<'_>, words: &[usize], frames: &mut Vec<RawFrame>) {
        let mut locations = crate::sync::lock(&self.locations);
        let wasm = &cx.code[0].1;
        for &pc in words {
            if pc & NATIVE_RETURN != 0 {
                if let Some((frame, false)) =
                    (cx.native_frame)((pc & !NATIVE_RETURN).wrapping_sub(1))
                {
                    frames.push(frame);
                }
                continue;
            }
            let location = *locations
                .entry(pc as u64)
                .or_insert_with(|| self.module.location_of(wasm, pc as u64));
            frames.extend(location.map(|(func_index, offset)| RawFrame::Wasm {
                module: Some(cx.module),
                func_index,
                offset,
            }));
        }
    }

    fn function_name(&self, index: u32) -> Option<NamedFunction> {
        let f = self.module.function(index)?;
        Some(NamedFunction {
            name: f.name.clone(),
            file: f.file.clone(),
            start_line: f.start_line,
        })
    }

    fn source_frames(&self, wasm: &[u8], func_index: u32, offset: u32) -> Option<Vec<NamedFrame>> {
        self.module.frames_at(wasm, func_index, offset)
    }
}
