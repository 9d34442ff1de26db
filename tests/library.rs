//! Embedders attach the profiler to their own `Engine` and `Store`.

mod common;

use wasmspy::profile::CPU;
use wasmspy::profile::{FrameId, StackId};
use wasmspy::Clock;
use wasmspy::SamplerKind;
use wasmspy::{Profiler, ProfilerOptions};
use wasmtime::{Config, Engine, Instance, Module, Store, TypedFunc};

/// One signal sampler runs per process: these tests take turns.
static SIGNALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A busy loop of `$n` rounds.
const BUSY: &str = r#"(func $busy (param $n i32) (result i32) (local $acc i32)
        (loop $l
            (local.set $acc (i32.add (i32.mul (local.get $acc) (i32.const 31)) (local.get $n)))
            (local.tee $n (i32.sub (local.get $n) (i32.const 1)))
            (br_if $l))
        (local.get $acc))"#;

/// `run(n)` calls `busy(n)`.
fn guest() -> String {
    format!(
        r#"(module {BUSY} (func $run (export "run") (param i32) (result i32) (call $busy (local.get 0))))"#
    )
}

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

/// `guest` (text) compiled on an engine configured for `options`, and a profiler with it
/// registered.
fn compiled(options: ProfilerOptions, guest: &str) -> (Engine, Module, Vec<u8>, Profiler) {
    let mut config = Config::new();
    Profiler::configure(&mut config, &options);
    let engine = Engine::new(&config).unwrap();
    let wasm = wat::parse_str(guest).unwrap();
    let module = Module::new(&engine, &wasm).unwrap();
    let profiler = Profiler::new(&engine, options).unwrap();
    profiler
        .add_module("guest.wasm", &module, wasm.as_slice())
        .unwrap();
    (engine, module, wasm, profiler)
}

fn setup(sampler: SamplerKind) -> (Engine, Module, Vec<u8>, Profiler) {
    let options = ProfilerOptions {
        sampler,
        ..Default::default()
    };
    compiled(options, &guest())
}

/// [`guest`] on an engine configured for `options`, registered with its profiler, instantiated in
/// a store the profiler is attached to (on this thread): the profiler, the store and `run`.
fn attached(options: ProfilerOptions) -> (Profiler, Store<()>, TypedFunc<i32, i32>) {
    let (engine, module, _, mut profiler) = compiled(options, &guest());
    let (store, run) = instantiated(&mut profiler, &engine, &module);
    (profiler, store, run)
}

/// A store attached to `profiler` (on this thread) with `module`, a [`guest`], instantiated in
/// it, and its `run`.
fn instantiated(
    profiler: &mut Profiler,
    engine: &Engine,
    module: &Module,
) -> (Store<()>, TypedFunc<i32, i32>) {
    let mut store = Store::new(engine, ());
    profiler.attach(&mut store).unwrap();
    let instance = Instance::new(&mut store, module, &[]).unwrap();
    let run = instance
        .get_typed_func::<i32, i32>(&mut store, "run")
        .unwrap();
    (store, run)
}

/// The share of the CPU time whose leaf is function `name`.
/// A stack's frames, leaf first, without the host's own (see `ProfilerOptions::host_frames`):
/// the guest's, a host call's frame its leaf.
fn guest_stack(
    profile: &wasmspy::profile::Profile,
    stack: wasmspy::profile::StackId,
) -> Vec<wasmspy::profile::FrameId> {
    profile.stacks[stack]
        .iter()
        .copied()
        .filter(|&f| !profile.is_host_frame(f))
        .collect()
}

fn leaf_share(profile: &wasmspy::profile::Profile, name: &str) -> f64 {
    let leaf: i64 = profile
        .samples
        .iter()
        .filter(|s| profile.frame_name(guest_stack(profile, s.stack)[0]) == name)
        .map(|s| s.values[CPU])
        .sum();
    leaf as f64 / profile.total(CPU) as f64
}

