//! What a sampled code address is in the source. A module's symbolizer combines DWARF
//! ([`dwarf`]: file, line and inlined frames, where the module carries debug info), or a source
//! map ([`source_map`]: file and line, where its toolchain writes one instead), with the
//! `name` section ([`names`]: every function's name), demangled ([`demangle`]). Each address is
//! symbolized once, when a profile first shows it.

mod dwarf;
pub mod host;
mod names;
pub mod source_map;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, Result};
use rustc_hash::FxHashMap;
use wasmparser::{KnownCustom, Parser, Payload, TypeRef};

use self::dwarf::{Dwarf, DwarfFrame, DwarfSections};
use self::names::Names;
use self::source_map::ModuleMap;
use crate::runtimes::{self, ModuleFacts, NamedFunction, Runtime};
use crate::warning::{Warning, WarningKind};
use crate::wasm::demangle::demangle;
use crate::wasm::module_bytes::ModuleBytes;
use crate::wasm::toolchain::Toolchain;

/// A function's names as a profile shows them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionName {
    /// Demangled.
    pub name: String,
    /// As written in the module.
    pub system_name: String,
}

impl FunctionName {
    pub fn from_raw(raw: String) -> Self {
        FunctionName {
            name: demangle(&raw).into_owned(),
            system_name: raw,
        }
    }

    /// A mangled linkage name demangles to the qualified name; an unmangled one (C's, or
    /// `__main_argc_argv` for `main`) is not what the source calls the function.
    fn from_dwarf(linkage_name: Option<String>, name: Option<String>) -> Option<Self> {
        let given = |n: &String| !n.is_empty();
        match (linkage_name.filter(given), name.filter(given)) {
            (Some(linkage), name) => {
                let demangled = demangle(&linkage);
                let name = match (demangled, name) {
                    (Cow::Borrowed(_), Some(name)) => name,
                    (demangled, _) => demangled.into_owned(),
                };
                Some(FunctionName {
                    name,
                    system_name: linkage,
                })
            }
            (None, Some(name)) => Some(FunctionName::from_raw(name)),
            (None, None) => None,
        }
    }
}

/// One source-level frame of a code address: an address in inlined code has several.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFrame {
    pub function: FunctionName,
    /// Empty when unknown.
    pub file: String,
    /// 0 when unknown.
    pub line: u32,
    pub column: u32,
    /// The line where the function is declared; 0 when unknown.
    pub start_line: u32,
}

enum DwarfState {
    /// Found, not read yet: a run that never shows an address does not pay for it.
    Unread(DwarfSections),
    Ready(Box<Dwarf>),
    /// Missing: worth a warning once there is code to symbolize.
    Absent,
    /// Unreadable, not wanted, or its absence told.
    Unavailable,
}

pub struct ModuleSymbolizer {
    file_name: String,
    wasm: ModuleBytes,
    names: Names,
    /// The language runtime the module is, or was built with, where wasmspy reads one: Go's
    /// own table names a Go module's functions (it has no DWARF).
    runtime: Option<Arc<dyn Runtime>>,
    dwarf: DwarfState,
    /// The module's source map, where it is used: lines where DWARF gives none.
    source_map: Option<ModuleMap>,
    /// Module offset → its source frames, innermost first.
    frames: FxHashMap<u32, Arc<[SourceFrame]>>,
    /// See [`lowered_indirect_call`](Self::lowered_indirect_call).
    lowered_indirect_calls: HashMap<u32, String>,
    /// Whether a lookup already failed (one warning is enough).
    lookup_failed: bool,
    warnings: Vec<Warning>,
    /// Why the module's runtime's stacks cannot be read, where it is one.
    runtime_warnings: Vec<Warning>,
}

/// What [`ModuleSymbolizer::new`] reads of a module's bytes.
struct Read {
    names: Names,
    sections: DwarfSections,
    warnings: Vec<Warning>,
    runtime: Option<Arc<dyn Runtime>>,
    runtime_warnings: Vec<Warning>,
}

