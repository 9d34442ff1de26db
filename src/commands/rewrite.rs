//! What a command compiles of the program it runs: its allocators rewritten when a memory
//! profile is asked for, a component's language runtimes probed (compiled so in wasmspy's
//! cache, [`super::probed_cache`]).

use std::sync::Arc;

use crate::commands::probed_cache::{Cached, Entry, ProbedCache};
use crate::memory::component::{rewrite_component_noting, RewrittenComponent};
use crate::memory::rewrite::{rewrite, Rewritten};
use crate::runtime_probe::probe_runtimes;
use crate::wasi_host::{self, Program};
use anyhow::{Context, Result};
use wasmtime::component::Component;
use wasmtime::Engine;

/// The program as compiled.
pub struct Instrumented {
    pub allocators: Rewrite,
    /// A component with language runtimes inside, probed (after the allocator rewrite).
    probed: Option<Arc<[u8]>>,
    compile: Compile,
}

/// How the program is compiled.
enum Compile {
    /// By Wasmtime, through its cache if it has one.
    Wasmtime,
    /// Compiled already: wasmspy's cache had it.
    Cached(Component),
    /// By Wasmtime, into this entry of wasmspy's cache.
    Into(Entry),
}

impl Instrumented {
    /// `wasm`, the program named `name`, its allocators rewritten if `memory`; a component's
    /// probed form found in `cache` (by `engine`'s settings) or put there when compiled.
    pub fn of(
        engine: &Engine,
        cache: Option<&ProbedCache>,
        wasm: &[u8],
        name: &str,
        memory: bool,
    ) -> Result<Self> {
        let component = wasmparser::Parser::is_component(wasm);
        // A memory profile's rewrite is made anew each run (Wasmtime caches what it compiles).
        let entry = match (memory, component, cache) {
            (false, true, Some(cache)) => Some(cache.entry(engine, wasm)),
            _ => None,
        };
        if let Some(Cached { component, probed }) = entry.as_ref().and_then(|e| e.read(engine)) {
            return Ok(Instrumented {
                allocators: Rewrite::None,
                probed,
                compile: Compile::Cached(component),
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
        let compile = entry.map_or(Compile::Wasmtime, Compile::Into);
        // The rewrite maps the code compiled back to the original: the probed component's.
        if let Rewrite::Component(r) = &mut allocators {
            if let Some(probed) = probed.take() {
                r.wasm = probed.to_vec();
            }
        }
        Ok(Instrumented {
            allocators,
            probed,
            compile,
        })
    }

    /// The program compiled: the instrumented program, or `original` when it is not.
    pub fn compile(&self, engine: &Engine, original: &[u8]) -> wasmtime::Result<Program> {
        let code = match &self.probed {
            Some(probed) => probed,
            None => self.allocators.code(original),
        };
        Ok(match &self.compile {
            Compile::Cached(component) => Program::Component(component.clone()),
            Compile::Into(entry) => {
                Program::Component(entry.write(engine, code, self.probed.is_some())?)
            }
            Compile::Wasmtime => wasi_host::compile(engine, code)?,
        })
    }

    /// Whether wasmspy's cache had the program compiled.
    pub fn was_cached(&self) -> bool {
        matches!(self.compile, Compile::Cached(_))
    }

    /// What to register the compiled program as, without an allocator rewrite: the probed
    /// component (the probes inside nested components move the modules after them in the
    /// binary, by whose offsets Wasmtime maps their code), or `original`.
    pub fn registered(&self, original: &Arc<[u8]>) -> Arc<[u8]> {
        match &self.probed {
            Some(probed) => probed.clone(),
            None => original.clone(),
        }
    }
}

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