#[test]
fn an_embedders_store_is_profiled() {
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    for sampler in [SamplerKind::Signal, SamplerKind::Epoch] {
        let (mut profiler, mut store, run) = attached(ProfilerOptions {
            sampler,
            ..Default::default()
        });
        profiler.start().unwrap();
        run.call(&mut store, 300_000_000).unwrap();
        let profile = profiler.stop();

        let share = leaf_share(&profile, "busy");
        assert!(
            share > 0.9,
            "{sampler:?}: busy has {share:.3} of the CPU time"
        );
        assert_eq!(profile.mappings.first().unwrap().file_name, "guest.wasm");
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
    assert!(
        matches!(&err, wasmspy::Error::Unavailable(why) if why.contains("another signal sampler")),
        "{err:?}"
    );
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
    use wasmspy::internals::clock::thread_cpu_ns;
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
        ..Default::default()
    };
    let mut store = wasi_host::new_store(&engine, &wasi).unwrap();
    profiler.attach(&mut store).unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    profiler.start().unwrap();
    let exit = wasi_host::run_with(&mut store, &module, |store, instance| {
        // 2 ms of CPU per call: samples land in the hook, under the allocator's caller.
        // A countdown of -1 stays below zero: every allocation calls it.
        let hook = wasmtime::Func::wrap(
            &mut *store,
            move |_: i32, _: i32, _: i32, _: i32, _: i64| -> i64 {
                counted.fetch_add(1, Ordering::Relaxed);
                let until = thread_cpu_ns() + 2_000_000;
                while thread_cpu_ns() < until {}
                wasmspy::memory::rewrite::report(-1, false, false)
            },
        );
        let table = instance.get_table(&mut *store, HOOK_TABLE).unwrap();
        table.set(&mut *store, 0, wasmtime::Ref::Func(Some(hook)))
    });
    let profile = profiler.stop();
    assert!(matches!(exit, Exit::Code(0)), "{exit:?}");
    assert!(calls.load(Ordering::Relaxed) > 0);

    let names = |stack: &[FrameId]| -> Vec<String> {
        stack
            .iter()
            .flat_map(|&f| profile.frames[f].lines.iter())
            .map(|l| profile.functions[l.function].name.clone())
            .collect()
    };
    let is_allocator = |n: &str| n.contains("alloc") || n == "malloc" || n == "free";
    let (mut in_hook, mut hot) = (0, 0);
    for sample in &profile.samples {
        let stack = &guest_stack(&profile, sample.stack);
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
    assert!(
        matches!(err, wasmspy::Error::Options(why) if why.contains("epoch interruption")),
        "{err}"
    );
}

/// On the instructions clock an embedder's store, called asynchronously, is sampled every
/// `instruction_interval` instructions: the profile counts instructions, not CPU time; two
/// stores running the same call get the same samples; a synchronous call is refused (fuel
/// yields need a fiber), not profiled wrong.
#[test]
fn an_embedders_store_is_profiled_by_instructions() {
    let options = ProfilerOptions {
        clock: Clock::Instructions,
        instruction_interval: 10_000,
        ..Default::default()
    };
    let (engine, module, _, mut profiler) = compiled(options, &guest());
    assert!(!engine.get_epoch_interruption());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    profiler.start().unwrap();
    let handle = profiler.handle();
    let run_once = || {
        let mut store = Store::new(&engine, ());
        handle.attach(&mut store).unwrap();
        runtime.block_on(async {
            let instance = Instance::new_async(&mut store, &module, &[]).await.unwrap();
            let run = instance
                .get_typed_func::<i32, i32>(&mut store, "run")
                .unwrap();
            run.call_async(&mut store, 1_000_000).await.unwrap();
            let sync = run.call(&mut store, 1);
            assert!(sync.is_err(), "a synchronous call ran");
        });
    };
    run_once();
    let first = profiler.handle().snapshot();
    run_once();
    let profile = profiler.stop();
    let kinds: Vec<&str> = profile
        .sample_types
        .iter()
        .map(|t| t.kind.as_str())
        .collect();
    assert_eq!(kinds, ["samples", "instructions"]);
    // The second store's samples are the first's again: every value doubled.
    assert_eq!(profile.total(CPU), 2 * first.total(CPU));
    assert_eq!(profile.total(0), 2 * first.total(0));
    assert!(first.total(0) > 100, "{} samples", first.total(0));
    assert!(leaf_share(&profile, "busy") > 0.99);
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
            guest_stack(&profile, s.stack)
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

/// CPU time (ns) a stack's samples carry, by the stack's function names, leaf first.
fn cpu_by_stack(profile: &wasmspy::profile::Profile) -> Vec<(Vec<String>, i64)> {
    profile
        .samples
        .iter()
        .map(|s| {
            let names = guest_stack(profile, s.stack)
                .iter()
                .map(|&f| profile.frame_name(f).to_string())
                .collect();
            (names, s.values[CPU])
        })
        .collect()
}

fn spin_cpu(ns: u64) {
    let until = wasmspy::internals::clock::thread_cpu_ns() + ns;
    while wasmspy::internals::clock::thread_cpu_ns() < until {}
}

/// Host → Wasm → host: an import that calls back into the guest keeps the samples of its own
/// code, before and after the inner calls, and the inner import and Wasm keep theirs.
#[test]
fn a_host_call_that_calls_back_into_the_guest_keeps_its_samples() {
    use wasmspy::internals::clock::thread_cpu_ns;
    use wasmtime::{Caller, Linker};

    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let guest = format!(
        r#"(module
        (import "host" "outer" (func $outer))
        (import "host" "inner" (func $inner))
        {BUSY}
        (func $nested (export "nested") (param i32) (result i32)
            (call $inner)
            (call $busy (local.get 0)))
        (func $run (export "run") (call $outer)))"#
    );
    let (engine, module, _, mut profiler) = compiled(
        ProfilerOptions {
            sampler: SamplerKind::Signal,
            ..Default::default()
        },
        &guest,
    );
    // The CPU time each host function spent in its own code, as it measured it.
    #[derive(Default)]
    struct Spent {
        outer: u64,
        inner: u64,
    }
    let mut store = Store::new(&engine, Spent::default());
    profiler.attach(&mut store).unwrap();
    let mut linker = Linker::new(&engine);
    linker
        .func_wrap("host", "outer", |mut caller: Caller<'_, Spent>| {
            let nested = caller
                .get_export("nested")
                .and_then(|e| e.into_func())
                .unwrap()
                .typed::<i32, i32>(&caller)
                .unwrap();
            let t = thread_cpu_ns();
            spin_cpu(150_000_000);
            caller.data_mut().outer += thread_cpu_ns() - t;
            nested.call(&mut caller, 100_000_000).unwrap();
            let t = thread_cpu_ns();
            spin_cpu(150_000_000);
            caller.data_mut().outer += thread_cpu_ns() - t;
        })
        .unwrap();
    linker
        .func_wrap("host", "inner", |mut caller: Caller<'_, Spent>| {
            let t = thread_cpu_ns();
            spin_cpu(100_000_000);
            caller.data_mut().inner += thread_cpu_ns() - t;
        })
        .unwrap();
    let instance = linker.instantiate(&mut store, &module).unwrap();
    let run = instance
        .get_typed_func::<(), ()>(&mut store, "run")
        .unwrap();
    profiler.start().unwrap();
    run.call(&mut store, ()).unwrap();
    let profile = profiler.stop();

    let stacks = cpu_by_stack(&profile);
    // The inner stacks end where the walk or Wasmtime's backtrace leaves Wasm: at `nested`,
    // or at `run` without the host frame between them.
    let cpu_of = |stack: &[&str]| -> u64 {
        stacks
            .iter()
            .filter(|(names, _)| {
                names.len() >= stack.len() && names.iter().zip(stack).all(|(n, s)| n == s)
            })
            .map(|&(_, cpu)| cpu as u64)
            .sum()
    };
    let spent = store.data();
    let outer = cpu_of(&["host::outer", "run"]);
    let inner = cpu_of(&["host::inner", "nested"]);
    let busy = cpu_of(&["busy", "nested"]);
    let near = |profiled: u64, measured: u64| {
        (profiled as f64) > 0.8 * measured as f64 && (profiled as f64) < 1.2 * measured as f64
    };
    assert!(
        near(outer, spent.outer),
        "outer: {outer} ns profiled, {} measured; {stacks:?}",
        spent.outer
    );
    assert!(
        near(inner, spent.inner),
        "inner: {inner} ns profiled, {} measured; {stacks:?}",
        spent.inner
    );
    assert!(busy > 0, "{stacks:?}");
}

