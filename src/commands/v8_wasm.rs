//! V8's frames of WebAssembly, named as wasmspy names a module's code. A `.cpuprofile` of
//! Node (`--cpu-prof`) or Chrome names a Wasm function by its `name` section entry or
//! `wasm-function[N]`, with its module's URL (`wasm://wasm/<hash>`) and, as the column, the
//! offset of its body in the module: no file, no line. Given the modules (`convert --wasm`),
//! each such frame gets the function's name, file and line from the module's DWARF or source map (its
//! first instruction's line: V8 says no more of where in the function a sample was).
//!
//! Which module a URL is: the one at whose function bodies all of its frames' offsets
//! start, the most of their names agreeing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rustc_hash::FxHashMap;
use wasm_encoder::{CustomSection, Section};
use wasmparser::{Parser, Payload};

use crate::export::cpuprofile::{CallFrame, CallFrames};
use crate::profile::{Frame, FrameId, Function, Line, Mapping, MappingId, ProfileBuilder};
use crate::resolve::build_id::BuildId;
use crate::resolve::symbolize::source_map::{Searched, SourceMapSearch};
use crate::resolve::symbolize::ModuleSymbolizer;
use crate::warning::Warning;
use crate::wasm::module_bytes::ModuleBytes;

/// The custom section naming the file a module's DWARF was split off to (Emscripten's
/// `-gseparate-dwarf`): the file's URL or path, as a length-prefixed string.
const EXTERNAL_DEBUG_INFO: &str = "external_debug_info";

/// A module whose frames a profile may show.
struct Module {
    file_name: String,
    symbolizer: ModuleSymbolizer,
    size: u64,
    build_id: String,
    /// Function body offset (as V8 gives it) → (function index, its first instruction's
    /// offset).
    bodies: FxHashMap<u32, (u32, u32)>,
    mapping: Option<MappingId>,
}

/// Names V8's Wasm frames from the modules given.
pub struct V8WasmFrames {
    modules: Vec<Module>,
    warnings: Vec<String>,
}

