//! wasmspy's own entries in Wasmtime's compile cache, for components: one whose language
//! runtimes wasmspy probes is compiled as other bytes than the user's, and Wasmtime's entry
//! for the probed bytes costs, on every start, probing the component again to know them (its
//! runtimes detected: 30 ms of a 14 MB StarlingMonkey component), hashing them and
//! decompressing the compiled code (zstd: 65 ms of the same component's 120 ms warm start
//! under `wasmtime run`). An entry here is keyed by the user's bytes and the engine's
//! settings, and holds the component compiled, probed or not, uncompressed (mapped, not read:
//! three times the size on disk of Wasmtime's entry), with the probed bytes beside it.
//!
//! An entry also keeps the build ids of the component's core modules (SHA-256 of each, which a
//! profile names its modules by), written once a run has hashed them: hashing them again cost
//! a warm start 0.7 ms of a 12 ms start of a 2.8 MB Rust component here, and 2 ms of CPU.
//! And the hash of each component file read, by the file's identity, so that a start of an
//! unchanged file does not hash its bytes again ([`ProbedCache::content`]).
//!
//! The entries live in Wasmtime's cache directory, in `modules/wasmspy-VERSION-MTIME/` beside
//! Wasmtime's `modules/wasmtime-VERSION/`, as files without an extension: Wasmtime's cleanup
//! counts them with its own against the cache's limits and deletes the oldest (by the time
//! written, which each use renews) when they are passed.

use std::fs::Metadata;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use twox_hash::XxHash3_128;
use wasmtime::component::Component;
use wasmtime::Engine;
use wasmtime_cli_flags::CommonOptions;

use crate::runtime_probe::PROBE;
use crate::shared::hex::hex;

/// Where an engine's entries are; `None` where Wasmtime's options turn its cache off.
pub struct ProbedCache {
    dir: PathBuf,
}

/// A component as an entry holds it: compiled, and the probed bytes it was compiled from
/// where its language runtimes were probed (`None`: nothing in it to probe); its core modules'
/// build ids, once a run has kept them.
pub struct Cached {
    pub component: Component,
    pub probed: Option<Arc<[u8]>>,
    pub build_ids: Option<Vec<String>>,
}

impl ProbedCache {
    /// The cache Wasmtime's options `-C cache` and `-C cache-config` name, as `wasmtime run`
    /// reads them; `None` when they turn it off.
    pub fn of(options: &CommonOptions) -> Result<Option<Self>> {
        if options.codegen.cache == Some(false) {
            return Ok(None);
        }
        let config = options.codegen.cache_config.as_deref().map(Path::new);
        let config = wasmtime::CacheConfig::from_file(config)?;
        let Some(root) = config.directory() else {
            return Ok(None);
        };
        // Each build of wasmspy may probe differently, as each local build of Wasmtime may
        // compile differently: Wasmtime names its directory so for builds from git.
        let built = std::env::current_exe()
            .and_then(std::fs::metadata)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis());
        let dir = root
            .join("modules")
            .join(format!("wasmspy-{}-{built}", env!("CARGO_PKG_VERSION")));
        Ok(Some(ProbedCache { dir }))
    }

    /// The entry of `wasm` compiled by `engine`; `file`, what the file `wasm` was read from
    /// was when it was opened.
    pub fn entry(&self, engine: &Engine, wasm: &[u8], file: &Metadata) -> Entry {
        let mut key = Key(XxHash3_128::new());
        engine.precompile_compatibility_hash().hash(&mut key);
        key.0.write(&self.content(wasm, file).to_le_bytes());
        let key = hex(&key.0.finish_128().to_le_bytes());
        Entry {
            compiled: self.dir.join(&key),
            probed: self.dir.join(format!("{key}-wasm")),
            build_ids: self.dir.join(format!("{key}-ids")),
        }
    }

    /// XXH3-128 of `wasm`, read from `file`: as an earlier run hashed the same file unchanged
    /// (kept beside the entries as `IDENTITY-file`), else hashed. Hashing a 2.8 MB component took 0.5 to 1.3 ms of
    /// its 10 ms warm start here, its bytes' first read after the file's.
    ///
    /// A file is the same when its device, inode, size, modification and change times are:
    /// the change time (which no program can set) moves with every write. As git's index
    /// does with "racily clean" files, a hash is kept only for a file whose times are over
    /// two seconds old when its bytes were read: one written again within a tick of the
    /// file system's clock could otherwise keep its times, and the hash of its old bytes
    /// would name the new ones.
    fn content(&self, wasm: &[u8], file: &Metadata) -> u128 {
        self.content_at(wasm, file, std::time::SystemTime::now())
    }

    /// [`content`](Self::content), `now` being the time.
    fn content_at(&self, wasm: &[u8], file: &Metadata, now: std::time::SystemTime) -> u128 {
        let known = self.dir.join(format!("{}-file", identity(file)));
        let kept = std::fs::read_to_string(&known)
            .ok()
            .and_then(|hex| u128::from_str_radix(hex.get(..32)?, 16).ok());
        if let Some(content) = kept {
            return content;
        }
        let content = XxHash3_128::oneshot(wasm);
        if settled(file, now) {
            let _ = write_atomically(&known, format!("{content:032x}").as_bytes());
        }
        content
    }
}

