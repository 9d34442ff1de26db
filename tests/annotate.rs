//! `wasmspy annotate`: a profile's functions by Wasm instruction, from a program whose hot
//! instruction is known in advance (a division), a component's, and the refusals.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::annotated::{division_hottest, native_adds_up, parse, Listed};
use common::*;

/// `tests/fixtures/c/divide.c`: `spin`'s loop divides by a divisor read at run time, and
/// calls `mix` every 256 rounds.
const DIVIDE: &str = "c/divide.wasm";

fn annotate(args: &[&std::ffi::OsStr]) -> Output {
    wasmspy().arg("annotate").args(args).output().unwrap()
}

/// `wasmspy annotate PROFILE FUNCTION --wasm MODULE`, which must list that one function: the
/// output, and the function's heading and rows.
fn annotate_one(profile: &Path, function: &str, module: &Path) -> (String, String, Vec<Listed>) {
    let out = annotate(&[
        profile.as_os_str(),
        function.as_ref(),
        "--wasm".as_ref(),
        module.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let mut functions = parse(&text);
    assert_eq!(functions.len(), 1, "{text}");
    let (heading, rows) = functions.remove(0);
    (text, heading, rows)
}

/// Records `divide.wasm` at 1 kHz: about a second of CPU.
fn record_divide(dir: &Path) -> std::path::PathBuf {
    let (out, path) = record(
        dir,
        &["--rate", "1000"],
        &fixture(DIVIDE),
        &["7", "100000000"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    path
}

/// Records `divide.wasm` for `rounds` rounds at 1 kHz, with `extra` flags, and annotates
/// `spin` with `--native`: the profile's directory, the profile, the listing and its rows.
fn native_spin(extra: &[&str], rounds: &str) -> (tempfile::TempDir, PathBuf, String, Vec<Listed>) {
    let dir = tempfile::tempdir().unwrap();
    let flags: Vec<&str> = extra.iter().copied().chain(["--rate", "1000"]).collect();
    let (out, profile) = record(dir.path(), &flags, &fixture(DIVIDE), &["7", rounds]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let module = fixture(DIVIDE);
    let out = annotate(&[
        profile.as_os_str(),
        "spin".as_ref(),
        "--native".as_ref(),
        "--wasm".as_ref(),
        module.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let (_, rows) = parse(&text).remove(0);
    (dir, profile, text, rows)
}

/// `annotate --native -o DIR/annotate.html` of a profile of `divide.wasm`: the page.
fn native_page(dir: &Path, profile: &Path) -> String {
    let page = dir.join("annotate.html");
    let module = fixture(DIVIDE);
    let out = annotate(&[
        profile.as_os_str(),
        "--native".as_ref(),
        "--wasm".as_ref(),
        module.as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    std::fs::read_to_string(&page).unwrap()
}

#[test]
fn the_division_holds_the_most_of_its_functions_samples_and_the_call_its_callees() {
    let dir = tempfile::tempdir().unwrap();
    let profile = record_divide(dir.path());
    let module = fixture(DIVIDE);
    let (text, heading, rows) = annotate_one(&profile, "spin", &module);
    assert!(heading.starts_with("spin in divide.wasm"), "{heading}");
    let (code, division) = division_hottest(&rows, &text);
    // The division is in the hottest basic block.
    assert_eq!(code[division].hot, Some(1), "{text}");
    // Its source line is shown above it.
    let line_of_division = rows
        .iter()
        .take_while(|r| r.offset != code[division].offset)
        .filter(|r| r.text.starts_with(";; tests/fixtures/c/divide.c:"))
        .last()
        .unwrap_or_else(|| panic!("no source line before the division: {text}"));
    assert!(
        line_of_division
            .text
            .starts_with(";; tests/fixtures/c/divide.c:23"),
        "{}",
        line_of_division.text
    );

    // The call of `mix` has, as its cumulative value, all of `mix`'s: every sample in `mix`
    // went through that one call. Both are of the same samples, so equal up to the printed
    // rounding (two decimals of the unit shown); but for the samples taken at the call
    // instruction itself, about to run (its flat value: one sample in some runs).
    let call = code
        .iter()
        .find(|r| r.text == "call $mix")
        .unwrap_or_else(|| panic!("no call of mix in spin: {text}"));
    let p = Decoded::load(&profile);
    let mix: f64 = p
        .stacks()
        .iter()
        .filter(|(names, _)| names.iter().any(|n| n == "mix"))
        .map(|(_, values)| values[p.value_index("cpu")] as f64)
        .sum();
    assert!(mix > 0.0, "no samples in mix");
    assert!(
        (call.cum - call.flat - mix).abs() <= 0.01e6 + mix * 1e-4,
        "call $mix: {} ns cumulative, {} flat, mix: {mix} ns\n{text}",
        call.cum,
        call.flat
    );
    // Of 1 ms samples, a few: a call's own instruction is short.
    assert!(
        call.flat <= 0.02 * mix,
        "the call itself holds {}: {text}",
        call.flat
    );
}

#[test]
fn the_hottest_functions_are_annotated_when_none_is_named_from_the_module_beside_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let profile = record_divide(dir.path());
    // No --wasm: the profile names `divide.wasm`, found beside it.
    std::fs::copy(fixture(DIVIDE), dir.path().join("divide.wasm")).unwrap();
    let out = annotate(&[profile.as_os_str(), "--top".as_ref(), "2".as_ref()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let headings: Vec<String> = parse(&text).into_iter().map(|(h, _)| h).collect();
    assert_eq!(headings.len(), 2, "{text}");
    assert!(
        headings[0].starts_with("spin in divide.wasm"),
        "{headings:?}"
    );
    assert!(
        headings[1].starts_with("mix in divide.wasm"),
        "{headings:?}"
    );
}

#[test]
fn a_components_function_is_annotated_from_its_core_module() {
    let dir = tempfile::tempdir().unwrap();
    let component = fixture("rust/component.wasm");
    let (out, profile) = record(dir.path(), &["--rate", "1000"], &component, &["hot", "8"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (text, heading, rows) = annotate_one(&profile, "component::engine::hot_path", &component);
    assert!(
        heading.starts_with("component::engine::hot_path in component.wasm/component.wasm"),
        "{heading}"
    );
    // The loop's line, from the core module's DWARF, and its multiplication in the hottest
    // block.
    assert!(
        rows.iter()
            .any(|r| r.text.starts_with(";; tests/fixtures/rust/component.rs:21")),
        "{text}"
    );
    assert!(
        rows.iter().any(|r| r.hot == Some(1) && r.text == "i64.mul"),
        "{text}"
    );
    // The core module's machine code, with the function's samples on its instructions.
    let out = annotate(&[
        profile.as_os_str(),
        "component::engine::hot_path".as_ref(),
        "--native".as_ref(),
        "--wasm".as_ref(),
        component.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let (_, rows) = parse(&text).remove(0);
    let flat: f64 = rows.iter().map(|r| r.flat).sum();
    let natives: Vec<f64> = rows
        .iter()
        .flat_map(|r| r.native.iter().map(|n| n.0))
        .collect();
    // Each value printed to 0.01 ms at most.
    let rounding = 10_000.0 * (rows.len() + natives.len()) as f64;
    assert!(
        flat > 0.0 && (natives.iter().sum::<f64>() - flat).abs() <= rounding,
        "{text}"
    );
}

/// `-o annotate.html`: one page, opened in Chromium (tests/browser/check.js): `spin` in its
/// function list, its hottest row the division (or the instruction after it), drawn hot.
#[test]
fn the_html_page_shows_the_hot_row_highlighted_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let profile = record_divide(dir.path());
    let module = fixture(DIVIDE);
    let page = dir.path().join("annotate.html");
    let out = annotate(&[
        profile.as_os_str(),
        "--wasm".as_ref(),
        module.as_os_str(),
        "-o".as_ref(),
        page.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("tests/fixtures/c/divide.c:23"),
        "no source column"
    );
    let Some(seen) = browser_check("annotate", &page, "spin", &dir.path().join("annotate.png"))
    else {
        return;
    };
    let hottest = seen
        .split(" hottest=")
        .nth(1)
        .and_then(|rest| rest.split(" background=").next())
        .unwrap_or_else(|| panic!("{seen}"));
    assert!(
        ["i32.div_u", "i32.sub"].contains(&hottest.trim()),
        "the hottest row is `{hottest}`: {seen}"
    );
}

/// A memory profile annotates by bytes: each allocating call holds what its callee allocated
/// from there (`tests/fixtures/c/alloc.c`: 10 x 24 bytes, and a block grown to 4096 from 64).
#[test]
fn a_memory_profile_puts_the_bytes_on_the_allocating_calls() {
    let dir = tempfile::tempdir().unwrap();
    let module = fixture("c/alloc.wasm");
    let (out, heap) = record_every_allocation(dir.path(), &module, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for (function, call, bytes) in [
        ("make_small", "call $malloc", 10.0 * 24.0),
        (
            "grow",
            "call $realloc",
            (6..=12).map(|k| f64::from(1 << k)).sum(),
        ),
    ] {
        let out = annotate(&[
            heap.as_os_str(),
            function.as_ref(),
            "--sample-index".as_ref(),
            "alloc_space".as_ref(),
            "--wasm".as_ref(),
            module.as_os_str(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = stdout(&out);
        let (_, rows) = &parse(&text)[0];
        let row = rows
            .iter()
            .find(|r| r.text == call)
            .unwrap_or_else(|| panic!("no `{call}` in {function}: {text}"));
        // Printed to two decimals of the unit shown (kB for grow's).
        assert!(
            (row.cum - bytes).abs() <= 0.005 * 1024.0,
            "{function}'s `{call}`: {} bytes, not {bytes}:\n{text}",
            row.cum
        );
    }
    // Allocations are sampled by stack, not by the machine instruction.
    let args = [
        heap.as_os_str(),
        "--native".as_ref(),
        "--wasm".as_ref(),
        module.as_os_str(),
    ];
    assert_one_line_error(&annotate(&args), "has no code of its instructions", &args);
}

/// `--native` on a profile of Pulley: under each instruction, the opcodes of the bytecode it
/// became that its samples fell on, whose values add up to the instruction's; the division's
/// `xdiv32_u` under the division (Cranelift and Pulley both blame the instruction after a
/// long one: under it or the one after); and the page's code column.
#[test]
fn pulleys_opcodes_are_shown_under_the_instructions_they_were_compiled_from() {
    let (dir, profile, text, rows) = native_spin(&["--target", "pulley64"], "10000000");
    let code: Vec<&Listed> = rows.iter().filter(|r| r.offset.is_some()).collect();
    let (mut flat, mut on_ops) = (0.0, 0.0);
    for row in &code {
        let ops: f64 = row
            .native
            .iter()
            .filter(|(_, op)| !op.starts_with("pair: "))
            .map(|(v, _)| v)
            .sum();
        // Each value printed to 0.01 ms: the ops' sum may differ from the row's by as much.
        let rounding = 10_000.0 * (row.native.len() + 1) as f64;
        assert!(ops <= row.flat + rounding, "{}: {text}", row.text);
        flat += row.flat;
        on_ops += ops;
    }
    // A sample of Pulley's bytecode carries its opcode unless its PC was not told (none seen).
    assert!(
        on_ops >= 0.95 * flat,
        "{on_ops} of {flat} on opcodes: {text}"
    );
    let division = code.iter().position(|r| r.text == "i32.div_u").unwrap();
    let divides = |r: &Listed| r.native.iter().any(|(v, op)| op == "xdiv32_u" && *v > 0.0);
    assert!(
        divides(code[division]) || code.get(division + 1).is_some_and(|r| divides(r)),
        "no xdiv32_u under the division: {text}"
    );

    let html = native_page(dir.path(), &profile);
    assert!(html.contains("<th>code</th>"), "{html}");
    assert!(
        html.contains("<td class=\"native\">xdiv32_u</td>"),
        "{html}"
    );
}

/// `--native` on Cranelift's and Winch's code: under each instruction the machine instructions
/// it was compiled to, by address, whose values add up to the instruction's (every sample of
/// the signal sampler in Wasm code says where in the machine code it was); the machine `div`
/// under the division; the hottest machine instruction the `div` or the one after it (skid).
#[test]
fn the_machine_code_is_shown_under_the_instructions_it_was_compiled_from() {
    for compiler in ["cranelift", "winch"] {
        let compiler_flag = format!("compiler={compiler}");
        let (dir, profile, text, rows) = native_spin(&["-C", &compiler_flag], "30000000");
        let code: Vec<&Listed> = rows.iter().filter(|r| r.offset.is_some()).collect();
        native_adds_up(&code, &text);
        // (address, flat, text) of each machine instruction, and the Wasm instruction's.
        let mut machine: Vec<(u64, f64, &str, &str)> = Vec::new();
        for row in &code {
            for (flat, line) in &row.native {
                let (address, instruction) = line.trim().split_once(":  ").unwrap();
                let address = u64::from_str_radix(address, 16).unwrap();
                machine.push((address, *flat, instruction, &row.text));
            }
        }
        // x86_64's `div`, aarch64's `udiv`.
        let is_div = |i: &str| i.starts_with("div ") || i.starts_with("udiv ");
        assert!(
            machine
                .iter()
                .any(|&(_, _, i, wasm)| wasm == "i32.div_u" && is_div(i)),
            "{compiler}: no `div` under the division: {text}"
        );
        machine.sort_by_key(|&(address, ..)| address);
        let hottest = (0..machine.len())
            .max_by(|&a, &b| machine[a].1.total_cmp(&machine[b].1))
            .unwrap();
        assert!(
            is_div(machine[hottest].2) || hottest > 0 && is_div(machine[hottest - 1].2),
            "{compiler}: the hottest machine instruction is `{}`: {text}",
            machine[hottest].2
        );
        let html = native_page(dir.path(), &profile);
        let division = machine.iter().find(|m| is_div(m.2)).unwrap();
        assert!(
            html.contains(&format!(
                "<td class=\"native\">{:>5x}:  {}</td>",
                division.0, division.2
            )),
            "{compiler}: no row of `{}` in the page: {html}",
            division.2
        );
    }
}

#[test]
fn bad_input_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let profile = record_divide(dir.path());
    let module = fixture(DIVIDE);
    let other = fixture("c/cprog.wasm");
    let folded = dir.path().join("out.folded");
    let converted = wasmspy()
        .args(["convert".as_ref(), profile.as_os_str(), "-o".as_ref()])
        .arg(&folded)
        .output()
        .unwrap();
    assert!(converted.status.success(), "{}", stderr(&converted));
    // The epoch sampler's samples are Wasmtime's backtraces: no machine instruction.
    let epoch = tempfile::tempdir().unwrap();
    let (out, no_code) = record(
        epoch.path(),
        &["--sampler", "epoch"],
        &module,
        &["7", "1000000"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let cases: [(Vec<&std::ffi::OsStr>, &str); 5] = [
        (
            vec![profile.as_os_str(), "--wasm".as_ref(), other.as_os_str()],
            "is not a module this profile was taken of",
        ),
        (
            vec![folded.as_os_str()],
            "has no Wasm instruction addresses",
        ),
        (
            vec![
                profile.as_os_str(),
                "no_such_function".as_ref(),
                "--wasm".as_ref(),
                module.as_os_str(),
            ],
            "no function of the profile's modules is named `no_such_function`",
        ),
        (vec![profile.as_os_str()], "none of the modules"),
        (
            vec![
                no_code.as_os_str(),
                "--native".as_ref(),
                "--wasm".as_ref(),
                module.as_os_str(),
            ],
            "has no code of its instructions: --native shows the machine code",
        ),
    ];
    for (args, expect) in cases {
        let out = annotate(&args);
        assert_one_line_error(&out, expect, &args);
    }
}
