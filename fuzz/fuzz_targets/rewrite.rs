//! The allocator rewrite (memory profiles) of valid modules that wasm-smith makes with C's
//! allocators among their exports (`malloc`, `free`, `calloc`, `realloc`, with random bodies):
//! never a panic, the rewritten module valid, and every code offset of it mapped back inside
//! the original's code. `cargo fuzz run rewrite`.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use wasm_smith::{Config, Module};
use wasmparser::{Parser, Payload, Validator};
use wasmspy::memory::rewrite::rewrite;

/// What the generated modules export, at least: C's allocators, as wasi-libc's.
const ALLOCATORS: &str = r#"(module
    (memory (export "memory") 1)
    (func (export "malloc") (param i32) (result i32) unreachable)
    (func (export "free") (param i32) unreachable)
    (func (export "calloc") (param i32 i32) (result i32) unreachable)
    (func (export "realloc") (param i32 i32) (result i32) unreachable))"#;

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let mut config: Config = u.arbitrary()?;
    config.exports = Some(wat::parse_str(ALLOCATORS).unwrap());
    config.min_memories = 1;
    config.max_memories = 1;
    config.memory64_enabled = false;
    config.gc_enabled = false;
    config.exceptions_enabled = false;
    let wasm = Module::new(config, u)?.to_bytes();
    if Validator::new().validate_all(&wasm).is_err() {
        return Ok(());
    }
    let Some(rewritten) = rewrite(&wasm).expect("a valid module with allocators is rewritten")
    else {
        return Ok(());
    };
    Validator::new()
        .validate_all(&rewritten.wasm)
        .expect("the rewrite of a valid module is valid");
    let original_code = code_range(&wasm);
    let code = code_range(&rewritten.wasm);
    for offset in code.start..code.end {
        if let Some(original) = rewritten.original_offset(offset as u32) {
            assert!(
                original_code.contains(&(original as usize)),
                "offset {offset} mapped to {original}, outside the original's code {original_code:?}"
            );
        }
    }
    Ok(())
}

fn code_range(wasm: &[u8]) -> std::ops::Range<usize> {
    Parser::new(0)
        .parse_all(wasm)
        .find_map(|p| match p {
            Ok(Payload::CodeSectionStart { range, .. }) => Some(range),
            _ => None,
        })
        .unwrap_or(0..0)
}
