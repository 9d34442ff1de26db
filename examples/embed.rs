//! Profiling a guest in your own Wasmtime host: the profiler attached to your engine and
//! store, the guest run, its profile written for `go tool pprof` and its hottest functions
//! printed.
//!
//! `cargo run --example embed -- [GUEST.wasm] [OUT.pb.gz]` (the bundled `examples/hotspots.wasm`
//! and `embed.pb.gz` unless given); the guest is a WASI command, run with wasmtime-wasi.

use std::collections::HashMap;

use anyhow::Context;
use wasmspy::profile::CPU;
use wasmspy::{Profiler, ProfilerOptions};
use wasmtime::{Engine, Linker, Module, Store};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::WasiCtxBuilder;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let guest = args
        .next()
        .unwrap_or_else(|| "examples/hotspots.wasm".into());
    let output = args.next().unwrap_or_else(|| "embed.pb.gz".into());

    // The engine gets what the sampler needs (for the default signal sampler: deep
    // backtraces, fiber stacks it can walk), nothing else.
    let options = ProfilerOptions::default();
    let mut config = wasmtime::Config::new();
    Profiler::configure(&mut config, &options);
    let engine = Engine::new(&config)?;
    let wasm = std::fs::read(&guest).with_context(|| format!("reading {guest}"))?;
    let module = Module::new(&engine, &wasm)?;

    // The profiler reads names, lines and inlined calls from the module's own bytes.
    let mut profiler = Profiler::new(&engine, options)?;
    profiler.add_module(&guest, &module, wasm.as_slice())?;

    let mut linker: Linker<WasiP1Ctx> = Linker::new(&engine);
    p1::add_to_linker_sync(&mut linker, |ctx| ctx)?;
    let wasi = WasiCtxBuilder::new()
        .inherit_stdio()
        .args(&[&guest])
        .build_p1();
    let mut store = Store::new(&engine, wasi);
    // Samples this thread's guest from now on.
    profiler.attach(&mut store)?;
    let instance = linker.instantiate(&mut store, &module)?;
    // A Go or CPython guest's own stacks, an allocator hook: shown the instance.
    profiler.attach_instance(&mut store, &instance)?;

    profiler.start()?;
    let start = instance.get_typed_func::<(), ()>(&mut store, "_start")?;
    let ran = start.call(&mut store, ());
    let profile = profiler.stop();
    // A guest's `exit(0)` is a trap with an exit code: the profile is written either way.
    if let Err(e) = ran {
        match e.downcast_ref::<wasmtime_wasi::I32Exit>() {
            Some(exit) if exit.0 == 0 => {}
            _ => eprintln!("the guest failed: {e:#}"),
        }
    }

    std::fs::write(&output, wasmspy::export::pprof::encode(&profile)?)?;
    for warning in profiler.handle().take_warnings() {
        eprintln!("warning: {warning}");
    }

    // The functions the samples ended in, by CPU time.
    let mut leaves: HashMap<&str, i64> = HashMap::new();
    for sample in &profile.samples {
        let leaf = profile.stacks[sample.stack][0];
        *leaves.entry(profile.frame_name(leaf)).or_default() += sample.values[CPU];
    }
    let total = profile.total(CPU).max(1);
    let mut leaves: Vec<_> = leaves.into_iter().collect();
    leaves.sort_by_key(|&(name, cpu)| (-cpu, name));
    println!("wrote {output}; where the CPU time went:");
    for (name, cpu) in leaves.iter().take(5) {
        println!("{:6.1}%  {name}", 100.0 * *cpu as f64 / total as f64);
    }
    Ok(())
}
