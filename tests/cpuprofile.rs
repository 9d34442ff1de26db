//! `.cpuprofile` (Chrome DevTools' CPU profile, which VS Code opens): written by `record`, read
//! by Chrome DevTools' own profile model (`tests/browser/devtools.mjs`: its TypeScript sources
//! from the npm package, bundled by esbuild), and read back by `convert`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

fn hotspots() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hotspots.wasm")
}

/// What Chrome DevTools makes of a `.cpuprofile` (`devtools.mjs --json`), or `None` (skipped)
/// where its packages are not installed.
fn devtools(file: &Path) -> Option<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    if !dir.join("node_modules/chrome-devtools-frontend").exists() {
        skip(
            "Chrome DevTools' reading of a .cpuprofile",
            "its packages are missing: run tests/browser/install.sh",
        );
        return None;
    }
    let out = Command::new("node")
        .arg(dir.join("devtools.mjs"))
        .arg(file)
        .arg("--json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

/// Records `module` once into a pprof and a `.cpuprofile`: the pprof whole, the host's
/// frames under a host call kept, as the `.cpuprofile` has them.
fn record_both(dir: &Path, module: &Path, args: &[&str]) -> (Decoded, PathBuf) {
    let cpuprofile = dir.join("out.cpuprofile");
    let (out, pprof) = record(dir, &["-o", cpuprofile.to_str().unwrap()], module, args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("out.cpuprofile in VS Code"),
        "{}",
        stderr(&out)
    );
    (Decoded::load_whole(&pprof), cpuprofile)
}

#[test]
fn devtools_shows_the_examples_hot_function_with_its_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (p, cpuprofile) = record_both(dir.path(), &hotspots(), &[]);
    let Some(read) = devtools(&cpuprofile) else {
        return;
    };
    assert_eq!(read["consumerErrors"], Value::Array(vec![]));
    // Every node reached from the root, as DevTools walks the tree.
    let file: Value = serde_json::from_slice(&std::fs::read(&cpuprofile).unwrap()).unwrap();
    assert_eq!(
        read["nodes"].as_array().unwrap().len(),
        file["nodes"].as_array().unwrap().len()
    );

    // DevTools' profile counts each function's samples as the pprof of the same run does.
    let functions = read["functions"].as_array().unwrap();
    for (name, samples) in p.top_self("samples").into_iter().take(4) {
        let counted = functions
            .iter()
            .filter(|f| f["function"] == name.as_str())
            .map(|f| f["selfSamples"].as_f64().unwrap())
            .sum::<f64>();
        assert_eq!(counted.round() as i64, samples, "{name}");
    }
    // Its Performance panel spans the whole run as the pprof times it (each sample rounded
    // to the microsecond). (Not the sum of its functions' self times: the panel's trace
    // engine sometimes gives a function's self time to another function too, e.g.
    // insertion_sort's 315 ms to main as well, which has no sample of its own, in a run of
    // 1,102 ms whose Performance panel then summed to 1,417 ms; or to the function called
    // before it at the same level, e.g. 89 ms of mandelbrot_inside's to insertion_sort.)
    let bounds = &read["performancePanel"]["boundsMs"];
    let span_ms = bounds["max"].as_f64().unwrap() - bounds["min"].as_f64().unwrap();
    let (cpu, samples) = (p.total("cpu") as f64 / 1e6, p.total("samples") as f64);
    assert!(
        (span_ms - cpu).abs() <= samples / 1000.0,
        "{span_ms} ms in DevTools, {cpu} ms in the pprof"
    );
    // Counted twice at times, but none of it lost: its functions' self times sum to the run's
    // at least.
    let self_ms: f64 = read["performancePanel"]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["selfMs"].as_f64().unwrap())
        .sum();
    assert!(
        self_ms >= cpu - samples / 1000.0,
        "{self_ms} ms of self time in DevTools, {cpu} ms in the pprof"
    );

    // The hottest function is is_prime, at its file and first line (0-based in the format),
    // its time by line as the pprof of the same run has it.
    let hottest = &read["hottest"];
    assert_eq!(hottest["function"], "is_prime", "{read:#}");
    let url = hottest["url"].as_str().unwrap();
    assert!(url.ends_with("examples/hotspots.c"), "{url}");
    let is_prime = &read["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "is_prime")
        .unwrap();
    assert_eq!(is_prime["lineNumber"], 7, "declared at line 8");
    let ticks: BTreeMap<i64, i64> = hottest["positionTicks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["line"].as_i64().unwrap(), t["ticks"].as_i64().unwrap()))
        .collect();
    let mut lines: BTreeMap<i64, i64> = BTreeMap::new();
    let samples_index = p.value_index("samples");
    for sample in &p.0.sample {
        let frames = p.sample_frames(sample);
        // (A sample at no known line has no tick.)
        if frames[0].0 == "is_prime" && frames[0].2 != 0 {
            *lines.entry(frames[0].2).or_default() += sample.value[samples_index];
        }
    }
    assert_eq!(ticks, lines);
    assert!(ticks.keys().all(|l| (8..=15).contains(l)), "{ticks:?}");
    // The Sources panel's time per line of hotspots.c: is_prime's loop lines hold most.
    let line_ms: f64 = hottest["lineLevelMsForUrl"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| (11..=13).contains(&l["line"].as_i64().unwrap()))
        .map(|l| l["ms"].as_f64().unwrap())
        .sum();
    let is_prime_ms = p.leaf_value("cpu", |l| p.source_frames(l)[0].0 == "is_prime") as f64 / 1e6;
    assert!(line_ms > 0.5 * is_prime_ms, "{line_ms} of {is_prime_ms}");
}

#[test]
fn inlined_functions_are_nodes_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let (_, cpuprofile) = record_both(dir.path(), &fixture("c/inline.wasm"), &["40"]);
    let Some(read) = devtools(&cpuprofile) else {
        return;
    };
    // mix (the hot line, 8) <- mix_twice <- hot_loop, each a node, each at its own line.
    let nodes = read["nodes"].as_array().unwrap();
    let by_id: BTreeMap<i64, &Value> = nodes
        .iter()
        .map(|n| (n["id"].as_i64().unwrap(), n))
        .collect();
    let mix = nodes
        .iter()
        .filter(|n| n["function"] == "mix")
        .max_by(|a, b| {
            a["selfMs"]
                .as_f64()
                .partial_cmp(&b["selfMs"].as_f64())
                .unwrap()
        })
        .unwrap();
    let parent = |n: &Value| by_id[&n["parent"].as_i64().unwrap()];
    assert_eq!(parent(mix)["function"], "mix_twice");
    assert_eq!(parent(parent(mix))["function"], "hot_loop");
    let ticks = mix["positionTicks"].as_array().unwrap();
    assert_eq!(ticks[0]["line"], 8, "{mix}");
    let functions = read["functions"].as_array().unwrap();
    let line = |name: &str| {
        functions.iter().find(|f| f["function"] == name).unwrap()["lineNumber"].clone()
    };
    assert_eq!(
        (line("mix"), line("mix_twice"), line("hot_loop")),
        (6.into(), 10.into(), 19.into())
    );
}

