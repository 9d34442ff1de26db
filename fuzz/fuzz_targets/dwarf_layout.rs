//! Corrupted DWARF under the reader of structure layouts (how CPython's structures are laid
//! out, from its DWARF): never a panic. The input patches the DWARF of `c/layout.wasm` as the
//! `dwarf` target's does. `cargo fuzz run dwarf_layout`; the corpus is
//! `fuzz/corpus/dwarf_layout`.
#![no_main]

use libfuzzer_sys::fuzz_target;

// Each target uses one of the shared harnesses.
#[allow(dead_code)]
#[path = "../../tests/common/guest_readers.rs"]
mod guest_readers;

fuzz_target!(|patch: &[u8]| guest_readers::dwarf_layout(patch));
