//! gofmt built for WASI by the Go toolchain at hand (`go` on PATH, which the test command
//! installs): a large real Go program for the Go stack test and the overhead benchmark.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `GOROOT` of the `go` on PATH; `None` without one.
pub fn goroot() -> Option<PathBuf> {
    let out = Command::new("go").args(["env", "GOROOT"]).output().ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Builds `cmd/gofmt` for `wasip1` into `out`.
pub fn build(out: &Path) {
    let built = Command::new("go")
        .args(["build", "-trimpath", "-o"])
        .arg(out)
        .arg("cmd/gofmt")
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm")
        .env("GOTOOLCHAIN", "local")
        .output()
        .expect("run go build");
    assert!(
        built.status.success(),
        "go build cmd/gofmt: {}",
        String::from_utf8_lossy(&built.stderr)
    );
}
