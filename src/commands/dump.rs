//! `wasmspy dump ADDR`: the stack of every guest a live server's profiler runs, now.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::cli::args::DumpArgs;
use crate::commands::top::{base_url, get};

/// Prints the live server's stack dump (`/debug/pprof/goroutine?debug=2`).
pub fn dump(args: DumpArgs) -> Result<i32> {
    let base = base_url(&args.addr);
    let url = format!("{base}/debug/pprof/goroutine?debug=2");
    let text =
        get(&url, Duration::from_secs(60)).with_context(|| format!("no stack dump from {base}"))?;
    let mut out = std::io::stdout();
    out.write_all(&text)?;
    out.flush()?;
    Ok(0)
}
