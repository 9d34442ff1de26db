//! SpiderMonkey's memory as the fuzzer writes it (two bytes place `js::TlsContext`, the rest is
//! the memory): the JavaScript stack walked over it as the signal handler walks it, the names
//! decoded. Never a panic, a read outside the memory (a slice here) or a walk that does not end.
//! `cargo fuzz run spidermonkey_walk`; the corpus is `fuzz/corpus/spidermonkey_walk`.
#![no_main]

use libfuzzer_sys::fuzz_target;

// Each target uses one of the shared harnesses.
#[allow(dead_code)]
#[path = "../../tests/common/guest_readers.rs"]
mod guest_readers;

fuzz_target!(|data: &[u8]| guest_readers::spidermonkey_walk(data));
