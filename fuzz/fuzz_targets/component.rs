//! Components as the fuzzer writes them, read as `record` reads them (their core modules, the
//! WIT functions they lower) and their allocators rewritten for memory profiles: never a
//! panic; a rewrite of a valid component is valid. `cargo fuzz run component
//! fuzz/corpus/component tests/fixtures/rust` (the fixtures as seeds, not committed twice).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wasmspy::memory::component::rewrite_component;
use wasmspy::internals::wasm::component::{core_modules, validated};

fuzz_target!(|component: &[u8]| {
    let _ = core_modules(component);
    let valid = validated(component).is_ok();
    if let Ok(Some(rewritten)) = rewrite_component(component) {
        if valid {
            validated(&rewritten.wasm).expect("the rewrite of a valid component is valid");
        }
    }
});
