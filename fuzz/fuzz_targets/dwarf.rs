//! Corrupted DWARF sections fed to the symbolizer: it must never panic.
//! `cargo fuzz run dwarf` (see CONTRIBUTING.md, "Fuzzing"); the input patches the DWARF of the fixtures.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../tests/common/corrupt_dwarf.rs"]
mod corrupt_dwarf;

const C_DWARF5: &[u8] = include_bytes!("../../tests/fixtures/c/inline-dwarf5.wasm");
const CPP_DWARF4: &[u8] = include_bytes!("../../tests/fixtures/cpp/inline.wasm");

fuzz_target!(|data: &[u8]| {
    // The first byte picks the module, the rest patches its DWARF.
    let Some((&which, patch)) = data.split_first() else {
        return;
    };
    let module = if which % 2 == 0 { C_DWARF5 } else { CPP_DWARF4 };
    corrupt_dwarf::symbolize_corrupted(module, patch);
});
