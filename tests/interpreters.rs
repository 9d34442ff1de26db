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
use common::timed_py::{assert_split_as_timed, Depth, Run};
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

#[test]
fn a_javascript_component_shows_spidermonkey() {
    let Some(js) = built_component("fib-js.wasm") else {
        return;
    };
    // StarlingMonkey imports `wasi:http` for `fetch`.
    let (p, _) = recorded(&js, &[], &["-S", "http"], &[], "fib(27) = 196418\n");
    let interpret = "js::Interpret(JSContext*, js::RunState&)";
    let share = inclusive_share(&p, interpret);
    assert!(
        share > 0.5,
        "{interpret}: {share:.2}: {:?}",
        p.top_self("samples")
    );
    let top = p.top_self("samples");
    assert!(
        top.iter().take(5).any(|(n, _)| n.starts_with("js::")),
        "the engine's own functions lead: {top:?}"
    );
    let mappings: Vec<&str> = p.0.mapping.iter().map(|m| p.str(m.filename)).collect();
    assert!(
        mappings.contains(&"fib-js.wasm/starling-raw.wasm"),
        "{mappings:?}"
    );
}

/// componentize-qjs's default output uses the component model's async ABI (`task.return`,
/// `task.cancel`): it runs as under `wasmtime run`, `--invoke` printing the WAVE result, and
/// its QuickJS loop is sampled, on the fiber Wasmtime's concurrent call runs it on, under the
/// export's lifted function.
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
    let mappings: Vec<&str> = p.0.mapping.iter().map(|m| p.str(m.filename)).collect();
    assert!(
        mappings.iter().any(|m| m.starts_with("greet-qjs.wasm/")),
        "{mappings:?}"
    );
}

/// componentize-py's CPython 3.14 has no DWARF, and its data (where `_Py_DebugOffsets` is) and
/// its code are in different modules of the component: its Python frames show all the same,
/// as the script's (`fib (fib.py)` under `Run.run`), read from the instance inside the
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
        let fib = "fib (fib.py)";
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
            let run = names.iter().position(|n| n == "Run.run (fib.py)");
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
        let mappings: Vec<&str> = p.0.mapping.iter().map(|m| p.str(m.filename)).collect();
        assert!(
            mappings.contains(&"fib-py.wasm/libpython3.14.so"),
            "{what}: {mappings:?}"
        );
    }
}

/// `tests/fixtures/python/timed.py`'s `main`, run from a componentize-py component's
/// `wasi:cli/run` (`timed_run.py`): each loop's share of the CPU within 5 points of the share
/// the script measured, each of their samples the loop → `main` → `Run.run`, both samplers.
#[test]
fn a_python_component_splits_as_the_script_timed_itself() {
    let Some(py) = built_component("timed-py.wasm") else {
        return;
    };
    let run = Run {
        file: "/1/timed.py",
        caller: ("Run.run (timed_run.py)", "/0/timed_run.py", 11),
    };
    for sampler in ["signal", "epoch"] {
        let dir = tempfile::tempdir().unwrap();
        let (out, path) = record(dir.path(), &["--sampler", sampler], &py, &["60"]);
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
    assert_allocated_by_line("componentize-py", &heap, 20, "Run.run (allocs_run.py)");
}
