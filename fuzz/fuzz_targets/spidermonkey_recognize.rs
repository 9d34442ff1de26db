//! Bytes as the fuzzer writes them, as a core module and as a patch of a SpiderMonkey
//! look-alike made from recognition's fingerprints (4-byte records: a position and a byte):
//! each recognised, and each function's loads and stores read as recognition reads them. Never
//! a panic, nor more accesses than its body has room for (a read that does not end); the
//! look-alike unpatched is recognised. `cargo fuzz run spidermonkey_recognize`; the corpus is
//! `fuzz/corpus/spidermonkey_recognize`.
#![no_main]

use libfuzzer_sys::fuzz_target;

// Each target uses one of the shared harnesses.
#[allow(dead_code)]
#[path = "../../tests/common/guest_readers.rs"]
mod guest_readers;

fuzz_target!(|data: &[u8]| {
    guest_readers::spidermonkey_recognize(data);
});
