//! CPython's `_Py_DebugOffsets` and the interpreter's memory as the fuzzer writes them: the
//! layout read from a module's data (CPython 3.13 and later without DWARF), then the Python
//! stack walked, as the signal handler walks it, over that memory (the offsets' own bytes
//! in it where CPython keeps them, at `_PyRuntime`), then the names decoded. Never a panic, a
//! read outside the memory (a slice here) or a walk that does not end.
//! `cargo fuzz run python_offsets`; the corpus is `fuzz/corpus/python_offsets`.
#![no_main]

use libfuzzer_sys::fuzz_target;

// Each target uses one of the shared harnesses.
#[allow(dead_code)]
#[path = "../../tests/common/guest_readers.rs"]
mod guest_readers;

fuzz_target!(|data: &[u8]| guest_readers::python_offsets(data));
