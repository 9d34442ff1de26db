//! The readers of guest-supplied bytes that the fuzz targets of the same names drive
//! (`fuzz/fuzz_targets/`), shared with `tests/fuzz_corpus.rs`, which replays their corpora on
//! stable Rust: a Go symbol table (`pclntab`), CPython's `_Py_DebugOffsets` with the Python
//! stack walked over made-up memory, SpiderMonkey's JavaScript stack walked over made-up memory,
//! and corrupted DWARF under the structure-layout reader.

use wasm_encoder::{
    CodeSection, ConstExpr, CustomSection, DataSection, Function, FunctionSection, Instruction,
    MemorySection, MemoryType, Module, TypeSection, ValType,
};
use wasmspy::internals::runtimes::cpython::layout::{eval_loop, PythonLayout};
use wasmspy::internals::runtimes::cpython::layout_without_dwarf;
use wasmspy::internals::runtimes::go::{GoModule, BUILD_ID_SECTION, FIRST_PC_F};
use wasmspy::internals::runtimes::interpreted::{CodeId, Frame};
use wasmspy::internals::runtimes::spidermonkey::example as spidermonkey;
use wasmspy::internals::runtimes::spidermonkey::ScriptCode;
use wasmspy::internals::shared::Memory;
use wasmspy::internals::shared::MAX_STACK_DEPTH;
use wasmspy::internals::wasm::dwarf_layout;
use wasmspy::internals::PythonCode;

#[path = "corrupt_dwarf.rs"]
#[allow(dead_code)]
mod corrupt_dwarf;

/// Defined functions: `PC_F` 0x1000 to 0x1007 in the table name them.
const FUNCTIONS: u32 = 8;
/// `pcHeader`'s first bytes (Go 1.20 and later: magic, pads, quantum 1, pointer size 8).
const HEADER_START: [u8; 8] = [0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8];

/// `table` as a Go module's symbol table: read, and frames looked up in it, never a panic,
/// whatever its offsets, counts and strings say.
pub fn go_module(table: &[u8]) {
    let wasm = module(table);
    let Some(go) = GoModule::read(&wasm) else {
        return;
    };
    let _ = go.before_go_1_25();
    for f in go.defined_functions().flatten() {
        let _ = (f.name.len(), f.file.len(), f.start_line, f.frame_size);
    }
    for index in 0..=FUNCTIONS {
        let _ = go.function(index);
        for offset in [0, 1, 2, 3, 5, 8, 1 << 20] {
            let _ = go.frames_at(&wasm, index, offset);
        }
        let pc_f = u64::from(FIRST_PC_F + index);
        for pc in [
            pc_f,
            pc_f << 16,
            pc_f << 16 | 1,
            pc_f << 16 | 0xffff,
            u64::MAX,
        ] {
            let _ = go.location_of(&wasm, pc);
        }
    }
}

/// A module with Go's build ID, [`FUNCTIONS`] functions `(i32) -> i32` (Go's ABI) and `table`
/// after the header's first bytes in a data segment, where Go's linker puts it.
fn module(table: &[u8]) -> Vec<u8> {
    let mut module = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32], [ValType::I32]);
    module.section(&types);
    let mut functions = FunctionSection::new();
    for _ in 0..FUNCTIONS {
        functions.function(0);
    }
    module.section(&functions);
    module.section(&memory_section(2));
    let mut code = CodeSection::new();
    for i in 0..FUNCTIONS {
        let mut body = Function::new([]);
        // Go's resume loop reads a block index from its parameter: a few blocks to find.
        for _ in 0..i {
            body.instruction(&Instruction::Block(wasm_encoder::BlockType::Empty));
        }
        for _ in 0..i {
            body.instruction(&Instruction::End);
        }
        body.instruction(&Instruction::LocalGet(0));
        body.instruction(&Instruction::End);
        code.function(&body);
    }
    module.section(&code);
    let mut data = DataSection::new();
    let bytes: Vec<u8> = HEADER_START.iter().chain(table).copied().collect();
    data.active(0, &ConstExpr::i32_const(4096), bytes);
    module.section(&data);
    module.section(&CustomSection {
        name: BUILD_ID_SECTION.into(),
        data: b"fuzz".as_slice().into(),
    });
    module.finish()
}

/// The guest's memory: reads past its end fail, as reads past a linear memory's length do.
struct Slice<'a>(&'a [u8]);

impl Memory for Slice<'_> {
    fn read(&self, address: u64, out: &mut [u8]) -> Option<()> {
        let start = usize::try_from(address).ok()?;
        out.copy_from_slice(self.0.get(start..start.checked_add(out.len())?)?);
        Some(())
    }
}

