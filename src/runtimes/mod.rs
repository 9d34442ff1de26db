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
pub mod in_component;
pub mod interpreted;
pub mod quickjs;
mod walk_counts;

use std::sync::Arc;

use anyhow::{bail, Result};
use wasmtime::{AsContextMut, Instance, WasmBacktrace};
use wasmtime_environ::{DefinedGlobalIndex, DefinedMemoryIndex, VMOffsets};

use crate::capture::vmctx::{fields_of, vmctx_and_memory, LinearMemory};
use crate::capture::{GuestStack, Spliced};
use crate::profile::Function;
use crate::resolve::symbolize::ModuleBytes;
use crate::resolve::{ModuleId, RawFrame};
use crate::warning::Warning;

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

    /// Reads the runtime's stack in `instance` into `pcs`, whose first `*depth` words are the
    /// sample's native frames, leaf first; `leaf_at` is the innermost Wasm frame's, where the
    /// sampler found one. Returns where the runtime's words start (`pcs[at..*depth]`, the
    /// native frames kept before them), or `None`, the sample left as it was. Async-signal-safe.
    ///
    /// # Safety
    /// `instance` must be an instance of this runtime's module that is alive.
    unsafe fn walk(
        &self,
        instance: &InstanceView,
        pcs: &mut [usize],
        depth: &mut usize,
        leaf_at: Option<usize>,
    ) -> Option<usize>;

    /// As [`walk`](Self::walk), on the guest thread from Wasmtime's `backtrace` (`at`, where
    /// the guest stopped): how many of its frames stay, and the runtime's words after them.
    ///
    /// # Safety
    /// As [`walk`](Self::walk).
    unsafe fn at_guest_thread(
        &self,
        instance: &InstanceView,
        backtrace: &WasmBacktrace,
        at: GuestPoint,
    ) -> Option<(usize, Vec<usize>)>;

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

    /// Where a module without DWARF gets its names and lines from, for the warning it gets.
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
    [go::detect, quickjs::detect, cpython::detect]
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
}

/// An instance of a runtime's module as walks read it: an anchor (the instance's `VMContext`,
/// or a [cell](RuntimeInstance::in_component) holding its memory's definition), where from it
/// the pointer to its memory's definition is, and where the globals its runtime reads are.
/// Valid while the instance lives; reading through it is `unsafe` for that reason.
#[derive(Clone, Copy, Debug)]
pub struct InstanceView {
    anchor: usize,
    memory: u32,
    globals: [u32; 2],
    root: u32,
}

impl InstanceView {
    /// `instance`, whose runtime reads its defined globals `globals` (at most two), checked
    /// against the memory Wasmtime reports.
    pub fn of(mut store: impl AsContextMut, instance: &Instance, globals: &[u32]) -> Result<Self> {
        if globals.len() > 2 {
            bail!("a runtime reads at most two globals");
        }
        let module = instance.module(&mut store).clone();
        let defined = globals.iter().map(|g| g + 1).max().unwrap_or(0);
        let fields = fields_of(&module, defined)?;
        if !globals.is_empty() && fields.num_imported_globals != 0 {
            bail!("the module imports globals");
        }
        let offsets = VMOffsets::from(fields);
        let mut at = [0; 2];
        for (slot, &g) in at.iter_mut().zip(globals) {
            *slot = offsets.vmctx_vmglobal_definition(DefinedGlobalIndex::from_u32(g));
        }
        let (vmctx, memory) = vmctx_and_memory(&mut store, instance)?;
        let view = InstanceView {
            anchor: vmctx,
            memory: offsets.vmctx_vmmemory_pointer(DefinedMemoryIndex::from_u32(0)),
            globals: at,
            root: 0,
        };
        let packed = InstanceView::unpack(vmctx, view.pack(), 0);
        if (packed.memory, packed.globals) != (view.memory, view.globals) {
            bail!("the instance's layout is larger than expected");
        }
        // SAFETY: the instance is alive: it is in `store`.
        unsafe { view.memory() }.check(&store, memory)?;
        Ok(view)
    }

    /// The offsets in one word, for the signal handler's table: 21 bits each.
    pub fn pack(&self) -> u64 {
        u64::from(self.memory) | u64::from(self.globals[0]) << 21 | u64::from(self.globals[1]) << 42
    }

