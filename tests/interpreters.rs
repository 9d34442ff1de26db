//! Components that carry an interpreter: JavaScript (componentize-js: SpiderMonkey in
//! StarlingMonkey; componentize-qjs: QuickJS, in the component model's async ABI) and Python
//! (componentize-py: CPython). Each runs under `wasmspy record`
//! with `wasmtime run`'s stdout and exit code, and its profile names the interpreter's own
//! functions, and the script's where wasmspy reads the interpreter's stack (CPython's). The components are built from
//! `tests/fixtures/interpreters/` by its `build.sh`, which `scripts/test.sh` runs (they are
//! 14–18 MB: built, not committed).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::allocs_py::assert_allocated_by_line;
use common::self_timed::{assert_shares_as_measured, measured_shares};
use common::timed_py::{self, assert_split_as_timed, Depth, Run};
use common::*;

/// Records `component` with `flags` (and wasmspy's own `profiling` flags), checks its stdout
/// and exit code against `wasmtime run`'s and `expected`, and returns its profile and what
/// wasmspy said on stderr.
fn recorded(
    component: &PathBuf,
    profiling: &[&str],
    flags: &[&str],
    args: &[&str],
    expected: &str,
) -> (Decoded, String) {
    let dir = tempfile::tempdir().unwrap();
    let ours_flags = [profiling, flags].concat();
    let (ours, profile) = record(dir.path(), &ours_flags, component, args);
    let theirs = Command::new(wasmtime_cli())
        .arg("run")
        .args(flags)
        .arg(component)
        .args(args)
        .output()
        .unwrap();
    assert_eq!(ours.status.code(), Some(0), "{}", stderr(&ours));
    assert_eq!(theirs.status.code(), Some(0), "{}", stderr(&theirs));
    assert_eq!(stdout(&ours), expected);
    assert_eq!(stdout(&theirs), expected);
    (Decoded::load(&profile), stderr(&ours))
}

/// The share of samples whose stack has `function` in it.
fn inclusive_share(p: &Decoded, function: &str) -> f64 {
    let with: i64 = p
        .stacks()
        .iter()
        .filter(|(names, _)| names.iter().any(|n| n == function))
        .map(|(_, values)| values[0])
        .sum();
    with as f64 / p.total("samples") as f64
}