/// A file as [`ProbedCache::content`] knows it: XXH3-128 of its device, inode, size,
/// modification and change times, in hex.
fn identity(file: &Metadata) -> String {
    let mut key = XxHash3_128::new();
    for n in [file.dev(), file.ino(), file.size()] {
        key.write(&n.to_le_bytes());
    }
    for n in [
        file.mtime(),
        file.mtime_nsec(),
        file.ctime(),
        file.ctime_nsec(),
    ] {
        key.write(&n.to_le_bytes());
    }
    hex(&key.finish_128().to_le_bytes())
}

/// Whether `file` was last written (or its inode changed) over two seconds before `now`.
fn settled(file: &Metadata, now: std::time::SystemTime) -> bool {
    let now = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    file.mtime().max(file.ctime()) + 2 < now
}

/// One component's entry: the component compiled, probed or not, and, if probed, the probed
/// bytes; its build ids; three files, which Wasmtime's cleanup may delete one without the
/// others.
pub struct Entry {
    compiled: PathBuf,
    probed: PathBuf,
    build_ids: PathBuf,
}

impl Entry {
    /// What the entry holds, if anything whole.
    pub fn read(&self, engine: &Engine) -> Option<Cached> {
        // SAFETY: the file is what `Engine::precompile_component` wrote, trusted as Wasmtime
        // trusts the entries it deserializes from the same directory; entries are only ever
        // replaced by renaming a whole new file over them, or deleted, neither of which
        // changes the bytes of a file already mapped. Wasmtime checks that it was compiled
        // for this engine's settings and version.
        let component = unsafe { Component::deserialize_file(engine, &self.compiled) }.ok()?;
        // Renewed for Wasmtime's cleanup, which deletes the oldest first.
        if let Ok(file) = std::fs::File::options().append(true).open(&self.compiled) {
            let _ = file.set_modified(std::time::SystemTime::now());
        }
        let probed = component
            .component_type()
            .imports(engine)
            .any(|(name, _)| name == PROBE);
        let probed = match probed {
            true => Some(crate::wasi_host::read_program(&self.probed).ok()?),
            false => None,
        };
        let build_ids = std::fs::read_to_string(&self.build_ids)
            .ok()
            .and_then(|ids| build_ids(&ids));
        Some(Cached {
            component,
            probed,
            build_ids,
        })
    }

    /// Keeps `ids`, the build ids of the component's core modules in order.
    pub fn keep_build_ids(&self, ids: &[String]) {
        let file = ids.join("\n");
        // Only ids a later start will believe (none left empty by a failed hash).
        if build_ids(&file).is_some() {
            let _ = write_atomically(&self.build_ids, file.as_bytes());
        }
    }

