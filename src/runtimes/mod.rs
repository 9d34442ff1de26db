//! Language runtimes whose own stacks live in a guest's linear memory: Go's goroutine stacks
//! ([`go`]), CPython's Python frames ([`cpython`]). One folder each, behind [`Runtime`]; the
//! samplers, the resolver, the symbolizer and the recorder know "a runtime", none by name.
//!
//! A runtime is [detected](detect) in a module's bytes when the module is registered. Its
//! instances are shown to the profiler ([`crate::ProfilerHandle::attach_instance`]) as an
//! [`InstanceView`], which the samplers hand to its walk: in the signal handler
//! (async-signal-safe, bounded, every read of linear memory checked against its length at
//! that instant), at an epoch, in the allocator hook. A walk writes words of the runtime's own
//! meaning (Go's PCs, packed Python frames) after the sample's native frames; the resolver has
//! the runtime [splice](Runtime::splice) them into the native frames it resolved, and the
//! recorder has it name the interpreted functions it made ([`Runtime::function`]).

pub mod cpython;
pub mod go;
mod instance;
pub mod interpreted;
pub mod quickjs;
pub mod spidermonkey;
mod walk_counts;

use std::sync::Arc;

use anyhow::Result;
use wasmtime::WasmBacktrace;

use crate::profile::Function;
use crate::shared::LinearMemory;
use crate::shared::{ModuleId, RawFrame};
use crate::warning::Warning;
use crate::wasm::module_bytes::ModuleBytes;
pub use instance::{InstanceView, RuntimeInstance};

/// A language runtime as the profile sees it in one module: see the module documentation.
pub trait Runtime: Send + Sync + 'static {
    /// Wasmtime compiled the runtime's module as `module` (from a rewrite whose function `i`
    /// is the original's `original(i)`, or from the module itself): what the walks need of
    /// its native code.
    fn compiled(&self, _module: &wasmtime::Module, _original: &dyn Fn(u32) -> Option<u32>) {}

    /// The defined globals of an instance its walks read (Go's SP and `g`), in this order.
    fn globals(&self) -> &'static [u32] {
        &[]
    }

    /// An interpreter's walk over its memory alone (QuickJS's, CPython's, SpiderMonkey's):
    /// writes its frames ([`interpreted::Frame`] words, each activation's ended by its marker)
    /// read from `memory`, from its state at `root` ([`Self::root`]), into `out`; how many, 0
    /// without frames or with some that do not check out. The default [`walk`](Self::walk) and
    /// [`at_guest_thread`](Self::at_guest_thread) run it. Async-signal-safe.
    fn walk_memory(&self, _memory: &LinearMemory, _root: u32, _out: &mut [usize]) -> usize {
        0
    }

    /// Reads the runtime's stack in `instance` into `pcs`, whose first `*depth` words are the
    /// sample's native frames, leaf first; `leaf_at` is the innermost Wasm frame's, where the
    /// sampler found one. Returns where the runtime's words start (`pcs[at..*depth]`, the
    /// native frames kept before them), or `None`, the sample left as it was. Async-signal-safe.
    /// By default, an interpreter's [`walk_memory`](Self::walk_memory), its frames after
    /// (some of) the native ones.
    ///
    /// # Safety
    /// `instance` must be an instance of this runtime's module that is alive.
    unsafe fn walk(
        &self,
        instance: &InstanceView,
        pcs: &mut [usize],
        depth: &mut usize,
        _leaf_at: Option<usize>,
    ) -> Option<usize> {
        // SAFETY: the caller's contract.
        unsafe {
            interpreted::after_native(instance, pcs, depth, |memory, root, out| {
                self.walk_memory(memory, root, out)
            })
        }
    }

    /// As [`walk`](Self::walk), on the guest thread from Wasmtime's `backtrace` (`at`, where
    /// the guest stopped): how many of its frames stay, and the runtime's words after them.
    ///
    /// # Safety
    /// As [`walk`](Self::walk).
    unsafe fn at_guest_thread(
        &self,
        instance: &InstanceView,
        backtrace: &WasmBacktrace,
        _at: GuestPoint,
    ) -> Option<(usize, Vec<usize>)> {
        // SAFETY: the caller's contract.
        unsafe {
            interpreted::on_guest_thread(instance, backtrace, |memory, root, out| {
                self.walk_memory(memory, root, out)
            })
        }
    }

    /// Where in `memory` the runtime's state its walks start from is (QuickJS's
    /// `JSRuntime`), found once as an instance is shown ([`InstanceView::root`]): 0 for a
    /// runtime whose walks need none; why not, for one whose state is not found.
    fn root(&self, _memory: &LinearMemory) -> Result<u32, String> {
        Ok(0)
    }

    /// Puts a sample's runtime `words` into its resolved native `frames` (leaf first).
    fn splice(&self, cx: &mut SpliceContext<'_>, words: &[usize], frames: &mut Vec<RawFrame>);

    /// The function of an interpreted frame this runtime's splice made
    /// ([`RawFrame::Interpreted`]); `None` from a runtime that makes none.
    fn function(&self, _code: u32) -> Option<Function> {
        None
    }

    /// The runtime's own name of its module's Wasm function `index`, file and first line.
    fn function_name(&self, _index: u32) -> Option<NamedFunction> {
        None
    }

    /// The runtime's own source frames at `offset` of function `func_index` of its module
    /// (`wasm`), innermost first, where it keeps a table of them (Go's pclntab).
    fn source_frames(
        &self,
        _wasm: &[u8],
        _func_index: u32,
        _offset: u32,
    ) -> Option<Vec<NamedFrame>> {
        None
    }

    /// Where the runtime's module, without DWARF, gets its names and lines from, for the
    /// warning it gets (said after "is"); `None`: the warning for the toolchain that built it
    /// (none for Go's, whose own table gives all DWARF would: [`crate::wasm::toolchain`]).
    fn without_dwarf(&self) -> Option<&'static str> {
        None
    }

    /// A warning about its walks so far, once a run: too many found its memory unreadable
    /// (see [`walk_counts::WalkCounts`]).
    fn walks_warning(&self) -> Option<String> {
        None
    }

    /// What a module whose DWARF is unreadable still shows, for the warning it gets.
    fn with_unreadable_dwarf(&self) -> Option<&'static str> {
        None
    }
}

