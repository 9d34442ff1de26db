//! `wasmspy dump ADDR`: the stack of every guest a live server's profiler runs, now.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use crate::commands::top::{base_url, get};

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct DumpArgs {
    /// The live server: `http://127.0.0.1:6060`, `127.0.0.1:6060`, or `:6060` on loopback.
    #[arg(value_name = "ADDR")]
    pub addr: String,
}

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