#[test]
fn convert_reads_a_cpuprofile_back_with_its_totals() {
    let dir = tempfile::tempdir().unwrap();
    let (p, cpuprofile) = record_both(dir.path(), &hotspots(), &[]);
    let back = dir.path().join("back.pb.gz");
    let out = wasmspy()
        .args(["convert"])
        .arg(&cpuprofile)
        .arg("-o")
        .arg(&back)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let q = Decoded::load(&back);
    assert_eq!(q.total("samples"), p.total("samples"));
    // Rounded to the microsecond once, in the whole.
    assert!((q.total("cpu") - p.total("cpu")).abs() < 1000);
    let names = |d: &Decoded| {
        d.top_self("samples")
            .into_iter()
            .take(3)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&q), names(&p));
    // Lines survive: is_prime's self samples by line.
    let by_line = |d: &Decoded| {
        let mut lines: BTreeMap<i64, i64> = BTreeMap::new();
        let i = d.value_index("samples");
        for s in &d.0.sample {
            let f = d.sample_frames(s);
            if f[0].0 == "is_prime" {
                *lines.entry(f[0].2).or_default() += s.value[i];
            }
        }
        lines
    };
    assert_eq!(by_line(&q), by_line(&p));
    // And the report reads it as it is.
    let out = wasmspy().arg("report").arg(&cpuprofile).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("is_prime"), "{}", stdout(&out));
}

#[test]
fn what_a_cpuprofile_cannot_hold_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let heap = dir.path().join("heap.cpuprofile");
    let out = wasmspy()
        .args(["record", "--mem-profile"])
        .arg(&heap)
        .arg("--")
        .arg(hotspots())
        .output()
        .unwrap();
    assert_one_line_error(
        &out,
        "a .cpuprofile holds time, not memory",
        &"--mem-profile",
    );
    assert!(!heap.exists());

    // A memory profile converted: said, nothing written.
    let (out, heap) = record_every_allocation(dir.path(), &fixture("c/alloc.wasm"), &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let converted = dir.path().join("heap-converted.cpuprofile");
    let out = wasmspy()
        .arg("convert")
        .arg(&heap)
        .arg("-o")
        .arg(&converted)
        .output()
        .unwrap();
    assert_one_line_error(
        &out,
        "is a profile of inuse_space (bytes), and a .cpuprofile holds time",
        &"convert",
    );
    assert!(!converted.exists());

    let bad = dir.path().join("bad.cpuprofile");
    std::fs::write(
        &bad,
        r#"{"nodes":[{"id":1,"callFrame":{"functionName":"(root)","scriptId":"0","url":"","lineNumber":-1,"columnNumber":-1},"children":[2]}],"startTime":0,"endTime":10,"samples":[1],"timeDeltas":[0]}"#,
    )
    .unwrap();
    let out = wasmspy().arg("report").arg(&bad).output().unwrap();
    assert_one_line_error(
        &out,
        "is damaged: it names node 2, which it does not have",
        &"bad",
    );
}
