//! Where `record` finds a module's source map (v3): among the `--source-map` files (the one
//! whose `file` is the module's name, else one whose offsets fall on the module's code), where
//! the module's `sourceMappingURL` section points (a path relative to the module's directory,
//! an absolute path, a `file://` URL, or a `data:` URL holding the map), or `NAME.wasm.map`
//! beside the module. The module and what it points to are the guest's: only regular files are
//! read, opened without blocking, and no more than [`MAX_MAP_BYTES`] of them.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use wasmparser::{BinaryReader, Parser, Payload};

use crate::resolve::symbolize::source_map::SourceMap;

/// Larger maps are refused: Emscripten's map of a 40 MB module is about as large.
const MAX_MAP_BYTES: u64 = 256 << 20;

/// The `--source-map` files, each until a module takes it.
pub struct SourceMaps {
    given: Vec<(PathBuf, Option<SourceMap>)>,
}

impl SourceMaps {
    /// Reads the `--source-map` files; what cannot be read is a warning each (returned).
    pub fn read(paths: &[PathBuf]) -> (Self, Vec<String>) {
        let mut warnings = Vec::new();
        let mut given = Vec::new();
        for path in paths {
            let read = read_bounded(path)
                .map_err(|e| format!("its source map {} cannot be read ({e})", path.display()))
                .and_then(|json| {
                    SourceMap::parse(&json, parent(path), &path.display().to_string())
                });
            match read {
                Ok(map) => given.push((path.clone(), Some(map))),
                // "its source map … is malformed": the map is not yet any module's.
                Err(why) => {
                    warnings.push(format!("--source-map: {}", why.trim_start_matches("its ")))
                }
            }
        }
        (SourceMaps { given }, warnings)
    }

    /// The source map of the module at `module` (`wasm`, its bytes), if it has one: `Err`
    /// where one should be and cannot be read, saying why.
    pub fn find(&mut self, module: &Path, wasm: &[u8]) -> Option<Result<SourceMap, String>> {
        if let Some(map) = self.take_given(module, wasm) {
            return Some(Ok(map));
        }
        let dir = parent(module);
        if let Some(url) = source_mapping_url(wasm) {
            return Some(from_url(&url, module, dir));
        }
        let beside = PathBuf::from(format!("{}.map", module.display()));
        if !beside.is_file() {
            return None;
        }
        Some(read_map(&beside, |e| {
            format!("its source map {} cannot be read ({e})", beside.display())
        }))
    }

    /// The given map that is `module`'s: by its `file`, else by its offsets.
    fn take_given(&mut self, module: &Path, wasm: &[u8]) -> Option<SourceMap> {
        let name = module.file_name()?.to_str()?;
        let named = |map: &SourceMap| map.file().and_then(|f| f.rsplit('/').next()) == Some(name);
        let position = self
            .given
            .iter()
            .position(|(_, m)| m.as_ref().is_some_and(named))
            .or_else(|| {
                self.given
                    .iter()
                    .position(|(_, m)| m.as_ref().is_some_and(|m| m.fits(wasm)))
            })?;
        self.given[position].1.take()
    }

    /// A warning for each `--source-map` that no module took.
    pub fn unused(&self) -> Vec<String> {
        self.given
            .iter()
            .filter(|(_, map)| map.is_some())
            .map(|(path, _)| {
                format!(
                    "--source-map {}: no module's name is its `file`, and its offsets fall on no module's code: not used",
                    path.display()
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

/// The bytes of the regular file at `path`, at most [`MAX_MAP_BYTES`]. Opened without
/// blocking: a FIFO put where a map should be would wait for a writer.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_MAP_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_MAP_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_MAP_BYTES >> 20
        )));
    }
    Ok(bytes)
}
