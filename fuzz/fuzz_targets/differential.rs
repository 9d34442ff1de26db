//! Valid modules from wasm-smith, each export called with zero arguments under plain Wasmtime
//! and under wasmspy's signal sampler at 10 kHz (as `wasmspy record` runs a guest): the same
//! results, bit for bit, or the same trap. Fuel bounds every call (the same budget on both).
//! `cargo fuzz run differential`.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use wasm_smith::{Config, Module as SmithModule};
use wasmspy::SamplerKind;
use wasmspy::{Profiler, ProfilerOptions};
use wasmtime::{Engine, Instance, Module, Store, Val};

const FUEL: u64 = 2_000_000;

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let mut config: Config = u.arbitrary()?;
    config.max_imports = 0;
    config.canonicalize_nans = true;
    config.threads_enabled = false;
    config.gc_enabled = false;
    config.exceptions_enabled = false;
    config.memory64_enabled = false;
    config.custom_page_sizes_enabled = false;
    config.wide_arithmetic_enabled = false;
    config.max_memory32_bytes = 1 << 24;
    config.max_tables = 4;
    let wasm = SmithModule::new(config, u)?.to_bytes();
    let plain = outcomes(&wasm, None);
    let options = ProfilerOptions {
        rate_hz: 10_000,
        sampler: SamplerKind::Signal,
        ..Default::default()
    };
    let profiled = outcomes(&wasm, Some(options));
    assert_eq!(plain, profiled, "wasmspy changed what the module does");
    Ok(())
}

/// Each export's results (floats as bits) or its error, in export order; `None` for a module
/// Wasmtime does not take.
fn outcomes(wasm: &[u8], profiler: Option<ProfilerOptions>) -> Option<Vec<String>> {
    let mut config = wasmtime::Config::new();
    config.consume_fuel(true);
    if let Some(options) = &profiler {
        Profiler::configure(&mut config, options);
    }
    let engine = Engine::new(&config).unwrap();
    let module = Module::new(&engine, wasm).ok()?;
    let mut store = Store::new(&engine, ());
    store.set_fuel(FUEL).unwrap();
    let mut profiler = profiler.map(|options| {
        let mut p = Profiler::new(&engine, options).unwrap();
        p.add_module("fuzz.wasm", &module, wasm).unwrap();
        p.attach(&mut store).unwrap();
        p.start().unwrap();
        p
    });
    let mut outcomes = Vec::new();
    match Instance::new(&mut store, &module, &[]) {
        Err(e) => outcomes.push(format!("instantiation: {}", e.root_cause())),
        Ok(instance) => {
            let exports: Vec<_> = module.exports().map(|e| e.name().to_string()).collect();
            for name in exports {
                let Some(func) = instance.get_func(&mut store, &name) else {
                    continue;
                };
                let ty = func.ty(&store);
                if ty.params().len() > 0 {
                    continue;
                }
                let mut results: Vec<Val> = ty
                    .results()
                    .map(|t| t.default_value().unwrap_or(Val::I32(0)))
                    .collect();
                let outcome = match func.call(&mut store, &[], &mut results) {
                    Ok(()) => results.iter().map(show).collect::<Vec<_>>().join(" "),
                    Err(e) => format!("error: {}", e.root_cause()),
                };
                outcomes.push(format!("{name}: {outcome}"));
            }
        }
    }
    if let Some(p) = profiler.as_mut() {
        p.stop();
    }
    Some(outcomes)
}

fn show(value: &Val) -> String {
    match value {
        Val::I32(v) => format!("i32 {v}"),
        Val::I64(v) => format!("i64 {v}"),
        Val::F32(bits) => format!("f32 {bits:#x}"),
        Val::F64(bits) => format!("f64 {bits:#x}"),
        Val::V128(v) => format!("v128 {:#x}", v.as_u128()),
        Val::FuncRef(f) => format!("funcref {}", f.is_some()),
        Val::ExternRef(r) => format!("externref {}", r.is_some()),
        other => format!("{other:?}"),
    }
}