    /// Compiles `wasm` (probed or not) with `engine` and records it: the compiled component.
    pub fn write(&self, engine: &Engine, wasm: &[u8], probed: bool) -> wasmtime::Result<Component> {
        let compiled = engine.precompile_component(wasm)?;
        // The probed bytes first: a compiled probed component is of no use without them.
        if !probed || write_atomically(&self.probed, wasm).is_ok() {
            let _ = write_atomically(&self.compiled, &compiled);
        }
        // SAFETY: `compiled` is what `precompile_component` just made with this engine.
        unsafe { Component::deserialize(engine, &compiled) }
    }
}

/// The build ids a file of them holds, one a line: each the hex SHA-256 of a module, or none
/// (an empty or damaged file).
fn build_ids(file: &str) -> Option<Vec<String>> {
    let ids: Vec<String> = file.lines().map(str::to_string).collect();
    let sha256 = |id: &String| id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
    (!ids.is_empty() && ids.iter().all(sha256)).then_some(ids)
}

/// Writes `bytes` to `path` whole or not at all: through a file beside it that Wasmtime's
/// cleanup takes for a compilation under way (`.wip-`), renamed over it.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(path.parent().expect("an entry is in a directory"))?;
    let wip = path.with_extension(format!("wip-wasmspy-{}", std::process::id()));
    let written = std::fs::File::create(&wip).and_then(|mut f| f.write_all(bytes));
    match written.and_then(|()| std::fs::rename(&wip, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&wip);
            Err(e)
        }
    }
}

/// An entry's key: XXH3's 128 bits of the engine's settings (hashed as Wasmtime hashes them
/// into its own key) and of the user's bytes' own XXH3-128 ([`ProbedCache::content`]). Not
/// SHA-256 as Wasmtime's: a quarter of its time (0.5 against 2 ms for a 2.8 MB component
/// here); and a hash that withstands a forger would protect nothing, as whoever can write the
/// cache's directory can put any compiled code there under any key.
struct Key(XxHash3_128);

impl Hasher for Key {
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    fn finish(&self) -> u64 {
        self.0.finish_128() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn a_files_hash_is_kept_once_its_times_are_settled_and_made_again_once_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ProbedCache {
            dir: dir.path().to_path_buf(),
        };
        let path = dir.path().join("program.wasm");
        let (first, second) = (b"the first bytes".as_slice(), b"other bytes, 22".as_slice());
        let hash = XxHash3_128::oneshot;
        std::fs::write(&path, first).unwrap();
        let written = std::fs::metadata(&path).unwrap();
        let kept = dir.path().join(format!("{}-file", identity(&written)));

        // Hashed as it is written: not kept (its times could stay through a rewrite).
        let at_write = SystemTime::UNIX_EPOCH + Duration::from_secs(written.ctime() as u64);
        assert_eq!(cache.content_at(first, &written, at_write), hash(first));
        assert!(!kept.exists());

        // Seconds later: hashed once, then known by the file's identity without a hash (the
        // bytes given are not looked at).
        let later = at_write + Duration::from_secs(10);
        assert_eq!(cache.content_at(first, &written, later), hash(first));
        assert!(kept.exists());
        assert_eq!(cache.content_at(second, &written, later), hash(first));

        // Written again in place, the same size, once the file system's clock has moved on:
        // its change time moved, so it is hashed again.
        std::thread::sleep(Duration::from_millis(50));
        std::fs::write(&path, second).unwrap();
        let rewritten = std::fs::metadata(&path).unwrap();
        assert_eq!(rewritten.size(), written.size());
        assert_ne!(
            (rewritten.ctime(), rewritten.ctime_nsec()),
            (written.ctime(), written.ctime_nsec())
        );
        assert_eq!(cache.content_at(second, &rewritten, later), hash(second));
    }
}
