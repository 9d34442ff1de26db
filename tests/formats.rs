//! Every output format, read back by an independent consumer: folded stacks by inferno, the
//! speedscope JSON by the speedscope app and the flame graph SVG by Chromium
//! (`tests/browser/check.js`, installed by `tests/browser/install.sh`), the Firefox
//! Profiler's processed JSON against its format's invariants; `convert` between them.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use serde_json::Value;

const FORMATS: [&str; 5] = ["pb.gz", "json", "speedscope.json", "svg", "folded"];

/// Records the C fixture (80 % of its time in `hot_function`) once into every format.
fn record_all(dir: &Path) -> BTreeMap<&'static str, std::path::PathBuf> {
    let paths: BTreeMap<_, _> = FORMATS
        .iter()
        .map(|&ext| (ext, dir.join(format!("cpu.{ext}"))))
        .collect();
    let mut cmd = wasmspy();
    cmd.arg("record");
    for path in paths.values() {
        cmd.arg("-o").arg(path);
    }
    let out = cmd
        .arg("--")
        .arg(fixture("c/cprog.wasm"))
        .args(["spin", "60"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out).matches("wasmspy: wrote ").count(), 5);
    paths
}

/// Folded stacks: (stack, value) lines.
fn folded(path: &Path) -> Vec<(String, i64)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let (stack, value) = l.rsplit_once(' ').unwrap();
            (stack.to_string(), value.parse().unwrap())
        })
        .collect()
}

