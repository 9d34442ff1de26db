//! What a command compiles of the program it runs: its allocators rewritten when a memory
//! profile is asked for, a component's language runtimes probed (compiled so in wasmspy's
//! cache, [`super::probed_cache`]).

use std::fs::Metadata;
use std::sync::Arc;

use crate::commands::probed_cache::{Cached, Entry, ProbedCache};
use crate::memory::component::{rewrite_component_noting, RewrittenComponent};
use crate::memory::rewrite::{rewrite, Rewritten};
use crate::runtime_probe::probe_runtimes;
use crate::shared::ModuleId;
use crate::wasi_host::{self, Program};
use crate::{Profiler, ProfilerHandle};
use anyhow::{Context, Result};
use wasmtime::component::Component;
use wasmtime::Engine;

/// The program as compiled.
pub struct Instrumented {
    pub allocators: Rewrite,
    /// A component with language runtimes inside, probed (after the allocator rewrite).
    probed: Option<Arc<[u8]>>,
    /// The component compiled already: wasmspy's cache had it.
    cached: Option<Component>,
    /// Its entry in wasmspy's cache, if it has one: what compiles it compiles into it.
    entry: Option<Entry>,
    /// Its core modules' build ids, where the entry kept them.
    build_ids: Option<Vec<String>>,
}

impl Instrumented {
    /// `wasm`, the program named `name` (read from `file`), its allocators rewritten if
    /// `memory`; a component's probed form found in `cache` (by `engine`'s settings) or put
    /// there when compiled.
    pub fn of(
        engine: &Engine,
        cache: Option<&ProbedCache>,
        wasm: &[u8],
        file: &Metadata,
        name: &str,
        memory: bool,
    ) -> Result<Self> {
        let component = wasmparser::Parser::is_component(wasm);
        // A memory profile's rewrite is made anew each run (Wasmtime caches what it compiles).
        let entry = match (memory, component, cache) {
            (false, true, Some(cache)) => Some(cache.entry(engine, wasm, file)),
            _ => None,
        };
        if let Some(cached) = entry.as_ref().and_then(|e| e.read(engine)) {
            let Cached {
                component,
                probed,
                build_ids,
            } = cached;
            return Ok(Instrumented {
                allocators: Rewrite::None,
                probed,
                cached: Some(component),
                entry,
                build_ids,
            });
        }
        let mut allocators = match memory {
            true => Rewrite::of(wasm, name)?,
            false => Rewrite::None,
        };
        let mut probed = match component {
            true => probe_runtimes(allocators.code(wasm))
                .with_context(|| format!("cannot show the language runtimes inside `{name}`"))?,
            false => None,
        };
        // The rewrite maps the code compiled back to the original: the probed component's.
        if let Rewrite::Component(r) = &mut allocators {
            if let Some(probed) = probed.take() {
                r.wasm = probed.to_vec();
            }
        }
        Ok(Instrumented {
            allocators,
            probed,
            cached: None,
            entry,
            build_ids: None,
        })
    }

    /// The program compiled: the instrumented program, or `original` when it is not.
    pub fn compile(&self, engine: &Engine, original: &[u8]) -> wasmtime::Result<Program> {
        let code = match &self.probed {
            Some(probed) => probed,
            None => self.allocators.code(original),
        };
        Ok(match (&self.cached, &self.entry) {
            (Some(component), _) => Program::Component(component.clone()),
            (None, Some(entry)) => {
                Program::Component(entry.write(engine, code, self.probed.is_some())?)
            }
            // By Wasmtime, through its cache if it has one.
            (None, None) => wasi_host::compile(engine, code)?,
        })
    }

