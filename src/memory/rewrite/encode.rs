//! Writes the rewritten module ([`Scan::encode`]): every section of the original copied as it
//! is but those the rewriter appends to, which are re-encoded with its additions, and the code
//! section, where each wrapped function's body is replaced by its wrapper and moved, byte for
//! byte, after the last function. Every other function body stays byte-identical; the result is
//! validated.

use std::collections::HashMap;

use anyhow::{Context, Result};
use wasm_encoder::reencode::{Reencode, RoundtripReencoder};
use wasm_encoder::{
    CodeSection, ExportSection, FunctionSection, GlobalSection, MemorySection, Module, RawSection,
    TableSection, TypeSection,
};
use wasmparser::{Parser, Payload};

use super::allocators::Allocator;
use super::hook::add_hook_type;
use super::scan::Scan;
use super::sections::{Added, SectionId};

impl Scan {
    /// The rewritten module's bytes; `tell`: whether allocators' wrappers tell the hook they
    /// enter and leave.
    pub(super) fn encode(
        &self,
        wasm: &[u8],
        wrapped: &[(u32, Allocator)],
        tell: bool,
    ) -> Result<Vec<u8>> {
        let total_functions = self.imported_functions + self.defined.len() as u32;
        // The moved original bodies, in `wrapped` order, after every existing function.
        let moved_index: HashMap<u32, u32> = wrapped
            .iter()
            .enumerate()
            .map(|(j, &(index, _))| (index, total_functions + j as u32))
            .collect();
        let added = Added {
            hook_type: self.types.len() as u32,
            hook_table: self.imported_tables + self.tables,
            flags: self.imported_memories + self.memories,
            depth: self.globals.len() as u32,
            countdown: self.globals.len() as u32 + 1,
            tell,
        };

        let mut re = RoundtripReencoder;
        let mut out = Module::new();
        let mut pending = vec![
            SectionId::Table,
            SectionId::Memory,
            SectionId::Global,
            SectionId::Export,
        ];
        let mut code = CodeSection::new();
        let mut in_code = false;
        for payload in Parser::new(0).parse_all(wasm) {
            let payload = payload?;
            let id = payload.as_section().map(|(id, _)| id);
            // Sections we append to but the module lacks go where the binary format orders them.
            if let Some(order) = id.and_then(SectionId::order_of) {
                while let Some(&missing) = pending.first().filter(|s| s.order() < order) {
                    pending.remove(0);
                    added.emit_new(&mut out, missing);
                }
            }
            match payload {
                Payload::TypeSection(reader) => {
                    let mut types = TypeSection::new();
                    re.parse_type_section(&mut types, reader)?;
                    add_hook_type(&mut types);
                    out.section(&types);
                }
                Payload::FunctionSection(reader) => {
                    let mut functions = FunctionSection::new();
                    re.parse_function_section(&mut functions, reader)?;
                    for &(index, _) in wrapped {
                        functions.function(self.defined(index).context("not defined")?.type_index);
                    }
                    out.section(&functions);
                }
                Payload::TableSection(reader) => {
                    pending.retain(|&s| s != SectionId::Table);
                    let mut tables = TableSection::new();
                    re.parse_table_section(&mut tables, reader)?;
                    added.tables(&mut tables);
                    out.section(&tables);
                }
                Payload::MemorySection(reader) => {
                    pending.retain(|&s| s != SectionId::Memory);
                    let mut memories = MemorySection::new();
                    re.parse_memory_section(&mut memories, reader)?;
                    added.memories(&mut memories);
                    out.section(&memories);
                }
                Payload::GlobalSection(reader) => {
                    pending.retain(|&s| s != SectionId::Global);
                    let mut globals = GlobalSection::new();
                    re.parse_global_section(&mut globals, reader)?;
                    added.globals(&mut globals);
                    out.section(&globals);
                }
                Payload::ExportSection(reader) => {
                    pending.retain(|&s| s != SectionId::Export);
                    let mut exports = ExportSection::new();
                    re.parse_export_section(&mut exports, reader)?;
                    added.exports(&mut exports);
                    out.section(&exports);
                }
                Payload::CodeSectionStart { .. } => in_code = true,
                Payload::CodeSectionEntry(body) => {
                    let index = self.imported_functions + code.len();
                    match wrapped.iter().find(|&&(i, _)| i == index) {
                        Some(&(_, Allocator::HostCalled)) => {
                            let (params, results) =
                                self.signature(index).context("not a function")?;
                            let [params, results] = [params, results].map(|types| {
                                types
                                    .iter()
                                    .map(|&t| re.val_type(t))
                                    .collect::<Result<Vec<_>, _>>()
                            });
                            code.function(&added.host_called_wrapper(
                                &params?,
                                &results?,
                                moved_index[&index],
                            ));
                        }
                        Some(&(_, allocator)) => {
                            let params = self
                                .allocator_params(index, allocator)
                                .context("not an allocator")?;
                            code.function(&added.wrapper(allocator, params, moved_index[&index]));
                        }
                        None => {
                            code.raw(&wasm[body.range()]);
                        }
                    }
                    if code.len() as usize == self.defined.len() {
                        for &(index, _) in wrapped {
                            code.raw(
                                &wasm[self.defined(index).context("not defined")?.body.clone()],
                            );
                        }
                        out.section(&code);
                        in_code = false;
                    }
                }
                Payload::End(_) => {}
                other => {
                    if let Some((id, range)) = other.as_section() {
                        if !in_code {
                            out.section(&RawSection {
                                id,
                                data: &wasm[range],
                            });
                        }
                    }
                }
            }
        }
        for missing in pending {
            added.emit_new(&mut out, missing);
        }
        let bytes = out.finish();
        wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
            .validate_all(&bytes)
            .context("the rewritten module does not validate")?;
        Ok(bytes)
    }
}