/// Reads the module `wasm`, named `file_name` in warnings: its names, where its DWARF is, and
/// the language runtime it is.
fn read(file_name: &str, wasm: &[u8]) -> Result<Read> {
    let mut names = Names::default();
    let mut sections = DwarfSections::default();
    let mut warnings = Vec::new();
    let mut custom_sections = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.context("malformed Wasm module")? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.context("malformed import section")?;
                    if matches!(import.ty, TypeRef::Func(_) | TypeRef::FuncExact(_)) {
                        names.add_import(import.module, import.name);
                    }
                }
            }
            Payload::CodeSectionStart { range, .. } => sections.code = Some(range),
            Payload::CustomSection(reader) => match reader.as_known() {
                KnownCustom::Name(section) => {
                    if let Err(e) = names.read_name_section(section) {
                        warnings.push(Warning::about(
                            file_name,
                            WarningKind::DamagedNames { why: e.to_string() },
                        ));
                    }
                }
                _ if reader.name().starts_with(".debug_") => {
                    let start = reader.data_offset();
                    let range = start..start + reader.data().len();
                    sections.sections.push((reader.name().to_string(), range));
                }
                _ => custom_sections.push(reader.name()),
            },
            _ => {}
        }
    }
    let debug_str = sections
        .sections
        .iter()
        .find(|(name, _)| name == ".debug_str")
        .map_or(&[][..], |(_, range)| &wasm[range.clone()]);
    let facts = ModuleFacts {
        custom_sections: &custom_sections,
        debug_str,
        defines: &|name| names.defines(name),
        names_functions: names.names_defined(),
    };
    let mut runtime_warnings = Vec::new();
    let runtime = runtimes::detect(file_name, wasm, &facts, &mut runtime_warnings);
    Ok(Read {
        names,
        sections,
        warnings,
        runtime,
        runtime_warnings,
    })
}

impl ModuleSymbolizer {
    /// Names the module's function imports by what they stand for (`names[i]` for import `i`,
    /// where known) rather than by `module::field`: a component's core imports are named by
    /// the WIT functions they lower.
    pub fn name_imports(&mut self, names: &[Option<String>]) {
        self.names.rename_imports(names);
    }

    /// Names the functions that nothing names `MODULE!wasm-function[N]`, as Wasmtime's
    /// backtraces do: in a component, the same index in several modules.
    pub fn qualify_unnamed(&mut self, module: &str) {
        self.names.qualify_unnamed(module);
    }

    /// No warning that the module has no DWARF: made by tooling, it has none to give.
    pub fn expect_no_dwarf(&mut self) {
        if let DwarfState::Absent = self.dwarf {
            self.dwarf = DwarfState::Unavailable;
        }
    }

    /// Takes the module's source map, which `find` finds, where it is wanted: where the module
    /// has no DWARF, or, `prefer`red, instead of it. `find` is given the module's bytes; what
    /// it found may be unreadable (the error says why, as a warning does). A map that is not
    /// used says why in one warning, instead of the one that the module has no DWARF.
    pub fn use_source_map(
        &mut self,
        prefer: bool,
        find: impl FnOnce(&[u8]) -> Option<Result<source_map::SourceMap, String>>,
    ) {
        let has_dwarf = matches!(self.dwarf, DwarfState::Unread(_) | DwarfState::Ready(_));
        if has_dwarf && !prefer {
            return;
        }
        let Some(found) = find(&self.wasm) else {
            return;
        };
        match found.and_then(|map| ModuleMap::new(map, &self.wasm)) {
            Ok(map) => {
                let changed = map.changed_sources();
                if let Some(first) = changed.first() {
                    let others = match changed.len() {
                        1 => String::new(),
                        n => format!(" (and {} more)", n - 1),
                    };
                    self.warnings.push(Warning::about(
                        &self.file_name,
                        WarningKind::SourceMap {
                            why: format!("{first}{others} differs from the copy its source map carries (edited since the build?): the profile's lines are the build's"),
                        },
                    ));
                }
                self.source_map = Some(map);
                self.dwarf = DwarfState::Unavailable;
            }
            Err(why) => {
                let instead = if has_dwarf {
                    "its DWARF debug info is used instead"
                } else {
                    self.dwarf = DwarfState::Unavailable;
                    "the profile names functions, without file:line"
                };
                self.warnings.push(Warning::about(
                    &self.file_name,
                    WarningKind::SourceMap {
                        why: format!("{why}: {instead}"),
                    },
                ));
            }
        }
    }

