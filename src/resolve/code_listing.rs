//! The compiled code of the registered modules, listed for Linux perf (`--perfmap`,
//! `--jitdump`) and the samplers: every function's code range, name and source lines.

use std::ops::Range;

use super::code_map::CompiledFunction;
use super::Resolver;

/// A compiled function as `ProfilerHandle::code_listing` lists it.
#[non_exhaustive]
pub struct ListedFunction {
    /// Where its compiled code is in the process's memory.
    pub code: Range<usize>,
    /// Its name, demangled.
    pub name: String,
    /// Where each stretch of code of one source line starts, by address.
    pub lines: Vec<SourceLine>,
}

/// Where a stretch of compiled code of one source line starts.
pub struct SourceLine {
    /// The address of its first instruction.
    pub address: usize,
    /// The source file.
    pub file: String,
    /// The line in `file`, from 1.
    pub line: u32,
}

impl Resolver {
    /// Every compiled function of the registered modules, named, with the source line of
    /// each stretch of its code where DWARF (or Go's table) gives one: what Linux perf is told
    /// of JIT code (see [`crate::perf`]).
    pub fn code_listing(&mut self) -> Vec<ListedFunction> {
        let functions: Vec<CompiledFunction> = self.code_map.functions().collect();
        // Each instruction as its original module's (function index, offset).
        let originals: Vec<Vec<(u32, u32)>> = functions
            .iter()
            .map(|f| {
                f.instructions
                    .iter()
                    .map(|&(_, offset)| {
                        let (index, offset, _) = self.original(f.module, f.func_index, offset);
                        (index, offset)
                    })
                    .collect()
            })
            .collect();
        // Symbolized a module at a time: one pass over its DWARF.
        for module in self.modules.ids().collect::<Vec<_>>() {
            let addresses: Vec<(u32, u32)> = functions
                .iter()
                .zip(&originals)
                .filter(|(f, _)| f.module == module)
                .flat_map(|(_, a)| a.iter().copied())
                .collect();
            self.symbolize(module, &addresses);
        }
        let mut listing = Vec::with_capacity(functions.len());
        for (f, originals) in functions.into_iter().zip(originals) {
            let Some(&(func_index, _)) = originals.first() else {
                continue;
            };
            let name = self.function_name(f.module, func_index).name;
            let mut lines: Vec<SourceLine> = Vec::new();
            for (&(address, _), &(index, offset)) in f.instructions.iter().zip(&originals) {
                let source = self.source_frames(f.module, index, offset);
                // The innermost frame's: perf shows no inlined calls of JIT code.
                let Some(s) = source.first().filter(|s| s.line > 0 && !s.file.is_empty()) else {
                    continue;
                };
                if lines
                    .last()
                    .is_some_and(|l| l.line == s.line && l.file == s.file)
                {
                    continue;
                }
                lines.push(SourceLine {
                    address,
                    file: s.file.clone(),
                    line: s.line,
                });
            }
            listing.push(ListedFunction {
                code: f.code,
                name,
                lines,
            });
        }
        listing
    }

    /// The native code of every registered module, read or not yet.
    pub fn code_ranges(&self) -> Vec<Range<usize>> {
        self.code_map
            .text_ranges()
            .chain(self.pending_texts())
            .collect()
    }
}
