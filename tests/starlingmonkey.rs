//! StarlingMonkey components (ComponentizeJS 0.23: SpiderMonkey 147 compiled to Wasm): the
//! profile shows the script's JavaScript frames, named as SpiderMonkey's stack traces name
//! them, at their lines. The components are built from `tests/fixtures/interpreters/` by its
//! `build.sh`, which `scripts/test.sh` runs (they are 14–21 MB: built, not committed).

mod common;

use std::path::Path;

use common::child::Killed;
use common::self_timed::{assert_shares_as_measured, measured_shares};
use common::*;

/// ComponentizeJS's components import `wasi:http` (for `fetch`).
const HTTP: [&str; 2] = ["-S", "http"];

/// `timed_sm.js`, which times its own `fib` and `build` and prints each one's share as
/// `NAME SHARE` lines, under both samplers: each function's share of the time in the profile
/// within 5 points of the script's measure. The script times itself by the wall clock
/// (`performance.now`), so the profile is taken by it too (`--clock wall`), as the QuickJS
/// test's is. With the default 1,200 rounds, some 3,000 samples: a binomial share's standard
/// deviation is 0.9 points at most, so 5 is more than 5 of them. Every sample of the two
/// functions is the script's own JavaScript stack, lines included: `fib` (recursing, at its
/// lines) or `build`, under `measure` at the line that calls it, under `run`.
fn splits_as_the_script_timed_itself(component: &Path, args: &[&str]) {
    for sampler in ["signal", "epoch"] {
        let what = format!("{} {sampler}", component.display());
        let dir = tempfile::tempdir().unwrap();
        let flags = [&HTTP[..], &["--sampler", sampler, "--clock", "wall"]].concat();
        let (out, path) = record(dir.path(), &flags, component, args);
        assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("not JavaScript frames"),
            "{what}: {}",
            stderr(&out)
        );
        let measured = measured_shares(
            &stdout(&out),
            &[
                ("fib", "fib (timed_sm.js:16:13)"),
                ("build", "build (timed_sm.js:23:15)"),
            ],
        );
        assert_eq!(measured.len(), 2, "{what}: {}", stdout(&out));
        let p = Decoded::load(&path);
        let wall = p.value_index("wall");
        let (mut in_functions, mut total) = ([0i64; 2], 0);
        for s in &p.0.sample {
            total += s.value[wall];
            let mut frames = p.sample_frames(s);
            frames.retain(|(name, ..)| name.contains(" (timed_sm.js:"));
            let Some(i) = measured
                .iter()
                .position(|(name, _)| Some(name) == frames.first().map(|f| &f.0))
            else {
                continue;
            };
            in_functions[i] += s.value[wall];
            let (lines, call_line) = match i {
                0 => (16..=21, 35),
                _ => (23..=29, 37),
            };
            let (callees, callers) = frames.split_at(frames.len() - 2);
            assert!(
                callees
                    .iter()
                    .all(|(name, file, line)| *name == measured[i].0
                        && file == "timed_sm.js"
                        && lines.contains(line))
                    && callers[0]
                        == (
                            "measure (timed_sm.js:31:17)".into(),
                            "timed_sm.js".into(),
                            call_line
                        )
                    && callers[1].0 == "run (timed_sm.js:46:6)",
                "{what}: {frames:?}"
            );
        }
        assert_shares_as_measured(&what, &measured, &in_functions, total, 9);
    }
}

#[test]
fn the_release_engine_splits_as_the_script_timed_itself() {
    if let Some(component) = built_component("timed-sm.wasm") {
        splits_as_the_script_timed_itself(&component, &[]);
    }
}

#[test]
fn the_debug_engine_splits_as_the_script_timed_itself() {
    if let Some(component) = built_component("timed-sm-debug.wasm") {
        splits_as_the_script_timed_itself(&component, &[]);
    }
}