    /// The view of `anchor` whose offsets are `packed` and whose runtime's state is at `root`.
    pub fn unpack(anchor: usize, packed: u64, root: u32) -> Self {
        let field = |shift: u32| (packed >> shift & ((1 << 21) - 1)) as u32;
        InstanceView {
            anchor,
            memory: field(0),
            globals: [field(21), field(42)],
            root,
        }
    }

    /// Where the runtime's state is in the memory ([`Runtime::root`]).
    pub fn root(&self) -> u32 {
        self.root
    }

    /// The memory as it is now.
    ///
    /// # Safety
    /// The instance must be alive: in its store's host functions, or in the signal handler
    /// while it is published ([`crate::capture`]'s table of runtime instances).
    pub unsafe fn memory(&self) -> LinearMemory {
        // SAFETY: the caller's contract.
        unsafe { LinearMemory::of(self.anchor, self.memory) }
    }

    /// The value of the `i`th global of those the view was made with.
    ///
    /// # Safety
    /// As [`memory`](Self::memory); `T` must be the global's type.
    pub unsafe fn global<T: Copy>(&self, i: usize) -> T {
        // SAFETY: the caller's contract: a live instance's global definition.
        unsafe { std::ptr::read_volatile((self.anchor + self.globals[i] as usize) as *const T) }
    }

    /// Where the view reads from, unique while the instance lives.
    pub fn anchor(&self) -> usize {
        self.anchor
    }
}

/// A runtime's instance, as the samplers read it (the signal handler's table, the epoch
/// callback, the allocator hook). Made only for an instance of the runtime's module, and kept
/// by the instance's store only.
#[derive(Clone)]
pub struct RuntimeInstance {
    runtime: Arc<dyn Runtime>,
    view: InstanceView,
    /// The anchor of a view of an instance inside a component, kept while the view is.
    _cell: Option<Arc<usize>>,
}

impl RuntimeInstance {
    /// `runtime`'s instance seen through `view`; why not, where its state is not found.
    ///
    /// # Safety
    /// `view` must be of an instance of `runtime`'s module, and this value must not outlive
    /// the instance's store.
    pub unsafe fn new(runtime: Arc<dyn Runtime>, mut view: InstanceView) -> Result<Self, String> {
        // SAFETY: the caller's contract: the instance is alive.
        view.root = runtime.root(&unsafe { view.memory() })?;
        Ok(RuntimeInstance {
            runtime,
            view,
            _cell: None,
        })
    }

    /// An instance of `runtime`'s module inside a component, which Wasmtime does not show
    /// but by the definition of its memory (`definition`, a `VMMemoryDefinition`): a cell
    /// holding it is the view's anchor. Its runtime reads no global.
    ///
    /// # Safety
    /// `definition` must be that of a memory of the store whose instance's value this is,
    /// which it must not outlive.
    pub unsafe fn in_component(
        runtime: Arc<dyn Runtime>,
        definition: usize,
    ) -> Result<Self, String> {
        if !runtime.globals().is_empty() {
            return Err(
                "the runtime reads globals, which an instance inside a component does not show"
                    .into(),
            );
        }
        let cell = Arc::new(definition);
        let mut view = InstanceView {
            anchor: &*cell as *const usize as usize,
            memory: 0,
            globals: [0; 2],
            root: 0,
        };
        // SAFETY: the caller's contract: the cell holds a live memory's definition.
        view.root = runtime.root(&unsafe { view.memory() })?;
        Ok(RuntimeInstance {
            runtime,
            view,
            _cell: Some(cell),
        })
    }

    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    pub fn view(&self) -> &InstanceView {
        &self.view
    }

    /// The guest stack on the guest thread, with the runtime's stack where it reads one.
    pub fn stack(&self, backtrace: WasmBacktrace, at: GuestPoint) -> GuestStack {
        // SAFETY: made for an instance of the runtime's module, alive while its store is,
        // which this value does not outlive.
        match unsafe { self.runtime.at_guest_thread(&self.view, &backtrace, at) } {
            Some((kept, words)) => GuestStack {
                backtrace,
                splice: Some(Spliced {
                    at: kept,
                    runtime: id_of(&self.runtime),
                    words,
                }),
            },
            None => GuestStack::wasm(backtrace),
        }
    }
}

/// What samples name a runtime by: the address of its value, unique while it lives.
pub fn id_of(runtime: &Arc<dyn Runtime>) -> usize {
    Arc::as_ptr(runtime) as *const () as usize
}
