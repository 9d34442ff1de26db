//! Function names without debug info: the `name` section's, and `module::field` for imports.

use std::collections::HashMap;

use anyhow::Result;
use wasmparser::{Name, NameSectionReader};

use super::FunctionName;

#[derive(Debug, Default)]
pub struct Names {
    /// Names from the `name` section, by index in the function index space (imports first).
    names: HashMap<u32, String>,
    /// `module::field` of each imported function, in import order.
    imports: Vec<String>,
    /// Prefixed to the names of functions nothing names: `MODULE!`.
    unnamed_prefix: String,
}

impl Names {
    pub fn add_import(&mut self, module: &str, field: &str) {
        self.imports.push(format!("{module}::{field}"));
    }

    pub fn rename_imports(&mut self, names: &[Option<String>]) {
        for (import, name) in self.imports.iter_mut().zip(names) {
            if let Some(name) = name {
                import.clone_from(name);
            }
        }
    }

    pub fn qualify_unnamed(&mut self, module: &str) {
        self.unnamed_prefix = format!("{module}!");
    }

    pub fn add_missing(&mut self, names: &HashMap<u32, String>) {
        for (&index, name) in names {
            self.names.entry(index).or_insert_with(|| name.clone());
        }
    }

    /// Reads the `name` section's function names; on error, keeps none of them.
    pub fn read_name_section(&mut self, reader: NameSectionReader<'_>) -> Result<()> {
        let read = |names: &mut HashMap<u32, String>| -> Result<()> {
            for subsection in reader {
                if let Name::Function(map) = subsection? {
                    for naming in map {
                        let naming = naming?;
                        // A blank name names nothing (weval's engine names many functions
                        // ""): such a function keeps its index.
                        if !naming.name.trim().is_empty() {
                            names.insert(naming.index, naming.name.to_string());
                        }
                    }
                }
            }
            Ok(())
        };
        let result = read(&mut self.names);
        if result.is_err() {
            self.names.clear();
        }
        result
    }

    /// Whether the `name` section names any function the module defines.
    pub fn names_defined(&self) -> bool {
        let imported = self.imported_function_count();
        self.names.keys().any(|&i| i >= imported)
    }

    /// Whether the module defines (not imports) a function named `name`.
    pub fn defines(&self, name: &str) -> bool {
        let imported = self.imported_function_count();
        self.names.iter().any(|(&i, n)| i >= imported && n == name)
    }

    /// Whether function `index` has a name: an import's, or the `name` section's.
    pub fn names(&self, index: u32) -> bool {
        index < self.imported_function_count() || self.names.contains_key(&index)
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
                // A name that only qualifies one (weval's " (specialized)", for a copy of
                // a nameless function) qualifies its index.
                Some(name) if name.starts_with(char::is_whitespace) => {
                    format!("{}wasm-function[{index}]{name}", self.unnamed_prefix)
                }
                Some(name) => name.clone(),
                None => format!("{}wasm-function[{index}]", self.unnamed_prefix),
            },
        };
        FunctionName::from_raw(raw)
    }
}
