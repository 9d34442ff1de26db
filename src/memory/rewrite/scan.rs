//! What the rewriter needs to know of a module, read in one pass ([`Scan`]): its function
//! types, its imports and the sizes of the index spaces it appends to, its defined functions
//! and where their bodies are, their names and exports; and whether a function's signature
//! lets it be a given allocator.

use std::collections::HashMap;
use std::ops::Range;

use anyhow::{Context, Result};
use wasmparser::{CompositeInnerType, KnownCustom, Name, Parser, Payload, TypeRef};

use super::allocators::Allocator;

/// What the rewriter needs to know of a module.
#[derive(Default)]
pub(super) struct Scan {
    /// Function types' (params, results); `None` for other types (GC structs, arrays).
    pub(super) types: Vec<Option<(Vec<wasmparser::ValType>, Vec<wasmparser::ValType>)>>,
    pub(super) imported_functions: u32,
    pub(super) imported_tables: u32,
    pub(super) imported_memories: u32,
    pub(super) defined: Vec<Defined>,
    pub(super) tables: u32,
    pub(super) memories: u32,
    /// Every global's (type, mutable), imported ones first.
    pub(super) globals: Vec<(wasmparser::ValType, bool)>,
    pub(super) names: HashMap<u32, String>,
    /// Exported functions, by export name.
    pub(super) exports: HashMap<String, u32>,
}

/// A defined function's place in the module.
pub(super) struct Defined {
    pub(super) type_index: u32,
    /// The body's bytes (locals and code), without its size.
    pub(super) body: Range<usize>,
}

impl Scan {
    pub(super) fn of(wasm: &[u8]) -> Result<Self> {
        let mut scan = Scan::default();
        let mut function_types = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.context("malformed Wasm module")? {
                Payload::TypeSection(reader) => {
                    for group in reader {
                        for ty in group?.into_types() {
                            scan.types.push(match ty.composite_type.inner {
                                CompositeInnerType::Func(f) => {
                                    Some((f.params().to_vec(), f.results().to_vec()))
                                }
                                _ => None,
                            });
                        }
                    }
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        match import?.ty {
                            TypeRef::Func(_) | TypeRef::FuncExact(_) => {
                                scan.imported_functions += 1
                            }
                            TypeRef::Table(_) => scan.imported_tables += 1,
                            TypeRef::Memory(_) => scan.imported_memories += 1,
                            TypeRef::Global(g) => scan.globals.push((g.content_type, g.mutable)),
                            _ => {}
                        }
                    }
                }
                Payload::FunctionSection(reader) => {
                    for ty in reader {
                        function_types.push(ty?);
                    }
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export?;
                        if export.kind == wasmparser::ExternalKind::Func {
                            scan.exports.insert(export.name.to_string(), export.index);
                        }
                    }
                }
                Payload::TableSection(reader) => scan.tables = reader.count(),
                Payload::MemorySection(reader) => scan.memories = reader.count(),
                Payload::GlobalSection(reader) => {
                    for global in reader {
                        let ty = global?.ty;
                        scan.globals.push((ty.content_type, ty.mutable));
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let type_index = *function_types
                        .get(scan.defined.len())
                        .context("more function bodies than functions")?;
                    scan.defined.push(Defined {
                        type_index,
                        body: body.range(),
                    });
                }
                Payload::CustomSection(reader) => {
                    if let KnownCustom::Name(names) = reader.as_known() {
                        for subsection in names.into_iter().flatten() {
                            if let Name::Function(map) = subsection {
                                for naming in map.into_iter().flatten() {
                                    scan.names.insert(naming.index, naming.name.to_string());
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(scan)
    }

    pub(super) fn defined(&self, index: u32) -> Option<&Defined> {
        self.defined
            .get(index.checked_sub(self.imported_functions)? as usize)
    }

    /// The (parameters, results) of defined function `index`.
    pub(super) fn signature(
        &self,
        index: u32,
    ) -> Option<&(Vec<wasmparser::ValType>, Vec<wasmparser::ValType>)> {
        self.defined(index)
            .and_then(|d| self.types.get(d.type_index as usize))
            .and_then(Option::as_ref)
    }

    /// The number of parameters of function `index` if it can be `allocator`.
    pub(super) fn allocator_params(&self, index: u32, allocator: Allocator) -> Option<u32> {
        let (params, results) = self.signature(index)?;
        if allocator == Allocator::HostCalled {
            return Some(params.len() as u32);
        }
        let i32s =
            |types: &[wasmparser::ValType]| types.iter().all(|&t| t == wasmparser::ValType::I32);
        // Go keeps its stack pointer in global 0, and the arguments at it.
        let go_stack = allocator != Allocator::GoMallocgc
            || self.globals.first() == Some(&(wasmparser::ValType::I32, true));
        (i32s(params)
            && i32s(results)
            && allocator.accepts(params.len(), results.len())
            && go_stack)
            .then_some(params.len() as u32)
    }
}