    /// The sources the module's map carries the text of and that are not on disk: (path,
    /// text).
    #[cfg(feature = "cli")]
    pub fn carried_sources(&self) -> Vec<(&str, &str)> {
        self.source_map
            .iter()
            .flat_map(ModuleMap::carried_sources)
            .collect()
    }

    /// Names functions that the `name` section does not (`names`: by function index).
    pub fn name_functions(&mut self, names: &HashMap<u32, String>) {
        self.names.add_missing(names);
    }

    /// The WIT function that the `call_indirect` at `offset` reaches, in a component's shim.
    pub fn lowered_indirect_call(&self, offset: u32) -> Option<&str> {
        self.lowered_indirect_calls.get(&offset).map(String::as_str)
    }

    pub fn name_lowered_indirect_calls(&mut self, calls: HashMap<u32, String>) {
        self.lowered_indirect_calls = calls;
    }

    /// Reads `wasm`'s imports and `name` section, and finds its DWARF (used unless `use_dwarf`
    /// is false). Fails only when the module itself is malformed; a damaged `name` section
    /// leaves a warning, and so does missing DWARF once code is symbolized.
    pub fn new(file_name: &str, wasm: ModuleBytes, use_dwarf: bool) -> Result<Self> {
        let Read {
            names,
            sections,
            warnings,
            runtime,
            runtime_warnings,
        } = read(file_name, &wasm)?;
        let dwarf = if !use_dwarf {
            DwarfState::Unavailable
        } else if sections.present() {
            DwarfState::Unread(sections)
        } else {
            DwarfState::Absent
        };
        Ok(ModuleSymbolizer {
            file_name: file_name.to_string(),
            wasm,
            names,
            runtime,
            dwarf,
            source_map: None,
            frames: FxHashMap::default(),
            lowered_indirect_calls: HashMap::new(),
            lookup_failed: false,
            warnings,
            runtime_warnings,
        })
    }

    /// The language runtime the module `wasm` is, as [`Self::runtime`] tells it, read without
    /// keeping its bytes.
    pub fn runtime_of(wasm: &[u8]) -> Result<Option<Arc<dyn Runtime>>> {
        Ok(read("", wasm)?.runtime)
    }

    /// The module's bytes.
    pub fn wasm(&self) -> &[u8] {
        &self.wasm
    }

    /// The module's bytes, shared.
    pub fn shared_wasm(&self) -> ModuleBytes {
        self.wasm.clone()
    }

    pub fn imported_function_count(&self) -> u32 {
        self.names.imported_function_count()
    }

    /// The name of function `index` (in the function index space, imports first); a runtime's
    /// own name where it has one (a Go function's as Go writes it), the `name` section's form
    /// kept as its system name.
    pub fn function_name(&self, index: u32) -> FunctionName {
        let name = match self.source_map_name(index) {
            Some(name) => FunctionName::from_raw(name),
            None => self.names.function_name(index),
        };
        match self.runtime_function(index) {
            Some(named) => FunctionName {
                name: named.name,
                system_name: name.system_name,
            },
            None => name,
        }
    }

    /// Where nothing else names function `index`, the source map's name for it.
    fn source_map_name(&self, index: u32) -> Option<String> {
        let map = self.source_map.as_ref()?;
        if self.names.names(index) {
            return None;
        }
        map.function_name(self.defined(index)?)
    }

