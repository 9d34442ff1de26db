//! Instrumenting a component without moving any of its indices: sections appended after its
//! own (the runtime probe's, the allocator rewrite's gate), numbered from the counts of its
//! index spaces, which its validation gives.

use std::sync::Arc;

use anyhow::{Context, Result};
use wasmparser::types::Types;
use wasmparser::{Parser, Validator, WasmFeatures};

/// `component` validated but for its functions' bodies (Wasmtime validates them as it compiles
/// them, a warm cache not again: all of a 14 MB StarlingMonkey component's took 0.4 s a pass):
/// its index spaces' counts (`types.as_ref()`) number what sections appended to it define.
pub fn validated(component: &[u8]) -> Result<Types> {
    let mut validator = Validator::new_with_features(WasmFeatures::all());
    let mut types = None;
    for payload in Parser::new(0).parse_all(component) {
        // The top level's `End`, the last.
        if let wasmparser::ValidPayload::End(end) = validator.payload(&payload?)? {
            types = Some(end);
        }
    }
    types.context("no component").context("invalid component")
}

/// `base`, a component's binary, with `appended`'s sections after its own: how wasmspy
/// instruments a component without moving any of its indices. Not validated again here:
/// Wasmtime validates all it compiles (and its cache holds only bytes it validated), and the
/// tests compile every kind of instrumented component (a second pass over a 18 MB component
/// took 17 ms of a warm start's 0.38 s of CPU).
pub fn append_sections(mut base: Vec<u8>, appended: wasm_encoder::Component) -> Vec<u8> {
    base.extend_from_slice(section_bytes(&appended));
    base
}

/// [`append_sections`] into shared bytes, `base` copied once: the probed component is both
/// compiled and kept by the profiler (a copy of a 18 MB component, its pages touched for the
/// first time, took 12 ms of a warm start).
pub fn appended_to(base: &[u8], appended: wasm_encoder::Component) -> Arc<[u8]> {
    let tail = section_bytes(&appended);
    let mut joined = Arc::<[u8]>::new_uninit_slice(base.len() + tail.len());
    let bytes = Arc::get_mut(&mut joined).expect("a new Arc is not shared");
    bytes[..base.len()].write_copy_of_slice(base);
    bytes[base.len()..].write_copy_of_slice(tail);
    // SAFETY: both copies above wrote every byte.
    unsafe { joined.assume_init() }
}

/// `appended`'s sections, without the header a component's binary starts with.
fn section_bytes(appended: &wasm_encoder::Component) -> &[u8] {
    &appended.as_slice()[wasm_encoder::Component::HEADER.len()..]
}
