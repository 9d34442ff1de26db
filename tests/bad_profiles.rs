//! `report` and `convert` on files that are empty, cut, foreign or damaged: one line that says
//! what is wrong with the file, a non-zero exit, never a panic, and no output written.

mod common;

use std::path::Path;

use common::*;
use prost::Message;
use wasmspy::export::pprof_proto as proto;

/// A small valid pprof message: `main` with 5 samples.
fn valid() -> proto::Profile {
    proto::Profile {
        string_table: ["", "samples", "count", "main"].map(String::from).to_vec(),
        sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
        function: vec![proto::Function {
            id: 1,
            name: 3,
            ..Default::default()
        }],
        location: vec![proto::Location {
            id: 1,
            line: vec![proto::Line {
                function_id: 1,
                ..Default::default()
            }],
            ..Default::default()
        }],
        sample: vec![proto::Sample {
            location_id: vec![1],
            value: vec![5],
            label: Vec::new(),
        }],
        ..Default::default()
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

fn damaged(change: impl FnOnce(&mut proto::Profile)) -> Vec<u8> {
    let mut p = valid();
    change(&mut p);
    gzip(&p.encode_to_vec())
}

/// `report` and `convert` of `bytes` both fail with one line: "`FILE` {says}…".
fn fails(dir: &Path, name: &str, bytes: &[u8], says: &str) {
    let file = dir.join(name);
    std::fs::write(&file, bytes).unwrap();
    let svg = dir.join("out.svg");
    let expect = format!("`{}` {says}", file.display());
    let out = wasmspy().arg("report").arg(&file).output().unwrap();
    assert_one_line_error(&out, &expect, &("report", name));
    let out = wasmspy()
        .arg("convert")
        .arg(&file)
        .arg("-o")
        .arg(&svg)
        .output()
        .unwrap();
    assert_one_line_error(&out, &expect, &("convert", name));
    assert!(!svg.exists(), "{name}: convert wrote an output");
}

#[test]
fn bad_files_get_one_line_that_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let raw = valid().encode_to_vec();
    let go_cpu = std::fs::read(fixture("pprof/go-cpu.pb.gz")).unwrap();
    let foreign = "is not a pprof, speedscope, .cpuprofile or folded-stacks profile";

    fails(dir, "empty.pb.gz", b"", "is empty");
    fails(dir, "blank.folded", b"  \n\n", "is empty");
    // Cut files, as a full disk or an interrupted copy leaves them.
    fails(dir, "cut.pb.gz", &go_cpu[..go_cpu.len() / 2], "ends early");
    fails(dir, "cut.pb", &raw[..raw.len() - 3], "ends early");
    let speedscope = dir.join("whole.speedscope.json");
    let out = wasmspy()
        .arg("convert")
        .arg(fixture("pprof/go-cpu.pb.gz"))
        .arg("-o")
        .arg(&speedscope)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let json = std::fs::read(&speedscope).unwrap();
    fails(
        dir,
        "cut.speedscope.json",
        &json[..json.len() / 2],
        "ends early",
    );
    fails(
        dir,
        "cut.folded",
        b"main;work 30\nmain;idle 1\nmain;wo",
        "ends early",
    );
    // Other kinds of files.
    fails(dir, "text.txt", b"just some notes\nand more\n", foreign);
    fails(dir, "data.json", br#"{"name": "not a profile"}"#, foreign);
    fails(
        dir,
        "image.png",
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01",
        foreign,
    );
    let wasm = std::fs::read(fixture("c/cprog.wasm")).unwrap();
    fails(dir, "module.wasm", &wasm, foreign);
    let elf = std::fs::read(env!("CARGO_BIN_EXE_wasmspy")).unwrap();
    fails(dir, "binary", &elf[..4096], foreign);
    fails(
        dir,
        "notes.gz",
        &gzip(b"gzipped notes"),
        "is gzipped, but not a pprof profile",
    );
    // pprof files whose content does not hold together.
    fails(
        dir,
        "no-types.pb.gz",
        &damaged(|p| {
            p.sample_type.clear();
            p.sample[0].value.clear();
        }),
        "has no sample types",
    );
    fails(
        dir,
        "location.pb.gz",
        &damaged(|p| p.sample[0].location_id = vec![7]),
        "is damaged: a sample names location 7",
    );
    fails(
        dir,
        "function.pb.gz",
        &damaged(|p| p.location[0].line[0].function_id = 9),
        "is damaged: a location names function 9",
    );
    fails(
        dir,
        "string.pb.gz",
        &damaged(|p| p.function[0].name = 1_000_000),
        "is damaged: string 1000000 is not in its string table",
    );
    fails(
        dir,
        "values.pb.gz",
        &damaged(|p| p.sample[0].value = vec![1, 2]),
        "is damaged: a sample has 2 values for 1 sample types",
    );
    for (name, values) in [("huge.pb.gz", i64::MAX), ("min.pb.gz", i64::MIN)] {
        fails(
            dir,
            name,
            &damaged(|p| {
                p.sample.push(p.sample[0].clone());
                for s in &mut p.sample {
                    s.value = vec![values];
                }
            }),
            "has samples values too large to add up",
        );
    }
    // Huge values that do add up are read.
    let big = dir.join("big.pb.gz");
    std::fs::write(&big, damaged(|p| p.sample[0].value = vec![i64::MAX])).unwrap();
    let out = wasmspy().arg("report").arg(&big).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("main"), "{}", stdout(&out));
}