    /// Function `index`'s place among the functions the module defines.
    fn defined(&self, index: u32) -> Option<usize> {
        let defined = index.checked_sub(self.names.imported_function_count())?;
        Some(defined as usize)
    }

    fn runtime_function(&self, index: u32) -> Option<NamedFunction> {
        self.runtime.as_ref()?.function_name(index)
    }

    /// The language runtime of the module, where wasmspy reads one.
    pub fn runtime(&self) -> Option<&Arc<dyn Runtime>> {
        self.runtime.as_ref()
    }

    /// The source frames of the instruction at `offset` (in the module's bytes) of function
    /// `func_index`, innermost first; never empty.
    pub fn source_frames(&mut self, func_index: u32, offset: u32) -> Arc<[SourceFrame]> {
        if !self.frames.contains_key(&offset) {
            self.symbolize(&[(func_index, offset)]);
        }
        self.frames[&offset].clone()
    }

    /// Symbolizes the instructions at these (function index, module offset) pairs that are not
    /// yet: in one batch, each DWARF compilation unit involved parsed once.
    pub fn symbolize(&mut self, addresses: &[(u32, u32)]) {
        let mut missing: Vec<(u32, u32)> = addresses
            .iter()
            .copied()
            .filter(|(_, offset)| !self.frames.contains_key(offset))
            .collect();
        if missing.is_empty() {
            return;
        }
        missing.sort_unstable_by_key(|&(_, offset)| offset);
        missing.dedup_by_key(|&mut (_, offset)| offset);
        let offsets: Vec<u32> = missing.iter().map(|&(_, offset)| offset).collect();
        let mut described = self.dwarf_frames(&offsets);
        for (func_index, offset) in missing {
            let frames = self.source_frames_of(func_index, offset, described.remove(&offset));
            self.frames.insert(offset, frames);
        }
    }

    /// DWARF's frames with names (the name section's where DWARF has none), or the function
    /// alone.
    fn source_frames_of(
        &self,
        func_index: u32,
        offset: u32,
        described: Option<Vec<DwarfFrame>>,
    ) -> Arc<[SourceFrame]> {
        let Some(described) = described.filter(|d| !d.is_empty()) else {
            if let Some(frames) = self.runtime_frames(func_index, offset) {
                return frames;
            }
            if let Some(frame) = self.source_map_frame(func_index, offset) {
                return Arc::new([frame]);
            }
            let named = self.runtime_function(func_index);
            return Arc::new([SourceFrame {
                function: self.function_name(func_index),
                file: named.as_ref().map(|f| f.file.clone()).unwrap_or_default(),
                line: 0,
                column: 0,
                start_line: named.map_or(0, |f| f.start_line),
            }]);
        };
        let outermost = described.len() - 1;
        described
            .into_iter()
            .enumerate()
            .map(|(i, frame)| {
                let function = match FunctionName::from_dwarf(frame.linkage_name, frame.name) {
                    Some(name) => name,
                    // The outermost frame is the Wasm function itself.
                    None if i == outermost => self.function_name(func_index),
                    None => FunctionName::from_raw("[unnamed inlined function]".into()),
                };
                SourceFrame {
                    function,
                    file: frame.file.unwrap_or_default(),
                    line: frame.line,
                    column: frame.column,
                    start_line: frame.start_line,
                }
            })
            .collect()
    }

    /// The frame of the instruction at `offset` as the source map has it: no inlined calls,
    /// and no line where the map gives none.
    fn source_map_frame(&self, func_index: u32, offset: u32) -> Option<SourceFrame> {
        let map = self.source_map.as_ref()?;
        let defined = self.defined(func_index)?;
        let mapped = map.position(defined, offset);
        Some(SourceFrame {
            function: self.function_name(func_index),
            file: mapped
                .as_ref()
                .map(|m| m.file.to_string())
                .unwrap_or_default(),
            line: mapped.as_ref().map_or(0, |m| m.line),
            column: mapped.as_ref().map_or(0, |m| m.column),
            start_line: map.start_line(defined).unwrap_or(0),
        })
    }