/// A SIGPROF that is not the sampler's own timer's (sent with `kill` to the process, or with
/// `tgkill` to the guest thread) takes no sample.
#[test]
fn a_foreign_sigprof_takes_no_sample() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::time::Instant;
    use wasmspy::Clock;

    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let (mut profiler, mut store, run) = attached(ProfilerOptions {
        sampler: SamplerKind::Signal,
        clock: Clock::Wall,
        rate_hz: 1,
        ..Default::default()
    });
    // SAFETY: gettid has no preconditions.
    let guest_tid = unsafe { libc::gettid() };
    let done = AtomicBool::new(false);
    let sent = AtomicU32::new(0);
    profiler.start().unwrap();
    let started = Instant::now();
    let ran = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                // SAFETY: signals to this process and its guest thread, whose handler is
                // installed (the sampler started).
                unsafe {
                    libc::syscall(libc::SYS_tgkill, libc::getpid(), guest_tid, libc::SIGPROF);
                    libc::kill(libc::getpid(), libc::SIGPROF);
                }
                sent.fetch_add(2, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        });
        // Until plenty of signals arrived.
        while sent.load(Ordering::Relaxed) < 1000 {
            run.call(&mut store, 50_000_000).unwrap();
        }
        let ran = started.elapsed();
        done.store(true, Ordering::Relaxed);
        ran
    });
    let profile = profiler.stop();
    let samples = profile.total(wasmspy::profile::SAMPLES);
    // The timer's own ticks: one a second.
    assert!(
        samples as f64 <= ran.as_secs_f64() + 1.0,
        "{samples} samples in {ran:?} at 1 Hz, with {} foreign SIGPROFs",
        sent.load(Ordering::Relaxed)
    );
}

/// A profile's clock starts at `start`, however long after the profiler was made.
#[test]
fn a_profile_counts_time_from_start() {
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let (mut profiler, mut store, run) = attached(ProfilerOptions {
        sampler: SamplerKind::Signal,
        ..Default::default()
    });
    std::thread::sleep(Duration::from_millis(300));
    let unix_before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let before = Instant::now();
    profiler.start().unwrap();
    run.call(&mut store, 100_000_000).unwrap();
    let profile = profiler.stop();
    let took = before.elapsed();
    assert!(profile.total(wasmspy::profile::SAMPLES) > 0);
    assert!(
        profile.duration_ns as u128 <= took.as_nanos(),
        "{} ns recorded, {took:?} from start to stop",
        profile.duration_ns
    );
    assert!(profile.start_unix_ns as u128 >= unix_before.as_nanos());
    let last = profile.samples.iter().map(|s| s.time_ns).max().unwrap();
    assert!(last <= profile.duration_ns as u64);
}

