//! Helpers shared by the integration tests: run the `wasmspy` binary, decode what it wrote.
#![allow(dead_code)] // each test crate uses its own subset

#[cfg(not(feature = "internals"))]
compile_error!("the tests reach wasmspy's internals: run them with `cargo test --features internals` (scripts/test.sh does)");

pub mod allocs_py;
pub mod annotated;
pub mod child;
pub mod gofmt;
pub mod lines_input;
pub mod own_cache;
pub mod self_timed;
pub mod timed_py;

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

/// `wasmtime run`: the example `cargo test` builds beside the tests.
pub fn wasmtime_cli() -> PathBuf {
    built_example("wasmtime-baseline")
}

/// The executable of example `name`, which `cargo test` builds beside the tests.
pub fn built_example(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_wasmspy"));
    let path = bin.parent().unwrap().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds it (`cargo build --features internals --example {name}`)",
        path.display()
    );
    path
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

/// As [`record`], for a run that must exit 0: its output and its profile.
pub fn record_ok(dir: &Path, extra: &[&str], module: &Path, args: &[&str]) -> (Output, Decoded) {
    let (out, path) = record(dir, extra, module, args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    (out, Decoded::load(&path))
}

/// Runs `wasmspy record --mem-rate 1 --mem-profile DIR/heap.pb.gz -- MODULE ARGS...`: every
/// allocation sampled.
pub fn record_every_allocation(dir: &Path, module: &Path, args: &[&str]) -> (Output, PathBuf) {
    let heap = dir.join("heap.pb.gz");
    let output = wasmspy()
        .args(["record", "--mem-rate", "1", "--mem-profile"])
        .arg(&heap)
        .arg("--")
        .arg(module)
        .args(args)
        .output()
        .expect("run wasmspy");
    (output, heap)
}

/// Sends Ctrl-C (SIGINT) to a running `wasmspy`.
pub fn sigint(child: &std::process::Child) {
    // SAFETY: plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
}

/// Runs `wasmspy record RECORD_ARGS... tests/fixtures/c/cprog.wasm stdin` with stdin open and
/// empty, so the guest blocks in `fd_read` and never reaches an epoch check; presses Ctrl-C
/// after a second; returns what it printed and how it ended.
pub fn ctrl_c_while_reading_stdin(record_args: &[&std::ffi::OsStr]) -> Output {
    use std::process::Stdio;
    let mut child = wasmspy()
        .arg("record")
        .args(record_args)
        .arg(fixture("c/cprog.wasm"))
        .arg("stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run wasmspy");
    let stdin = child.stdin.take(); // held open until the child is gone
    std::thread::sleep(std::time::Duration::from_millis(1000));
    sigint(&child);
    let output = child.wait_with_output().unwrap();
    drop(stdin);
    output
}

/// A test that cannot run here for want of something it needs: says `skipped` where it is
/// seen (written to stderr past the test harness's capture, which takes only `eprintln!`), and
/// fails under CI, where everything must be there.
pub fn skip(test: &str, why: &str) {
    assert!(std::env::var_os("CI").is_none(), "{test}: {why}, under CI");
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: {test}: {why}");
}

/// `out` failed with one line on stderr, `wasmspy: error: …` containing `expect`, and no panic.
pub fn assert_one_line_error(out: &std::process::Output, expect: &str, what: &dyn std::fmt::Debug) {
    let err = stderr(out);
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("wasmspy: wrote"))
        .collect();
    assert!(!out.status.success(), "{what:?} succeeded");
    assert_eq!(errors.len(), 1, "{what:?}: not one line: {err}");
    assert!(errors[0].starts_with("wasmspy: error: "), "{what:?}: {err}");
    assert!(
        errors[0].contains(expect),
        "{what:?}: expected `{expect}` in {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// cprog's `spin`: `hot_function` sampled under `run_spin`, under `main`, under `_start`.
pub fn assert_spin_stack(p: &Decoded) {
    let stacks = p.stacks();
    let hot_stack = &stacks
        .iter()
        .find(|(n, _)| n[0] == "hot_function")
        .expect("hot_function sampled")
        .0;
    let pos = |f: &str| hot_stack.iter().position(|n| n == f).unwrap_or(usize::MAX);
    assert!(
        pos("run_spin") < pos("main") && pos("main") < pos("_start"),
        "{hot_stack:?}"
    );
}

/// A pprof profile read back from disk, with the questions tests ask of it.
pub struct Decoded(pub proto::Profile);

impl Decoded {
    /// The profile as the guest's code sees it: the host's own frames (see
    /// `ProfilerOptions::host_frames`: locations in mappings where a host object is loaded)
    /// and their mappings left out, so that a host call's frame is its sample's leaf, as the
    /// tests about the guest's stacks expect; [`Self::load_whole`] keeps them. Locations are
    /// numbered anew, in order (see [`Self::location`]).
    pub fn load(path: &Path) -> Self {
        let mut p = Self::load_whole(path);
        let host: std::collections::HashSet<u64> =
            p.0.mapping
                .iter()
                .filter(|m| m.memory_start != 0)
                .map(|m| m.id)
                .collect();
        p.0.mapping.retain(|m| !host.contains(&m.id));
        let mut renumbered = HashMap::new();
        p.0.location.retain(|l| !host.contains(&l.mapping_id));
        for (i, l) in p.0.location.iter_mut().enumerate() {
            renumbered.insert(l.id, i as u64 + 1);
            l.id = i as u64 + 1;
        }
        for s in &mut p.0.sample {
            s.location_id = s
                .location_id
                .iter()
                .filter_map(|l| renumbered.get(l).copied())
                .collect();
        }
        p
    }

    /// The profile as written, the host's frames included.
    pub fn load_whole(path: &Path) -> Self {
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

    /// A location's source frames, innermost first: (function, file, line, inlined). Every
    /// frame but the last is inlined into the one after it.
    pub fn source_frames(&self, location: u64) -> Vec<(String, String, i64, bool)> {
        let lines = &self.location(location).line;
        lines
            .iter()
            .enumerate()
            .map(|(i, line)| {
                let f = self.function(line.function_id);
                (
                    self.str(f.name).to_string(),
                    self.str(f.filename).to_string(),
                    line.line,
                    i + 1 < lines.len(),
                )
            })
            .collect()
    }

    /// A sample's source frames, leaf first: (function, file, line).
    pub fn sample_frames(&self, sample: &proto::Sample) -> Vec<(String, String, i64)> {
        sample
            .location_id
            .iter()
            .flat_map(|&l| self.source_frames(l))
            .map(|(name, file, line, _)| (name, file, line))
            .collect()
    }

    /// The functions the samples' frames are in, each once, in the profile's order.
    pub fn sampled_functions(&self) -> Vec<&proto::Function> {
        let used: std::collections::HashSet<u64> = self
            .0
            .sample
            .iter()
            .flat_map(|s| &s.location_id)
            .flat_map(|&l| &self.location(l).line)
            .map(|line| line.function_id)
            .collect();
        self.0
            .function
            .iter()
            .filter(|f| used.contains(&f.id))
            .collect()
    }

    /// The names of [`Self::sampled_functions`].
    pub fn sampled_function_names(&self) -> Vec<&str> {
        self.sampled_functions()
            .into_iter()
            .map(|f| self.str(f.name))
            .collect()
    }

    /// The file names of the profile's mappings.
    pub fn mapping_names(&self) -> Vec<&str> {
        self.0
            .mapping
            .iter()
            .map(|m| self.str(m.filename))
            .collect()
    }

    /// `kind` summed over the samples whose leaf location satisfies `pred`.
    pub fn leaf_value(&self, kind: &str, pred: impl Fn(u64) -> bool) -> i64 {
        let i = self.value_index(kind);
        self.0
            .sample
            .iter()
            .filter(|s| s.location_id.first().is_some_and(|&l| pred(l)))
            .map(|s| s.value[i])
            .sum()
    }

    pub fn total(&self, kind: &str) -> i64 {
        let i = self.value_index(kind);
        self.0.sample.iter().map(|s| s.value[i]).sum()
    }

    /// (function, self value) sorted by value, largest first; as in pprof, code inlined
    /// into a function is the inlined function's own.
    pub fn top_self(&self, kind: &str) -> Vec<(String, i64)> {
        self.top_self_by(kind, |loc| loc.line.first().unwrap())
    }

    /// As [`top_self`](Self::top_self), but code inlined into a function counts as the
    /// function's own, as it is in the compiled module.
    pub fn top_self_compiled(&self, kind: &str) -> Vec<(String, i64)> {
        self.top_self_by(kind, |loc| loc.line.last().unwrap())
    }

    fn top_self_by(
        &self,
        kind: &str,
        line: impl Fn(&proto::Location) -> &proto::Line,
    ) -> Vec<(String, i64)> {
        let i = self.value_index(kind);
        let mut by_name: HashMap<String, i64> = HashMap::new();
        for sample in &self.0.sample {
            let leaf = line(self.location(sample.location_id[0]));
            let name = self.str(self.function(leaf.function_id).name);
            *by_name.entry(name.to_string()).or_default() += sample.value[i];
        }
        let mut top: Vec<_> = by_name.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top
    }

    /// Share of `kind` whose leaf is `function` (see [`top_self`](Self::top_self)).
    pub fn self_share(&self, kind: &str, function: &str) -> f64 {
        self.share_of(&self.top_self(kind), kind, function)
    }

    /// Share of `kind` in `function`'s compiled code (see
    /// [`top_self_compiled`](Self::top_self_compiled)).
    pub fn self_share_compiled(&self, kind: &str, function: &str) -> f64 {
        self.share_of(&self.top_self_compiled(kind), kind, function)
    }

    fn share_of(&self, top: &[(String, i64)], kind: &str, function: &str) -> f64 {
        let own: i64 = top
            .iter()
            .filter(|(n, _)| n == function)
            .map(|(_, v)| v)
            .sum();
        own as f64 / self.total(kind) as f64
    }
}

/// `split.c` (a loop-free function and a loop, which the program times itself) run with
/// `split` for `rounds` at 2 kHz: (the program's own `straight_line` fraction, the profile's,
/// the profile's `small_after` share), shares of the three functions' self time.
pub fn split_shares(extra: &[&str], rounds: &str) -> (f64, f64, f64) {
    let dir = tempfile::tempdir().unwrap();
    let (own, path, _) = split_profile(dir.path(), extra, "2000", rounds);
    let p = Decoded::load(&path);
    let self_of = |f: &str| p.self_share("cpu", f);
    let (straight, after, looping) = (
        self_of("straight_line"),
        self_of("small_after"),
        self_of("looping"),
    );
    let all = straight + after + looping;
    (own, straight / all, after / all)
}

/// `c/split.wasm` recorded into `dir` with `extra` at `rate`: the share of `straight_line`
/// the program measured itself, the profile's path, and what wasmspy said on stderr.
pub fn split_profile(
    dir: &Path,
    extra: &[&str],
    rate: &str,
    rounds: &str,
) -> (f64, PathBuf, String) {
    let mut args = extra.to_vec();
    args.extend(["--rate", rate]);
    let (out, path) = record(dir, &args, &fixture("c/split.wasm"), &[rounds]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let own: f64 = stdout(&out)
        .strip_prefix("straight_line ")
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}", stdout(&out)));
    (own, path, stderr(&out))
}

/// The component built from `tests/fixtures/interpreters/`, if it is there.
pub fn built_component(name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/interpreters")
        .join(name);
    if path.exists() {
        return Some(path);
    }
    skip(
        name,
        &format!(
            "{} is missing: tests/fixtures/interpreters/build.sh builds it",
            path.display()
        ),
    );
    None
}

/// Runs the browser checker (`tests/browser/check.js`): what it printed, `None` (with a note)
/// where it is not installed, a failure under CI.
pub fn browser_check(mode: &str, file: &Path, name: &str, screenshot: &Path) -> Option<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    if !dir.join("node_modules/playwright-core").exists()
        || !Path::new("/usr/bin/chromium").exists()
    {
        let test = format!("browser check of {mode}");
        skip(
            &test,
            "Chromium or playwright-core is missing: run tests/browser/install.sh",
        );
        return None;
    }
    let out = Command::new("node")
        .arg(dir.join("check.js"))
        .arg(mode)
        .arg(file)
        .arg(name)
        .arg(screenshot)
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "{mode}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(screenshot.exists());
    Some(stdout(&out))
}
