//! `record --target pulley64`: the guest on Wasmtime's Pulley interpreter, as `wasmtime run
//! --target pulley64` runs it, profiled with its stacks, names and source lines.

mod common;

use std::collections::{HashMap, HashSet};

use common::*;
use wasmspy::internals::resolve::pulley_ops::FunctionOps;

/// `tests/fixtures/c/cprog.c` spends 80 % of its loop work in `hot_function` (4 × the work of
/// `cold_function`): under Pulley the program prints what it prints natively, and the profile
/// has that split, with `run_spin` (at the line of its call) above `hot_function`, down to
/// `_start`: with the signal sampler (the default), and with the epoch sampler, whose samples
/// land at the loops' headers, where the time is (a loop header has no line of its own,
/// compiled or interpreted).
fn profiles_cprogs_split(sampler: &str) {
    let dir = tempfile::tempdir().unwrap();
    let module = fixture("c/cprog.wasm");
    let (native, _) = record(dir.path(), &[], &module, &["spin", "20"]);
    let (out, path) = record(
        dir.path(),
        &["--target", "pulley64", "-v", "--sampler", sampler],
        &module,
        &["spin", "20"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), stdout(&native));
    let sampler_line = format!("{sampler} sampler");
    assert!(stderr(&out).contains(&sampler_line), "{}", stderr(&out));
    let p = Decoded::load(&path);
    let (hot, cold) = (
        p.self_share("cpu", "hot_function"),
        p.self_share("cpu", "cold_function"),
    );
    let share = hot / (hot + cold);
    assert!(
        (share - 0.8).abs() <= 0.05,
        "hot_function {share:.3} of the two"
    );
    assert!(
        hot + cold > 0.8,
        "the loops have {:.3} of the CPU",
        hot + cold
    );
    let cpu = p.value_index("cpu");
    let mut in_hot = 0;
    for s in &p.0.sample {
        let frames: Vec<(String, String, i64, bool)> = s
            .location_id
            .iter()
            .flat_map(|&l| p.source_frames(l))
            .collect();
        if frames[0].0 != "hot_function" {
            continue;
        }
        in_hot += s.value[cpu];
        assert!(frames[0].1.ends_with("cprog.c"), "{frames:?}");
        assert_eq!(
            (&frames[1].0[..], frames[1].2),
            ("run_spin", 41),
            "{frames:?}"
        );
        assert!(frames.iter().any(|f| f.0 == "_start"), "{frames:?}");
    }
    assert!(in_hot > 0);
}

#[test]
fn pulley_runs_the_guest_and_the_signal_sampler_profiles_it() {
    profiles_cprogs_split("signal");
}

#[test]
fn pulley_runs_the_guest_and_the_epoch_sampler_profiles_it() {
    profiles_cprogs_split("epoch");
}

/// `split.c` times itself in a loop-free function and in a loop: under Pulley the signal
/// sampler agrees with it within 5 points, where the epoch sampler, which samples only where
/// the bytecode checks the epoch, gives the loop-free function nothing.
#[test]
fn loop_free_code_is_sampled_on_pulley() {
    let pulley = |sampler| split_shares(&["--target", "pulley64", "--sampler", sampler], "600");
    let (own, signal, _) = pulley("signal");
    eprintln!("straight_line: program {own:.4}, signal sampler {signal:.4}");
    assert!(
        (signal - own).abs() <= 0.05,
        "program {own:.4} vs signal {signal:.4}"
    );
    let (own, epoch, _) = pulley("epoch");
    eprintln!("straight_line: program {own:.4}, epoch sampler {epoch:.4}");
    assert!(
        epoch < 0.05 && own > 0.2,
        "program {own:.4} vs epoch {epoch:.4}"
    );
}