/// Without a timeline, samples are kept as totals by stack: one sample per distinct stack,
/// adding up to what the timeline keeps one by one.
#[test]
fn without_a_timeline_samples_are_totals_by_stack() {
    use wasmspy::profile::SAMPLES;

    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    for timeline in [true, false] {
        let (mut profiler, mut store, run) = attached(ProfilerOptions {
            sampler: SamplerKind::Signal,
            rate_hz: 10_000,
            timeline,
            ..Default::default()
        });
        profiler.start().unwrap();
        run.call(&mut store, 200_000_000).unwrap();
        let profile = profiler.stop();
        let samples = profile.total(SAMPLES);
        assert!(samples > 100, "{samples} samples");
        let mut stacks: Vec<StackId> = profile.samples.iter().map(|s| s.stack).collect();
        if timeline {
            assert_eq!(profile.samples.len() as i64, samples);
            let times: Vec<u64> = profile.samples.iter().map(|s| s.time_ns).collect();
            assert!(times.windows(2).all(|w| w[0] <= w[1]));
        } else {
            stacks.sort();
            stacks.dedup();
            assert_eq!(stacks.len(), profile.samples.len(), "one sample per stack");
            assert!(profile.samples.len() < 10);
        }
    }
}

/// An embedder's own component, linker and host function: the component's core module is
/// named and its functions found by both samplers, and time in the host function is charged
/// to the WIT function the guest called, under the guest's stack.
#[test]
fn an_embedders_component_is_profiled() {
    use wasmtime::component::{Component, Linker};
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let wasm = wat::parse_str(format!(
        r#"(component
            (import "host:test/work" (instance $work (export "spin" (func))))
            (alias export $work "spin" (func $spin))
            (core func $spin_lowered (canon lower (func $spin)))
            (core instance $imports (export "spin" (func $spin_lowered)))
            (core module $guest (@name "guest")
                (import "host" "spin" (func $spin))
                {BUSY}
                (func $run (export "run") (param i32) (result i32)
                    (call $spin)
                    (call $busy (local.get 0))))
            (core instance $g (instantiate $guest (with "host" (instance $imports))))
            (func (export "run") (param "n" s32) (result s32) (canon lift (core func $g "run"))))"#
    ))
    .unwrap();
    for sampler in [SamplerKind::Signal, SamplerKind::Epoch] {
        let (engine, options) = engine_for(sampler);
        let component = Component::new(&engine, &wasm).unwrap();
        let mut profiler = Profiler::new(&engine, options).unwrap();
        // Started first: a component registered while running is sampled too.
        profiler.start().unwrap();
        profiler
            .add_component("app.wasm", &component, wasm.as_slice())
            .unwrap();
        let mut linker = Linker::<()>::new(&engine);
        linker
            .instance("host:test/work")
            .unwrap()
            .func_wrap("spin", |_, (): ()| {
                spin_cpu(100_000_000);
                Ok(())
            })
            .unwrap();
        let mut store = Store::new(&engine, ());
        profiler.attach(&mut store).unwrap();
        let instance = linker.instantiate(&mut store, &component).unwrap();
        let run = instance
            .get_typed_func::<(i32,), (i32,)>(&mut store, "run")
            .unwrap();
        run.call(&mut store, (200_000_000,)).unwrap();
        let profile = profiler.stop();

        let by_stack = cpu_by_stack(&profile);
        let cpu_of = |leaf: &str| -> f64 {
            let own: i64 = by_stack
                .iter()
                .filter(|(names, _)| names[0] == leaf)
                .map(|(names, cpu)| {
                    assert_eq!(names.last().unwrap(), "run", "{sampler:?}: {names:?}");
                    cpu
                })
                .sum();
            own as f64 / profile.total(CPU) as f64
        };
        let busy = cpu_of("busy");
        assert!(busy > 0.3, "{sampler:?}: busy {busy:.2}: {by_stack:?}");
        if sampler == SamplerKind::Signal {
            // 100 ms spinning in the host: time the epoch sampler, checking only in guest
            // code, cannot see.
            let spin = cpu_of("host:test/work#spin");
            assert!(spin > 0.1, "{sampler:?}: spin {spin:.2}: {by_stack:?}");
        }
        // The host's objects are mappings too, where they are loaded.
        let mappings: Vec<&str> = profile
            .mappings
            .iter()
            .filter(|m| m.start == 0)
            .map(|m| m.file_name.as_str())
            .collect();
        assert_eq!(mappings, ["app.wasm/guest"]);
    }
}

