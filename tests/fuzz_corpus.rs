//! The fuzz targets' corpora (`fuzz/corpus/*`: seeds, and the inputs `cargo fuzz` found that
//! reach new code) replayed on stable Rust: reading any of them, as `report` and `convert` do,
//! never panics; nor do the readers of what a guest supplies (a Go symbol table, CPython's
//! `_Py_DebugOffsets` and the memory its stack is walked in, DWARF structure layouts).

#[path = "common/guest_readers.rs"]
mod guest_readers;
#[path = "common/read_any.rs"]
mod read_any;

use std::path::Path;

use read_any::{gzip, read_and_use};

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let inputs: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.unwrap().path()).unwrap())
        .collect();
    assert!(
        inputs.len() >= 3,
        "{}: {} inputs",
        dir.display(),
        inputs.len()
    );
    inputs
}

#[test]
fn pprof_corpus_reads_without_panic() {
    for input in corpus("pprof") {
        read_and_use(&input);
        read_and_use(&gzip(&input));
    }
}

#[test]
fn speedscope_corpus_reads_without_panic() {
    for input in corpus("speedscope") {
        read_and_use(&input);
    }
}

#[test]
fn folded_corpus_reads_without_panic() {
    for input in corpus("folded") {
        read_and_use(&input);
    }
}

#[test]
fn cpuprofile_corpus_reads_without_panic() {
    for input in corpus("cpuprofile") {
        read_and_use(&input);
    }
}

#[test]
fn go_module_corpus_reads_without_panic() {
    for input in corpus("go_module") {
        guest_readers::go_module(&input);
    }
}

#[test]
fn spidermonkey_walk_corpus_walks_without_panic() {
    for input in corpus("spidermonkey_walk") {
        guest_readers::spidermonkey_walk(&input);
    }
}

/// The committed seed is the walk's example as it is now: a change of the example or the
/// layout is seen here, and the seed written again (`WRITE_SEED=1`).
#[test]
fn spidermonkey_walk_seed_is_the_example() {
    let seed = guest_readers::spidermonkey_seed();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/spidermonkey_walk/example");
    if std::env::var_os("WRITE_SEED").is_some() {
        std::fs::write(&path, &seed).unwrap();
    }
    assert!(
        std::fs::read(&path).unwrap() == seed,
        "{}: WRITE_SEED=1 writes it",
        path.display()
    );
}

#[test]
fn python_offsets_corpus_walks_without_panic() {
    for input in corpus("python_offsets") {
        guest_readers::python_offsets(&input);
    }
}

#[test]
fn dwarf_layout_corpus_reads_without_panic() {
    for input in corpus("dwarf_layout") {
        guest_readers::dwarf_layout(&input);
    }
}
