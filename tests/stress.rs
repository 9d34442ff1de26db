//! The signal sampler at 10 kHz for about 30 s, on a busy guest and on one making millions of
//! small fd_writes: the guest's output is unchanged, nothing crashes or hangs, every sample is
//! accounted for (and lost ones reported).

mod common;

use std::process::Stdio;

use common::*;

const C: &str = "c/cprog.wasm";

/// Runs `record --rate 10000 -v` and returns (stdout, stderr, profile).
fn stress(guest_args: &[&str]) -> (Vec<u8>, String, Decoded) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pb.gz");
    let result = wasmspy()
        .args(["record", "--rate", "10000", "-v", "-o"])
        .arg(&out)
        .arg("--")
        .arg(fixture(C))
        .args(guest_args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = stderr(&result);
    assert_eq!(result.status.code(), Some(0), "{err}");
    (result.stdout, err, Decoded::load(&out))
}

/// Samples recorded plus lost ones match the CPU time at 10 kHz: none vanished unreported.
fn assert_accounted(err: &str, p: &Decoded) {
    let line = err.lines().find(|l| l.contains(" lost samples")).unwrap();
    eprintln!("{line}");
    let lost: i64 = line
        .rsplit(", ")
        .next()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let recorded = p.total("samples");
    let expected = p.total("cpu") as f64 / 100_000.0;
    let ratio = (recorded + lost) as f64 / expected;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "{recorded} + {lost} lost samples for {expected:.0} expected"
    );
}

#[test]
fn ten_khz_on_a_busy_guest() {
    // 4700 rounds take about 30 s; the checksum is what the same C source prints natively.
    let (out, err, p) = stress(&["spin", "4700"]);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "spin done: 4700 rounds, checksum 1126480179\n"
    );
    assert_accounted(&err, &p);
    assert_eq!(p.top_self("cpu")[0].0, "hot_function");
}

#[test]
fn ten_khz_on_a_guest_making_millions_of_small_writes() {
    let lines = 7_000_000;
    let (out, err, p) = stress(&["write", &lines.to_string()]);
    let expected: String = (0..lines).map(|i| format!("line {i}\n")).collect();
    assert!(
        out == expected.as_bytes(),
        "guest output differs ({} bytes)",
        out.len()
    );
    assert_accounted(&err, &p);
    let fd_write = p
        .stacks()
        .iter()
        .filter(|(names, _)| names[0] == "wasi_snapshot_preview1::fd_write")
        .inspect(|(names, _)| assert!(names.iter().any(|n| n == "write_lines"), "{names:?}"))
        .map(|(_, v)| v[0])
        .sum::<i64>();
    assert!(
        fd_write as f64 > 0.5 * p.total("samples") as f64,
        "fd_write: {fd_write}"
    );
}
