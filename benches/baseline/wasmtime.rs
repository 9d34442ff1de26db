//! `wasmtime run`, built from the `wasmtime-cli` crate of the Wasmtime version wasmspy runs on
//! (`target/debug/examples/wasmtime-baseline run [OPTIONS] MODULE [ARGS]`, and `serve`): what users run instead of
//! wasmspy, and so the baseline of the benchmarks and the program that Linux perf samples in the
//! faithfulness test. Its defaults are the CLI's, but for the compile cache (the `cache`
//! feature is left out: `-C cache=n`).

use clap::Parser;

#[derive(Parser)]
#[command(name = "wasmtime")]
enum Wasmtime {
    Run(wasmtime_cli::commands::RunCommand),
    Serve(wasmtime_cli::commands::ServeCommand),
}

fn main() -> wasmtime::Result<()> {
    match Wasmtime::parse() {
        Wasmtime::Run(run) => run.execute(),
        Wasmtime::Serve(serve) => serve.execute(),
    }
}