/// The engine is the oracle: `names_sm.js` notes the first line of `new Error().stack` inside
/// each kind of function SpiderMonkey names in its own way (`name@file:line:column`), and
/// each of them spins in its own body. The profile has each under the name the engine
/// printed, in the file it printed, with at least 1 % of the samples (each has about 5 %, the
/// field initializer, which spins in a builtin, 2.5 %: with some 2,000 samples a share's
/// standard deviation is 0.35 points, so 1 % is 4 of them below the least):
/// methods, accessors (`get size`), private methods, constructors (the class's name),
/// the engine's guessed names (`handlers.onToken`, `callbacks/<`, `makeClosure/<`, `run/<`),
/// `new Function`'s `anonymous` in `names_sm.js line 178 > Function`. Where the engine prints
/// no name, the profile says `<anonymous>` for a function (a class's field initializer) and
/// `<top-level>` for a script's top level (indirect `eval`'s code).
#[test]
fn functions_are_named_as_spidermonkey_names_them() {
    let Some(component) = built_component("names-sm.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (out, p) = record_ok(dir.path(), &HTTP, &component, &[]);
    let printed = stdout(&out);
    let noted: Vec<(&str, &str)> = printed.lines().filter_map(|l| l.split_once('\t')).collect();
    assert_eq!(noted.len(), 21, "{printed}");
    let total = p.total("samples");
    for (kind, line) in noted {
        let (name, place) = line.split_once('@').unwrap();
        let file = place.rsplitn(3, ':').nth(2).unwrap();
        let shown = match (name, kind) {
            ("", "eval") => "<top-level>",
            ("", _) => "<anonymous>",
            (name, _) => name,
        };
        let samples: i64 =
            p.0.sample
                .iter()
                .filter(|s| {
                    p.sample_frames(s)
                        .first()
                        .is_some_and(|(function, in_file, _)| {
                            function.starts_with(&format!("{shown} (")) && in_file == file
                        })
                })
                .map(|s| s.value[0])
                .sum();
        assert!(
            samples * 100 >= total,
            "{kind}: {name:?} in {file:?}: {samples} of {total} samples: {:?}",
            p.top_self("samples")
        );
    }
}

/// The weval (AOT) engine runs the script's functions in the portable baseline interpreter
/// (PBL): its frames are read from the JIT activation. One test, not two, so that its runs
/// under the signal sampler (`--native`'s and the split's) share one compile of the 21 MB
/// component: two tests run at once would both compile it (27 CPU-seconds), missing the cache.
///
/// With `--native`, the weval engine's own Wasm frames stay, and the calls of its portable
/// baseline interpreter (weval's specialized functions, one chain per JavaScript call) are
/// replaced by the JavaScript frames they run: in every stack that reads the script, its
/// frames stand together, the engine's entry (the export's Wasm frames) rootward of them,
/// what the innermost one called (a VM call, an inline cache) leafward. Most samples
/// (90 % of the CPU time measured; the rest: the engine starting, frames caught being pushed
/// or popped) are in `fib` or `build`.
///
/// Then the split as the script timed it, as the other engines': weval's engine runs `fib`
/// faster and `build` slower than the others, hence the arguments (build.sh's) that even the
/// split out.
#[test]
fn the_weval_engine_shows_its_javascript_frames_and_splits_as_the_script_timed_itself() {
    let Some(component) = built_component("timed-sm-weval.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let flags = [&HTTP[..], &["--native"]].concat();
    let (_, p) = record_ok(dir.path(), &flags, &component, &["200", "420"]);
    let is_javascript = |name: &String| name.contains(".js:");
    let (mut in_functions, mut total) = (0, 0);
    for (names, _) in p.stacks() {
        total += 1;
        // Leaf first.
        let Some(innermost) = names.iter().position(is_javascript) else {
            continue;
        };
        let outermost = names.iter().rposition(is_javascript).unwrap();
        assert!(
            names[innermost..=outermost].iter().all(is_javascript)
                && names[outermost + 1..]
                    .iter()
                    .any(|n| n.starts_with("module0!wasm-function[")),
            "{names:?}"
        );
        in_functions += usize::from(
            ["fib (timed_sm.js:16:13)", "build (timed_sm.js:23:15)"].contains(&&*names[innermost]),
        );
    }
    assert!(
        in_functions * 2 > total,
        "{in_functions} of {total}: {:?}",
        p.top_self("samples")
    );
    splits_as_the_script_timed_itself(&component, &["2000", "4200"]);
}

/// `wasmspy dump` of a StarlingMonkey component (the release engine, whose functions have no
/// names) running `timed_sm.js` for minutes: each dump shows the guest's JavaScript stack as
/// the profile names it, leaf first, each frame at its line, and none of the engine's Wasm
/// functions: `fib` (recursing, at its lines 16–21) under `measure` at its call (35), or
/// `build` (23–29) under `measure` at 37, or `measure` itself; maybe under a host call they
/// made (`performance.now()`, the garbage collector's clock); then `run` at 56 and the
/// export's own JavaScript. Of 30 dumps, with half the time in each function, both show as the
/// leaf (each is missed with odds of 2^-30).
#[test]
fn a_dump_shows_a_starlingmonkey_components_javascript_stack() {
    use std::process::Stdio;
    let Some(component) = built_component("timed-sm.wasm") else {
        return;
    };
    let mut guest = wasmspy()
        .args(["record", "-S", "http", "--pprof-addr", "127.0.0.1:0", "--"])
        .arg(&component)
        .arg("100000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut guest_err = child::StderrLines::of(&mut guest);
    let _guest = Killed(guest);
    let line = guest_err.wait_for("serving profiles at ");
    let url = line.split("serving profiles at ").nth(1).unwrap();
    let dump = || {
        let out = wasmspy().arg("dump").arg(url).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    // The server answers before the guest runs: dumps from once the script's loop shows
    // (polled, a minute at most, so that a dump that never shows it fails rather than hangs).
    let started = (0..600).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        dump().contains("\nmeasure (timed_sm.js:31:17)\n")
    });
    assert!(started, "no dump showed the script's loop: {}", dump());
    let mut leaves = std::collections::BTreeSet::new();
    for _ in 0..30 {
        let text = dump();
        let blocks: Vec<&str> = text
            .split("\n\n")
            .filter(|b| b.starts_with("guest "))
            .collect();
        assert_eq!(blocks.len(), 1, "{text}");
        let lines: Vec<&str> = blocks[0].lines().collect();
        assert!(
            lines[0].starts_with("guest 1 [running, ")
                || lines[0].starts_with("guest 1 [host call, "),
            "{text}"
        );
        // (function, place): `fib (timed_sm.js:16:13)`, `timed_sm.js:20`.
        let frames: Vec<(&str, &str)> = lines[1..]
            .chunks(2)
            .map(|c| (c[0], c.get(1).map_or("", |place| place.trim())))
            .collect();
        let script: Vec<(&str, &str)> = frames
            .iter()
            .copied()
            .skip_while(|(_, place)| {
                ["[host]", "[wasmtime]"].contains(place) || place.starts_with("host: ")
            })
            .collect();
        let n = script.len();
        assert!(n >= 3, "{text}");
        assert!(
            script[n - 1]
                .0
                .starts_with("export_run_0_2_12$run (initializer.js:"),
            "{text}"
        );
        assert_eq!(
            script[n - 2],
            ("run (timed_sm.js:46:6)", "timed_sm.js:56"),
            "{text}"
        );
        let line_of = |place: &str| -> i64 {
            let line = place.strip_prefix("timed_sm.js:");
            line.and_then(|l| l.parse().ok())
                .unwrap_or_else(|| panic!("{place}: {text}"))
        };
        let (measure, at) = script[n - 3];
        assert_eq!(measure, "measure (timed_sm.js:31:17)", "{text}");
        let callees = &script[..n - 3];
        let (call, lines) = match callees.first().map(|(name, _)| *name) {
            Some("fib (timed_sm.js:16:13)") => (35, 16..=21),
            Some("build (timed_sm.js:23:15)") => (37, 23..=29),
            None => (line_of(at), 31..=44),
            Some(other) => panic!("{other}: {text}"),
        };
        assert_eq!(line_of(at), call, "{text}");
        for (name, place) in callees {
            assert!(
                *name == callees[0].0 && lines.contains(&line_of(place)),
                "{text}"
            );
        }
        leaves.insert(
            callees
                .first()
                .map_or(measure, |(name, _)| *name)
                .to_string(),
        );
    }
    assert!(
        leaves.contains("fib (timed_sm.js:16:13)") && leaves.contains("build (timed_sm.js:23:15)"),
        "{leaves:?}"
    );
}

/// An embedder's own Wasmtime host running a StarlingMonkey component (the release engine)
/// through the library: wasmtime-wasi's WASI 0.2 and wasmtime-wasi-http's `wasi:http` (which
/// the engine imports: `wasmtime run -S http` links it) in its linker, the component probed
/// (`probe_runtimes`, `define_runtime_probe`) so that the profiler is shown the engine's
/// instance. The profile has the script's JavaScript frames as `record`'s has them: `fib` and
/// `build`, about half the samples each (the script's split: 200 rounds, some 600 samples, a
/// share's standard deviation 2 points), at their lines, under `measure` at its calls of them
/// and `run`; nearly all the samples in them.
#[test]
fn an_embedders_starlingmonkey_component_shows_its_javascript_frames() {
    use wasmspy::{probe_runtimes, Profiler, ProfilerOptions, SamplerKind};
    use wasmtime::component::{Component, Linker, ResourceTable};
    use wasmtime_wasi::p2::bindings::sync::Command;
    use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
    use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

    struct Host {
        ctx: WasiCtx,
        http: WasiHttpCtx,
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
    impl WasiHttpView for Host {
        fn http(&mut self) -> WasiHttpCtxView<'_> {
            WasiHttpCtxView {
                ctx: &mut self.http,
                table: &mut self.table,
                hooks: Default::default(),
            }
        }
    }

    let Some(path) = built_component("timed-sm.wasm") else {
        return;
    };
    let wasm = std::fs::read(&path).unwrap();
    let probed = probe_runtimes(&wasm)
        .unwrap()
        .expect("SpiderMonkey's engine is probed");
    let options = ProfilerOptions {
        sampler: SamplerKind::Signal,
        ..Default::default()
    };
    let mut config = wasmtime::Config::new();
    Profiler::configure(&mut config, &options);
    let engine = wasmtime::Engine::new(&config).unwrap();
    let component = Component::new(&engine, &probed).unwrap();
    let mut profiler = Profiler::new(&engine, options).unwrap();
    profiler
        .add_component("timed-sm.wasm", &component, probed)
        .unwrap();
    let mut linker = Linker::<Host>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).unwrap();
    wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker).unwrap();
    profiler
        .define_runtime_probe(&mut linker, &component)
        .unwrap();
    let ctx = WasiCtxBuilder::new()
        .args(&["timed-sm.wasm", "200"])
        .build();
    let host = Host {
        ctx,
        http: WasiHttpCtx::new(),
        table: ResourceTable::new(),
    };
    let mut store = wasmtime::Store::new(&engine, host);
    profiler.attach(&mut store).unwrap();
    profiler.start().unwrap();
    let command = Command::instantiate(&mut store, &component, &linker).unwrap();
    command
        .wasi_cli_run()
        .call_run(&mut store)
        .unwrap()
        .unwrap();
    let profile = profiler.stop();
    let warnings: Vec<String> = profiler
        .handle()
        .take_warnings()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        !warnings.iter().any(|w| w.contains("not JavaScript frames")),
        "{warnings:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cpu.pb.gz");
    std::fs::write(&out, wasmspy::export::pprof::encode(&profile).unwrap()).unwrap();
    let p = Decoded::load(&out);
    let total = p.total("samples");
    let mut in_functions = [0i64; 2];
    for s in &p.0.sample {
        let frames = p.sample_frames(s);
        let script: Vec<_> = frames
            .iter()
            .filter(|(_, file, _)| file == "timed_sm.js")
            .collect();
        let (i, call, lines) = match script.first().map(|(name, ..)| name.as_str()) {
            Some("fib (timed_sm.js:16:13)") => (0, 35, 16..=21),
            Some("build (timed_sm.js:23:15)") => (1, 37, 23..=29),
            _ => continue,
        };
        in_functions[i] += s.value[0];
        let (callees, callers) = script.split_at(script.len() - 2);
        assert!(
            callees
                .iter()
                .all(|(name, _, line)| *name == script[0].0 && lines.contains(line))
                && (callers[0].0.as_str(), callers[0].2) == ("measure (timed_sm.js:31:17)", call)
                && (callers[1].0.as_str(), callers[1].2) == ("run (timed_sm.js:46:6)", 56),
            "{frames:?}"
        );
    }
    let [fib, build] = in_functions;
    assert!(
        (fib + build) * 10 >= total * 9,
        "fib {fib}, build {build} of {total} samples: {:?}",
        p.top_self("samples")
    );
    for (name, samples) in [("fib", fib), ("build", build)] {
        let share = samples as f64 / (fib + build) as f64;
        assert!(
            (0.3..=0.7).contains(&share),
            "{name}: {share:.3}: {:?}",
            p.top_self("samples")
        );
    }
}