    /// The runtime's frames at `offset`, from its own table (Go's), with the calls inlined
    /// there.
    fn runtime_frames(&self, func_index: u32, offset: u32) -> Option<Arc<[SourceFrame]>> {
        let located = self
            .runtime
            .as_ref()?
            .source_frames(&self.wasm, func_index, offset)?;
        let outermost = located.len() - 1;
        Some(
            located
                .into_iter()
                .enumerate()
                .map(|(i, frame)| SourceFrame {
                    function: if i == outermost {
                        self.function_name(func_index)
                    } else {
                        FunctionName {
                            system_name: frame.name.clone(),
                            name: frame.name,
                        }
                    },
                    file: frame.file,
                    line: frame.line,
                    column: 0,
                    start_line: frame.start_line,
                })
                .collect(),
        )
    }

    fn dwarf_frames(&mut self, offsets: &[u32]) -> FxHashMap<u32, Vec<DwarfFrame>> {
        if let DwarfState::Absent = self.dwarf {
            let why = self.runtime.as_ref().and_then(|r| r.without_dwarf());
            // The producers read only now: most modules have DWARF, or are never sampled.
            let advice = match why {
                Some(_) => None,
                None => Toolchain::of(&self.wasm).line_advice(&self.file_name),
            };
            // Neither for Go's, whose own table gives what DWARF would.
            if why.is_some() || advice.is_some() {
                self.warnings.push(Warning::about(
                    &self.file_name,
                    WarningKind::NoDwarf {
                        why: why.map(str::to_string),
                        advice,
                    },
                ));
            }
            self.dwarf = DwarfState::Unavailable;
        }
        if let DwarfState::Unread(sections) = &self.dwarf {
            self.dwarf = match Dwarf::load(&self.wasm, sections) {
                Ok(dwarf) => {
                    if let Some(problem) = &dwarf.unreadable_units {
                        self.lookup_failed = true;
                        self.warnings.push(Warning::about(
                            &self.file_name,
                            WarningKind::DamagedDwarf {
                                why: format!(
                                    "{problem}: code they describe is shown by function name only"
                                ),
                            },
                        ));
                    }
                    DwarfState::Ready(Box::new(dwarf))
                }
                Err(e) => {
                    let names = self
                        .runtime
                        .as_ref()
                        .and_then(|r| r.with_unreadable_dwarf())
                        .unwrap_or("the profile names functions, without file:line");
                    self.warnings.push(Warning::about(
                        &self.file_name,
                        WarningKind::DamagedDwarf {
                            why: format!("{e:#}: {names}"),
                        },
                    ));
                    DwarfState::Unavailable
                }
            };
        }
        let DwarfState::Ready(dwarf) = &self.dwarf else {
            return FxHashMap::default();
        };
        let resolved = dwarf.resolve(offsets);
        if let Some(e) = resolved.error {
            if !std::mem::replace(&mut self.lookup_failed, true) {
                self.warnings.push(Warning::about(
                    &self.file_name,
                    WarningKind::DamagedDwarf {
                        why: format!("part of its DWARF debug info is unreadable ({e}): code it describes is shown by function name only"),
                    },
                ));
            }
        }
        resolved.frames
    }

    /// No warning that the module's runtime cannot be read: another module of its component
    /// shows it (a runtime's data and code may be in different modules of a component).
    pub fn runtime_shown_elsewhere(&mut self) {
        self.runtime_warnings.clear();
    }