impl V8WasmFrames {
    /// The modules at `paths`, each with its DWARF: its own, or that of the debug file among
    /// `debug_files` carrying its code, or that of the file its `external_debug_info` section
    /// names, looked for beside it; without DWARF, with its source map, among `source_maps`
    /// or where the module says (as `record` finds them).
    pub fn open(
        paths: &[PathBuf],
        debug_files: &[PathBuf],
        source_maps: &[PathBuf],
    ) -> Result<Self> {
        let read = |path: &Path| {
            std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))
        };
        let mut debug: Vec<(PathBuf, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        for path in debug_files {
            let bytes = read(path)?;
            let code = code_section(&bytes)
                .with_context(|| format!("`{}` is not a Wasm module", path.display()))?
                .map(<[u8]>::to_vec);
            debug.push((path.clone(), bytes, code));
        }
        let mut modules = Vec::new();
        let (mut search, mut warnings) = SourceMapSearch::new(source_maps);
        for path in paths {
            let bytes = read(path)?;
            let file_name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            let sections = Sections::of(&bytes)
                .with_context(|| format!("`{}` is not a Wasm module", path.display()))?;
            let split = debug
                .iter()
                .find(|(_, _, code)| code.is_some() && code.as_deref() == sections.code(&bytes));
            let bytes = match (split, &sections.external) {
                (Some((debug_path, debug_bytes, _)), _) => {
                    if sections.has_dwarf {
                        bail!("`{}` has DWARF of its own: --debug-file `{}` is for a module whose DWARF was split off", path.display(), debug_path.display());
                    }
                    with_dwarf_of(bytes, debug_bytes)?
                }
                (None, Some(external)) if !sections.has_dwarf => {
                    match beside(path, external).map(|p| (std::fs::read(&p), p)) {
                        Some((Ok(debug_bytes), p)) => {
                            if code_section(&debug_bytes).ok().flatten() != sections.code(&bytes) {
                                bail!("`{}`, which `{}` names as its DWARF, is of other code: give the right one with --debug-file", p.display(), path.display());
                            }
                            with_dwarf_of(bytes, &debug_bytes)?
                        }
                        _ => {
                            warnings.push(format!("{file_name}: its DWARF is in `{external}`, not found beside it: give it with --debug-file for file:line"));
                            bytes
                        }
                    }
                }
                _ => bytes,
            };
            let buffer: Arc<[u8]> = bytes.into();
            let wasm = ModuleBytes::whole(buffer.clone());
            let mut symbolizer = ModuleSymbolizer::new(&file_name, wasm.clone(), true)
                .with_context(|| format!("`{}` is not a Wasm module", path.display()))?;
            search.module_file(&file_name, path);
            symbolizer.use_source_map(false, |wasm| {
                search.find(&file_name, wasm, Searched::Module)
            });
            let bodies = bodies(&buffer, symbolizer.imported_function_count())
                .with_context(|| format!("`{}` is not a Wasm module", path.display()))?;
            modules.push(Module {
                file_name,
                size: buffer.len() as u64,
                build_id: BuildId::of(wasm).get().to_string(),
                symbolizer,
                bodies,
                mapping: None,
            });
        }
        warnings.extend(search.unused());
        Ok(V8WasmFrames { modules, warnings })
    }

    /// What was found wrong, once each.
    pub fn take_warnings(&mut self) -> Vec<String> {
        for module in &mut self.modules {
            self.warnings.extend(
                module
                    .symbolizer
                    .take_warnings()
                    .iter()
                    .map(Warning::to_string),
            );
        }
        std::mem::take(&mut self.warnings)
    }

    /// The module a script's frames are of: every offset a body's start, the most names
    /// agreeing.
    fn module_of(&self, calls: &[&CallFrame]) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for (i, module) in self.modules.iter().enumerate() {
            let mut agreeing = 0;
            let all_bodies = calls.iter().all(|call| {
                let Some(&(index, _)) = u32::try_from(call.column_number)
                    .ok()
                    .and_then(|offset| module.bodies.get(&offset))
                else {
                    return false;
                };
                let name = module.symbolizer.function_name(index).system_name;
                let v8_name = call
                    .function_name
                    .strip_prefix('$')
                    .unwrap_or(&call.function_name);
                if v8_name == name || v8_name == format!("wasm-function[{index}]") {
                    agreeing += 1;
                }
                true
            });
            if all_bodies && best.is_none_or(|(_, most)| agreeing > most) {
                best = Some((i, agreeing));
            }
        }
        best.map(|(i, _)| i)
    }

    /// The frame of the function whose body is at `offset` in module `m`.
    fn frame(&mut self, m: usize, offset: u32, builder: &mut ProfileBuilder) -> Option<FrameId> {
        let module = &mut self.modules[m];
        let &(index, first) = module.bodies.get(&offset)?;
        let mapping = *module.mapping.get_or_insert_with(|| {
            builder.add_mapping(Mapping {
                file_name: module.file_name.clone(),
                build_id: module.build_id.clone(),
                size: module.size,
                start: 0,
            })
        });
        let lines = module
            .symbolizer
            .source_frames(index, first)
            .iter()
            .map(|s| Line {
                function: builder.function(&Function {
                    name: s.function.name.clone(),
                    system_name: s.function.system_name.clone(),
                    file: s.file.clone(),
                    start_line: s.start_line,
                }),
                line: s.line,
                column: s.column,
            })
            .collect();
        Some(builder.frame(&Frame {
            mapping: Some(mapping),
            address: u64::from(first),
            lines,
        }))
    }
}

