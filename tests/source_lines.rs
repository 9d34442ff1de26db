//! Source-level profiles: every sampled address mapped through the module's DWARF to function,
//! file and line, with each inlined call as a line of the same pprof location.

mod common;

use common::*;

/// A source frame as the tests expect it: function, file, line.
type Expected<'a> = (&'a str, &'a str, i64);

const C_FILE: &str = "tests/fixtures/c/inline.c";

/// Records `module args`, checks that the samples whose leaf is the hot line show exactly
/// `hot` (innermost first; all but the last inlined) called from `caller`, and that they hold
/// at least `min_share` of the CPU time. Returns the decoded profile.
fn check_hot_stack(
    module: &str,
    args: &[&str],
    hot: &[Expected<'_>],
    caller: Expected<'_>,
    min_share: f64,
) -> Decoded {
    let dir = tempfile::tempdir().unwrap();
    let (output, out) = record(dir.path(), &[], &fixture(module), args);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!stderr(&output).contains("warning"), "{}", stderr(&output));
    let p = Decoded::load(&out);
    let expected: Vec<(String, String, i64, bool)> = hot
        .iter()
        .enumerate()
        .map(|(i, &(f, file, line))| (f.into(), file.into(), line, i + 1 < hot.len()))
        .collect();
    let is_hot = |loc: u64| {
        let frames = p.source_frames(loc);
        frames[0].0 == hot[0].0 && frames[0].2 == hot[0].2
    };
    let mut hot_samples = 0;
    for sample in &p.0.sample {
        if !is_hot(sample.location_id[0]) {
            continue;
        }
        hot_samples += 1;
        assert_eq!(p.source_frames(sample.location_id[0]), expected);
        let parent = p.source_frames(sample.location_id[1]);
        let (f, file, line, inlined) = parent.last().unwrap().clone();
        assert_eq!((f.as_str(), file.as_str(), line), caller);
        assert!(!inlined);
    }
    assert!(hot_samples > 0, "no sample of {:?}", hot[0]);
    let share = p.leaf_value("cpu", is_hot) as f64 / p.total("cpu") as f64;
    assert!(
        share >= min_share,
        "hot line has {share:.2} of the CPU time"
    );
    let mapping = &p.0.mapping[0];
    assert!(
        mapping.has_functions
            && mapping.has_filenames
            && mapping.has_line_numbers
            && mapping.has_inline_frames
    );
    p
}

/// The line each named function is declared on (its pprof `start_line`).
fn start_line(p: &Decoded, name: &str) -> i64 {
    p.sampled_functions()
        .into_iter()
        .find(|f| p.str(f.name) == name)
        .unwrap_or_else(|| panic!("no function {name}"))
        .start_line
}

fn check_c_inline(module: &str) {
    let p = check_hot_stack(
        module,
        &["100"],
        &[
            ("mix", C_FILE, 8),
            ("mix_twice", C_FILE, 14),
            ("hot_loop", C_FILE, 23),
        ],
        // The symbol of `int main(int, char **)` is `__main_argc_argv`: the source name wins.
        ("main", C_FILE, 32),
        // How the loop's time splits between the hot line and the volatile store after it
        // (line 14) is the CPU's doing: the hot line had 20 % and more on earlier machines,
        // 12-18 % on this one (the same split with the commits before this session's).
        0.05,
    );
    assert_eq!(start_line(&p, "mix"), 7);
    assert_eq!(start_line(&p, "mix_twice"), 11);
    assert_eq!(start_line(&p, "hot_loop"), 20);
    // wasi-libc's DWARF names `_start`'s file in parts: `./build`, `./libc-bottom-half/crt`,
    // `crt1-command.c`. Joined, the path is normalised, the one every view shows.
    let start = p
        .sampled_functions()
        .into_iter()
        .find(|f| p.str(f.name) == "_start");
    assert_eq!(
        start.map(|f| p.str(f.filename)),
        Some("build/libc-bottom-half/crt/crt1-command.c")
    );
}

#[test]
fn c_always_inline_helper_in_a_lexical_block_dwarf4() {
    check_c_inline("c/inline.wasm");
}

#[test]
fn c_always_inline_helper_in_a_lexical_block_dwarf5() {
    check_c_inline("c/inline-dwarf5.wasm");
}

