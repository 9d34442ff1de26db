//! pprof files, raw and gzipped, read as `wasmspy report`/`convert` read them: never a panic.
//! `cargo fuzz run pprof` (see CONTRIBUTING.md, "Fuzzing"); the corpus is `fuzz/corpus/pprof`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/read_any.rs"]
mod read_any;

fuzz_target!(|data: &[u8]| {
    read_any::read_and_use(data);
    read_any::read_and_use(&read_any::gzip(data));
});
