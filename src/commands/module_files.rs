//! The Wasm modules a command is given by path (`convert --wasm`, `annotate --wasm`), each
//! opened as the profiler registers one: its names, its DWARF (its own, split off beside it, or
//! given with `--debug-file`) or its source map, its build id. A component is its core
//! modules, each named as a profile names it (`FILE/NAME`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use wasm_encoder::{CustomSection, Section};
use wasmparser::{Parser, Payload};

use crate::resolve::build_id::BuildId;
use crate::resolve::core_module_symbolizer;
use crate::resolve::symbolize::source_map::{Searched, SourceMapSearch};
use crate::resolve::symbolize::ModuleSymbolizer;
use crate::wasm::component::core_modules;
use crate::wasm::module_bytes::ModuleBytes;

/// The custom section naming the file a module's DWARF was split off to (Emscripten's
/// `-gseparate-dwarf`): the file's URL or path, as a length-prefixed string.
const EXTERNAL_DEBUG_INFO: &str = "external_debug_info";

/// Where the `--wasm` modules' DWARF and source maps are, where they are not where the modules
/// say.
#[derive(Args, Debug)]
pub struct Sidecars {
    /// The DWARF of a `--wasm` module that was split off (Emscripten's `-gseparate-dwarf`),
    /// where it is not beside the module under the name the module gives it; may be given
    /// several times, each matched to its module by its code.
    #[arg(long, value_name = "FILE", requires = "wasm")]
    pub debug_file: Vec<PathBuf>,

    /// The source map (v3) of a `--wasm` module without DWARF, where its `sourceMappingURL`
    /// section does not point to it and it is not beside the module (`MODULE.map`); may be
    /// given several times, each matched to the module its `file` names, else by its offsets.
    #[arg(long, value_name = "FILE", requires = "wasm")]
    pub source_map: Vec<PathBuf>,
}

/// A module given by path (or a core module of a component given by path).
pub struct ModuleFile {
    /// The file it was read from (a core module's: its component's).
    pub path: PathBuf,
    /// Its file's name (a core module's: `FILE/NAME`).
    pub file_name: String,
    pub symbolizer: ModuleSymbolizer,
    /// Its length in bytes.
    pub size: u64,
    /// The hex SHA-256 of its bytes, as the profiles of it name it.
    pub build_id: String,
}

/// The modules at `paths`, each with its DWARF: its own, or that of the debug file among
/// `sidecars`' carrying its code, or that of the file its `external_debug_info` section
/// names, looked for beside it; without DWARF, with its source map, among `sidecars`' or
/// where the module says (as `record` finds them). A component's core modules, each with its
/// own DWARF. With what was found wrong, a line each.
pub fn open(paths: &[PathBuf], sidecars: &Sidecars) -> Result<(Vec<ModuleFile>, Vec<String>)> {
    let read = |path: &Path| {
        std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))
    };
    let mut debug: Vec<(PathBuf, Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for path in &sidecars.debug_file {
        let bytes = read(path)?;
        let code = code_section(&bytes)
            .with_context(|| format!("`{}` is not a Wasm module", path.display()))?
            .map(<[u8]>::to_vec);
        debug.push((path.clone(), bytes, code));
    }
    let mut modules = Vec::new();
    let (mut search, mut warnings) = SourceMapSearch::new(&sidecars.source_map);
    for path in paths {
        let bytes = read(path)?;
        let file_name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        if Parser::is_component(&bytes) {
            let buffer: Arc<[u8]> = bytes.into();
            let cores = core_modules(&buffer)
                .with_context(|| format!("`{}` is not a Wasm component", path.display()))?;
            for (index, core) in cores.into_iter().enumerate() {
                let size = core.range.len() as u64;
                let wasm = ModuleBytes::within(buffer.clone(), core.range.clone())
                    .context("a core module beyond the component's end")?;
                let (file_name, symbolizer, _) =
                    core_module_symbolizer(&file_name, &buffer, index, core, true)?;
                modules.push(ModuleFile {
                    path: path.clone(),
                    file_name,
                    symbolizer,
                    size,
                    build_id: BuildId::of(wasm).get().to_string(),
                });
            }
            continue;
        }
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
        modules.push(ModuleFile {
            path: path.clone(),
            file_name,
            size: buffer.len() as u64,
            build_id: BuildId::of(wasm).get().to_string(),
            symbolizer,
        });
    }
    warnings.extend(search.unused());
    Ok((modules, warnings))
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