#[test]
fn cpp_template_member_inlined_with_demangled_scopes() {
    let file = "tests/fixtures/cpp/inline.cpp";
    let p = check_hot_stack(
        "cpp/inline.wasm",
        &["60"],
        &[
            (
                "shapes::Accumulator<unsigned long long>::add(unsigned long long)",
                file,
                11,
            ),
            ("shapes::sum_series(unsigned int, unsigned int)", file, 18),
        ],
        ("main", file, 29),
        0.5,
    );
    let add = p
        .sampled_functions()
        .into_iter()
        .find(|f| p.str(f.system_name) == "_ZN6shapes11AccumulatorIyE3addEy")
        .expect("the mangled name is the system name");
    assert_eq!(add.start_line, 10);
}

/// The Rust fixture's hot closure and what it sits in, innermost first: in the release build
/// every frame but `iter::main` is inlined into `iter::checksum`; in the debug build each is a
/// call of its own.
fn iter_closure_frames() -> Vec<(&'static str, String, i64)> {
    let file = "tests/fixtures/rust/iter.rs".to_string();
    let core = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/core/src";
    let map_rs = format!("{core}/iter/adapters/map.rs");
    let macros_rs = format!("{core}/slice/iter/macros.rs");
    vec![
        ("iter::checksum::{{closure}}", file.clone(), 9),
        (
            "core::iter::adapters::map::map_fold::{{closure}}",
            map_rs.clone(),
            88,
        ),
        (
            "<core::slice::iter::Iter<T> as core::iter::traits::iterator::Iterator>::fold",
            macros_rs,
            279,
        ),
        (
            "<core::iter::adapters::map::Map<I,F> as core::iter::traits::iterator::Iterator>::fold",
            map_rs,
            128,
        ),
        ("iter::checksum", file.clone(), 10),
        ("iter::main", file, 21),
    ]
}

#[test]
fn rust_inlined_iterator_closure() {
    let frames = iter_closure_frames();
    let borrowed: Vec<Expected<'_>> = frames
        .iter()
        .map(|(f, file, line)| (*f, file.as_str(), *line))
        .collect();
    let (caller, hot) = borrowed.split_last().unwrap();
    // 3000 rounds: 0.17 s, enough samples for the hot line's share (a third of the loop's
    // three lines) to stand clear of the threshold.
    let p = check_hot_stack("rust/iter.wasm", &["3000"], hot, *caller, 0.2);
    assert_eq!(start_line(&p, "iter::checksum"), 7);
    // Two closures have that name: `map`'s, the hot one, and `fold`'s (line 10), which longer
    // runs sample too.
    assert!(p
        .0
        .function
        .iter()
        .any(|f| p.str(f.name) == "iter::checksum::{{closure}}" && f.start_line == 9));
}

#[test]
fn rust_debug_build_calls_what_release_inlines() {
    let expected: Vec<(String, String, i64, bool)> = iter_closure_frames()
        .into_iter()
        .map(|(f, file, line)| (f.to_string(), file, line, false))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let (output, out) = record(dir.path(), &[], &fixture("rust/iter-debug.wasm"), &["200"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let p = Decoded::load(&out);
    let mut closure_samples = 0;
    for sample in &p.0.sample {
        let stack: Vec<_> = sample
            .location_id
            .iter()
            .flat_map(|&l| p.source_frames(l))
            .collect();
        if stack[0].0 != expected[0].0 || stack[0].2 != 9 {
            continue;
        }
        closure_samples += sample.value[p.value_index("samples")];
        // Each call is a location of its own: nothing is inlined.
        assert_eq!(stack[..expected.len()], expected[..]);
    }
    assert!(
        closure_samples > 20,
        "{closure_samples} samples of the closure"
    );
}

/// Runs the C fixture with `extra` flags, or on `module` bytes written to a file, and returns
/// wasmspy's stderr and the profile.
fn record_bytes(wasm: &[u8], extra: &[&str]) -> (String, Decoded) {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("inline.wasm");
    std::fs::write(&module, wasm).unwrap();
    let (output, out) = record(dir.path(), extra, &module, &["30"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).starts_with("inline done: 30 rounds"));
    (stderr(&output), Decoded::load(&out))
}

/// The profile names functions from the `name` section alone: no files, lines or inlining.
fn assert_names_only(p: &Decoded) {
    assert!(p.0.location.iter().all(|l| l.line.len() == 1));
    assert!(p.sampled_functions().iter().all(|f| f.filename == 0));
    assert!(p.0.location.iter().all(|l| l.line[0].line == 0));
    let top = p.top_self("cpu");
    assert_eq!(top[0].0, "hot_loop", "{top:?}");
}

fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| l.starts_with("wasmspy: warning:"))
        .collect()
}

