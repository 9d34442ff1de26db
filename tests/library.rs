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
    (func $run (export "run") (param i32) (result i32) (call $busy (local.get 0))))"#;

/// An engine configured for `sampler`, and the options that choose it.
fn engine_for(sampler: SamplerKind) -> (Engine, ProfilerOptions) {
    let options = ProfilerOptions {
        sampler,
        ..Default::default()
    };
    let mut config = Config::new();
    Profiler::configure(&mut config, &options);
    (Engine::new(&config).unwrap(), options)
}

fn setup(sampler: SamplerKind) -> (Engine, Module, Vec<u8>, Profiler) {
    let (engine, options) = engine_for(sampler);
    let wasm = wat::parse_str(GUEST).unwrap();
    let module = Module::new(&engine, &wasm).unwrap();
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

/// A module compiled from the allocator rewrite is profiled in the original's terms: the hot
/// loop's source lines are the original's, and an allocator shows once, as the leaf of the
/// stacks that called it (here: samples taken inside a deliberately slow allocator hook).
#[test]
fn a_rewritten_module_profiles_as_the_original() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use wasmspy::clock::thread_cpu_ns;
    use wasmspy::memory::rewrite::{rewrite, HOOK_TABLE};
    use wasmspy::wasi_host::{self, Exit, UnknownImports, WasiConfig};

    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/rust/iter.wasm");
    let original: Arc<[u8]> = std::fs::read(path).unwrap().into();
    let rewritten = Arc::new(rewrite(&original).unwrap().unwrap());
    let options = ProfilerOptions {
        rate_hz: 10_000,
        sampler: SamplerKind::Signal,
        ..Default::default()
    };
    let mut config = wasi_host::engine_config();
    Profiler::configure(&mut config, &options);
    let engine = Engine::new(&config).unwrap();
    let module = Module::new(&engine, &rewritten.wasm).unwrap();
    let mut profiler = Profiler::new(&engine, options).unwrap();
    profiler
        .add_rewritten_module("iter.wasm", &module, original, rewritten)
        .unwrap();
    let wasi = WasiConfig {
        argv: vec!["iter.wasm".into(), "300".into()],
        env: Vec::new(),
        dirs: Vec::new(),
        unknown_imports: UnknownImports::Reject,
    };
    let mut store = wasi_host::new_store(&engine, &wasi).unwrap();
    profiler.attach(&mut store).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    profiler.start().unwrap();
    let exit = wasi_host::run_with(
        &mut store,
        &module,
        wasi.unknown_imports,
        |store, instance| {
            // 2 ms of CPU per call: samples land in the hook, under the allocator's caller.
            // Returning -1 keeps the countdown below zero: every allocation calls it.
            let hook = wasmtime::Func::wrap(
                &mut *store,
                move |_: i32, _: i32, _: i32, _: i32, _: i64| -> i64 {
                    counted.fetch_add(1, Ordering::Relaxed);
                    let until = thread_cpu_ns() + 2_000_000;
                    while thread_cpu_ns() < until {}
                    -1
                },
            );
            let table = instance.get_table(&mut *store, HOOK_TABLE).unwrap();
            table.set(&mut *store, 0, wasmtime::Ref::Func(Some(hook)))
        },
    );
    let profile = profiler.stop();
    assert!(matches!(exit, Exit::Code(0)), "{exit:?}");
    assert!(calls.load(Ordering::Relaxed) > 0);

    let names = |stack: &[usize]| -> Vec<String> {
        stack
            .iter()
            .flat_map(|&f| profile.frames[f].lines.iter())
            .map(|l| profile.functions[l.function].name.clone())
            .collect()
    };
    let is_allocator = |n: &str| n.contains("alloc") || n == "malloc" || n == "free";
    let (mut in_hook, mut hot) = (0, 0);
    for sample in &profile.samples {
        let stack = &profile.stacks[sample.stack];
        let names = names(stack);
        // A wrapper above its allocator's moved body is dropped: no allocator twice in a row.
        for pair in names.windows(2) {
            assert!(!(is_allocator(&pair[0]) && pair[0] == pair[1]), "{names:?}");
        }
        // The hook is called from the wrapper, which stands for its allocator.
        if names[0] == "[host call]" && is_allocator(&names[1]) {
            in_hook += 1;
            assert_ne!(names[1], names[2], "the allocator shows once: {names:?}");
        }
        let leaf = &profile.frames[stack[0]].lines[0];
        if profile.functions[leaf.function].name == "iter::checksum::{{closure}}" && leaf.line == 9
        {
            hot += 1;
            let outer = profile.frames[stack[0]].lines.last().unwrap();
            assert_eq!(profile.functions[outer.function].name, "iter::checksum");
            assert_eq!(outer.line, 10);
        }
    }
    assert!(in_hook > 5, "{in_hook} samples in the allocator hook");
    assert!(hot > 5, "{hot} samples of the hot line");
}

/// Each sampler's engine has only what that sampler needs: the signal sampler's has no epoch
/// interruption (so nothing can interrupt the guest through the profiler), the epoch sampler's
/// has it; the epoch sampler refuses an engine without it.
#[test]
fn each_sampler_configures_only_what_it_needs() {
    for (sampler, epochs) in [(SamplerKind::Signal, false), (SamplerKind::Epoch, true)] {
        let (engine, options) = engine_for(sampler);
        assert_eq!(engine.get_epoch_interruption(), epochs, "{sampler:?}");
        let profiler = Profiler::new(&engine, options).unwrap();
        assert_eq!(profiler.handle().interrupt(), epochs, "{sampler:?}");
    }
    let options = ProfilerOptions {
        sampler: SamplerKind::Epoch,
        ..Default::default()
    };
    let err = Profiler::new(&Engine::default(), options).err().unwrap();
    assert!(err.to_string().contains("epoch interruption"), "{err}");
}

/// A guest called asynchronously runs on a fiber stack: the signal handler walks it too, so
/// samples keep their callers.
#[test]
fn a_guest_on_a_fiber_keeps_its_callers() {
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let (engine, module, _, mut profiler) = setup(SamplerKind::Signal);
    let mut store = Store::new(&engine, ());
    profiler.attach(&mut store).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    profiler.start().unwrap();
    runtime.block_on(async {
        let instance = Instance::new_async(&mut store, &module, &[]).await.unwrap();
        let run = instance
            .get_typed_func::<i32, i32>(&mut store, "run")
            .unwrap();
        run.call_async(&mut store, 300_000_000).await.unwrap();
    });
    let profile = profiler.stop();
    let stacks: Vec<Vec<&str>> = profile
        .samples
        .iter()
        .map(|s| {
            profile.stacks[s.stack]
                .iter()
                .map(|&f| profile.frame_name(f))
                .collect()
        })
        .filter(|names: &Vec<&str>| names[0] == "busy")
        .collect();
    assert!(stacks.len() > 100, "{} samples in busy", stacks.len());
    let with_caller = stacks.iter().filter(|s| s.get(1) == Some(&"run")).count();
    assert!(
        with_caller as f64 > 0.95 * stacks.len() as f64,
        "{with_caller} of {} samples in busy show run above it",
        stacks.len()
    );
}
