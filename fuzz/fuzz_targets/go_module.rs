//! A Go module's symbol table (`pclntab`) as the fuzzer writes it, in a module otherwise shaped
//! like Go's (its build ID, functions of Go's signature, the table in a data segment): reading
//! it and looking frames up in it never panics, whatever its offsets, counts and strings say.
//! `cargo fuzz run go_module`; the corpus is `fuzz/corpus/go_module`.
#![no_main]

use libfuzzer_sys::fuzz_target;

// Each target uses one of the shared harnesses.
#[allow(dead_code)]
#[path = "../../tests/common/guest_readers.rs"]
mod guest_readers;

fuzz_target!(|data: &[u8]| guest_readers::go_module(data));