/// A real engine whose code no longer matches SpiderMonkey's as wasmspy knows it: the debug
/// and release engines (`fib-js.wasm`, `timed-sm.wasm`) with each function that has the first
/// fingerprint recognition finds `js::TlsContext` by given one more load before its own, of
/// address 0, its value dropped. The engine runs as before (a load of memory that is there,
/// its value unused), but that function's loads and stores are no longer the fingerprint's,
/// as after a change of SpiderMonkey or of the compiler that built it. The run's output
/// (`fib-js.wasm`'s exactly; `timed-sm.wasm`'s two shares, which are timed, line by line by
/// their names) and exit code are `wasmtime run`'s; one warning says the engine's frames
/// cannot be read, naming the fingerprint's function (the others, that the engine has no
/// DWARF, recognition's "is SpiderMonkey's engine" says instead); the profile keeps the
/// engine's Wasm frames, `js::Interpret` (named in the debug engine, `wasm-function[N]` in
/// the release one, N as recognition found it before the change) under most samples, and
/// none is JavaScript.
#[test]
fn an_engine_whose_code_no_longer_matches_keeps_its_wasm_frames() {
    use wasmspy::internals::runtimes::spidermonkey::recognize::TLS_CONTEXT;
    let print = &TLS_CONTEXT[0];
    let dir = tempfile::tempdir().unwrap();
    for (name, args) in [("fib-js.wasm", &[][..]), ("timed-sm.wasm", &["50"][..])] {
        let Some(component) = built_component(name) else {
            continue;
        };
        let (altered, changed, interpreter) =
            with_one_more_load(&std::fs::read(&component).unwrap(), print);
        assert!(changed >= 1, "{name}: none like `{}`", print.function);
        let interpreter = format!("wasm-function[{interpreter}]");
        let guest = dir.path().join(name);
        std::fs::write(&guest, altered).unwrap();
        let plain = std::process::Command::new(wasmtime_cli())
            .args(["run", "-S", "http"])
            .arg(&guest)
            .args(args)
            .output()
            .unwrap();
        let (out, path) = record(dir.path(), &HTTP, &guest, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{name}: {err}");
        assert_eq!(plain.status.code(), Some(0), "{name}: {}", stderr(&plain));
        // A line, or (the timed shares) its first word.
        let names = |o: &std::process::Output| -> Vec<String> {
            let line = |l: &str| match name {
                "timed-sm.wasm" => l.split(' ').next().unwrap_or_default().to_string(),
                _ => l.to_string(),
            };
            stdout(o).lines().map(line).collect()
        };
        assert_eq!(names(&out), names(&plain), "{name}: {err}");
        assert!(!names(&out).is_empty(), "{name}: {err}");
        let (warned, others): (Vec<&str>, Vec<&str>) = err
            .lines()
            .filter(|l| l.contains("warning"))
            .partition(|l| l.contains("SpiderMonkey"));
        assert_eq!(warned.len(), 1, "{name}: {err}");
        assert!(
            others.iter().all(|l| l.contains("has no DWARF debug info")),
            "{name}: {err}"
        );
        assert!(
            warned[0].contains("SpiderMonkey, but its code does not match")
                && warned[0].contains(&format!("no function is `{}`", print.function))
                && warned[0].ends_with("not JavaScript frames"),
            "{name}: {err}"
        );
        eprintln!("{name}: {err}");
        let p = Decoded::load(&path);
        let functions: Vec<(&str, &str)> = p
            .sampled_functions()
            .into_iter()
            .map(|f| (p.str(f.name), p.str(f.filename)))
            .collect();
        assert!(
            functions
                .iter()
                .all(|(f, file)| !file.ends_with(".js") && !f.contains(".js:")),
            "{name}: {functions:?}"
        );
        let total = p.total("samples");
        let interpret: i64 =
            p.0.sample
                .iter()
                .filter(|s| {
                    let frames = p.sample_frames(s);
                    frames.iter().any(|(f, ..)| {
                        f.starts_with("js::Interpret(JSContext*") || f.ends_with(&interpreter)
                    })
                })
                .map(|s| s.value[p.value_index("samples")])
                .sum();
        eprintln!("{name}: {interpret} of {total} samples in js::Interpret: {functions:?}");
        assert!(interpret * 2 >= total, "{name}: {functions:?}");
    }
}

/// `component` with each function of its SpiderMonkey engine (the core module recognised as
/// one) that has `print`'s type and loads and stores given one more load before them (of
/// address 0, dropped), every other byte as it was; how many functions it changed, and which
/// function is `js::Interpret` (as recognition found it before).
fn with_one_more_load(
    component: &[u8],
    print: &wasmspy::internals::runtimes::spidermonkey::recognize::Fingerprint,
) -> (Vec<u8>, usize, u32) {
    use wasmspy::internals::runtimes::spidermonkey::recognize::*;
    let (mut changed, mut interpreter) = (0, u32::MAX);
    let altered = sections(component, |id, module| {
        // Core modules are section 1 of a component.
        match recognize(module) {
            Recognition::Engine(engine) if id == 1 => interpreter = engine.interpreter,
            _ => return None,
        }
        let code = Code::parse(module).unwrap();
        let mut scratch = Scratch::default();
        let mut like = |f: u32| {
            let ty = code.func_type(f).unwrap();
            let mut n = 0;
            let read = code.accesses(&mut scratch, f, |access, _| {
                n += 1;
                match print.accesses.get(n - 1) == Some(&access) {
                    true => std::ops::ControlFlow::Continue(()),
                    false => std::ops::ControlFlow::Break(()),
                }
            });
            ty.params() == print.params
                && ty.results() == print.results
                && read.is_ok()
                && n == print.accesses.len()
        };
        let first = code.defined().start;
        let targets: Vec<u32> = code.defined().filter(|&f| like(f)).collect();
        changed += targets.len();
        // `i32.const 0`, `i32.load` (aligned to 4, offset 0), `drop`.
        const LOAD: [u8; 6] = [0x41, 0x00, 0x28, 0x02, 0x00, 0x1a];
        Some(sections(module, |id, payload| {
            // The code section (10): its bodies, each after its locals the new load or not.
            if id != 10 {
                return None;
            }
            let bodies =
                wasmparser::CodeSectionReader::new(wasmparser::BinaryReader::new(payload, 0))
                    .unwrap();
            let mut section = Vec::new();
            wasm_encoder::Encode::encode(&bodies.count(), &mut section);
            for (i, body) in bodies.into_iter().enumerate() {
                let body = body.unwrap();
                let (range, ops) = (
                    body.range(),
                    body.get_operators_reader().unwrap().original_position(),
                );
                let mut bytes = payload[range.start..ops].to_vec();
                if targets.contains(&(first + i as u32)) {
                    bytes.extend(LOAD);
                }
                bytes.extend(&payload[ops..range.end]);
                wasm_encoder::Encode::encode(bytes.as_slice(), &mut section);
            }
            Some(section)
        }))
    });
    (altered, changed, interpreter)
}

/// A module or component (`wasm`) with each section whose id and contents `change` gives new
/// contents for replaced by them (its size said again); every other byte as it was.
fn sections(wasm: &[u8], mut change: impl FnMut(u8, &[u8]) -> Option<Vec<u8>>) -> Vec<u8> {
    let mut out = wasm[..8].to_vec();
    let mut reader = wasmparser::BinaryReader::new(&wasm[8..], 8);
    while !reader.eof() {
        let id = reader.read_u8().unwrap();
        let size = reader.read_var_u32().unwrap();
        let payload = reader.read_bytes(size as usize).unwrap();
        out.push(id);
        let payload = change(id, payload).unwrap_or_else(|| payload.to_vec());
        wasm_encoder::Encode::encode(payload.as_slice(), &mut out);
    }
    out
}