/// Where the guest stopped when a stack is taken on its thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestPoint {
    /// At a check compiled into the guest's code, a function entry or loop header: the epoch
    /// sampler's, and the instructions clock's (fuel is checked where epochs are).
    Epoch,
    /// In the allocator hook, called by a rewritten allocator's wrapper once it returned.
    Allocator,
}

/// A function as its runtime names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedFunction {
    pub name: String,
    /// Empty when the runtime names none.
    pub file: String,
    pub start_line: u32,
}

/// A source frame as a runtime's own table gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedFrame {
    pub name: String,
    pub file: String,
    pub line: u32,
    pub start_line: u32,
}

/// What a runtime's splice may ask of the resolver.
pub struct SpliceContext<'a> {
    /// The registered module the runtime is detected in.
    pub module: ModuleId,
    /// The registered modules the runtime's native code may be in, with their bytes: its own
    /// first, then, in a component, the component's others (componentize-py's CPython has
    /// its data in one module, its code in another).
    pub code: &'a [(ModuleId, ModuleBytes)],
    /// Whether the runtime's own native frames are shown with its frames (`--native`).
    pub native: bool,
    /// The frame of a native code address.
    pub native_frame: &'a mut dyn FnMut(usize) -> Option<(RawFrame, bool)>,
}

/// The runtime of a module, detected in its bytes; `None` for a module of no runtime wasmspy
/// reads. What stops a runtime's stacks from being read is said in `warnings`.
pub fn detect(
    file_name: &str,
    wasm: &[u8],
    module: &ModuleFacts<'_>,
    warnings: &mut Vec<Warning>,
) -> Option<Arc<dyn Runtime>> {
    [
        go::detect,
        quickjs::detect,
        cpython::detect,
        spidermonkey::detect,
    ]
    .into_iter()
    .find_map(|detect| detect(file_name, wasm, module, warnings))
}

/// What the symbolizer read of a module that detection uses.
pub struct ModuleFacts<'a> {
    /// Its custom sections by name.
    pub custom_sections: &'a [&'a str],
    /// Its `.debug_str` section, empty without one.
    pub debug_str: &'a [u8],
    /// Whether its `name` section names a function so.
    pub defines: &'a dyn Fn(&str) -> bool,
    /// Whether its `name` section names any function it defines.
    pub names_functions: bool,
}

/// What samples name a runtime by: the address of its value, unique while it lives.
pub fn id_of(runtime: &Arc<dyn Runtime>) -> usize {
    Arc::as_ptr(runtime) as *const () as usize
}
