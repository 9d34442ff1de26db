//! Maps native code addresses of compiled modules and components back to Wasm functions and
//! Wasm code offsets, using what Wasmtime keeps for each: its functions' ranges in the
//! executable text and its address map (native offset → offset in the binary). A component's
//! text holds the code of all its core modules; each function says which one it is from.

use std::ops::Range;
use std::sync::OnceLock;

use wasmtime::component::Component;
use wasmtime::{Module, ModuleFunction};

use crate::shared::ModuleId;

/// Where a native code address is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeLocation {
    /// In a Wasm function; `offset` is the offset of the instruction in its module's binary.
    Wasm {
        module: ModuleId,
        func_index: u32,
        offset: u32,
    },
    /// In a module's text, outside its Wasm functions: Wasmtime's trampolines.
    Trampoline,
    /// Not in any registered module's code.
    Elsewhere,
}

/// A core module whose code is in a text: the index it was registered under, and where its
/// binary starts in the binary compiled (a component's; 0 for a module compiled alone).
#[derive(Clone, Copy, Debug)]
pub struct CodeOwner {
    pub module: ModuleId,
    pub start: u32,
}

/// A function of a text: (start, end, function index, owner); text offsets.
type TextFunction = (u32, u32, u32, u32);

struct TextCode {
    text: Range<usize>,
    owners: Vec<CodeOwner>,
    /// By start.
    functions: Vec<TextFunction>,
    /// What was compiled, whose address map this text has.
    compiled: Compiled,
    /// (text offset, offset in the binary compiled), by text offset; read from Wasmtime's on
    /// first use, by whoever first resolves an address (the pipeline, while the guest runs),
    /// not when the program is registered: a 16 MB component has millions of entries, 35 ms
    /// before its guest could start.
    address_map: OnceLock<Vec<(u32, u32)>>,
}

/// A compiled module or component, kept for its address map.
enum Compiled {
    Module(Module),
    Component(Component),
}

impl TextCode {
    /// Function `(start, end, func_index, owner)` of this text, with its mapped instructions.
    fn compiled_function(
        &self,
        &(start, end, func_index, owner): &TextFunction,
    ) -> CompiledFunction {
        let owner = self.owners[owner as usize];
        let address_map = self.address_map();
        let first = address_map.partition_point(|&(text, _)| text < start);
        let instructions = address_map[first..]
            .iter()
            .take_while(|&&(text, _)| text < end)
            .map(|&(text, wasm)| {
                (
                    self.text.start + text as usize,
                    wasm.saturating_sub(owner.start),
                )
            })
            .collect();
        CompiledFunction {
            code: self.text.start + start as usize..self.text.start + end as usize,
            module: owner.module,
            func_index,
            instructions,
        }
    }

    fn address_map(&self) -> &[(u32, u32)] {
        self.address_map.get_or_init(|| match &self.compiled {
            Compiled::Module(m) => mapped(m.address_map()),
            Compiled::Component(c) => mapped(c.address_map()),
        })
    }
}

/// Wasmtime's address map, as (text offset, offset in the binary) by text offset, of the
/// instructions it maps.
fn mapped(map: Option<impl Iterator<Item = (usize, Option<u32>)>>) -> Vec<(u32, u32)> {
    let mut entries: Vec<(u32, u32)> = map
        .into_iter()
        .flatten()
        .filter_map(|(text_offset, wasm)| Some((text_offset as u32, wasm?)))
        .collect();
    entries.sort_unstable();
    entries
}

/// A compiled Wasm function: its native code and, for each instruction the address map
/// names, where its code starts and its offset in its module's binary (as compiled), by
/// address.
pub struct CompiledFunction {
    pub code: Range<usize>,
    pub module: ModuleId,
    pub func_index: u32,
    pub instructions: Vec<(usize, u32)>,
}

#[derive(Default)]
pub struct CodeMap {
    texts: Vec<TextCode>,
}

impl CodeMap {
    pub fn add(&mut self, module_index: ModuleId, module: &Module) {
        let owner = CodeOwner {
            module: module_index,
            start: 0,
        };
        let functions = module.functions().map(|f| (f, 0));
        self.add_text(
            module.text(),
            vec![owner],
            functions,
            Compiled::Module(module.clone()),
        );
    }

    /// A component's code: `owners[i]` is its core module `i` (Wasmtime's static module
    /// index). Functions of modules not listed (the adapters Wasmtime generates between
    /// components) are left out, as trampolines are.
    pub fn add_component(&mut self, component: &Component, owners: Vec<CodeOwner>) {
        let count = owners.len();
        let functions = component
            .functions()
            .map(|f| {
                let owner = f.module.as_u32();
                (f, owner)
            })
            .filter(|&(_, owner)| (owner as usize) < count);
        self.add_text(
            component.text(),
            owners,
            functions,
            Compiled::Component(component.clone()),
        );
    }

