//! Corrupted DWARF for the symbolizer: shared by the fuzz target (`fuzz/`) and the corruption
//! test that runs in CI.

use std::sync::Arc;

use wasmparser::{Parser, Payload};
use wasmspy::resolve::symbolize::{ModuleBytes, ModuleSymbolizer};

/// Overwrites bytes of `module`'s `.debug_*` sections as `patch` says, then symbolizes one in
/// every [`ADDRESS_STEP`] code offsets of the module (every function, most lines: a fuzzer wants
/// many runs a second). `patch` is a list of 5-byte records: which section (modulo their
/// number), a little-endian 24-bit position (modulo its size) and the byte to write there.
pub const ADDRESS_STEP: usize = 7;

pub fn symbolize_corrupted(module: &[u8], patch: &[u8]) {
    let mut wasm = module.to_vec();
    let mut sections = Vec::new();
    let mut code = 0..0;
    for payload in Parser::new(0).parse_all(module) {
        match payload.expect("the module before corruption is valid") {
            Payload::CustomSection(r)
                if r.name().starts_with(".debug_") && !r.data().is_empty() =>
            {
                sections.push(r.data_offset()..r.data_offset() + r.data().len());
            }
            Payload::CodeSectionStart { range, .. } => code = range,
            _ => {}
        }
    }
    if sections.is_empty() {
        return;
    }
    for record in patch.chunks_exact(5) {
        let section = &sections[record[0] as usize % sections.len()];
        let at = u32::from_le_bytes([record[1], record[2], record[3], 0]) as usize % section.len();
        wasm[section.start + at] = record[4];
    }
    let wasm: Arc<[u8]> = wasm.into();
    let mut symbolizer = ModuleSymbolizer::new("fuzz.wasm", ModuleBytes::whole(wasm), true)
        .expect("the module parses");
    let addresses: Vec<(u32, u32)> = code
        .step_by(ADDRESS_STEP)
        .map(|offset| (0, offset as u32))
        .collect();
    symbolizer.symbolize(&addresses);
    for &(func, offset) in addresses.iter().step_by(13) {
        assert!(!symbolizer.source_frames(func, offset).is_empty());
    }
}
