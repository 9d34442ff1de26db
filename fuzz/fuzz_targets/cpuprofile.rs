//! `.cpuprofile` files (ours, V8's) read as `wasmspy report`/`convert` read them: never a
//! panic, nor a hang on a call tree that loops or runs deep. `cargo fuzz run cpuprofile` (see
//! CONTRIBUTING.md, "Fuzzing"); the corpus is `fuzz/corpus/cpuprofile`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/read_any.rs"]
mod read_any;

fuzz_target!(|data: &[u8]| read_any::read_and_use(data));
