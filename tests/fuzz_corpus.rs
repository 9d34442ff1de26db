//! The fuzz targets' corpora (`fuzz/corpus/*`: seeds, and the inputs `cargo fuzz` found that
//! reach new code) replayed on stable Rust: reading any of them, as `report` and `convert` do,
//! never panics; nor do the readers of what a guest supplies (a Go symbol table, CPython's
//! `_Py_DebugOffsets` and the memory its stack is walked in, the code SpiderMonkey is
//! recognised by, DWARF structure layouts).

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

/// The committed seeds are the walk's examples as they are now: a change of an example or of
/// the layout is seen here, and the seeds written again (`WRITE_SEED=1`). Each walks to its
/// frames: `example`, the interpreter's (`fib` at lines 5 and 4, `run` at 9, the self-hosted
/// `forEach` between them left out); `example_pbl`, the same in the portable baseline
/// interpreter first, found through the trampoline's `Stack`, then the interpreter's.
#[test]
fn spidermonkey_walk_seeds_are_the_examples() {
    let frame = |name: &str, line| Some((name.to_string(), line));
    let activation = [frame("fib", 5), frame("fib", 4), frame("run", 9), None];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/spidermonkey_walk");
    for (name, seed) in guest_readers::spidermonkey_walk_seeds() {
        let expected = match name {
            "example" => activation.to_vec(),
            "example_pbl" => [activation.clone(), activation.clone()].concat(),
            _ => Vec::new(),
        };
        assert_eq!(
            guest_readers::spidermonkey_walked(&seed),
            expected,
            "{name}"
        );
        let path = dir.join(name);
        if std::env::var_os("WRITE_SEED").is_some() {
            std::fs::write(&path, &seed).unwrap();
        }
        assert!(
            std::fs::read(&path).is_ok_and(|committed| committed == seed),
            "{}: WRITE_SEED=1 writes it",
            path.display()
        );
    }
}

#[test]
fn spidermonkey_recognize_corpus_reads_without_panic() {
    for input in corpus("spidermonkey_recognize") {
        guest_readers::spidermonkey_recognize(&input);
    }
}

/// The committed seeds are made from recognition's fingerprints as they are now: a change of
/// the fingerprints or of the look-alike made from them is seen here, and the seeds written
/// again (`WRITE_SEED=1`). Each is what its name says: the look-alike recognised, then made
/// unreadable by a patch or, as a module, by the lack of `js::Interpret`; cut, not SpiderMonkey
/// (its data, after its code, is gone).
#[test]
fn spidermonkey_recognize_seeds_are_the_look_alike() {
    use wasmspy::internals::runtimes::spidermonkey::recognize::Recognition::{self, *};
    let unreadable = |r: &Recognition, why: &str| matches!(r, Unreadable(s) if s.contains(why));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/spidermonkey_recognize");
    for (name, seed) in guest_readers::spidermonkey_recognize_seeds() {
        let (raw, patched) = guest_readers::spidermonkey_recognize(&seed);
        let expected = match name {
            "look_alike" => matches!(patched, Engine(_)),
            "tls_context_moved" => unreadable(&patched, "disagree"),
            "no_interpreter" => unreadable(&raw, "no function is `js::Interpret"),
            "cut" => raw == NotSpiderMonkey,
            _ => false,
        };
        assert!(expected, "{name}: {raw:?}, patched {patched:?}");
        let path = dir.join(name);
        if std::env::var_os("WRITE_SEED").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &seed).unwrap();
        }
        assert!(
            std::fs::read(&path).is_ok_and(|committed| committed == seed),
            "{}: WRITE_SEED=1 writes it",
            path.display()
        );
    }
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