/// An embedder's own WASI host running a component with CPython inside (componentize-py's
/// `allocs-py`), instrumented as `wasmspy record --mem-profile` instruments it: the
/// allocators rewritten (`rewrite_component`), then the runtimes probed (`probe_runtimes`),
/// the two host functions defined in the embedder's linker. The heap profile gives each
/// Python line of `allocs.py` its bytes, under the Python stack, which only the probe shows.
#[test]
fn an_embedders_python_component_gets_its_python_memory_profile() {
    use wasmspy::memory::component::rewrite_component;
    use wasmspy::probe_runtimes;
    use wasmtime::component::{Component, Linker, ResourceTable};
    use wasmtime_wasi::p2::bindings::sync::Command;
    use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

    struct Host {
        ctx: WasiCtx,
        table: ResourceTable,
    }
    impl WasiView for Host {
        fn ctx(&mut self) -> WasiCtxView<'_> {
            WasiCtxView {
                ctx: &mut self.ctx,
                table: &mut self.table,
            }
        }
    }

    let Some(path) = common::built_component("allocs-py.wasm") else {
        return;
    };
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let wasm = std::fs::read(&path).unwrap();
    let rewritten = rewrite_component(&wasm)
        .unwrap()
        .expect("CPython's allocators");
    let probed = probe_runtimes(&rewritten.wasm)
        .unwrap()
        .expect("CPython is probed");
    let (engine, mut options) = engine_for(SamplerKind::Signal);
    options.mem_rate = Some(1);
    let component = Component::new(&engine, &probed).unwrap();
    let mut profiler = Profiler::new(&engine, options).unwrap();
    profiler
        .add_rewritten_component("allocs-py.wasm", &component, wasm, &rewritten)
        .unwrap();
    let mut linker = Linker::<Host>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
    profiler
        .define_runtime_probe(&mut linker, &component)
        .unwrap();
    profiler
        .define_component_allocator_hook(&mut linker)
        .unwrap();
    let ctx = WasiCtxBuilder::new()
        .args(&["allocs-py.wasm", "20"])
        .build();
    let mut store = Store::new(
        &engine,
        Host {
            ctx,
            table: ResourceTable::new(),
        },
    );
    profiler.attach(&mut store).unwrap();
    profiler.start().unwrap();
    let command = Command::instantiate(&mut store, &component, &linker).unwrap();
    command
        .wasi_cli_run()
        .call_run(&mut store)
        .unwrap()
        .unwrap();
    profiler.stop();
    let heap = profiler.handle().heap_profile().expect("a memory profile");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("heap.pb.gz");
    let mut file = std::fs::File::create(&out).unwrap();
    wasmspy::export::Format::Pprof
        .write(&heap, &mut file)
        .unwrap();
    drop(file);
    common::allocs_py::assert_allocated_by_line("embedder", &out, 20, "Run.run (allocs_run.py:10)");
}

