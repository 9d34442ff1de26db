//! A compile cache of a test's or benchmark's own, not the user's: Wasmtime's cache
//! configuration file, in `dir`, naming a directory beside it.

use std::path::{Path, PathBuf};

/// The cache directory, and the `-C` value that points Wasmtime (and wasmspy) at it.
pub fn own_cache(dir: &Path) -> (PathBuf, String) {
    let cache = dir.join("cache");
    let config = dir.join("cache.toml");
    std::fs::write(
        &config,
        format!("[cache]\ndirectory = {:?}\n", cache.display().to_string()),
    )
    .unwrap();
    (cache, format!("cache-config={}", config.display()))
}