    /// Warnings not taken yet.
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        self.warnings.append(&mut self.runtime_warnings);
        std::mem::take(&mut self.warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn symbolizer(wasm: Vec<u8>) -> ModuleSymbolizer {
        ModuleSymbolizer::new("m.wasm", ModuleBytes::whole(wasm.into()), true).unwrap()
    }

    #[test]
    fn names_imports_and_nameless_functions() {
        let wasm = wat::parse_str(
            r#"(module
            (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
            (import "env" "mem" (memory 1))
            (func $_ZN7hotspot6engine9warm_path17hf943d30d5f82710bE)
            (func)
        )"#,
        )
        .unwrap();
        let mut s = symbolizer(wasm);
        assert_eq!(s.imported_function_count(), 1);
        assert_eq!(s.function_name(0).name, "wasi_snapshot_preview1::fd_write");
        let f = s.function_name(1);
        assert_eq!(f.name, "hotspot::engine::warm_path");
        assert_eq!(
            f.system_name,
            "_ZN7hotspot6engine9warm_path17hf943d30d5f82710bE"
        );
        assert_eq!(s.function_name(2).name, "wasm-function[2]");
        assert!(s.take_warnings().is_empty());
        s.source_frames(1, 40);
        s.source_frames(2, 41);
        let warnings = s.take_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(
            warnings[0].module.as_deref(),
            Some("m.wasm"),
            "{warnings:?}"
        );
        assert_eq!(
            warnings[0].to_string(),
            "m.wasm has no DWARF debug info: the profile names functions, without file:line (build with -g; or give wasmspy its source map: --source-map FILE or a sourceMappingURL section, or m.wasm.map beside it)"
        );
    }

    /// weval names its engine's functions "" and their specialized copies " (specialized)":
    /// neither may be a frame's whole name.
    #[test]
    fn blank_names_and_bare_qualifiers_keep_the_index() {
        let mut wasm = wat::parse_str("(module (func) (func) (func))").unwrap();
        let mut names = wasm_encoder::NameMap::new();
        names.append(0, "");
        names.append(1, " (specialized)");
        names.append(2, "f");
        let mut section = wasm_encoder::NameSection::new();
        section.functions(&names);
        wasm_encoder::Section::append_to(&section, &mut wasm);
        let s = symbolizer(wasm);
        assert_eq!(s.function_name(0).name, "wasm-function[0]");
        assert_eq!(s.function_name(1).name, "wasm-function[1] (specialized)");
        assert_eq!(s.function_name(2).name, "f");
    }

    #[test]
    fn without_dwarf_an_address_is_its_function() {
        let wasm = wat::parse_str("(module (func $f (nop)))").unwrap();
        let mut s = symbolizer(wasm);
        let frames = s.source_frames(0, 30);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].function.name, "f");
        assert_eq!((frames[0].file.as_str(), frames[0].line), ("", 0));
    }

    #[test]
    fn damaged_name_section_warns_and_keeps_going() {
        let mut wasm = wat::parse_str("(module (func $f))").unwrap();
        // Append a `name` custom section whose function subsection claims more bytes than it has.
        let body: &[u8] = &[4, b'n', b'a', b'm', b'e', 1, 20, 1, 0];
        wasm.push(0);
        wasm.push(body.len() as u8);
        wasm.extend_from_slice(body);
        let mut s =
            ModuleSymbolizer::new("m.wasm", ModuleBytes::whole(wasm.into()), false).unwrap();
        let warnings = s.take_warnings();
        assert_eq!(warnings.len(), 1);
        assert!(
            matches!(&warnings[0].kind, WarningKind::DamagedNames { .. }),
            "{warnings:?}"
        );
        assert_eq!(s.function_name(0).name, "wasm-function[0]");
    }

    #[test]
    fn truncated_module_is_an_error() {
        let wasm = wat::parse_str("(module (func $f (nop)))").unwrap();
        let truncated: Arc<[u8]> = wasm[..wasm.len() - 3].into();
        assert!(ModuleSymbolizer::new("m.wasm", ModuleBytes::whole(truncated), true).is_err());
    }
}
