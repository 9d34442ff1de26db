//! The resolve stage: maps what [`crate::capture`] captured (native program counters, Wasmtime
//! backtraces) to frames of the registered modules' code ([`RawFrame`]). The [`Resolver`] is
//! here with what it asks of a registered module; code is registered in [`registry`], mapped
//! to frames in [`frames`] (through the [`code_map`], host calls named by the import or WIT
//! function called, Pulley's bytecode decoded by [`pulley_ops`], the allocator rewrite's
//! offsets mapped back to the original module) and listed for Linux perf in [`code_listing`];
//! when a profile is built, frames are symbolized ([`symbolize`]).

pub mod build_id;
mod code_listing;
pub mod code_map;
mod frames;
mod machine_code;
pub mod pulley_ops;
mod registry;
#[cfg(feature = "cli")]
pub use registry::core_module_symbolizer;
pub mod symbolize;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use wasmtime::Module;

use crate::memory::rewrite::Rewritten;
use crate::profile::{Function, Id, Mapping, Table};
use crate::runtimes::Runtime;
use crate::shared::{ModuleId, RawFrame};
use crate::warning::{Warning, WarningKind};
use crate::wasm::module_bytes::ModuleBytes;
use build_id::BuildId;
use code_map::CodeMap;
use pulley_ops::FunctionOps;
use symbolize::host::HostSymbols;
use symbolize::source_map::{Searched, SourceMapSearch};
use symbolize::{FunctionName, ModuleSymbolizer, SourceFrame};

pub use code_listing::ListedFunction;
pub use machine_code::LeafCode;

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
    /// Where the modules' source maps are found, and whether a map comes before DWARF.
    source_maps: SourceMapSearch,
    prefer_source_maps: bool,
    /// Why maps given could not be read, until taken with the other warnings.
    source_map_warnings: Vec<String>,
    /// Whether interpreted runtimes' samples show their native frames with their own.
    runtime_native: bool,
    /// The registered modules of a language runtime, by the runtime's id (as samples name it,
    /// [`id_of`]).
    runtimes: FxHashMap<usize, RegisteredRuntime>,
    /// Components registered and not read yet: read at the resolver's next use
    /// ([`Resolver::read_pending`]).
    pending: Vec<registry::ComponentToRead>,
    /// Why pending components could not be read, until taken with the other warnings.
    unread: Vec<Warning>,
    /// Pulley functions' instructions, by the address of their code, once decoded.
    function_ops: FxHashMap<usize, FunctionOps>,
    opcode_names: HashMap<&'static str, Arc<str>>,
    /// A native code address in each Wasm function a leaf sample fell in, by its (original)
    /// module and function index: whose machine code profiles keep.
    sampled_code: FxHashMap<(ModuleId, u32), usize>,
    /// The host's frames' names (see [`RawFrame::Host`]).
    host_symbols: HostSymbols,
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
            sampled_code: FxHashMap::default(),
            use_dwarf,
            source_maps: SourceMapSearch::default(),
            prefer_source_maps: false,
            source_map_warnings: Vec::new(),
            runtime_native,
            runtimes: FxHashMap::default(),
            pending: Vec::new(),
            unread: Vec::new(),
            host_symbols: HostSymbols::new(use_dwarf),
        }
    }

    /// The language runtime of registered module `module`, where wasmspy reads one.
    pub fn runtime(&self, module: ModuleId) -> Option<Arc<dyn Runtime>> {
        self.modules[module].symbolizer.runtime().cloned()
    }

    /// The function of an interpreted frame (see [`RawFrame::Interpreted`]).
    pub fn interpreted_function(&self, module: ModuleId, code: u32) -> Option<Function> {
        self.modules[module].symbolizer.runtime()?.function(code)
    }

    /// Looks for the source maps of the modules registered from now on in `search` (see
    /// [`SourceMapSearch`]); `prefer`: a map's lines rather than DWARF's, where a module has
    /// both. `warnings`: why maps given could not be read.
    pub fn search_source_maps(
        &mut self,
        search: SourceMapSearch,
        prefer: bool,
        warnings: Vec<String>,
    ) {
        self.source_maps = search;
        self.prefer_source_maps = prefer;
        self.source_map_warnings = warnings;
    }

    /// Says that the module or component to be registered as `name` was read from `file`,
    /// where its source map may be found.
    pub fn module_file(&mut self, name: &str, file: &std::path::Path) {
        self.source_maps.module_file(name, file);
    }

    /// Has `symbolizer`, of the module registered as `name` (in the component registered as
    /// `name` when `searched` says so), take its source map, where it has one and wants it.
    fn find_source_map(
        &mut self,
        symbolizer: &mut ModuleSymbolizer,
        name: &str,
        searched: Searched,
    ) {
        if self.use_dwarf {
            let search = &mut self.source_maps;
            symbolizer.use_source_map(self.prefer_source_maps, |wasm| {
                search.find(name, wasm, searched)
            });
        }
    }

    /// The sources the registered modules' maps carry the text of and that are not on disk,
    /// each once: (path, text).
    #[cfg(feature = "cli")]
    pub fn carried_sources(&self) -> Vec<(String, String)> {
        let mut carried: Vec<(String, String)> = Vec::new();
        for module in self.modules.iter() {
            for (path, text) in module.symbolizer.carried_sources() {
                if !carried.iter().any(|(p, _)| p == path) {
                    carried.push((path.to_string(), text.to_string()));
                }
            }
        }
        carried
    }

    /// Warnings about the modules' symbols, and the runtimes' walks, not taken yet.
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        let mut unused = std::mem::take(&mut self.source_map_warnings);
        // Only once a module is registered is a map given that none took unused.
        if !self.modules.is_empty() {
            unused.extend(self.source_maps.unused());
            self.source_maps.forget_unused();
        }
        let mut warnings: Vec<Warning> = unused
            .into_iter()
            .map(|why| Warning {
                module: None,
                kind: WarningKind::SourceMap { why },
            })
            .collect();
        warnings.append(&mut self.unread);
        warnings.extend(
            self.modules
                .iter_mut()
                .flat_map(|m| m.symbolizer.take_warnings()),
        );
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
            start: 0,
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

    /// The source frames of host code at `address` (see [`RawFrame::Host`]), innermost first.
    pub fn host_source_frames(&mut self, address: u64) -> Arc<[SourceFrame]> {
        self.host_symbols.source_frames(address)
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
}
