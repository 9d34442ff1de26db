//! Registering code with a profiler: modules and components (rewritten for memory profiles or
//! not), whose names, lines and language runtimes are read from their bytes, and whose code
//! the sampler is then shown, before or after [`Profiler::start`].

use std::path::Path;
use std::sync::Arc;

use wasmtime::Module;

use super::{Profiler, ProfilerHandle, Result};
use crate::memory::rewrite::Rewritten;
use crate::shared::ModuleId;
use crate::sync::lock;

impl Profiler {
    /// Shows the sampler the code of a module just registered (one registered after
    /// [`start`](Self::start) is sampled too).
    fn code_registered(&self) {
        let code = self.handle.registry().code_ranges();
        lock(&self.handle.sampler).add_code(&code);
    }

    /// Registers a module so its frames are named and attributed to it, before or after
    /// [`start`](Self::start). `wasm` is the module's binary (not text) form; pass an
    /// `Arc<[u8]>` to share it rather than have it copied. Problems with its names or debug info
    /// are not errors: see [`ProfilerHandle::take_warnings`].
    pub fn add_module(
        &self,
        file_name: &str,
        module: &Module,
        wasm: impl Into<Arc<[u8]>>,
    ) -> Result<()> {
        let id = self
            .handle
            .resolver()
            .add_module(file_name, module, wasm.into(), None)?;
        self.code_registered();
        self.runtime_registered(id, module);
        Ok(())
    }

    /// Says that the module or component to be registered next as `file_name` was read from
    /// the file at `path`, so that its source map is found where its `sourceMappingURL`
    /// section points relative to it, or beside it (`path` + `.map`). Without it only maps
    /// given in [`ProfilerOptions::source_maps`](super::ProfilerOptions::source_maps), and
    /// those a module's section points to by an absolute path or URL, are found.
    pub fn module_path(&self, file_name: &str, path: &Path) {
        self.handle.resolver().module_file(file_name, path);
    }

    /// Keeps the runtime of a module just registered, if it has one, for its instances shown
    /// to [`ProfilerHandle::attach_instance`].
    fn runtime_registered(&self, id: ModuleId, module: &Module) {
        if let Some(runtime) = self.handle.resolver().runtime(id) {
            let text = module.text().as_ptr_range();
            let text = text.start as usize..text.end as usize;
            lock(&self.handle.runtimes).push((text, runtime));
        }
    }

    /// Registers a component (`wasmtime::component::Component`), as
    /// [`add_module`](Self::add_module) does a module: each of its core modules is a module of
    /// the profile (a mapping of its own, named `FILE/NAME` after the module's name), and a host
    /// call is named by the WIT function it lowers
    /// (`wasi:io/streams@0.2.0#[method]output-stream.blocking-write-and-flush`). `wasm` is the
    /// component's binary; only its core modules' bytes are kept.
    pub fn add_component(
        &self,
        file_name: &str,
        component: &wasmtime::component::Component,
        wasm: impl Into<Arc<[u8]>>,
    ) -> Result<()> {
        self.handle
            .resolver()
            .add_component(file_name, component, wasm.into(), None, None)?;
        self.code_registered();
        Ok(())
    }

    /// Registers a component by `register`, given the registry as it is (a component to be
    /// read later left unread: `Resolver::add_component_read_later`), then shows the samplers
    /// its code; returns its modules, whose ids [`ProfilerHandle::build_ids`] gives. For a
    /// command that kept its core modules' build ids from an earlier run.
    #[cfg(feature = "cli")]
    pub(crate) fn register_component(
        &self,
        register: impl FnOnce(&mut crate::resolve::Resolver) -> anyhow::Result<Vec<ModuleId>>,
    ) -> Result<Vec<ModuleId>> {
        let modules = register(&mut self.handle.registry())?;
        self.code_registered();
        Ok(modules)
    }

    /// As [`add_component`](Self::add_component), for a component compiled from
    /// `rewritten.wasm`, the allocator rewrite of `original` (see
    /// [`crate::memory::component`]); define the hook it imports with
    /// [`define_component_allocator_hook`](Self::define_component_allocator_hook).
    pub fn add_rewritten_component(
        &self,
        file_name: &str,
        component: &wasmtime::component::Component,
        original: impl Into<Arc<[u8]>>,
        rewritten: &crate::memory::component::RewrittenComponent,
    ) -> Result<()> {
        self.handle.resolver().add_component(
            file_name,
            component,
            original.into(),
            Some(rewritten),
            None,
        )?;
        self.code_registered();
        Ok(())
    }

    /// As [`add_module`](Self::add_module), for a module compiled from `rewritten`, the
    /// allocator rewrite of `original` (see [`crate::memory::rewrite`]): its samples are
    /// symbolized in the original's terms, each allocator shown once.
    pub fn add_rewritten_module(
        &self,
        file_name: &str,
        module: &Module,
        original: impl Into<Arc<[u8]>>,
        rewritten: Arc<Rewritten>,
    ) -> Result<()> {
        let id = self.handle.resolver().add_module(
            file_name,
            module,
            original.into(),
            Some(rewritten.clone()),
        )?;
        self.code_registered();
        self.runtime_registered(id, module);
        Ok(())
    }
}

impl ProfilerHandle {
    /// The sources the registered modules' source maps carry the text of (`sourcesContent`)
    /// and that are not on disk: (path, text).
    #[cfg(feature = "cli")]
    pub(crate) fn carried_sources(&self) -> Vec<(String, String)> {
        self.resolver().carried_sources()
    }

    /// The build ids of registered modules `modules`, waiting for those still being hashed.
    #[cfg(feature = "cli")]
    pub(crate) fn build_ids(&self, modules: &[ModuleId]) -> Vec<String> {
        self.resolver().build_ids(modules)
    }
}
