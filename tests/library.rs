//! Embedders attach the profiler to their own `Engine` and `Store`.

use wasmspy::collector::CPU;
use wasmspy::sampler::SamplerKind;
use wasmspy::{Profiler, ProfilerOptions};
use wasmtime::{Config, Engine, Instance, Module, Store};

/// One signal sampler runs per process: these tests take turns.
static SIGNALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

const GUEST: &str = r#"(module
    (func $busy (param $n i32) (result i32) (local $acc i32)
        (loop $l
            (local.set $acc (i32.add (i32.mul (local.get $acc) (i32.const 31)) (local.get $n)))
            (local.tee $n (i32.sub (local.get $n) (i32.const 1)))
            (br_if $l))
        (local.get $acc))
    (func (export "run") (param i32) (result i32) (call $busy (local.get 0))))"#;

fn setup(sampler: SamplerKind) -> (Engine, Module, Vec<u8>, Profiler) {
    let mut config = Config::new();
    Profiler::configure(&mut config);
    let engine = Engine::new(&config).unwrap();
    let wasm = wat::parse_str(GUEST).unwrap();
    let module = Module::new(&engine, &wasm).unwrap();
    let options = ProfilerOptions {
        sampler,
        ..Default::default()
    };
    let profiler = Profiler::new(&engine, options).unwrap();
    profiler
        .add_module("guest.wasm", &module, wasm.as_slice())
        .unwrap();
    (engine, module, wasm, profiler)
}

#[test]
fn an_embedders_store_is_profiled() {
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    for sampler in [SamplerKind::Signal, SamplerKind::Epoch] {
        let (engine, module, _, mut profiler) = setup(sampler);
        let mut store = Store::new(&engine, ());
        profiler.attach(&mut store).unwrap();
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let run = instance
            .get_typed_func::<i32, i32>(&mut store, "run")
            .unwrap();
        profiler.start().unwrap();
        run.call(&mut store, 300_000_000).unwrap();
        let profile = profiler.stop();

        let busy: i64 = profile
            .samples
            .iter()
            .filter(|s| profile.frame_name(profile.stacks[s.stack][0]) == "busy")
            .map(|s| s.values[CPU])
            .sum();
        let share = busy as f64 / profile.total(CPU) as f64;
        assert!(
            share > 0.9,
            "{sampler:?}: busy has {share:.3} of the CPU time"
        );
        assert_eq!(profile.mappings[0].file_name, "guest.wasm");
    }
}

#[test]
fn one_signal_sampler_at_a_time() {
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let (engine, _, _, mut first) = setup(SamplerKind::Signal);
    let (_, _, _, mut second) = setup(SamplerKind::Signal);
    let mut store = Store::new(&engine, ());
    first.attach(&mut store).unwrap();
    second.attach(&mut store).unwrap();
    first.start().unwrap();
    let err = second.start().unwrap_err();
    assert!(err.to_string().contains("another signal sampler"), "{err}");
    first.stop();
    second.start().unwrap();
    second.stop();
}
