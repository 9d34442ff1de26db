//! Registering code with the resolver: modules, components (each core module registered
//! apart, its imports named by the WIT functions they lower), rewrites of either, and the
//! language runtimes detected in them.

use std::ops::Range;
use std::sync::Arc;

use anyhow::{Context, Result};
use wasmtime::component::Component;
use wasmtime::Module;

use super::build_id::BuildId;
use super::code_map::CodeOwner;
use super::symbolize::source_map::Searched;
use super::symbolize::ModuleSymbolizer;
use super::{Compiled, RegisteredModule, RegisteredRuntime, Resolver};
use crate::memory::component::RewrittenComponent;
use crate::memory::rewrite::Rewritten;
use crate::profile::Id;
use crate::runtimes::{id_of, Runtime};
use crate::shared::ModuleId;
use crate::warning::{Warning, WarningKind};
use crate::wasm::component::{core_modules, CoreModule, PROBE_MODULE};
use crate::wasm::module_bytes::ModuleBytes;

impl Resolver {
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
        self.read_pending();
        let id = self.next_module();
        self.code_map.add(id, module);
        let compiled = Compiled::Module(module.clone());
        let mut symbolizer =
            ModuleSymbolizer::new(file_name, ModuleBytes::whole(wasm), self.use_dwarf)?;
        self.find_source_map(&mut symbolizer, file_name, Searched::Module);
        if let Some(runtime) = symbolizer.runtime() {
            runtime.compiled(module, &|index| match &rewritten {
                Some(r) => r.original_function(index),
                None => Some(index),
            });
        }
        self.register(file_name, compiled, 0, symbolizer, rewritten, None);
        Ok(id)
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

    /// Registers a component: each of its core modules is a module of its own, named
    /// `FILE/NAME` by its `name` section's module name (`FILE/module0` without one), its
    /// imports named by the WIT functions they lower. When `component` was compiled from
    /// `rewritten`, the allocator rewrite of `wasm`, its code is mapped back to `wasm`'s.
    /// `build_ids`: its core modules' build ids, in order, where they are known (else hashed).
    /// Returns the modules registered, in order.
    pub fn add_component(
        &mut self,
        file_name: &str,
        component: &Component,
        wasm: Arc<[u8]>,
        rewritten: Option<&RewrittenComponent>,
        build_ids: Option<Vec<String>>,
    ) -> Result<Vec<ModuleId>> {
        self.read_pending();
        let registered = ComponentToRead::new(file_name, component, wasm, build_ids);
        self.read_component(registered, rewritten)
    }

    /// As [`add_component`](Self::add_component), its core modules' build ids known (an
    /// earlier run kept them): registered by them alone, its modules read at the resolver's
    /// next use ([`read_pending`](Self::read_pending)), not here: a warm start of `wasmspy
    /// record` reads them on the pipeline's thread while the guest runs (~1 ms of the Rust
    /// fixture's 12).
    #[cfg(feature = "cli")]
    pub fn add_component_read_later(
        &mut self,
        file_name: &str,
        component: &Component,
        wasm: Arc<[u8]>,
        build_ids: Vec<String>,
    ) -> Result<Vec<ModuleId>> {
        self.read_pending();
        let (first, count) = (self.modules.len(), build_ids.len());
        let registered = ComponentToRead::new(file_name, component, wasm, Some(build_ids));
        if count == 0 {
            return self.read_component(registered, None);
        }
        self.pending.push(registered);
        Ok((first..first + count).map(ModuleId::from_index).collect())
    }

    /// Reads the components registered and not read yet (see
    /// [`add_component`](Self::add_component)). One whose bytes cannot be read (they compiled,
    /// so they can) is a warning, and its frames stay unnamed.
    pub fn read_pending(&mut self) {
        for pending in std::mem::take(&mut self.pending) {
            let file_name = pending.file_name.clone();
            if let Err(e) = self.read_component(pending, None) {
                let why = format!("{e:#}");
                let warning = Warning::about(&file_name, WarningKind::DamagedNames { why });
                self.unread.push(warning);
            }
        }
    }

    /// The text of every component registered and not read yet.
    pub(super) fn pending_texts(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.pending.iter().map(|p| {
            let text = p.component.text().as_ptr_range();
            text.start as usize..text.end as usize
        })
    }