/// A host call from bytecode is attributed to the import called, under the guest's stack.
#[test]
fn host_calls_from_pulley_are_named_under_the_guest_stack() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(
        dir.path(),
        &["--target", "pulley64", "--rate", "2000"],
        &fixture("c/cprog.wasm"),
        &["write", "300000"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = Decoded::load(&path);
    let fd_write: i64 = p
        .stacks()
        .iter()
        .filter(|(names, _)| names[0] == "wasi_snapshot_preview1::fd_write")
        .inspect(|(names, _)| {
            assert!(names.iter().any(|n| n == "write_lines"), "{names:?}");
            assert!(names.iter().any(|n| n == "_start"), "{names:?}");
        })
        .map(|(_, v)| v[0])
        .sum();
    let share = fd_write as f64 / p.total("samples") as f64;
    eprintln!("fd_write: {share:.3} of the samples");
    assert!(share > 0.05, "fd_write {share:.3} of the samples");
}

/// The opcodes of `cprog.c`'s `hot_function` as Pulley compiles it: each instruction's
/// (previous, own, next) opcode.
fn hot_function_instructions() -> HashSet<(Option<String>, String, Option<String>)> {
    let mut config = wasmtime::Config::new();
    config.target("pulley64").unwrap();
    let engine = wasmtime::Engine::new(&config).unwrap();
    let module = wasmtime::Module::from_file(&engine, fixture("c/cprog.wasm")).unwrap();
    let f = module
        .functions()
        .find(|f| f.name.as_deref() == Some("hot_function"))
        .unwrap();
    let code = &module.text()[f.offset..f.offset + f.len];
    let ops = FunctionOps::decode(code, &mut HashMap::new());
    (0..code.len() as u32)
        .filter_map(|offset| ops.at(offset))
        .map(|at| {
            let name = |op: Option<std::sync::Arc<str>>| op.map(|o| o.to_string());
            (name(at.prev), at.op.to_string(), name(at.next))
        })
        .collect()
}

/// Each sample of Pulley names the opcode it ran, with those before and after it: in
/// `hot_function`, every sample's three are an instruction of its bytecode with its neighbours,
/// its loop's arithmetic has most of its time, and `report --opcodes` ranks opcodes and pairs.
#[test]
fn samples_name_the_opcodes_they_ran() {
    let dir = tempfile::tempdir().unwrap();
    let (out, path) = record(
        dir.path(),
        &["--target", "pulley64"],
        &fixture("c/cprog.wasm"),
        &["spin", "10"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = Decoded::load(&path);
    let instructions = hot_function_instructions();
    let cpu = p.value_index("cpu");
    let label = |s: &wasmspy::export::pprof_proto::Sample, key: &str| {
        s.label
            .iter()
            .find(|l| p.str(l.key) == key)
            .map(|l| p.str(l.str).to_string())
    };
    let (mut in_hot, mut labeled, mut arithmetic) = (0, 0, 0);
    for s in &p.0.sample {
        let leaf = p.source_frames(s.location_id[0]);
        if leaf[0].0 != "hot_function" {
            continue;
        }
        in_hot += s.value[cpu];
        let Some(op) = label(s, "pulley_op") else {
            continue;
        };
        labeled += s.value[cpu];
        let triple = (label(s, "pulley_prev"), op.clone(), label(s, "pulley_next"));
        assert!(
            instructions.contains(&triple),
            "{triple:?} is no instruction of hot_function: {instructions:?}"
        );
        if ["xmadd32", "xshr32_u_u6", "xbxor32"].contains(&op.as_str()) {
            arithmetic += s.value[cpu];
        }
    }
    eprintln!(
        "hot_function: {in_hot} ns, {labeled} with an opcode, {arithmetic} in its arithmetic"
    );
    assert!(in_hot > 0);
    assert_eq!(
        labeled, in_hot,
        "every sample in the function has its opcode"
    );
    assert!(
        arithmetic as f64 > 0.3 * in_hot as f64,
        "the loop's arithmetic: {arithmetic} of {in_hot}"
    );

    let report = wasmspy()
        .args(["report", "--opcodes"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
    let text = stdout(&report);
    let (ops, pairs) = text.split_once("Adjacent opcode pairs").unwrap();
    for op in ["xmadd32", "xshr32_u_u6", "xbxor32"] {
        assert!(ops.contains(&format!("  {op}\n")), "{text}");
    }
    assert!(
        pairs.lines().any(|l| l.ends_with("  xshr32_u_u6 xbxor32")),
        "{text}"
    );
}

/// `report --opcodes` of a profile without opcodes says why in one line.
#[test]
fn opcodes_need_a_profile_of_pulley() {
    let dir = tempfile::tempdir().unwrap();
    let (_, path) = record(dir.path(), &[], &fixture("c/cprog.wasm"), &["spin", "1"]);
    let out = wasmspy()
        .args(["report", "--opcodes"])
        .arg(&path)
        .output()
        .unwrap();
    assert_one_line_error(&out, "has no Pulley opcodes", &"report --opcodes");
}

/// perf's files describe compiled code: under Pulley the CPU runs the interpreter, so they are
/// refused in one line rather than written to name bytecode perf never samples.
#[test]
fn perf_files_are_refused_for_pulley() {
    for flag in ["--jitdump", "--perfmap"] {
        let dir = tempfile::tempdir().unwrap();
        let (out, _) = record(
            dir.path(),
            &["--target", "pulley64", flag],
            &fixture("c/cprog.wasm"),
            &["spin", "1"],
        );
        assert_one_line_error(&out, "under Pulley perf sees only the interpreter", &flag);
    }
}
