//! StarlingMonkey components (ComponentizeJS 0.23: SpiderMonkey 147 compiled to Wasm): the
//! profile shows the script's JavaScript frames, named as SpiderMonkey's stack traces name
//! them, at their lines. The components are built from `tests/fixtures/interpreters/` by its
//! `build.sh`, which `scripts/test.sh` runs (they are 14–21 MB: built, not committed).

mod common;

use std::path::Path;

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
/// (PBL): its frames are read from the JIT activation. It runs `fib` faster and `build` slower
/// than the others, hence the arguments (build.sh's) that even the split out.
#[test]
fn the_weval_engine_splits_as_the_script_timed_itself() {
    if let Some(component) = built_component("timed-sm-weval.wasm") {
        splits_as_the_script_timed_itself(&component, &["2000", "4200"]);
    }
}
