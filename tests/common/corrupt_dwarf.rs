//! Corrupted DWARF for the symbolizer: shared by the fuzz target (`fuzz/`) and the corruption
//! test that runs in CI.

use std::sync::Arc;

use wasmparser::{Parser, Payload};
use wasmspy::internals::resolve::symbolize::ModuleSymbolizer;
use wasmspy::internals::wasm::module_bytes::ModuleBytes;

/// Code offsets symbolized: one in this many (every function, most lines: a fuzzer wants many
/// runs a second).
pub const ADDRESS_STEP: usize = 7;

/// `module` with bytes of its `.debug_*` sections overwritten as `patch` says, and its code
/// section's range; `None` for a module without DWARF. `patch` is a list of 5-byte records:
/// which section (modulo their number), a little-endian 24-bit position (modulo its size) and
/// the byte to write there.
pub fn corrupted(module: &[u8], patch: &[u8]) -> Option<(Vec<u8>, std::ops::Range<usize>)> {
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
        return None;
    }
    for record in patch.chunks_exact(5) {
        let section = &sections[record[0] as usize % sections.len()];
        let at = u32::from_le_bytes([record[1], record[2], record[3], 0]) as usize % section.len();
        wasm[section.start + at] = record[4];
    }
    Some((wasm, code))
}

/// Symbolizes one in every [`ADDRESS_STEP`] code offsets of `module` [`corrupted`] by `patch`.
pub fn symbolize_corrupted(module: &[u8], patch: &[u8]) {
    let Some((wasm, code)) = corrupted(module, patch) else {
        return;
    };
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