    /// Reads `registered`'s core modules (see [`add_component`](Self::add_component)).
    fn read_component(
        &mut self,
        registered: ComponentToRead,
        rewritten: Option<&RewrittenComponent>,
    ) -> Result<Vec<ModuleId>> {
        let ComponentToRead {
            file_name,
            component,
            wasm,
            build_ids,
        } = registered;
        let file_name = file_name.as_str();
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
            let range = core.range.clone();
            let (name, mut symbolizer, tooling) =
                core_module_symbolizer(file_name, &wasm, index, core, self.use_dwarf)?;
            if !tooling {
                self.find_source_map(&mut symbolizer, file_name, Searched::InComponent);
            }
            let start = compiled.get(index).map_or(range.start, |c| c.range.start) as u32;
            let rewrite = rewritten.and_then(|r| r.modules.get(index).cloned().flatten());
            // Allocators found by their code's shape, where the module names none.
            if let Some(rewrite) = &rewrite {
                symbolizer.name_functions(&rewrite.c_names());
            }
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
        // Ids for another component's modules (a different count) are not its.
        let mut build_ids = build_ids
            .filter(|ids| ids.len() == registered.len())
            .map(Vec::into_iter);
        for (name, compiled_as, start, symbolizer, rewrite) in registered {
            let build_id = build_ids.as_mut().and_then(Iterator::next);
            self.register(&name, compiled_as, start, symbolizer, rewrite, build_id);
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
        self.code_map.add_component(&component, owners);
        Ok((first..self.modules.len())
            .map(ModuleId::from_index)
            .collect())
    }

    /// The build ids of registered modules `modules`, each once hashed.
    #[cfg(feature = "cli")]
    pub fn build_ids(&self, modules: &[ModuleId]) -> Vec<String> {
        let ids = modules.iter().map(|&m| self.modules[m].build_id.get());
        ids.map(str::to_string).collect()
    }

    fn register(
        &mut self,
        file_name: &str,
        compiled: Compiled,
        start: u32,
        symbolizer: ModuleSymbolizer,
        rewritten: Option<Arc<Rewritten>>,
        build_id: Option<String>,
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
            build_id: match build_id {
                Some(id) => BuildId::known(id),
                None => BuildId::of(symbolizer.shared_wasm()),
            },
            symbolizer,
            file_name: file_name.to_string(),
            rewritten,
        });
    }
}

/// A component registered, its modules read then or at the resolver's next use.
pub(super) struct ComponentToRead {
    file_name: String,
    component: Component,
    wasm: Arc<[u8]>,
    build_ids: Option<Vec<String>>,
}

impl ComponentToRead {
    fn new(
        file_name: &str,
        component: &Component,
        wasm: Arc<[u8]>,
        build_ids: Option<Vec<String>>,
    ) -> Self {
        ComponentToRead {
            file_name: file_name.to_string(),
            component: component.clone(),
            wasm,
            build_ids,
        }
    }
}

/// Core module `index` of the component `wasm` (read from `file_name`), `core`, as a profile
/// names it (`FILE/NAME` by its `name` section's module name, `FILE/module0` without one),
/// with its symbolizer: its imports named by the WIT functions they lower, a shim's stubs and
/// calls named; and whether tooling made it (an adapter, a shim: no debug info, no source map
/// to look for).
pub fn core_module_symbolizer(
    file_name: &str,
    wasm: &Arc<[u8]>,
    index: usize,
    core: CoreModule,
    use_dwarf: bool,
) -> Result<(String, ModuleSymbolizer, bool)> {
    let module_name = match &core.name {
        Some(name) => name.clone(),
        None => format!("module{index}"),
    };
    let name = format!("{file_name}/{module_name}");
    let bytes = ModuleBytes::within(wasm.clone(), core.range.clone())
        .context("a core module beyond the component's end")?;
    let mut symbolizer = ModuleSymbolizer::new(&name, bytes, use_dwarf)?;
    symbolizer.qualify_unnamed(&module_name);
    // wit-component's adapters, shims and fixups carry no debug info, nor do the modules
    // that show wasmspy a runtime's instance.
    let tooling = module_name.starts_with("wit-component:") || module_name == PROBE_MODULE;
    if tooling {
        symbolizer.expect_no_dwarf();
    }
    symbolizer.name_imports(&core.lowered_imports);
    symbolizer.name_functions(&core.stub_names);
    symbolizer.name_lowered_indirect_calls(core.lowered_indirect_calls);
    Ok((name, symbolizer, tooling))
}