    /// Registers `program`, compiled from `original` (the program named `name`), with
    /// `profiler`: in the original's terms where its allocators were rewritten, as the probed
    /// component where its runtimes were probed, its core modules' build ids taken from its
    /// cache entry where the entry kept them. Returns what [`keep_build_ids`](Self::keep_build_ids)
    /// needs.
    pub fn register(
        &self,
        profiler: &Profiler,
        name: &str,
        program: &Program,
        original: &Arc<[u8]>,
    ) -> Result<Registered> {
        let mut modules = Vec::new();
        match (program, &self.allocators) {
            (Program::Module(module), Rewrite::Module(r)) => {
                profiler.add_rewritten_module(name, module, original.clone(), r.clone())?
            }
            (Program::Module(module), _) => profiler.add_module(name, module, original.clone())?,
            (Program::Component(component), Rewrite::Component(r)) => {
                profiler.add_rewritten_component(name, component, original.clone(), r)?
            }
            (Program::Component(component), _) => {
                let wasm = self.registered(original);
                let ids = self.build_ids.clone();
                modules = profiler.register_component(|registry| match (&self.probed, ids) {
                    // Read while the guest runs. Not a probed component: its probe, called as
                    // the guest instantiates it, needs its modules, and would read them on the
                    // guest's thread, where that CPU is sampled as the guest's call to the
                    // probe (a probed fixture under load: 27 of its 121 samples, where the
                    // pipeline's thread had not read it first).
                    (None, Some(ids)) => {
                        registry.add_component_read_later(name, component, wasm, ids)
                    }
                    (_, ids) => registry.add_component(name, component, wasm, None, ids),
                })?
            }
        }
        Ok(Registered(modules))
    }

    /// Keeps the build ids of the component's core modules in its entry, if it has one that
    /// does not hold them yet (waiting for their hashing): after the profile is written, which
    /// needed them too.
    pub fn keep_build_ids(&self, profiler: &ProfilerHandle, registered: &Registered) {
        if let (Some(entry), None) = (&self.entry, &self.build_ids) {
            entry.keep_build_ids(&profiler.build_ids(&registered.0));
        }
    }

    /// Whether wasmspy's cache had the program compiled.
    pub fn was_cached(&self) -> bool {
        self.cached.is_some()
    }

    /// What to register the compiled program as, without an allocator rewrite: the probed
    /// component (the probes inside nested components move the modules after them in the
    /// binary, by whose offsets Wasmtime maps their code), or `original`.
    fn registered(&self, original: &Arc<[u8]>) -> Arc<[u8]> {
        match &self.probed {
            Some(probed) => probed.clone(),
            None => original.clone(),
        }
    }
}

/// A registered component's core modules (none for a module, or a rewritten component).
pub struct Registered(Vec<ModuleId>);

pub enum Rewrite {
    Module(Arc<Rewritten>),
    Component(RewrittenComponent),
    /// Nothing to rewrite: no allocator wasmspy knows.
    None,
}

impl Rewrite {
    /// The rewrite of `wasm`, the program named `name`; warns when it has nothing to rewrite.
    pub fn of(wasm: &[u8], name: &str) -> Result<Self> {
        let mut unrecognised = Vec::new();
        let rewritten = if wasmparser::Parser::is_component(wasm) {
            rewrite_component_noting(wasm, &mut unrecognised).map(|r| r.map(Rewrite::Component))
        } else {
            rewrite(wasm).map(|r| r.map(|r| Rewrite::Module(Arc::new(r))))
        }
        .with_context(|| format!("cannot instrument the allocators of `{name}`"))?;
        // A module whose allocators have no names and whose code is not recognised.
        for why in unrecognised {
            eprintln!(
                "wasmspy: warning: {name}/{why}: the memory profile leaves out its allocations"
            );
        }
        Ok(rewritten.unwrap_or_else(|| {
            eprintln!("wasmspy: warning: {name} has no allocator function wasmspy knows (malloc, free, __rust_alloc, ...): the memory profile will be empty");
            Rewrite::None
        }))
    }

    /// What to compile: the rewritten program, or `original` when there is none.
    pub fn code<'a>(&'a self, original: &'a [u8]) -> &'a [u8] {
        match self {
            Rewrite::Module(r) => &r.wasm,
            Rewrite::Component(r) => &r.wasm,
            Rewrite::None => original,
        }
    }
}
