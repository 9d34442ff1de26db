//! What a command compiles of the program it runs: its allocators rewritten when a memory
//! profile is asked for, a component's language runtimes probed.

use std::sync::Arc;

use crate::memory::component::{rewrite_component_noting, RewrittenComponent};
use crate::memory::rewrite::{rewrite, Rewritten};
use crate::runtime_probe::probe_runtimes;
use anyhow::{Context, Result};

/// The program as compiled.
pub struct Instrumented {
    pub allocators: Rewrite,
    /// A component with language runtimes inside, probed (after the allocator rewrite).
    probed: Option<Arc<[u8]>>,
}

impl Instrumented {
    /// `wasm`, the program named `name`, its allocators rewritten if `memory`.
    pub fn of(wasm: &[u8], name: &str, memory: bool) -> Result<Self> {
        let allocators = match memory {
            true => Rewrite::of(wasm, name)?,
            false => Rewrite::None,
        };
        let mut allocators = allocators;
        let mut probed = match wasmparser::Parser::is_component(wasm) {
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
        Ok(Instrumented { allocators, probed })
    }

    /// What to compile: the instrumented program, or `original` when it is not.
    pub fn code<'a>(&'a self, original: &'a [u8]) -> &'a [u8] {
        match &self.probed {
            Some(probed) => probed,
            None => self.allocators.code(original),
        }
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
