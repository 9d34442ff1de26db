//! The `wasmspy` command line: its arguments (`args.rs`) and its entry point ([`main`]); the
//! commands themselves are in `commands/`.

pub(crate) mod args;

use clap::error::ErrorKind;
use clap::Parser;

/// What the `wasmspy` executable runs: parses its arguments and runs the command, then exits
/// with the command's status. The binary's whole `main`; not part of the library's API.
#[doc(hidden)]
pub fn main() -> ! {
    let cli = match args::Cli::try_parse() {
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
        args::Command::Record(args) => crate::commands::record::record(args),
        args::Command::Serve(args) => crate::commands::serve::serve(args),
        args::Command::Report(args) => crate::commands::report::report(args),
        args::Command::Convert(args) => crate::commands::report::convert(args),
        args::Command::Diff(args) => crate::commands::report::diff(args),
        args::Command::Top(args) => crate::commands::top::top(args),
        args::Command::Dump(args) => crate::commands::dump::dump(args),
    };
    let code = code.unwrap_or_else(|e| {
        eprintln!("wasmspy: error: {e:#}");
        1
    });
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}