#[test]
fn every_format_from_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let paths = record_all(dir.path());
    let pprof = Decoded::load(&paths["pb.gz"]);
    let hot_cpu = pprof.leaf_value("cpu", |l| pprof.source_frames(l)[0].0 == "hot_function");
    assert!(hot_cpu as f64 > 0.6 * pprof.total("cpu") as f64);

    // Folded stacks: root first, the default sample type (CPU time), the same totals. A sample
    // in Wasmtime's own code before or after the guest runs has no guest stack: the host's
    // frames under `[host]`.
    let stacks = folded(&paths["folded"]);
    assert!(
        stacks
            .iter()
            .all(|(s, _)| s.starts_with("_start") || s.starts_with("[host];")),
        "{stacks:?}"
    );
    let leaf_total: i64 = stacks
        .iter()
        .filter(|(s, _)| s.ends_with(";hot_function"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(leaf_total, hot_cpu);
    assert_eq!(
        stacks.iter().map(|(_, v)| v).sum::<i64>(),
        pprof.total("cpu")
    );
    // inferno draws them.
    let mut svg = Vec::new();
    let text = std::fs::read_to_string(&paths["folded"]).unwrap();
    inferno::flamegraph::from_lines(
        &mut inferno::flamegraph::Options::default(),
        text.lines(),
        &mut svg,
    )
    .unwrap();
    assert!(String::from_utf8(svg).unwrap().contains("hot_function"));

    // speedscope: a profile per sample type, weights adding up to the pprof totals.
    let speedscope: Value =
        serde_json::from_slice(&std::fs::read(&paths["speedscope.json"]).unwrap()).unwrap();
    assert_eq!(
        speedscope["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames = speedscope["shared"]["frames"].as_array().unwrap();
    let profiles = speedscope["profiles"].as_array().unwrap();
    let names: Vec<&str> = profiles
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["samples", "cpu"]);
    assert_eq!(speedscope["activeProfileIndex"], 1, "cpu is the default");
    for p in profiles {
        let weights: i64 = p["weights"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_i64().unwrap())
            .sum();
        assert_eq!(weights, pprof.total(p["name"].as_str().unwrap()));
        assert_eq!(p["endValue"].as_i64().unwrap(), weights);
        for stack in p["samples"].as_array().unwrap() {
            let stack = stack.as_array().unwrap();
            let root = &frames[stack[0].as_u64().unwrap() as usize]["name"];
            assert!(
                root == "_start.command_export" || root == "[host]",
                "{root}"
            );
        }
    }
    assert_eq!(profiles[1]["unit"], "nanoseconds");
    assert_eq!(profiles[0]["unit"], "none");
    let hot = frames.iter().find(|f| f["name"] == "hot_function").unwrap();
    assert_eq!(hot["file"], "tests/fixtures/c/cprog.c");

    firefox_invariants(&paths["json"], pprof.total("samples"));

    browser_check(
        "speedscope",
        &paths["speedscope.json"],
        "hot_function",
        &dir.path().join("speedscope.png"),
    );
    browser_check(
        "svg",
        &paths["svg"],
        "hot_function",
        &dir.path().join("svg.png"),
    );
}

/// The processed profile's invariants: every table's columns as long as its `length`, every
/// index inside the table it points into, stack prefixes before their stacks, samples in time
/// order, a library per module with its symbols; and the hot function named.
fn firefox_invariants(path: &Path, samples: i64) {
    let p: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let categories = p["meta"]["categories"].as_array().unwrap();
    let category_names: Vec<&str> = categories
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for expected in ["Wasm", "Host call", "Wasmtime"] {
        assert!(category_names.contains(&expected), "{category_names:?}");
    }
    assert_eq!(p["libs"].as_array().unwrap().len(), 1);
    assert_eq!(p["libs"][0]["name"], "cprog.wasm");
    let thread = &p["threads"][0];
    let strings = thread["stringArray"].as_array().unwrap();
    let len = |table: &str| thread[table]["length"].as_u64().unwrap() as usize;
    for table in [
        "samples",
        "stackTable",
        "frameTable",
        "funcTable",
        "markers",
        "resourceTable",
        "nativeSymbols",
    ] {
        let n = len(table);
        for (column, values) in thread[table].as_object().unwrap() {
            if let Some(values) = values.as_array() {
                assert_eq!(values.len(), n, "{table}.{column}");
            }
        }
    }
    let index_in = |v: &Value, n: usize, what: &str| {
        let i = v.as_u64().unwrap_or_else(|| panic!("{what}: {v}")) as usize;
        assert!(i < n, "{what}: {i} of {n}");
        i
    };
    assert_eq!(len("samples") as i64, samples);
    let mut time = 0.0;
    for (i, delta) in thread["samples"]["timeDeltas"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        time += delta.as_f64().unwrap();
        assert!(time >= 0.0);
        index_in(
            &thread["samples"]["stack"][i],
            len("stackTable"),
            "sample stack",
        );
    }
    for i in 0..len("stackTable") {
        let prefix = &thread["stackTable"]["prefix"][i];
        if !prefix.is_null() {
            assert!(
                index_in(prefix, len("stackTable"), "prefix") < i,
                "stack {i}'s prefix"
            );
        }
        index_in(
            &thread["stackTable"]["frame"][i],
            len("frameTable"),
            "stack frame",
        );
    }
    for i in 0..len("frameTable") {
        index_in(
            &thread["frameTable"]["func"][i],
            len("funcTable"),
            "frame func",
        );
        index_in(
            &thread["frameTable"]["category"][i],
            categories.len(),
            "frame category",
        );
    }
    let func_names: Vec<&str> = (0..len("funcTable"))
        .map(|i| {
            let s = index_in(&thread["funcTable"]["name"][i], strings.len(), "func name");
            strings[s].as_str().unwrap()
        })
        .collect();
    assert!(func_names.contains(&"hot_function"), "{func_names:?}");
    for i in 0..len("markers") {
        index_in(&thread["markers"]["name"][i], strings.len(), "marker name");
    }
    assert!(len("nativeSymbols") > 0);
}

#[test]
fn convert_between_formats() {
    let dir = tempfile::tempdir().unwrap();
    let paths = record_all(dir.path());
    let convert = |input: &Path, output: &Path, extra: &[&str]| {
        let out = wasmspy()
            .arg("convert")
            .arg(input)
            .arg("-o")
            .arg(output)
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    };
    // pprof to folded gives what record wrote, and by samples with --sample-index.
    let folded_again = dir.path().join("again.folded");
    convert(&paths["pb.gz"], &folded_again, &[]);
    assert_eq!(folded(&folded_again), folded(&paths["folded"]));
    let by_samples = dir.path().join("samples.txt");
    convert(
        &paths["pb.gz"],
        &by_samples,
        &["--format", "folded", "--sample-index", "samples"],
    );
    let pprof = Decoded::load(&paths["pb.gz"]);
    assert_eq!(
        folded(&by_samples).iter().map(|(_, v)| v).sum::<i64>(),
        pprof.total("samples")
    );
    // speedscope back to pprof: the same sample types and totals.
    let back = dir.path().join("back.pb.gz");
    convert(&paths["speedscope.json"], &back, &[]);
    let back = Decoded::load(&back);
    assert_eq!(back.total("cpu"), pprof.total("cpu"));
    assert_eq!(back.total("samples"), pprof.total("samples"));
    // Folded stacks to a flame graph and to pprof.
    let svg = dir.path().join("from-folded.svg");
    convert(&paths["folded"], &svg, &[]);
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("hot_function"));
    let from_folded = dir.path().join("from-folded.pb.gz");
    convert(&paths["folded"], &from_folded, &[]);
    assert_eq!(
        Decoded::load(&from_folded).total("value"),
        pprof.total("cpu")
    );
    // A folded file does not say its values are CPU nanoseconds: `report` shows them as
    // numbers, not as a count of samples.
    let out = wasmspy()
        .arg("report")
        .arg(&paths["folded"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(report.starts_with("Type: value\n"), "{report}");
    assert!(
        report.contains(&format!("of {} total", pprof.total("cpu"))),
        "{report}"
    );
    // A Go-written heap profile, as Firefox and speedscope profiles.
    convert(
        &fixture("pprof/go-heap.pb.gz"),
        &dir.path().join("heap.json"),
        &[],
    );
    convert(
        &fixture("pprof/go-heap.pb.gz"),
        &dir.path().join("heap.speedscope.json"),
        &[],
    );

    // What cannot be read or written: one line, exit status 1 (2 for bad flags).
    let fails = |args: &[&std::ffi::OsStr], code: i32, message: &str| {
        let out = wasmspy().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(message), "{err}");
    };
    let out = dir.path().join("x.svg");
    fails(
        &[
            "convert".as_ref(),
            paths["json"].as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ],
        1,
        "is a Firefox Profiler profile, which cannot be read back",
    );
    fails(
        &["report".as_ref(), fixture("c/cprog.c").as_os_str()],
        1,
        "is not a pprof, speedscope, .cpuprofile or folded-stacks profile",
    );
    fails(
        &[
            "convert".as_ref(),
            paths["pb.gz"].as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
            "--format".as_ref(),
            "png".as_ref(),
        ],
        2,
        "unknown format `png`",
    );
    fails(
        &[
            "report".as_ref(),
            "--sample-index".as_ref(),
            "bytes".as_ref(),
            paths["pb.gz"].as_os_str(),
        ],
        1,
        "no sample type `bytes` (it has: samples, cpu)",
    );
    fails(
        &[
            "report".as_ref(),
            dir.path().join("missing.pb.gz").as_os_str(),
        ],
        1,
        "cannot read",
    );
}

/// A program spending its time in `fd_write`: in the Firefox profile, those samples' leaves
/// are in the "Host call" category and the stretches in the call are markers named by it.
#[test]
fn firefox_host_calls_are_categorized_and_marked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("io.json");
    let out = wasmspy()
        .args(["record", "--rate", "10000", "-o"])
        .arg(&path)
        .arg("--")
        .arg(fixture("c/cprog.wasm"))
        .args(["write", "200000"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let p: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let thread = &p["threads"][0];
    let strings = thread["stringArray"].as_array().unwrap();
    let categories = p["meta"]["categories"].as_array().unwrap();
    let host = categories
        .iter()
        .position(|c| c["name"] == "Host call")
        .unwrap();
    let markers = &thread["markers"];
    let writes: Vec<(f64, f64)> = (0..markers["length"].as_u64().unwrap() as usize)
        .filter(|&i| {
            strings[markers["name"][i].as_u64().unwrap() as usize]
                == "wasi_snapshot_preview1::fd_write"
        })
        .map(|i| {
            (
                markers["startTime"][i].as_f64().unwrap(),
                markers["endTime"][i].as_f64().unwrap(),
            )
        })
        .collect();
    assert!(!writes.is_empty(), "no fd_write marker");
    assert!(writes.iter().all(|(start, end)| end > start));
    assert_eq!(markers["category"][0].as_u64().unwrap() as usize, host);
    // The frames of the import are host calls.
    let frames = &thread["frameTable"];
    let funcs = &thread["funcTable"];
    let fd_write_frames = (0..frames["length"].as_u64().unwrap() as usize).filter(|&i| {
        let func = frames["func"][i].as_u64().unwrap() as usize;
        strings[funcs["name"][func].as_u64().unwrap() as usize]
            == "wasi_snapshot_preview1::fd_write"
    });
    for i in fd_write_frames {
        assert_eq!(frames["category"][i].as_u64().unwrap() as usize, host);
    }
}

/// `--format` decides whatever the names say, for the CPU and the memory profile alike.
#[test]
fn format_flag_overrides_the_names() {
    let dir = tempfile::tempdir().unwrap();
    let (cpu, heap) = (dir.path().join("cpu.out"), dir.path().join("heap.out"));
    let out = wasmspy()
        .args(["record", "--format", "speedscope", "-o"])
        .arg(&cpu)
        .arg("--mem-profile")
        .arg(&heap)
        .arg("--")
        .arg(fixture("c/alloc.wasm"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    for (path, first) in [(&cpu, "samples"), (&heap, "alloc_objects")] {
        let json: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(json["profiles"][0]["name"], first, "{}", path.display());
    }
    // Without it, a name that says nothing is pprof.
    let plain = dir.path().join("plain.out");
    let out = wasmspy()
        .args(["record", "-o"])
        .arg(&plain)
        .arg("--")
        .arg(fixture("c/alloc.wasm"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    Decoded::load(&plain);
}