/// ComponentizeJS's debug engine (StarlingMonkey: SpiderMonkey 147, with a name section): the
/// profile shows the script's JavaScript frames, `fib` (recursing, at its lines 4 and 5: the
/// engine puts `fib`'s return on its closing line) under `run` at the line that calls it,
/// under ComponentizeJS's generated bindings; with `--native`, the engine's own functions,
/// each `js::Interpret` replaced by the JavaScript frames it runs.
#[test]
fn a_javascript_component_shows_its_javascript_frames() {
    let Some(js) = built_component("fib-js.wasm") else {
        return;
    };
    // StarlingMonkey imports `wasi:http` for `fetch`.
    let (p, said) = recorded(&js, &[], &["-S", "http"], &[], "fib(27) = 196418\n");
    assert!(
        !said.contains("not JavaScript frames"),
        "recognised: {said}"
    );
    let fib = "fib (fib.js:3:13)";
    let share = inclusive_share(&p, fib);
    assert!(
        share > 0.8,
        "{fib}: {share:.2}: {:?}",
        p.top_self("samples")
    );
    let mut in_fib = 0;
    for s in &p.0.sample {
        let frames = p.sample_frames(s);
        let Some(first) = frames.iter().position(|(name, ..)| name == fib) else {
            continue;
        };
        in_fib += 1;
        let run = frames
            .iter()
            .position(|(name, ..)| name == "run (fib.js:8:6)");
        assert!(
            frames[first..run.unwrap_or(frames.len())]
                .iter()
                .all(|(name, file, line)| name == fib && file == "fib.js" && [4, 5].contains(line))
                && run.is_some_and(|r| frames[r].2 == 9),
            "{frames:?}"
        );
    }
    // Distinct stacks: fib's depths and lines.
    assert!(in_fib >= 5, "{:?}", p.top_self("samples"));
    let mappings = p.mapping_names();
    assert!(
        mappings.contains(&"fib-js.wasm/starling-raw.wasm"),
        "{mappings:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let (_, p) = record_ok(dir.path(), &["--native", "-S", "http"], &js, &[]);
    let interpret = "js::Interpret(JSContext*, js::RunState&)";
    let mut spliced = 0;
    for (names, _) in p.stacks() {
        // Leaf first: fib's frames, then the engine's frames that called the loop.
        let Some(run) = names.iter().position(|n| n == "run (fib.js:8:6)") else {
            continue;
        };
        assert!(!names.iter().any(|n| n == interpret), "{names:?}");
        assert!(
            names[run + 1..].iter().any(|n| n.starts_with("js::")),
            "{names:?}"
        );
        spliced += usize::from(names[..run].iter().any(|n| n == fib));
    }
    assert!(spliced >= 5, "{:?}", p.top_self("samples"));
}

/// componentize-qjs's default output uses the component model's async ABI (`task.return`,
/// `task.cancel`): it runs as under `wasmtime run`, `--invoke` printing the WAVE result, and
/// its QuickJS loop is sampled, on the fiber Wasmtime's concurrent call runs it on, as the
/// JavaScript function it is: `greet (greet.js:3:8)`.
#[test]
fn a_quickjs_component_of_the_async_abi_runs_and_is_sampled() {
    let Some(qjs) = built_component("greet-qjs.wasm") else {
        return;
    };
    let (p, _) = recorded(
        &qjs,
        &[],
        &["--invoke", "greet(\"World\")"],
        &[],
        "\"Hello, World! 315\"\n",
    );
    // The loop is 3 million iterations of QuickJS's interpreter: some hundreds of samples.
    assert!(p.total("samples") > 20, "{:?}", p.top_self("samples"));
    let greet = "greet (greet.js:3:8)";
    let share = inclusive_share(&p, greet);
    assert!(
        share > 0.9,
        "{greet}: {share:.2}: {:?}",
        p.top_self("samples")
    );
    let mappings = p.mapping_names();
    assert!(
        mappings.iter().any(|m| m.starts_with("greet-qjs.wasm/")),
        "{mappings:?}"
    );
}

/// `timed.js` built by componentize-qjs in its two ABIs (default, `--sync`), where built.
fn timed_qjs_builds() -> Option<Vec<PathBuf>> {
    ["timed-qjs.wasm", "timed-qjs-sync.wasm"]
        .iter()
        .map(|b| built_component(b))
        .collect()
}

/// `timed.js`'s `run`, which times its own `fib` and `build` and returns each one's share as
/// `NAME SHARE` lines, through componentize-qjs's two ABIs and both samplers: each function's
/// share of the time in the profile within 5 points of the script's measure. The script times
/// itself by the wall clock (`performance.now`, all it has), so the profile is taken by it too
/// (`--clock wall`), as tests/drop_in.rs does: a thread descheduled by a loaded machine adds the
/// same time to both, where CPU time would part them (0.495 against 0.438 once). (With 1,500 rounds,
/// some 1,000 samples: a binomial share's standard deviation is 1.6 points at most, so 5 is
/// 3 of them), and every sample of them the script's own JavaScript stack, lines included:
/// `fib` (recursing, at its lines) or `build` → `run` at the line that calls it. The leaf may
/// be a host call or Wasmtime's (a string copied by `memory.copy`) under the JavaScript line.
#[test]
fn a_quickjs_component_splits_as_the_script_timed_itself() {
    let Some(builds) = timed_qjs_builds() else {
        return;
    };
    for (qjs, sampler) in builds.iter().flat_map(|b| [(b, "signal"), (b, "epoch")]) {
        let dir = tempfile::tempdir().unwrap();
        let flags = [
            "--sampler",
            sampler,
            "--clock",
            "wall",
            "--invoke",
            "run(1500)",
            "--verbose",
        ];
        let (out, path) = record(dir.path(), &flags, qjs, &[]);
        // Named with the sampler's counts (lost samples among them), should the split fail.
        let counts = stderr(&out)
            .lines()
            .find(|l| l.contains(" sampler at "))
            .unwrap_or_default()
            .to_string();
        let what = format!(
            "{} {sampler} ({counts})",
            qjs.file_name().unwrap().to_string_lossy()
        );
        assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
        // Recognised: no "QuickJS (rquickjs-sys …), but …" warning.
        assert!(
            !stderr(&out).contains("QuickJS (rquickjs-sys"),
            "{what}: {}",
            stderr(&out)
        );
        // The WAVE string: "fib 0.4145\nbuild 0.5855".
        let result = stdout(&out).trim().trim_matches('"').replace("\\n", "\n");
        let measured = measured_shares(
            &result,
            &[
                ("fib", "fib (timed.js:4:1)"),
                ("build", "build (timed.js:11:1)"),
            ],
        );
        assert_eq!(measured.len(), 2, "{what}: {result}");
        let p = Decoded::load(&path);
        let wall = p.value_index("wall");
        let (mut in_functions, mut total) = ([0i64; 2], 0);
        for s in &p.0.sample {
            total += s.value[wall];
            let mut frames = p.sample_frames(s);
            frames.retain(|(name, ..)| name.contains(" (timed.js:"));
            let Some(i) = measured
                .iter()
                .position(|(name, _)| Some(name) == frames.first().map(|f| &f.0))
            else {
                continue;
            };
            in_functions[i] += s.value[wall];
            let (lines, call_line) = match i {
                0 => (4..=9, 23),
                _ => (11..=17, 25),
            };
            let (callees, run) = frames.split_at(frames.len() - 1);
            assert!(
                callees
                    .iter()
                    .all(|(name, file, line)| *name == measured[i].0
                        && file == "/timed.js"
                        && lines.contains(line))
                    && run
                        == [(
                            "run (timed.js:19:8)".to_string(),
                            "/timed.js".to_string(),
                            call_line
                        )],
                "{what}: {frames:?}"
            );
        }
        assert_shares_as_measured(&what, &measured, &in_functions, total, 9);
    }
}

/// A host call stays the leaf, under the JavaScript line that made it: `timed.js`'s
/// `readClock` calls `performance.now()` (`wasi:clocks/monotonic-clock`'s `now`) in a loop, and
/// more than half of the CPU is in that call, each of its samples `now` ← `readClock` at the
/// call's line and nothing else (the signal sampler: the epoch sampler samples guest code).
#[test]
fn a_quickjs_components_host_calls_stay_under_the_javascript_line() {
    let Some(builds) = timed_qjs_builds() else {
        return;
    };
    for qjs in &builds {
        let dir = tempfile::tempdir().unwrap();
        let flags = ["--invoke", "read-clock(300000)"];
        let (out, p) = record_ok(dir.path(), &flags, qjs, &[]);
        assert_eq!(stdout(&out), "300000\n");
        let cpu = p.value_index("cpu");
        let now = "wasi:clocks/monotonic-clock@0.2.0::now";
        let (mut in_now, mut total) = (0, 0);
        for s in &p.0.sample {
            total += s.value[cpu];
            let frames = p.sample_frames(s);
            if frames.first().is_none_or(|f| f.0 != now) {
                continue;
            }
            in_now += s.value[cpu];
            let caller = ("readClock (timed.js:34:8)".into(), "/timed.js".into(), 37);
            assert_eq!(frames[1..], [caller], "{qjs:?}: {frames:?}");
        }
        assert!(
            in_now * 2 > total,
            "{qjs:?}: {in_now} of {total} ns in {now}"
        );
    }
}

/// With `--native`, QuickJS's own frames stay: each call of its interpreter loop is replaced by
/// the JavaScript frame it runs, so `fib`'s frames follow `run` and each other directly (a
/// JavaScript call is a call of the loop from the loop), the engine's frames that call `run`
/// stay below it, and those `fib` calls into (its helpers) above it.
#[test]
fn a_quickjs_component_shows_its_engine_frames_with_native() {
    let Some(qjs) = built_component("timed-qjs-sync.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_, p) = record_ok(dir.path(), &["--native", "--invoke", "run(300)"], &qjs, &[]);
    let fib = "fib (timed.js:4:1)";
    let share = inclusive_share(&p, fib);
    assert!(
        share > 0.2,
        "{fib}: {share:.2}: {:?}",
        p.top_self("samples")
    );
    // The engine is the component's third module, unnamed.
    let engine = |n: &str| n.starts_with("module2!wasm-function[");
    let mut helpers = 0;
    for (names, _) in p.stacks() {
        let Some(run) = names.iter().position(|n| n == "run (timed.js:19:8)") else {
            continue;
        };
        // Leaf first.
        assert!(names[run + 1..].iter().any(|n| engine(n)), "{names:?}");
        let fibs: Vec<usize> = (0..run).filter(|&i| names[i] == fib).collect();
        let Some(&first) = fibs.first() else {
            continue;
        };
        assert_eq!(fibs, (first..run).collect::<Vec<_>>(), "{names:?}");
        helpers += usize::from(names[..first].iter().any(|n| engine(n)));
    }
    assert!(helpers > 0, "{:?}", p.top_self("samples"));
}

/// componentize-py's CPython 3.14 has no DWARF, and its data (where `_Py_DebugOffsets` is) and
/// its code are in different modules of the component: its Python frames show all the same,
/// as the script's (`fib (fib.py:6)` under `Run.run`), read from the instance inside the
/// component; with `--native`, each activation of the eval loop is replaced by its Python
/// frames, between CPython's C frames.
#[test]
fn a_python_component_shows_its_python_frames() {
    let Some(py) = built_component("fib-py.wasm") else {
        return;
    };
    for native in [false, true] {
        let what = format!("native {native}");
        let flags: &[&str] = if native { &["--native"] } else { &[] };
        let (p, said) = recorded(&py, flags, &[], &["27"], "fib(27) = 196418\n");
        assert!(!said.contains("CPython, but"), "{what}: {said}");
        let fib = "fib (fib.py:6)";
        let share = inclusive_share(&p, fib);
        assert!(
            share > 0.5,
            "{what}: {fib}: {share:.2}: {:?}",
            p.top_self("samples")
        );
        let eval = "_PyEval_EvalFrameDefault";
        for (names, _) in p.stacks() {
            let Some(at) = names.iter().position(|n| n == fib) else {
                continue;
            };
            // Leaf first: `fib`, `Run.run`, then the export's C frames (with --native).
            let run = names.iter().position(|n| n == "Run.run (fib.py:11)");
            assert!(run.is_some_and(|run| run > at), "{what}: {names:?}");
            let run = run.unwrap();
            if native {
                assert!(!names.iter().any(|n| n == eval), "{what}: {names:?}");
                assert!(
                    names[run..].iter().any(|n| n == "_PyEval_Vector"),
                    "{what}: {names:?}"
                );
            } else {
                assert_eq!(run, names.len() - 1, "{what}: {names:?}");
            }
        }
        let mappings = p.mapping_names();
        assert!(
            mappings.contains(&"fib-py.wasm/libpython3.14.so"),
            "{what}: {mappings:?}"
        );
    }
}

/// `tests/fixtures/python/timed.py`'s `main`, run from a componentize-py component's
/// `wasi:cli/run` (`timed_run.py`): each loop's share of the time within 5 points of the share
/// the script measured, each of their samples the loop → `main` → `Run.run`, both samplers.
#[test]
fn a_python_component_splits_as_the_script_timed_itself() {
    let Some(py) = built_component("timed-py.wasm") else {
        return;
    };
    let run = Run {
        file: "/1/timed.py",
        caller: ("Run.run (timed_run.py:10)", "/0/timed_run.py", 11),
    };
    for sampler in ["signal", "epoch"] {
        let dir = tempfile::tempdir().unwrap();
        let flags = [&["--sampler", sampler][..], &timed_py::FLAGS].concat();
        let (out, path) = record(dir.path(), &flags, &py, &[timed_py::ROUNDS]);
        assert_eq!(out.status.code(), Some(0), "{sampler}: {}", stderr(&out));
        assert_split_as_timed(sampler, &out, &path, &run, Depth::Exactly);
    }
}

/// `allocs.py`'s `allocate` run by a componentize-py component, every allocation recorded
/// (`--mem-rate 1`): each line's bytes, under its Python stack, as on CPython 3.15 alone.
/// CPython's allocators (`libpython3.14.so`) nest `libc.so`'s `malloc` in them through the
/// component's gate, and nothing is reported while the host places `run`'s arguments or frees
/// its result (the guest would trap: `cannot leave component instance`).
#[test]
fn a_python_component_allocates_by_python_line() {
    let Some(py) = built_component("allocs-py.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap.pb.gz");
    let flags = ["--mem-rate", "1", "--mem-profile", heap.to_str().unwrap()];
    recorded(&py, &flags, &[], &["20"], "4500000\n");
    assert_allocated_by_line("componentize-py", &heap, 20, "Run.run (allocs_run.py:10)");
}

/// `names.js` has one function of each kind QuickJS names in its own way (a class's
/// constructor, method, static method, getter, setter and private method; an object literal's
/// method; two classes' field initializers; functions and arrows named by their bindings;
/// anonymous callbacks; `new Function` and indirect `eval` code), each noting how
/// `new Error().stack` names it inside itself. The oracle is the engine: each is in the
/// profile under the name it printed, with its file, and the anonymous callbacks, the
/// initializers and the two classes' constructors are functions of their own.
#[test]
fn quickjs_frames_are_named_as_quickjs_names_them() {
    let Some(qjs) = built_component("names-qjs.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (out, p) = record_ok(dir.path(), &["--invoke", "run(40)"], &qjs, &[]);
    let printed = stdout(&out);
    // A WAVE string: `KIND: at NAME (FILE:LINE:COLUMN)` lines, joined by `\n`.
    let lines: Vec<&str> = printed.trim().trim_matches('"').split("\\n").collect();
    assert_eq!(lines.len(), 16, "{printed}");
    let functions: std::collections::BTreeSet<String> = p
        .stacks()
        .into_iter()
        .flat_map(|(names, _)| names)
        .collect();
    for line in &lines {
        let (kind, frame) = line.split_once(": at ").unwrap();
        let (name, position) = frame.rsplit_once(" (").unwrap();
        let file = position.split(':').next().unwrap();
        let base = file.rsplit('/').next().unwrap();
        let ours = format!("{name} ({base}:");
        assert!(
            functions.iter().any(|f| f.starts_with(&ours)),
            "{kind}: the engine names it {name} ({file}), the profile has none such: {functions:?}"
        );
    }
    // Two callbacks, and two classes' field initializers, which the engine gives no position:
    // each is where its class's constructor is (`Parser`'s, line 46; `Renderer`'s implicit
    // one, at its class's end). (Lexer's, which sets its private method's brand, may be
    // sampled too, at Lexer's constructor.)
    for anonymous in ["68:17", "69:18", "46:3", "53:1"] {
        let name = format!("<anonymous> (names.js:{anonymous})");
        assert!(functions.contains(&name), "{name}: {functions:?}");
    }
    for class in ["Lexer", "Parser"] {
        let found = functions
            .iter()
            .filter(|f| f.starts_with(&format!("{class} (")));
        assert_eq!(found.count(), 1, "{class}: {functions:?}");
    }
}

/// A profile's functions of one bundle, each keyed as the engines name it (its name, the line
/// it starts on), with its self and total `cpu`; a sample's self goes to its innermost frame
/// in the bundle, so that time in a builtin (V8's `RegExp:` frames, QuickJS's native code and
/// host calls) is its JavaScript caller's in both profiles.
struct BundleShares {
    functions: std::collections::BTreeMap<(String, i64), (i64, i64)>,
    /// Of samples with a frame of the library (the bundle before its entry script).
    in_library: i64,
    total: i64,
}

fn bundle_shares(p: &Decoded, bundle: &str, entry_line: i64) -> BundleShares {
    let cpu = p.value_index("cpu");
    let mut shares = BundleShares {
        functions: Default::default(),
        in_library: 0,
        total: 0,
    };
    for sample in &p.0.sample {
        let value = sample.value[cpu];
        shares.total += value;
        let mut seen = std::collections::BTreeSet::new();
        let mut library = false;
        for &id in &sample.location_id {
            for line in &p.location(id).line {
                let f = p.function(line.function_id);
                if !p.str(f.filename).ends_with(bundle) {
                    continue;
                }
                library |= line.line > 0 && line.line < entry_line;
                let key = (p.str(f.system_name).to_string(), f.start_line);
                let entry = shares.functions.entry(key.clone()).or_default();
                if seen.is_empty() {
                    entry.0 += value;
                }
                if seen.insert(key) {
                    entry.1 += value;
                }
            }
        }
        shares.in_library += if library { value } else { 0 };
    }
    shares
}

impl BundleShares {
    /// How many functions hold three quarters of the self time, the fewest that do.
    fn spread(&self) -> usize {
        let mut selfs: Vec<i64> = self.functions.values().map(|v| v.0).collect();
        selfs.sort_unstable_by(|a, b| b.cmp(a));
        let mut sum = 0;
        1 + selfs
            .iter()
            .take_while(|&&s| {
                sum += s;
                sum * 4 < self.total * 3
            })
            .count()
    }
}

/// Two real npm libraries (marked 15, htmlparser2 12; tests/fixtures/interpreters/realcode/),
/// each bundled by esbuild with a script that renders generated input, profiled under QuickJS and StarlingMonkey
/// by wasmspy and under Node by `node --cpu-prof` (converted by wasmspy: both are then keyed the
/// same way). Every function Node finds holding 2 % of the time or more is in ours under the
/// name Node gives it, starting on the same line (an implicit constructor: below it); the library holds at least 90 % of ours; and
/// no entry holds what Node spreads over many: the functions that hold three quarters of the
/// time are at least a third as many as Node's (the engines differ: QuickJS runs regular
/// expressions slower than V8, whose compiled code is ~40 times faster here, so their shares of
/// one function differ; one entry holding 92 %, as before, has a spread of 1).
#[test]
fn real_libraries_are_named_as_node_names_them() {
    let engines = [
        ("marked", "qjs", "6", "300"),
        ("htmlparser2", "qjs", "15", "150"),
        ("marked", "sm", "20", "300"),
        ("htmlparser2", "sm", "8", "150"),
    ];
    for (lib, engine, ours_rounds, node_rounds) in engines {
        let Some(component) = built_component(&format!("{lib}-{engine}.wasm")) else {
            continue;
        };
        // StarlingMonkey's bundle is Node's with marked's `\p{…}` classes written as ranges
        // (its engine has no Unicode property data), line for line.
        let bundle = component.with_file_name(format!("{lib}.bundle.js"));
        let text = std::fs::read_to_string(&bundle).unwrap();
        // esbuild marks where each module's code begins: the entry script's comes last.
        let entry = format!("// realcode/{lib}_run.js");
        let entry_line = 1 + text.lines().position(|l| l == entry).unwrap() as i64;
        let dir = tempfile::tempdir().unwrap();
        let invoke = format!("run({ours_rounds})");
        let http: &[&str] = if engine == "sm" { &["-S", "http"] } else { &[] };
        let flags = [http, &["--invoke", &invoke]].concat();
        let (out, ours) = record_ok(dir.path(), &flags, &component, &[]);
        let printed = stdout(&out);
        let node_dir = dir.path().join("node");
        let node = Command::new("node")
            .args(["--cpu-prof", "--cpu-prof-interval", "250", "--cpu-prof-dir"])
            .arg(&node_dir)
            .arg(fixture("interpreters/realcode/node_run.mjs"))
            .arg(&bundle)
            .arg(node_rounds)
            .output()
            .unwrap();
        assert!(node.status.success(), "{}", stderr(&node));
        // The same result at any number of rounds but its first field... the output's hash
        // is of the last round's, the same in both.
        let hash = |s: &str| {
            s.trim()
                .trim_matches('"')
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(
            hash(&printed),
            hash(&stdout(&node)),
            "{lib} {engine}: {printed}"
        );
        let cpuprofile = std::fs::read_dir(&node_dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let converted = dir.path().join("node.pb.gz");
        let out = wasmspy()
            .args(["convert", "-o"])
            .arg(&converted)
            .arg(cpuprofile.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let name = format!("{lib}.bundle.js");
        let ours = bundle_shares(&ours, &name, entry_line);
        let node = bundle_shares(&Decoded::load(&converted), &name, entry_line);
        let share = |v: i64, of: &BundleShares| v as f64 / of.total as f64;
        let mut missing = Vec::new();
        for ((function, line), (_, total)) in &node.functions {
            // V8 names class field initializers itself (`<instance_members_initializer>`),
            // and module code has no name; QuickJS's traces write both `<anonymous>`.
            if share(*total, &node) < 0.02 || function.is_empty() || function.starts_with('<') {
                continue;
            }
            // A class's implicit constructor starts where V8 puts it, the `class` line, in
            // Node's; where QuickJS does, the class's last, in ours.
            let implicit = text.lines().nth(*line as usize - 1).is_some_and(|l| {
                l.starts_with(&format!("class {function} "))
                    || l.starts_with(&format!("var {function} = class "))
            }) && ours
                .functions
                .keys()
                .any(|(f, l)| f == function && l > line);
            if !implicit && !ours.functions.contains_key(&(function.clone(), *line)) {
                missing.push(format!("{function}:{line} ({:.3})", share(*total, &node)));
            }
        }
        let top = |s: &BundleShares| {
            let mut v: Vec<_> = s.functions.iter().map(|(k, v)| (v.0, k.clone())).collect();
            v.sort_unstable_by_key(|e| std::cmp::Reverse(e.0));
            v.truncate(12);
            v.into_iter()
                .map(|(v, (f, l))| format!("{f}:{l} {:.3}", share(v, s)))
                .collect::<Vec<_>>()
        };
        let what = format!(
            "{lib} {engine}: ours {:?}, spread {}; Node's {:?}, spread {}",
            top(&ours),
            ours.spread(),
            top(&node),
            node.spread()
        );
        println!("{what}");
        assert_eq!(missing, Vec::<String>::new(), "{what}");
        assert!(
            share(ours.in_library, &ours) >= 0.9,
            "{what}: {}",
            share(ours.in_library, &ours)
        );
        assert!(ours.spread() * 3 >= node.spread(), "{what}");
    }
}

/// A component whose runtime wasmspy probes is compiled once into wasmspy's own entries of the
/// compile cache (componentize-qjs's QuickJS, probed inside a nested component: the probed
/// bytes move its modules), and started from them after: the same JavaScript frames, lines
/// and build ids as the run that compiled it. An entry whose compiled file is damaged is
/// compiled again and written whole.
#[test]
fn a_probed_component_starts_from_wasmspys_cache_as_compiled() {
    let Some(qjs) = built_component("timed-qjs-sync.wasm") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (cache, cache_config) = common::own_cache::own_cache(dir.path());
    let flags = [
        "-C",
        &cache_config,
        "--clock",
        "wall",
        "--rate",
        "4000",
        "--invoke",
        "run(300)",
        "--verbose",
    ];
    // What the profile shows of the script: its functions at their lines, and the build ids.
    let shown = |run: &str| {
        let run_dir = dir.path().join(run);
        std::fs::create_dir(&run_dir).unwrap();
        let (out, p) = record_ok(&run_dir, &flags, &qjs, &[]);
        assert_eq!(
            stderr(&out).contains("(found in wasmspy's cache)"),
            run == "cached",
            "{run}: {}",
            stderr(&out)
        );
        let mut functions: Vec<String> =
            p.0.sample
                .iter()
                .flat_map(|s| p.sample_frames(s))
                .filter(|(name, file, _)| name.contains(" (timed.js:") && file == "/timed.js")
                .map(|(name, ..)| name)
                .collect();
        functions.sort();
        functions.dedup();
        // The probe's call, as the guest instantiates the component, looks the runtime up and
        // no more: the component is read before the guest runs, not on the guest's thread when
        // the probe needs it (a millisecond of wall time is four samples here). Read later, on
        // the pipeline's thread, the probe waited for it only on a loaded machine (27 of the
        // JavaScript test's 121 samples there; none here idle).
        let in_probe: i64 = p
            .stacks()
            .into_iter()
            .filter(|(names, _)| names[0] == "wasmspy-runtime-probe")
            .map(|(_, values)| values[p.value_index("samples")])
            .sum();
        assert!(in_probe < 4, "{run}: {in_probe} samples in the probe");
        let mut build_ids: Vec<String> =
            p.0.mapping
                .iter()
                .map(|m| p.str(m.build_id).to_string())
                .collect();
        build_ids.sort();
        (functions, build_ids)
    };
    let compiled = shown("compiling");
    assert_eq!(
        compiled.0,
        [
            "build (timed.js:11:1)",
            "fib (timed.js:4:1)",
            "run (timed.js:19:8)"
        ],
        "{compiled:?}"
    );
    // One entry: the compiled component, the probed bytes and the core modules' build ids
    // (beside the hash of the component's file, which a run keeps for a settled file).
    let entries: Vec<PathBuf> = std::fs::read_dir(cache.join("modules"))
        .unwrap()
        .flatten()
        .filter(|d| d.file_name().to_string_lossy().starts_with("wasmspy-"))
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|f| f.path())
        .filter(|p| !p.to_string_lossy().ends_with("-file"))
        .collect();
    assert_eq!(entries.len(), 3, "{entries:?}");
    let artifact = entries
        .iter()
        .find(|p| {
            let p = p.to_string_lossy();
            !p.ends_with("-wasm") && !p.ends_with("-ids")
        })
        .unwrap();
    let size = std::fs::metadata(artifact).unwrap().len();
    assert_eq!(shown("cached"), compiled);
    std::fs::write(artifact, b"\x7fELF damaged").unwrap();
    assert_eq!(shown("damaged"), compiled);
    assert_eq!(std::fs::metadata(artifact).unwrap().len(), size);
}
