//! The allocator rewrite of the program a command runs, when a memory profile is asked for.

use std::sync::Arc;

use anyhow::{Context, Result};
use wasmspy::memory::component::{rewrite_component, RewrittenComponent};
use wasmspy::memory::rewrite::{rewrite, Rewritten};

pub enum Rewrite {
    Module(Arc<Rewritten>),
    Component(RewrittenComponent),
    /// Nothing to rewrite: no allocator wasmspy knows.
    None,
}

impl Rewrite {
    /// The rewrite of `wasm`, the program named `name`; warns when it has nothing to rewrite.
    pub fn of(wasm: &[u8], name: &str) -> Result<Self> {
        let rewritten = if wasmparser::Parser::is_component(wasm) {
            rewrite_component(wasm).map(|r| r.map(Rewrite::Component))
        } else {
            rewrite(wasm).map(|r| r.map(|r| Rewrite::Module(Arc::new(r))))
        }
        .with_context(|| format!("cannot instrument the allocators of `{name}`"))?;
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
