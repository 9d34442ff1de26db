//! The perf map: `/tmp/perf-PID.map`, a line per function, `START SIZE NAME` (hexadecimal,
//! without `0x`), which perf reads to name code in anonymous memory
//! (`tools/perf/Documentation/jit-interface.txt`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::resolve::ListedFunction;

/// Writes `listing` to this process's perf map, replacing any; returns its path.
pub fn write(listing: &[ListedFunction]) -> Result<PathBuf> {
    let path = PathBuf::from(format!("/tmp/perf-{}.map", std::process::id()));
    let mut text = Vec::new();
    for f in listing {
        // A name is the rest of its line.
        let name = f.name.replace('\n', " ");
        writeln!(text, "{:x} {:x} {name}", f.code.start, f.code.len())?;
    }
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}
