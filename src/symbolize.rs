//! Names for the code of one Wasm module: the `name` section's function names, demangled, and
//! `module::field` for imported functions.

use std::collections::HashMap;

use anyhow::{Context, Result};
use wasmparser::{KnownCustom, Name, Parser, Payload, TypeRef};

use crate::demangle::demangle;

/// A function's names as a profile shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionName {
    /// Demangled.
    pub name: String,
    /// As written in the module.
    pub system_name: String,
}

#[derive(Debug, Default)]
pub struct ModuleSymbols {
    /// Names from the `name` section, by index in the function index space (imports first).
    names: HashMap<u32, String>,
    /// `module::field` of each imported function, in import order.
    imports: Vec<String>,
    /// Set when the `name` section could not be read; the module still profiles, nameless.
    pub warning: Option<String>,
}

impl ModuleSymbols {
    /// Reads the module's imports and `name` section. Fails only when the module itself is
    /// malformed; a damaged `name` section leaves a warning and no names.
    pub fn parse(wasm: &[u8]) -> Result<Self> {
        let mut symbols = ModuleSymbols::default();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.context("malformed Wasm module")? {
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import.context("malformed import section")?;
                        if matches!(import.ty, TypeRef::Func(_) | TypeRef::FuncExact(_)) {
                            symbols
                                .imports
                                .push(format!("{}::{}", import.module, import.name));
                        }
                    }
                }
                Payload::CustomSection(reader) => {
                    if let KnownCustom::Name(names) = reader.as_known() {
                        if let Err(e) = symbols.read_names(names) {
                            symbols.names.clear();
                            symbols.warning = Some(format!("ignoring malformed name section: {e}"));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(symbols)
    }

    fn read_names(&mut self, reader: wasmparser::NameSectionReader<'_>) -> Result<()> {
        for subsection in reader {
            if let Name::Function(map) = subsection? {
                for naming in map {
                    let naming = naming?;
                    self.names.insert(naming.index, naming.name.to_string());
                }
            }
        }
        Ok(())
    }

    pub fn imported_function_count(&self) -> u32 {
        self.imports.len() as u32
    }

    /// The name of function `index` (in the function index space). Imports are named by
    /// what they import, which is what a reader of a profile recognizes (`wasi_snapshot_preview1::fd_write`).
    pub fn function_name(&self, index: u32) -> FunctionName {
        let raw = match self.imports.get(index as usize) {
            Some(import) => import.clone(),
            None => match self.names.get(&index) {
                Some(name) => name.clone(),
                None => format!("wasm-function[{index}]"),
            },
        };
        FunctionName {
            name: demangle(&raw).into_owned(),
            system_name: raw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wat(text: &str) -> Vec<u8> {
        wat::parse_str(text).unwrap()
    }

    #[test]
    fn names_imports_and_nameless_functions() {
        let wasm = wat(r#"(module
            (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
            (import "env" "mem" (memory 1))
            (func $_ZN7hotspot6engine9warm_path17hf943d30d5f82710bE)
            (func)
        )"#);
        let s = ModuleSymbols::parse(&wasm).unwrap();
        assert_eq!(s.imported_function_count(), 1);
        assert_eq!(s.function_name(0).name, "wasi_snapshot_preview1::fd_write");
        let f = s.function_name(1);
        assert_eq!(f.name, "hotspot::engine::warm_path");
        assert_eq!(
            f.system_name,
            "_ZN7hotspot6engine9warm_path17hf943d30d5f82710bE"
        );
        assert_eq!(s.function_name(2).name, "wasm-function[2]");
        assert!(s.warning.is_none());
    }

    #[test]
    fn damaged_name_section_warns_and_keeps_going() {
        let mut wasm = wat("(module (func $f))");
        // Append a `name` custom section whose function subsection claims more bytes than it has.
        let body: &[u8] = &[4, b'n', b'a', b'm', b'e', 1, 20, 1, 0];
        wasm.push(0);
        wasm.push(body.len() as u8);
        wasm.extend_from_slice(body);
        let s = ModuleSymbols::parse(&wasm).unwrap();
        assert!(s.warning.is_some());
        assert_eq!(s.function_name(0).name, "wasm-function[0]");
    }

    #[test]
    fn truncated_module_is_an_error() {
        let wasm = wat("(module (func $f (nop)))");
        assert!(ModuleSymbols::parse(&wasm[..wasm.len() - 3]).is_err());
    }
}