/// The module's bytes with `section` renamed (same length), or one byte of its contents
/// (at `at`) replaced.
fn patched(name: &str, section: &str, rename: Option<&str>, at: Option<(usize, u8)>) -> Vec<u8> {
    let mut wasm = std::fs::read(fixture(name)).unwrap();
    let found = wasmparser::Parser::new(0)
        .parse_all(&wasm.clone())
        .find_map(|p| match p.unwrap() {
            wasmparser::Payload::CustomSection(r) if r.name() == section => {
                Some((r.data_offset(), r.data().len()))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no {section}"));
    let (data, _) = found;
    if let Some(new_name) = rename {
        assert_eq!(new_name.len(), section.len());
        let name_at = data - section.len();
        assert_eq!(&wasm[name_at..data], section.as_bytes());
        wasm[name_at..data].copy_from_slice(new_name.as_bytes());
    }
    if let Some((offset, byte)) = at {
        wasm[data + offset] = byte;
    }
    wasm
}

#[test]
fn no_dwarf_names_functions_only() {
    let wasm = std::fs::read(fixture("c/inline.wasm")).unwrap();
    let (err, p) = record_bytes(&wasm, &["--no-dwarf"]);
    assert!(warnings(&err).is_empty(), "{err}");
    assert_names_only(&p);
}

#[test]
fn stripped_dwarf_warns_once_and_names_functions() {
    // Renamed, `.debug_info` is an unknown custom section: as if stripped.
    let wasm = patched("c/inline.wasm", ".debug_info", Some(".xebug_info"), None);
    let (err, p) = record_bytes(&wasm, &[]);
    let w = warnings(&err);
    assert_eq!(w.len(), 1, "{err}");
    assert!(w[0].contains("no DWARF debug info"), "{err}");
    // Its `producers` section says clang: the advice is clang's, and a map would serve too.
    assert!(
        w[0].contains("(built by clang: build with -g or -gline-tables-only; or give wasmspy its source map: --source-map FILE"),
        "{err}"
    );
    assert_names_only(&p);
}

#[test]
fn unreadable_dwarf_warns_once_and_names_functions() {
    // DWARF version 99 in the first unit's header (after its 4-byte length).
    let wasm = patched("c/inline.wasm", ".debug_info", None, Some((4, 99)));
    let (err, p) = record_bytes(&wasm, &[]);
    let w = warnings(&err);
    assert_eq!(w.len(), 1, "{err}");
    assert!(w[0].contains("cannot read its DWARF"), "{err}");
    assert_names_only(&p);
}

#[test]
fn a_damaged_unit_warns_once_and_the_others_keep_their_lines() {
    // The first unit's line program (libc's `_start`) claims DWARF version 99.
    let mut wasm = std::fs::read(fixture("c/inline.wasm")).unwrap();
    let first_line_program = wasmparser::Parser::new(0)
        .parse_all(&wasm.clone())
        .find_map(|p| match p.unwrap() {
            wasmparser::Payload::CustomSection(r) if r.name() == ".debug_line" => {
                Some(r.data_offset())
            }
            _ => None,
        })
        .unwrap();
    wasm[first_line_program + 4] = 99;
    let (err, p) = record_bytes(&wasm, &[]);
    let w = warnings(&err);
    assert_eq!(w.len(), 1, "{err}");
    assert!(
        w[0].contains("1 of its 40 DWARF compilation units are unreadable"),
        "{err}"
    );
    let mut saw_mix = false;
    for sample in &p.0.sample {
        for &loc in &sample.location_id {
            let frames = p.source_frames(loc);
            match frames[0].0.as_str() {
                "mix" => {
                    saw_mix = true;
                    assert_eq!((frames[0].1.as_str(), frames[0].2), (C_FILE, 8));
                }
                "_start" => assert_eq!(frames, [("_start".into(), String::new(), 0, false)]),
                _ => {}
            }
        }
    }
    assert!(saw_mix);
}