impl CallFrames for V8WasmFrames {
    fn resolve(
        &mut self,
        calls: &[&CallFrame],
        builder: &mut ProfileBuilder,
    ) -> Vec<Option<FrameId>> {
        let mut scripts: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, call) in calls.iter().enumerate() {
            // Node 20 gives a call of an import (`wasm-to-js:…`) its caller's URL, at
            // column 0.
            if call.url.starts_with("wasm://") && !call.function_name.starts_with("wasm-to-js") {
                scripts.entry(&call.url).or_default().push(i);
            }
        }
        let mut frames = vec![None; calls.len()];
        let mut urls: Vec<&str> = scripts.keys().copied().collect();
        urls.sort_unstable();
        for url in urls {
            let nodes = &scripts[url];
            let of_script: Vec<&CallFrame> = nodes.iter().map(|&i| calls[i]).collect();
            let Some(m) = self.module_of(&of_script) else {
                self.warnings.push(format!("{url}: none of the --wasm modules has function bodies where its frames are: they are kept as V8 named them"));
                continue;
            };
            for &i in nodes {
                let offset = u32::try_from(calls[i].column_number).unwrap_or(u32::MAX);
                frames[i] = self.frame(m, offset, builder);
            }
        }
        frames
    }
}

/// Each function body's offset in the module → its function index and its first
/// instruction's offset.
fn bodies(wasm: &[u8], imported: u32) -> Result<FxHashMap<u32, (u32, u32)>> {
    let mut bodies = FxHashMap::default();
    let mut index = imported;
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::CodeSectionEntry(body) = payload? {
            let first = body.get_operators_reader()?.original_position();
            bodies.insert(body.range().start as u32, (index, first as u32));
            index += 1;
        }
    }
    Ok(bodies)
}

/// What of a module's sections tells where its DWARF is.
struct Sections {
    code: Option<std::ops::Range<usize>>,
    has_dwarf: bool,
    external: Option<String>,
}

impl Sections {
    fn of(wasm: &[u8]) -> Result<Self> {
        let mut sections = Sections {
            code: None,
            has_dwarf: false,
            external: None,
        };
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::CodeSectionStart { range, .. } => sections.code = Some(range),
                Payload::CustomSection(reader) if reader.name().starts_with(".debug_") => {
                    sections.has_dwarf = true;
                }
                Payload::CustomSection(reader) if reader.name() == EXTERNAL_DEBUG_INFO => {
                    let mut data = wasmparser::BinaryReader::new(reader.data(), 0);
                    sections.external = data.read_string().ok().map(str::to_string);
                }
                _ => {}
            }
        }
        Ok(sections)
    }

    fn code<'a>(&self, wasm: &'a [u8]) -> Option<&'a [u8]> {
        self.code.clone().and_then(|range| wasm.get(range))
    }
}

/// A module's code section's contents, if it has one.
fn code_section(wasm: &[u8]) -> Result<Option<&[u8]>> {
    Ok(Sections::of(wasm)?.code.and_then(|range| wasm.get(range)))
}

/// Where the file `external` (a path or a URL) is, beside `module`: its file name in
/// `module`'s folder.
fn beside(module: &Path, external: &str) -> Option<PathBuf> {
    let name = external.rsplit('/').next().filter(|n| !n.is_empty())?;
    Some(module.parent().unwrap_or(Path::new("")).join(name))
}

/// `wasm` with the `.debug_*` sections of `debug` (a module of the same code, its DWARF
/// split off) appended: DWARF addresses are offsets in the code section, the same in both.
fn with_dwarf_of(mut wasm: Vec<u8>, debug: &[u8]) -> Result<Vec<u8>> {
    for payload in Parser::new(0).parse_all(debug) {
        if let Payload::CustomSection(reader) = payload.context("malformed debug file")? {
            if reader.name().starts_with(".debug_") {
                CustomSection {
                    name: reader.name().into(),
                    data: reader.data().into(),
                }
                .append_to(&mut wasm);
            }
        }
    }
    Ok(wasm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debug_file_is_looked_for_beside_the_module() {
        let module = Path::new("/w/app.wasm");
        assert_eq!(
            beside(module, "http://host/x/app.debug.wasm"),
            Some(PathBuf::from("/w/app.debug.wasm"))
        );
        assert_eq!(
            beside(module, "app.debug.wasm"),
            Some(PathBuf::from("/w/app.debug.wasm"))
        );
        assert_eq!(beside(module, "x/"), None);
    }
}
