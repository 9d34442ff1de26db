//! Helpers shared by the integration tests: run the `wasmspy` binary, decode what it wrote.
#![allow(dead_code)] // each test crate uses its own subset

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use wasmspy::export::{pprof, pprof_proto as proto};

pub fn wasmspy() -> Command {
    Command::new(env!("CARGO_BIN_EXE_wasmspy"))
}

pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// Runs `wasmspy record -o DIR/out.pb.gz EXTRA... -- MODULE ARGS...`.
pub fn record(dir: &Path, extra: &[&str], module: &Path, args: &[&str]) -> (Output, PathBuf) {
    let out = dir.join("out.pb.gz");
    let output = wasmspy()
        .arg("record")
        .arg("-o")
        .arg(&out)
        .args(extra)
        .arg("--")
        .arg(module)
        .args(args)
        .output()
        .expect("run wasmspy");
    (output, out)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A pprof profile read back from disk, with the questions tests ask of it.
pub struct Decoded(pub proto::Profile);

impl Decoded {
    pub fn load(path: &Path) -> Self {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        Decoded(pprof::decode(&bytes).expect("decode pprof"))
    }

    pub fn str(&self, i: i64) -> &str {
        &self.0.string_table[i as usize]
    }

    pub fn value_index(&self, kind: &str) -> usize {
        self.0
            .sample_type
            .iter()
            .position(|vt| self.str(vt.r#type) == kind)
            .unwrap_or_else(|| panic!("no sample type {kind}"))
    }

    pub fn function(&self, id: u64) -> &proto::Function {
        &self.0.function[(id - 1) as usize]
    }

    pub fn location(&self, id: u64) -> &proto::Location {
        &self.0.location[(id - 1) as usize]
    }

    /// Function names of each sample's stack, leaf first (innermost inlined frame first).
    pub fn stacks(&self) -> Vec<(Vec<String>, &[i64])> {
        self.0
            .sample
            .iter()
            .map(|s| {
                let names = s
                    .location_id
                    .iter()
                    .flat_map(|&l| self.location(l).line.iter())
                    .map(|line| self.str(self.function(line.function_id).name).to_string())
                    .collect();
                (names, s.value.as_slice())
            })
            .collect()
    }

    pub fn total(&self, kind: &str) -> i64 {
        let i = self.value_index(kind);
        self.0.sample.iter().map(|s| s.value[i]).sum()
    }

    /// (function, self value) sorted by value, largest first.
    pub fn top_self(&self, kind: &str) -> Vec<(String, i64)> {
        let i = self.value_index(kind);
        let mut by_name: HashMap<String, i64> = HashMap::new();
        for (names, values) in self.stacks() {
            *by_name.entry(names[0].clone()).or_default() += values[i];
        }
        let mut top: Vec<_> = by_name.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top
    }

    /// Share of `kind` whose leaf is `function`.
    pub fn self_share(&self, kind: &str, function: &str) -> f64 {
        let own: i64 = self
            .top_self(kind)
            .iter()
            .filter(|(n, _)| n == function)
            .map(|(_, v)| v)
            .sum();
        own as f64 / self.total(kind) as f64
    }
}
