//! What the benchmarks share.

use wasmspy::wasi_host::Exit;

/// Stops the benchmark when a guest fails: its time would mean nothing.
pub fn check(exit: Exit) {
    if !matches!(exit, Exit::Code(0)) {
        panic!("the guest did not succeed: {exit:?}");
    }
}

pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The Sightglass corpus's benchmarks folder, or `None` (said on stdout) where it is absent.
pub fn corpus() -> Option<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/corpus/sightglass/benchmarks");
    if root.is_dir() {
        return Some(root);
    }
    println!(
        "the Sightglass corpus is absent ({}): nothing to measure",
        root.display()
    );
    None
}
