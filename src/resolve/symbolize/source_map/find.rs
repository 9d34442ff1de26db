//! Where a module's source map (v3) is found: among the maps given (`--source-map`: the one
//! whose `file` is the module's name, else one whose offsets fall on the module's code), where
//! the module's `sourceMappingURL` section points (a path relative to the module's directory,
//! an absolute path, a `file://` URL, or a `data:` URL holding the map), or `NAME.wasm.map`
//! beside the module. The module and what it points to are the guest's: only regular files are
//! read, opened without blocking, and no more than [`MAX_MAP_BYTES`] of them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use wasmparser::{BinaryReader, Parser, Payload};

use super::SourceMap;
use crate::shared::regular_file::read_at_most;

/// Larger maps are refused: Emscripten's map of a 40 MB module is about as large.
const MAX_MAP_BYTES: u64 = 256 << 20;

/// Where the registered modules' source maps are: the maps given, each until a module takes
/// it, and the files the modules were read from.
#[derive(Default)]
pub struct SourceMapSearch {
    given: Vec<Given>,
    /// A module's (or component's) registered name → its file.
    files: HashMap<String, PathBuf>,
}

/// A map given, until a module takes it.
struct Given {
    path: PathBuf,
    map: Option<SourceMap>,
    /// The module it came nearest to fitting, and why it does not: the fewest wrong offsets.
    nearest: Option<(usize, String, String)>,
}

/// What a map is looked for: a module, or a core module of a component, whose map is not the
/// component's `NAME.wasm.map`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Searched {
    Module,
    InComponent,
}

impl SourceMapSearch {
    /// Reads the maps given; what cannot be read is a warning each (returned).
    pub fn new(paths: &[PathBuf]) -> (Self, Vec<String>) {
        let mut warnings = Vec::new();
        let mut given = Vec::new();
        for path in paths {
            let read = read_bounded(path)
                .map_err(|e| format!("its source map {} cannot be read ({e})", path.display()))
                .and_then(|json| {
                    SourceMap::parse(&json, parent(path), &path.display().to_string())
                });
            match read {
                Ok(map) => given.push(Given {
                    path: path.clone(),
                    map: Some(map),
                    nearest: None,
                }),
                // "its source map … is malformed": the map is not yet any module's.
                Err(why) => {
                    warnings.push(format!("--source-map: {}", why.trim_start_matches("its ")))
                }
            }
        }
        (
            SourceMapSearch {
                given,
                files: HashMap::new(),
            },
            warnings,
        )
    }

    /// Says that the module or component to be registered as `name` was read from `file`:
    /// its map may be beside it, or relative to it.
    pub fn module_file(&mut self, name: &str, file: &Path) {
        self.files.insert(name.to_string(), file.to_path_buf());
    }

    /// The source map of the module registered as `name` (`wasm`, its bytes; in the component
    /// registered as `name` when `searched` says so), if it has one: `Err` where one should be
    /// and cannot be read, saying why.
    pub fn find(
        &mut self,
        name: &str,
        wasm: &[u8],
        searched: Searched,
    ) -> Option<Result<SourceMap, String>> {
        let file = self.files.get(name).cloned();
        let file_name = match &file {
            Some(file) => file.file_name()?.to_str()?.to_string(),
            None => name.to_string(),
        };
        if let Some(map) = self.take_given(&file_name, wasm) {
            return Some(Ok(map));
        }
        let url = source_mapping_url(wasm);
        let Some(module) = file else {
            // Where the module was read from is unknown (an embedder's): only a map that says
            // where it is without a directory can be found.
            return url
                .filter(|u| u.starts_with("data:") || u.starts_with("file:") || u.starts_with('/'))
                .map(|url| from_url(&url, Path::new(name), Path::new("")));
        };
        let dir = parent(&module);
        if let Some(url) = url {
            return Some(from_url(&url, &module, dir));
        }
        if searched == Searched::InComponent {
            return None;
        }
        let beside = PathBuf::from(format!("{}.map", module.display()));
        if !beside.is_file() {
            return None;
        }
        Some(read_map(&beside, |e| {
            format!("its source map {} cannot be read ({e})", beside.display())
        }))
    }

