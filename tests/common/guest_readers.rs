//! The readers of guest-supplied bytes that the fuzz targets of the same names drive
//! (`fuzz/fuzz_targets/`), shared with `tests/fuzz_corpus.rs`, which replays their corpora on
//! stable Rust: a Go symbol table (`pclntab`), CPython's `_Py_DebugOffsets` with the Python
//! stack walked over made-up memory, SpiderMonkey's JavaScript stack walked over made-up memory,
//! SpiderMonkey recognised in made-up and damaged modules, and corrupted DWARF under the
//! structure-layout reader.

use std::ops::ControlFlow;
use std::sync::OnceLock;

use wasm_encoder::{
    CodeSection, ConstExpr, CustomSection, DataSection, Function, FunctionSection, Instruction,
    MemorySection, MemoryType, Module, TypeSection, ValType,
};
use wasmspy::internals::runtimes::cpython::layout::{eval_loop, PythonLayout};
use wasmspy::internals::runtimes::cpython::layout_without_dwarf;
use wasmspy::internals::runtimes::go::{GoModule, BUILD_ID_SECTION, FIRST_PC_F};
use wasmspy::internals::runtimes::interpreted::{CodeId, Frame};
use wasmspy::internals::runtimes::spidermonkey::example as spidermonkey;
use wasmspy::internals::runtimes::spidermonkey::recognize::{
    look_alike, recognize, Code, Recognition, Recognized, Scratch, ACCESS_BYTES, RELEASE,
    TLS_CONTEXT,
};
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
/// examples (`src/runtimes/spidermonkey/example.rs`), whole and in parts.
pub fn spidermonkey_walk(data: &[u8]) {
    spidermonkey_walked(data);
}

/// [`spidermonkey_walk`]'s frames, innermost first: each one's name (empty where it has none)
/// and line, `None` after each activation's.
pub fn spidermonkey_walked(data: &[u8]) -> Vec<Option<(String, u32)>> {
    let Some((place, memory)) = data.split_first_chunk::<2>() else {
        return Vec::new();
    };
    let code = ScriptCode::new(spidermonkey::layout());
    let mut out = vec![0; MAX_STACK_DEPTH];
    let written = code.walk(
        &Slice(memory),
        u32::from(u16::from_le_bytes(*place)),
        &mut out,
    );
    assert!(written <= out.len());
    out[..written]
        .iter()
        .map(|&word| match Frame::unpack(word) {
            Frame::Code { id, line } => {
                let names = (id != CodeId::UNKNOWN).then(|| code.names().get(id));
                Some((
                    names.flatten().map(|n| n.qualname).unwrap_or_default(),
                    line,
                ))
            }
            Frame::Activation => None,
        })
        .collect()
}

/// The seeds of [`spidermonkey_walk`], by file name, each an example engine's state, its
/// `js::TlsContext`'s address first: `example`, the interpreter's activation (`running`);
/// `example_pbl`, a JIT activation's portable baseline interpreter frames inside it
/// (`running_pbl`: the trampoline's `Stack`, the runtime's PBL stack top, the frames'
/// headers and `BaselineFrame`s).
pub fn spidermonkey_walk_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let seed = |image: Vec<u8>| {
        // Up to its last word that is not 0, whole (the widest the walk reads is 8 bytes).
        let used = image.iter().rposition(|b| *b != 0).unwrap_or(0) + 1;
        let used = used.next_multiple_of(8).min(image.len());
        let mut seed = (spidermonkey::TLS_CONTEXT as u16).to_le_bytes().to_vec();
        seed.extend_from_slice(&image[..used]);
        seed
    };
    vec![
        ("example", seed(spidermonkey::running().0)),
        ("example_pbl", seed(spidermonkey::running_pbl().0)),
    ]
}

/// Where the recognition target's look-alike keeps `js::TlsContext`.
const LOOK_ALIKE_TLS: u32 = 0x2000;

/// The look-alike [`spidermonkey_recognize`] patches: recognised, `js::Interpret` after the
/// functions that read `js::TlsContext`.
fn spidermonkey_look_alike() -> &'static [u8] {
    static MODULE: OnceLock<Vec<u8>> = OnceLock::new();
    MODULE.get_or_init(|| look_alike::engine_like(&[LOOK_ALIKE_TLS; TLS_CONTEXT.len()], 1))
}

/// `data` as a core module, and as a patch of a SpiderMonkey look-alike (4-byte records: a
/// little-endian 24-bit position, modulo the module's size, and the byte to write there):
/// each recognised, never a panic, and each function's loads and stores read with at most one
/// per [`ACCESS_BYTES`] bytes of its body, the bound recognition skips bodies by (the reader
/// never reads an operator twice, nor past its body). The look-alike unpatched is recognised
/// as what it is. What each was recognised as: `data`, the patched look-alike.
pub fn spidermonkey_recognize(data: &[u8]) -> (Recognition, Recognition) {
    let raw = recognized(data);
    let mut wasm = spidermonkey_look_alike().to_vec();
    for record in data.chunks_exact(4) {
        let at = u32::from_le_bytes([record[0], record[1], record[2], 0]) as usize % wasm.len();
        wasm[at] = record[3];
    }
    let recognition = recognized(&wasm);
    if data.len() < 4 {
        assert_eq!(
            recognition,
            Recognition::Engine(Recognized {
                version: RELEASE,
                tls_context: LOOK_ALIKE_TLS,
                interpreter: TLS_CONTEXT.len() as u32,
            })
        );
    }
    (raw, recognition)
}

/// `recognize(wasm)`, after reading every function's accesses as recognition reads them.
fn recognized(wasm: &[u8]) -> Recognition {
    if let Ok(code) = Code::parse(wasm) {
        let mut scratch = Scratch::default();
        for func in code.defined() {
            let size = code.body(func).map_or(0, |b| b.as_bytes().len());
            let mut accesses = 0;
            let _ = code.accesses(&mut scratch, func, |_, _| {
                accesses += 1;
                ControlFlow::Continue(())
            });
            assert!(
                accesses * ACCESS_BYTES <= size,
                "function {func}: {accesses} accesses in {size} bytes"
            );
        }
    }
    recognize(wasm)
}

/// The seeds of [`spidermonkey_recognize`], by file name: no patch (the look-alike as it is);
/// the patch that has the first function reading `js::TlsContext` read another address (the
/// functions disagree: unreadable); as a module, the look-alike without its `js::Interpret`
/// (unreadable), whole and cut inside its code.
pub fn spidermonkey_recognize_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut moved = vec![LOOK_ALIKE_TLS; TLS_CONTEXT.len()];
    moved[0] += 4;
    let (module, other) = (
        spidermonkey_look_alike(),
        look_alike::engine_like(&moved, 1),
    );
    assert_eq!(module.len(), other.len());
    let patch: Vec<u8> = (0..module.len())
        .filter(|&at| module[at] != other[at])
        .flat_map(|at| {
            let mut record = (at as u32).to_le_bytes();
            record[3] = other[at];
            record
        })
        .collect();
    let readers = look_alike::engine_like(&[LOOK_ALIKE_TLS; TLS_CONTEXT.len()], 0);
    let cut = readers[..readers.len() * 2 / 3].to_vec();
    vec![
        ("look_alike", Vec::new()),
        ("tls_context_moved", patch),
        ("no_interpreter", readers),
        ("cut", cut),
    ]
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