/// Four threads, each with its own store attached after the profiler started, each running a
/// hot function of its own for a CPU time it measures itself: every thread is sampled, each
/// function holds its thread's CPU time, and its samples carry the labels its store was
/// attached with, also once written to pprof and read back.
#[test]
fn every_thread_that_attaches_a_store_is_sampled() {
    use wasmspy::internals::clock::thread_cpu_ns;
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let functions: String = (0..4)
        .map(|i| format!(r#"(func $hot{i} (export "hot{i}") (param i32) (result i32) (call $busy (local.get 0)))"#))
        .collect();
    let (engine, module, _, mut profiler) = compiled(
        ProfilerOptions {
            sampler: SamplerKind::Signal,
            ..Default::default()
        },
        &format!("(module {BUSY} {functions})"),
    );
    // Started before any store is attached: each thread is sampled from its attach on.
    profiler.start().unwrap();
    let handle = profiler.handle();
    let cpu_ns: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4u64)
            .map(|i| {
                let (engine, module, handle) = (&engine, &module, handle.clone());
                s.spawn(move || {
                    let mut store = Store::new(engine, ());
                    let thread = i.to_string();
                    handle
                        .attach_with_labels(&mut store, &[("thread", &thread)])
                        .unwrap();
                    let instance = Instance::new(&mut store, module, &[]).unwrap();
                    let hot = instance
                        .get_typed_func::<i32, i32>(&mut store, &format!("hot{i}"))
                        .unwrap();
                    let start = thread_cpu_ns();
                    // Thread i runs (i + 1) × 150 ms of CPU, in calls of a few tens of ms
                    // (the time between them, outside Wasm, is a small part of it).
                    while thread_cpu_ns() - start < (i + 1) * 150_000_000 {
                        hot.call(&mut store, 20_000_000).unwrap();
                    }
                    thread_cpu_ns() - start
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let profile = profiler.stop();
    let read_back =
        wasmspy::export::pprof::read(&wasmspy::export::pprof::encode(&profile).unwrap()).unwrap();
    assert_eq!(read_back.total(CPU), profile.total(CPU));
    for p in [&profile, &read_back] {
        for sample in &p.samples {
            let names: Vec<&str> = p.stacks[sample.stack]
                .iter()
                .map(|&f| p.frame_name(f))
                .collect();
            if let Some(hot) = names.iter().find(|n| n.starts_with("hot")) {
                let label = [("thread".to_string(), hot[3..].to_string())];
                assert_eq!(*sample.labels, label, "{names:?}");
            }
        }
    }
    let cpu_of = |wanted: &dyn Fn(&str) -> bool| -> u64 {
        profile
            .samples
            .iter()
            .filter(|s| {
                guest_stack(&profile, s.stack)
                    .iter()
                    .any(|&f| wanted(profile.frame_name(f)))
            })
            .map(|s| s.values[CPU] as u64)
            .sum()
    };
    // No statistics here: a sample holds its thread's CPU time since the thread's previous
    // sample, so each thread's loop time is in its own `hot` function's samples but for the
    // CPU time outside Wasm (instantiation, the gaps between calls: the samples with no `hot`
    // frame, `outside`, whatever thread they were on), the time after its last sample and
    // before its first (at most a sample's CPU each, which is the 1 ms interval plus the
    // signal's delivery, at most a kernel tick, ≤ 10 ms: `CHUNK` is twice that) and what
    // lost samples held (each at most `CHUNK`). Measured under two CPU-bound processes:
    // `outside` 50–120 ms (a debug build's instantiation), no lost sample.
    const CHUNK: u64 = 20_000_000;
    let counts = handle.counts();
    let total_cpu: u64 = cpu_ns.iter().sum();
    let profiled = profile.total(CPU) as u64;
    let in_hot = cpu_of(&|name| name.starts_with("hot"));
    let outside = profiled - in_hot;
    for (i, &cpu) in cpu_ns.iter().enumerate() {
        let hot = cpu_of(&|name| name == format!("hot{i}"));
        let low = cpu.saturating_sub(2 * CHUNK + outside + counts.lost * CHUNK);
        assert!(
            (low..=cpu + CHUNK).contains(&hot),
            "hot{i} holds {hot} ns of CPU, its thread used {cpu} ns; outside Wasm {outside} ns; threads' CPU {cpu_ns:?} ns, profiled {profiled} ns, samples {counts:?}"
        );
    }
    // Nearly all the CPU the threads used is in the profile, and little of it outside Wasm.
    let seen = in_hot as f64 / total_cpu as f64;
    assert!(
        seen > 0.9 && outside < total_cpu / 4,
        "the profile's hot functions hold {seen:.3} of the threads' CPU time, {outside} ns outside Wasm"
    );
}

/// The epoch sampler on the CPU clock ticks by one thread's CPU time: a store attached on a
/// second thread is refused, each time it is tried, saying why and what to use instead (a guest
/// there would be sampled only while the first thread runs). On the wall clock both threads'
/// stores are attached. A thread that has ended leaves its place to the next.
#[test]
fn the_epoch_sampler_on_the_cpu_clock_takes_one_thread() {
    let options = ProfilerOptions {
        sampler: SamplerKind::Epoch,
        ..Default::default()
    };
    let (engine, _, _, profiler) = compiled(options, &guest());
    let handle = profiler.handle();
    for _ in 0..2 {
        // Joined: the thread has ended, its thread-locals (which release it) dropped; the
        // scope's own wait ends before them.
        std::thread::scope(|s| {
            s.spawn(|| handle.attach(&mut Store::new(&engine, ())).unwrap())
                .join()
                .unwrap();
        });
    }
    for clock in [Clock::Cpu, Clock::Wall] {
        let options = ProfilerOptions {
            sampler: SamplerKind::Epoch,
            clock,
            ..Default::default()
        };
        let (engine, _, _, profiler) = compiled(options, &guest());
        let handle = profiler.handle();
        handle.attach(&mut Store::new(&engine, ())).unwrap();
        let second: Vec<_> = std::thread::scope(|s| {
            s.spawn(|| {
                (0..2)
                    .map(|_| handle.attach(&mut Store::new(&engine, ())))
                    .collect()
            })
            .join()
            .unwrap()
        });
        for attached in second {
            match clock {
                Clock::Cpu => {
                    let e = attached.unwrap_err().to_string();
                    assert!(
                        e.contains("ticks by one thread's CPU time")
                            && e.contains("use the signal sampler, or the wall clock"),
                        "{e}"
                    );
                }
                _ => attached.unwrap(),
            }
        }
    }
}

/// How many times the calling thread gave up the CPU: each signal that wakes a sleeping thread
/// adds one when it sleeps again.
fn voluntary_switches() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// At 100 Hz the thread's CPU-clock timer alone ticks: a thread that sleeps is never woken
/// (its sleep is its one voluntary switch), where wall ticks, at 101 Hz, wake it once before
/// they hand over to the CPU timer (a second switch, as its sleep goes on).
#[test]
fn at_100_hz_a_sleeping_thread_is_never_woken() {
    use wasmspy::internals::clock::thread_cpu_ns;
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    for (rate_hz, most, least) in [(100, 1, 1), (101, 5, 2)] {
        let (mut profiler, mut store, run) = attached(ProfilerOptions {
            sampler: SamplerKind::Signal,
            rate_hz,
            ..Default::default()
        });
        profiler.start().unwrap();
        let start = thread_cpu_ns();
        while thread_cpu_ns() - start < 30_000_000 {
            run.call(&mut store, 100_000).unwrap();
        }
        let before = voluntary_switches();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let woken = voluntary_switches() - before;
        profiler.stop();
        assert!(
            (least..=most).contains(&woken),
            "{rate_hz} Hz: {woken} voluntary switches in 200 ms of sleep"
        );
    }
}

/// A sampled thread that waits is not woken at the sampling rate (an idle server's workers
/// would spend CPU doing nothing), and what it runs between waits is still sampled: a thread
/// alternating 2 ms of work with 3 ms of sleep has its CPU in the profile.
#[test]
fn a_waiting_thread_is_not_woken_at_the_sampling_rate() {
    use wasmspy::internals::clock::thread_cpu_ns;
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let (mut profiler, mut store, run) = attached(ProfilerOptions {
        sampler: SamplerKind::Signal,
        ..Default::default()
    });
    profiler.start().unwrap();
    let work = |store: &mut Store<()>, ns: u64| {
        let start = thread_cpu_ns();
        while thread_cpu_ns() - start < ns {
            run.call(&mut *store, 100_000).unwrap();
        }
    };
    work(&mut store, 20_000_000);
    let before = voluntary_switches();
    std::thread::sleep(std::time::Duration::from_millis(400));
    let woken = voluntary_switches() - before;
    // Woken at 1 kHz, the thread would give up the CPU about 400 times.
    assert!(woken < 40, "woken {woken} times in 400 ms of sleep");

    let start = thread_cpu_ns();
    for _ in 0..100 {
        work(&mut store, 2_000_000);
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
    let used = thread_cpu_ns() - start;
    let profile = profiler.stop();
    let total = profile.total(CPU) as f64;
    assert!(
        total > 0.9 * (used + 20_000_000) as f64,
        "the profile holds {total} ns of the {used} + 20,000,000 ns of CPU"
    );
    let share = leaf_share(&profile, "busy");
    assert!(share > 0.8, "busy has {share:.3} of the CPU time");
}

/// Threads that end free what sampling them took: 300 threads one after the other (more than
/// the 256 sampled at once), each attaching a store and running its guest for 3 ms of CPU,
/// all attach and all are sampled, each under its own thread.
#[test]
fn threads_that_end_free_their_place() {
    use wasmspy::internals::clock::thread_cpu_ns;
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let (engine, module, _, mut profiler) = compiled(
        ProfilerOptions {
            sampler: SamplerKind::Signal,
            ..Default::default()
        },
        &format!(
            r#"(module {BUSY} (func (export "hot") (param i32) (result i32) (call $busy (local.get 0))))"#
        ),
    );
    profiler.start().unwrap();
    let handle = profiler.handle();
    for _ in 0..300 {
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut store = Store::new(&engine, ());
                handle.attach(&mut store).unwrap();
                let instance = Instance::new(&mut store, &module, &[]).unwrap();
                let hot = instance
                    .get_typed_func::<i32, i32>(&mut store, "hot")
                    .unwrap();
                let start = thread_cpu_ns();
                while thread_cpu_ns() - start < 3_000_000 {
                    hot.call(&mut store, 100_000).unwrap();
                }
            });
        });
    }
    let profile = profiler.stop();
    let threads: std::collections::HashSet<_> =
        profile.samples.iter().filter_map(|s| s.thread).collect();
    assert!(
        threads.len() >= 285,
        "{} of 300 threads sampled",
        threads.len()
    );
    assert!(
        profile.total(CPU) as f64 > 0.5 * 300.0 * 3e6,
        "{}",
        profile.total(CPU)
    );
}

/// A module registered after the profiler started, in a store attached after it started, is
/// sampled as one registered before.
#[test]
fn a_module_registered_while_running_is_sampled() {
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let (engine, options) = engine_for(SamplerKind::Signal);
    let mut profiler = Profiler::new(&engine, options).unwrap();
    let mut first = Store::new(&engine, ());
    profiler.attach(&mut first).unwrap();
    profiler.start().unwrap();
    let wasm = wat::parse_str(guest()).unwrap();
    let module = Module::new(&engine, &wasm).unwrap();
    profiler
        .add_module("late.wasm", &module, wasm.as_slice())
        .unwrap();
    let (mut store, run) = instantiated(&mut profiler, &engine, &module);
    run.call(&mut store, 300_000_000).unwrap();
    let profile = profiler.stop();
    let share = leaf_share(&profile, "busy");
    assert!(share > 0.9, "busy has {share:.3} of the CPU time");
    assert_eq!(profile.mappings.first().unwrap().file_name, "late.wasm");
}

/// An embedder's engine compiling for Pulley, its store called synchronously on its own
/// thread: the signal sampler walks the interpreter's stack (`busy` under `run`).
#[test]
fn an_embedders_pulley_store_is_profiled() {
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let options = ProfilerOptions {
        sampler: SamplerKind::Signal,
        ..Default::default()
    };
    let mut config = Config::new();
    config.target("pulley64").unwrap();
    Profiler::configure(&mut config, &options);
    let engine = Engine::new(&config).unwrap();
    let wasm = wat::parse_str(guest()).unwrap();
    let module = Module::new(&engine, &wasm).unwrap();
    let mut profiler = Profiler::new(&engine, options).unwrap();
    profiler
        .add_module("guest.wasm", &module, wasm.as_slice())
        .unwrap();
    let mut store = Store::new(&engine, ());
    profiler.attach(&mut store).unwrap();
    let instance = Instance::new(&mut store, &module, &[]).unwrap();
    let run = instance
        .get_typed_func::<i32, i32>(&mut store, "run")
        .unwrap();
    profiler.start().unwrap();
    run.call(&mut store, 20_000_000).unwrap();
    let profile = profiler.stop();
    let share = leaf_share(&profile, "busy");
    assert!(share > 0.9, "busy has {share:.3} of the CPU time");
    let under_run = profile
        .samples
        .iter()
        .filter(|s| {
            let names: Vec<&str> = guest_stack(&profile, s.stack)
                .iter()
                .map(|&f| profile.frame_name(f))
                .collect();
            names[..] == ["busy", "run"]
        })
        .map(|s| s.values[CPU])
        .sum::<i64>();
    assert!(
        under_run as f64 > 0.9 * profile.total(CPU) as f64,
        "{under_run} of {}",
        profile.total(CPU)
    );
}

/// `examples/embed.rs`, the host an embedder copies, profiles the bundled example as
/// `wasmspy record` does: its hot path (`is_prime`, about half the work) leads, and the
/// profile it writes reads back with file:line from the module's DWARF.
#[test]
fn the_embedding_example_profiles_the_bundled_program() {
    let example = common::built_example("embed");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("embed.pb.gz");
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let run = std::process::Command::new(&example)
        .arg(manifest.join("examples/hotspots.wasm"))
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}{}", common::stderr(&run));
    assert!(stdout.contains("primes below 3000000: 216816"), "{stdout}");
    let first = stdout
        .lines()
        .skip_while(|l| !l.starts_with("wrote "))
        .nth(1)
        .unwrap_or_default();
    assert!(first.ends_with("  is_prime"), "{stdout}");
    let profile = wasmspy::export::pprof::read(&std::fs::read(&out).unwrap()).unwrap();
    let share = leaf_share(&profile, "is_prime");
    assert!(share > 0.3, "is_prime has {share:.3} of the CPU time");
    let p = common::Decoded::load(&out);
    assert!(
        p.0.location.iter().flat_map(|l| &l.line).any(|line| {
            let f = p.function(line.function_id);
            p.str(f.name) == "is_prime" && p.str(f.filename).ends_with("examples/hotspots.c")
        }),
        "is_prime without its file"
    );
}

/// An embedder's module without DWARF takes its source map (v3): one among
/// `ProfilerOptions::source_maps`, matched by its offsets, or the one beside the file
/// `Profiler::module_path` says the module was read from. The map, written here, gives the busy
/// loop's function `busy.ts:3` from its body's start on; `run`, no line.
#[test]
fn source_maps_give_an_embedders_module_its_lines() {
    let _turn = SIGNALS.lock().unwrap_or_else(|e| e.into_inner());
    let wasm = wat::parse_str(guest()).unwrap();
    let busy = wasmparser::Parser::new(0)
        .parse_all(&wasm)
        .find_map(|p| match p.unwrap() {
            wasmparser::Payload::CodeSectionEntry(body) => Some(body.range().start),
            _ => None,
        })
        .unwrap();
    // One segment: generated column `busy`, source 0, line 2 (0-based), column 0.
    let mut builder = oxc_sourcemap::SourceMapBuilder::default();
    let source = builder.add_source_and_content("busy.ts", "");
    builder.add_token(0, busy as u32, 2, 0, Some(source), None);
    let map = builder.into_sourcemap().to_json_string();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("given.map"), &map).unwrap();
    std::fs::write(dir.path().join("guest.wasm.map"), &map).unwrap();
    for given in [true, false] {
        let options = ProfilerOptions {
            source_maps: if given {
                vec![dir.path().join("given.map")]
            } else {
                Vec::new()
            },
            ..Default::default()
        };
        let mut config = Config::new();
        Profiler::configure(&mut config, &options);
        let engine = Engine::new(&config).unwrap();
        let module = Module::new(&engine, &wasm).unwrap();
        let mut profiler = Profiler::new(&engine, options).unwrap();
        if !given {
            profiler.module_path("guest.wasm", &dir.path().join("guest.wasm"));
        }
        profiler
            .add_module("guest.wasm", &module, wasm.as_slice())
            .unwrap();
        let (mut store, run) = instantiated(&mut profiler, &engine, &module);
        profiler.start().unwrap();
        run.call(&mut store, 100_000_000).unwrap();
        let profile = profiler.stop();
        let warnings = profiler.handle().take_warnings();
        assert!(warnings.is_empty(), "{warnings:?}");
        let busy_lines: Vec<(String, u32)> = profile
            .frames
            .iter()
            .flat_map(|f| f.lines.iter())
            .filter(|l| profile.functions[l.function].name == "busy")
            .map(|l| (profile.functions[l.function].file.clone(), l.line))
            .collect();
        let expected = dir.path().join("busy.ts").display().to_string();
        assert!(!busy_lines.is_empty(), "given: {given}");
        assert!(
            busy_lines.iter().all(|l| *l == (expected.clone(), 3)),
            "given: {given}: {busy_lines:?}"
        );
    }
}
