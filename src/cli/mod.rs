//! The `wasmspy` command line: its subcommands parsed and dispatched ([`main`]); each
//! command, and its arguments, are in `commands/`.

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

use crate::commands::annotate::AnnotateArgs;
use crate::commands::dump::DumpArgs;
use crate::commands::record::RecordArgs;
use crate::commands::report::{ConvertArgs, DiffArgs, ReportArgs};
use crate::commands::serve::ServeArgs;
use crate::commands::top::TopArgs;

#[derive(Parser)]
#[command(
    name = "wasmspy",
    version,
    about = "A sampling profiler for WebAssembly programs running on Wasmtime"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a WASI program as `wasmtime run` would, and write a CPU profile of it.
    Record(RecordArgs),
    /// Serve a wasi:http/proxy component as `wasmtime serve` would, and profile every request.
    Serve(ServeArgs),
    /// Print a profile's top functions (or lines), as `go tool pprof -top` does.
    Report(ReportArgs),
    /// Write a profile in another format.
    Convert(ConvertArgs),
    /// Show where a profile's hottest (or named) functions spend it, Wasm instruction by
    /// instruction, between their source lines, as `perf annotate` and `pprof -list` do.
    Annotate(AnnotateArgs),
    /// Compare two profiles: what grew and what shrank, totals first, and a verdict for CI.
    Diff(DiffArgs),
    /// Show the functions taking a running guest's CPU now, refreshed, from its live server
    /// (`record --pprof-addr`, `serve --pprof-addr`), as py-spy's `top` does.
    Top(TopArgs),
    /// Print the stack of every guest running now, from its live server (`record
    /// --pprof-addr`, `serve --pprof-addr`), as py-spy's `dump` does: each request with its
    /// labels and how long it has run.
    Dump(DumpArgs),
}

/// What the `wasmspy` executable runs: parses its arguments and runs the command, then exits
/// with the command's status. The binary's whole `main`; not part of the library's API.
#[doc(hidden)]
pub fn main() -> ! {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                let _ = e.print();
                std::process::exit(0);
            }
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                let _ = e.print();
                std::process::exit(2);
            }
            _ => {
                // Clap's first paragraph, on one line: the message and what it lists (the
                // missing arguments), without the usage and tips after it.
                let text = e.to_string();
                let message: Vec<&str> = text
                    .lines()
                    .take_while(|l| !l.trim().is_empty())
                    .map(str::trim)
                    .collect();
                let message = message.join(" ");
                let message = message.strip_prefix("error: ").unwrap_or(&message);
                eprintln!("wasmspy: error: {message} (see `wasmspy --help`)");
                std::process::exit(2);
            }
        },
    };
    let code = match cli.command {
        Command::Record(args) => crate::commands::record::record(args),
        Command::Serve(args) => crate::commands::serve::serve(args),
        Command::Report(args) => crate::commands::report::report(args),
        Command::Convert(args) => crate::commands::report::convert(args),
        Command::Annotate(args) => crate::commands::annotate::annotate(args),
        Command::Diff(args) => crate::commands::report::diff(args),
        Command::Top(args) => crate::commands::top::top(args),
        Command::Dump(args) => crate::commands::dump::dump(args),
    };
    let code = code.unwrap_or_else(|e| {
        eprintln!("wasmspy: error: {e:#}");
        1
    });
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}
