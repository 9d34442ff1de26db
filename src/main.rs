mod cli;
mod commands;

use clap::error::ErrorKind;
use clap::Parser;

fn main() {
    let cli = match cli::Cli::try_parse() {
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
        cli::Command::Record(args) => commands::record::record(args),
        cli::Command::Serve(args) => commands::serve::serve(args),
        cli::Command::Report(args) => commands::report::report(args),
        cli::Command::Convert(args) => commands::report::convert(args),
        cli::Command::Diff(args) => commands::report::diff(args),
        cli::Command::Top(args) => commands::top::top(args),
        cli::Command::Dump(args) => commands::dump::dump(args),
    };
    let code = code.unwrap_or_else(|e| {
        eprintln!("wasmspy: error: {e:#}");
        1
    });
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}