    fn add_text(
        &mut self,
        text: &[u8],
        owners: Vec<CodeOwner>,
        functions: impl Iterator<Item = (ModuleFunction, u32)>,
        compiled: Compiled,
    ) {
        let text = text.as_ptr_range();
        let mut functions: Vec<_> = functions
            .map(|(f, owner)| {
                let (start, end) = (f.offset as u32, (f.offset + f.len) as u32);
                (start, end, f.index.as_u32(), owner)
            })
            .collect();
        functions.sort_unstable();
        self.texts.push(TextCode {
            text: text.start as usize..text.end as usize,
            owners,
            functions,
            compiled,
            address_map: OnceLock::new(),
        });
    }

    /// The executable text of every registered module and component.
    pub fn text_ranges(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.texts.iter().map(|m| m.text.clone())
    }

    /// Every function of every registered text.
    pub fn functions(&self) -> impl Iterator<Item = CompiledFunction> + '_ {
        self.texts
            .iter()
            .flat_map(|m| m.functions.iter().map(move |f| m.compiled_function(f)))
    }

    /// The Wasm function that holds `pc`, with its mapped instructions.
    pub fn function_at(&self, pc: usize) -> Option<CompiledFunction> {
        let (m, f) = self.function_entry(pc)?;
        Some(m.compiled_function(f))
    }

    /// The code of the Wasm function that holds `pc`.
    pub fn function_code(&self, pc: usize) -> Option<Range<usize>> {
        let (m, &(start, end, ..)) = self.function_entry(pc)?;
        Some(m.text.start + start as usize..m.text.start + end as usize)
    }

    /// The text that holds `pc`, and its function there.
    fn function_entry(&self, pc: usize) -> Option<(&TextCode, &TextFunction)> {
        let m = self.texts.iter().find(|m| m.text.contains(&pc))?;
        let offset = (pc - m.text.start) as u32;
        let i = m.functions.partition_point(|&(start, ..)| start <= offset);
        let f = m.functions.get(i.checked_sub(1)?)?;
        (offset < f.1).then_some((m, f))
    }

    pub fn lookup(&self, pc: usize) -> CodeLocation {
        let Some(m) = self.texts.iter().find(|m| m.text.contains(&pc)) else {
            return CodeLocation::Elsewhere;
        };
        let offset = (pc - m.text.start) as u32;
        let i = m.functions.partition_point(|&(start, ..)| start <= offset);
        let Some(&(start, end, func_index, owner)) = i.checked_sub(1).map(|i| &m.functions[i])
        else {
            return CodeLocation::Trampoline;
        };
        if offset >= end {
            return CodeLocation::Trampoline;
        }
        // The closest mapped instruction at or before the address, within this function; in
        // the prologue, before any, the function's first mapped instruction.
        let address_map = m.address_map();
        let j = address_map.partition_point(|&(text, _)| text <= offset);
        let before = j.checked_sub(1).map(|j| address_map[j]);
        let after = address_map.get(j).copied();
        let wasm = before
            .filter(|&(text, _)| text >= start)
            .or(after.filter(|&(text, _)| text < end))
            .map_or(0, |(_, wasm)| wasm);
        let owner = m.owners[owner as usize];
        CodeLocation::Wasm {
            module: owner.module,
            func_index,
            offset: wasm.saturating_sub(owner.start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Id;
    use wasmtime::{Config, Engine};

    #[test]
    fn addresses_in_a_function_map_to_its_wasm_code() {
        let wasm = wat::parse_str(
            r#"(module
                (import "env" "f" (func))
                (func $a (result i32) i32.const 1 i32.const 2 i32.add)
                (func $b (result i32) i32.const 3))"#,
        )
        .unwrap();
        let engine = Engine::new(&Config::new()).unwrap();
        let module = Module::new(&engine, &wasm).unwrap();
        let mut map = CodeMap::default();
        let seventh = ModuleId::from_index(7);
        map.add(seventh, &module);
        let text = module.text().as_ptr() as usize;
        let funcs: Vec<_> = module.functions().collect();
        assert_eq!(funcs.len(), 2);
        for f in &funcs {
            match map.lookup(text + f.offset + f.len / 2) {
                CodeLocation::Wasm {
                    module,
                    func_index,
                    offset,
                } => {
                    assert_eq!(module, seventh);
                    assert_eq!(func_index, f.index.as_u32());
                    assert!(offset > 0 && (offset as usize) < wasm.len());
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(funcs[0].index.as_u32(), 1, "index space counts the import");
        assert_eq!(map.lookup(text.wrapping_sub(1)), CodeLocation::Elsewhere);
        assert_eq!(map.text_ranges().count(), 1);
        // Listed: each function's code, its instructions within it, mapped as `lookup` maps.
        let listed: Vec<CompiledFunction> = map.functions().collect();
        assert_eq!(listed.len(), 2);
        for (f, listed) in funcs.iter().zip(&listed) {
            assert_eq!(listed.code, text + f.offset..text + f.offset + f.len);
            assert_eq!(listed.func_index, f.index.as_u32());
            assert!(!listed.instructions.is_empty());
            for &(address, offset) in &listed.instructions {
                assert!(listed.code.contains(&address));
                match map.lookup(address) {
                    CodeLocation::Wasm { offset: o, .. } => assert_eq!(o, offset),
                    other => panic!("{other:?}"),
                }
            }
        }
    }
}