/// CPython's `_Py_DebugOffsets` and the interpreter's memory as `data` says (two bytes place
/// `_PyRuntime`, the rest is the memory, the cookie written at it): the layout read from a
/// module's data, the stack walked over that memory, the names decoded.
pub fn python_offsets(data: &[u8]) {
    // Two bytes place `_PyRuntime`; the rest is the memory, the cookie written at it.
    let Some((place, memory)) = data.split_first_chunk::<2>() else {
        return;
    };
    let mut memory = memory.to_vec();
    memory.resize(memory.len().max(64), 0);
    let runtime = usize::from(u16::from_le_bytes(*place)) % (memory.len() - 8);
    memory[runtime..runtime + 8].copy_from_slice(b"xdebugpy");
    let wasm = memory_module(&memory);
    let Some(Ok(layout)) = layout_without_dwarf(&wasm) else {
        return;
    };
    let code = PythonCode::new(layout);
    let mut out = vec![0; MAX_STACK_DEPTH];
    let written = code.walk(&Slice(&memory), &mut out);
    assert!(written <= out.len());
    for &word in &out[..written] {
        if let Frame::Code { id, .. } = Frame::unpack(word) {
            if id != CodeId::UNKNOWN {
                let _ = code.names().get(id);
            }
        }
    }
}

/// SpiderMonkey's memory as `data` says (two bytes place `js::TlsContext`, the rest is the
/// memory): the JavaScript stack walked over it as the signal handler walks it, with the
/// layout of ComponentizeJS 0.23's engines, the names decoded. The seeds are the walk's
/// example (`src/runtimes/spidermonkey/example.rs`), whole and in parts.
pub fn spidermonkey_walk(data: &[u8]) {
    let Some((place, memory)) = data.split_first_chunk::<2>() else {
        return;
    };
    let code = ScriptCode::new(spidermonkey::layout());
    let mut out = vec![0; MAX_STACK_DEPTH];
    let written = code.walk(
        &Slice(memory),
        u32::from(u16::from_le_bytes(*place)),
        &mut out,
    );
    assert!(written <= out.len());
    for &word in &out[..written] {
        if let Frame::Code { id, .. } = Frame::unpack(word) {
            if id != CodeId::UNKNOWN {
                let _ = code.names().get(id);
            }
        }
    }
}

/// The seed of [`spidermonkey_walk`]: the example engine's state, its `js::TlsContext`'s
/// address first.
pub fn spidermonkey_seed() -> Vec<u8> {
    let image = spidermonkey::running().0;
    let used = image.iter().rposition(|b| *b != 0).unwrap_or(0) + 1;
    let mut seed = (spidermonkey::TLS_CONTEXT as u16).to_le_bytes().to_vec();
    seed.extend_from_slice(&image[..used]);
    seed
}

/// A module whose memory is `image` (one active data segment at address 0).
fn memory_module(image: &[u8]) -> Vec<u8> {
    let mut module = Module::new();
    module.section(&memory_section(1));
    let mut data = DataSection::new();
    data.active(0, &ConstExpr::i32_const(0), image.iter().copied());
    module.section(&data);
    module.finish()
}

const LAYOUT: &[u8] = include_bytes!("../fixtures/c/layout.wasm");

/// The members `tests` of `src/wasm/dwarf_layout.rs` read, and some that are not there.
const PATHS: &[&str] = &[
    "Outer.tag",
    "Outer.in.a",
    "Outer.in.b",
    "outer.named.x",
    "Outer.named.y",
    "Outer.u1",
    "Outer.u2",
    "Outer.ptr",
    "Outer.missing",
    "Inner.b",
    "Inner",
    "",
    ".",
    "Outer..b",
];

/// `c/layout.wasm` with its DWARF patched as `patch` says, under the structure-layout reader
/// and CPython's: never a panic.
pub fn dwarf_layout(patch: &[u8]) {
    let Some((wasm, _)) = corrupt_dwarf::corrupted(LAYOUT, patch) else {
        return;
    };
    let _ = dwarf_layout::read(&wasm, &["the_outer", "nowhere"], PATHS);
    let _ = dwarf_layout::parameter_offsets(&wasm, "main");
    let _ = PythonLayout::read(&wasm);
    let _ = eval_loop(&wasm);
}

/// One 32-bit memory of `pages` pages at least.
fn memory_section(pages: u64) -> MemorySection {
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: pages,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    memories
}