    /// The given map that is the module's (named `name`): by its `file`, else by its offsets.
    fn take_given(&mut self, name: &str, wasm: &[u8]) -> Option<SourceMap> {
        let named = |map: &SourceMap| map.file().and_then(|f| f.rsplit('/').next()) == Some(name);
        if let Some(given) = self
            .given
            .iter_mut()
            .find(|g| g.map.as_ref().is_some_and(named))
        {
            return given.map.take();
        }
        for given in &mut self.given {
            let Some(map) = &given.map else { continue };
            match map.misfit_of(wasm) {
                None => return given.map.take(),
                Some((wrong, why)) => {
                    if given.nearest.as_ref().is_none_or(|(w, ..)| wrong < *w) {
                        given.nearest = Some((wrong, name.to_string(), why));
                    }
                }
            }
        }
        None
    }

    /// Lets the maps given that no module took go (once said unused).
    pub fn forget_unused(&mut self) {
        self.given.clear();
    }

    /// A warning for each map given that no module took.
    pub fn unused(&self) -> Vec<String> {
        self.given
            .iter()
            .filter(|given| given.map.is_some())
            .map(|given| {
                let nearest = match &given.nearest {
                    // "its source map … is not of this build of it (…)": of the module's.
                    Some((_, module, why)) => {
                        format!(" (nearest, {module}: {})", why.trim_start_matches("its "))
                    }
                    None => String::new(),
                };
                format!(
                    "--source-map {}: no module's name is its `file`, and its offsets fall on no module's code{nearest}: not used",
                    given.path.display()
                )
            })
            .collect()
    }
}

/// The module's `sourceMappingURL` section's URL; of several (`wasm-opt
/// --output-source-map-url` adds one before the one the module had), the first.
fn source_mapping_url(wasm: &[u8]) -> Option<String> {
    for payload in Parser::new(0).parse_all(wasm) {
        match payload {
            Ok(Payload::CustomSection(section)) if section.name() == "sourceMappingURL" => {
                let mut reader = BinaryReader::new(section.data(), section.data_offset());
                return reader.read_string().ok().map(str::to_string);
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// The map at `url`, as the module at `module` (in `dir`) names it.
fn from_url(url: &str, module: &Path, dir: &Path) -> Result<SourceMap, String> {
    if let Some(data) = url.strip_prefix("data:") {
        let origin = "in its sourceMappingURL (a data: URL)";
        return match data.split_once(',') {
            Some((kind, base64)) if kind.ends_with(";base64") => {
                let engine = base64::engine::general_purpose::STANDARD;
                let json = engine
                    .decode(base64.trim())
                    .map_err(|e| format!("its source map {origin} is not base64 ({e})"))?;
                SourceMap::parse(&json, dir, origin)
            }
            _ => Err(format!("its source map {origin} is not base64-encoded")),
        };
    }
    let path = if url.starts_with("file:") {
        url::Url::parse(url)
            .ok()
            .and_then(|u| u.to_file_path().ok())
            .ok_or_else(|| format!("its sourceMappingURL {url} is no local file's"))?
    } else if let Some((scheme, _)) = url.split_once("://") {
        // Served (Emscripten's `--source-map-base http://…`): the map is looked for beside the
        // module, under its own name.
        let name = url.rsplit('/').next().unwrap_or_default();
        let beside = dir.join(name);
        if name.is_empty() || !beside.is_file() {
            return Err(format!(
                "its sourceMappingURL is {url}, which wasmspy does not fetch over {scheme}, and no {name} is beside {}: give the map with --source-map",
                module.display()
            ));
        }
        beside
    } else {
        dir.join(url)
    };
    read_map(&path, |e| {
        format!(
            "its sourceMappingURL {url} points to {}, which cannot be read ({e})",
            path.display()
        )
    })
}

/// The map at `path` (its sources relative to its directory); `unreadable` says why it
/// cannot be read.
fn read_map(
    path: &Path,
    unreadable: impl FnOnce(std::io::Error) -> String,
) -> Result<SourceMap, String> {
    let json = read_bounded(path).map_err(unreadable)?;
    SourceMap::parse(&json, parent(path), &path.display().to_string())
}

/// `path`'s directory; `""` (the working directory) for a bare name.
fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new(""))
}

/// The bytes of the regular file at `path`, at most [`MAX_MAP_BYTES`].
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let bytes = read_at_most(path, MAX_MAP_BYTES + 1)?;
    if bytes.len() as u64 > MAX_MAP_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_MAP_BYTES >> 20
        )));
    }
    Ok(bytes)
}
