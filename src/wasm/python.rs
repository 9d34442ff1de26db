//! CPython built for WASI, as a reader of its Python stack needs it: where the interpreter's
//! state is and how its structures are laid out, from the module's DWARF
//! ([`super::dwarf_layout`]), so that one reader serves CPython 3.11, 3.12 and 3.13.
//!
//! The chain from the runtime to the running Python frame (`Include/internal/pycore_*.h`):
//! `_PyRuntime.interpreters.main` → `PyInterpreterState.threads.head` (WASI runs one
//! thread) → the thread's current frame, `tstate->cframe->current_frame` before 3.13,
//! `tstate->current_frame` since → `_PyInterpreterFrame.previous` … Each frame names its code
//! object (`f_code`; `f_executable` in 3.13) and its instruction (`prev_instr`, the code unit
//! before the next one, before 3.13; `instr_ptr`, the current one, since), relative to the
//! code object's bytecode (`co_code_adaptive`). Frames the interpreter pushes for a call from
//! C (entry frames: `is_entry` in 3.11, `owner == FRAME_OWNED_BY_CSTACK` since) run no code
//! of their own.

use anyhow::Result;

use super::dwarf_layout::{self, Layout, Member};

/// How a frame's instruction pointer is meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instruction {
    /// `prev_instr` (3.11, 3.12): the code unit before the next instruction.
    Previous,
    /// `instr_ptr` (3.13): the instruction running or about to.
    Current,
}

/// How an entry frame (pushed for a call from C) is marked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryMark {
    /// `is_entry`, a bool at this offset (3.11).
    IsEntry(u32),
    /// `owner`, a char at this offset, equal to `FRAME_OWNED_BY_CSTACK` (3) (3.12, 3.13).
    Owner(u32),
}

/// Where CPython keeps its state and what its structures look like, in a module's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonLayout {
    /// `_PyRuntime`'s address.
    pub runtime: u32,
    /// `_PyRuntimeState.interpreters.main`.
    pub main_interpreter: u32,
    /// `PyInterpreterState.threads.head`.
    pub threads_head: u32,
    /// From a thread state to its current frame: `cframe` then `current_frame` before 3.13,
    /// `current_frame` alone since.
    pub current_frame: Vec<u32>,
    /// `_PyInterpreterFrame` members.
    pub frame_code: u32,
    pub frame_previous: u32,
    pub frame_instruction: u32,
    pub instruction: Instruction,
    pub entry: EntryMark,
    /// `PyCodeObject` members: `co_qualname`, `co_filename`, `co_linetable`,
    /// `co_firstlineno`, and where its bytecode starts (`co_code_adaptive`).
    pub code_qualname: u32,
    pub code_filename: u32,
    pub code_linetable: u32,
    pub code_first_line: u32,
    pub code_bytecode: u32,
    /// `str` objects: the length, the state bits, and where a compact ASCII string's
    /// characters start (`sizeof(PyASCIIObject)`) and a compact non-ASCII one's
    /// (`sizeof(PyCompactUnicodeObject)`).
    pub str_length: u32,
    pub str_state: u32,
    pub str_ascii_data: u32,
    pub str_compact_data: u32,
    /// `bytes` objects (line tables): the size and where the bytes start.
    pub bytes_size: u32,
    pub bytes_data: u32,
}

const PATHS: &[&str] = &[
    "_PyRuntimeState.interpreters.main",
    "PyInterpreterState.threads.head",
    "PyThreadState.cframe",
    "_PyCFrame.current_frame",
    "PyThreadState.current_frame",
    "_PyInterpreterFrame.f_code",
    "_PyInterpreterFrame.f_executable",
    "_PyInterpreterFrame.previous",
    "_PyInterpreterFrame.prev_instr",
    "_PyInterpreterFrame.instr_ptr",
    "_PyInterpreterFrame.is_entry",
    "_PyInterpreterFrame.owner",
    "PyCodeObject.co_qualname",
    "PyCodeObject.co_filename",
    "PyCodeObject.co_linetable",
    "PyCodeObject.co_firstlineno",
    "PyCodeObject.co_code_adaptive",
    "PyASCIIObject.length",
    "PyASCIIObject.state",
    "PyCompactUnicodeObject.utf8",
    "PyBytesObject.ob_base.ob_size",
    "PyBytesObject.ob_sval",
];

impl PythonLayout {
    /// CPython's layout in `wasm`, if its DWARF describes CPython (`_PyRuntime` and the
    /// structures above); `None` otherwise, with what is missing.
    pub fn read(wasm: &[u8]) -> Result<std::result::Result<Self, String>> {
        let layout = dwarf_layout::read(wasm, &["_PyRuntime"], PATHS)?;
        Ok(Self::of(&layout))
    }

    fn of(layout: &Layout) -> std::result::Result<Self, String> {
        let runtime = layout
            .variables
            .get("_PyRuntime")
            .copied()
            .ok_or("no `_PyRuntime` in its DWARF: not CPython")?;
        let member = |path: &str| -> std::result::Result<Member, String> {
            layout
                .members
                .get(path)
                .copied()
                .ok_or_else(|| format!("its DWARF does not describe `{path}`"))
        };
        let offset = |path: &str| member(path).map(|m| m.offset as u32);
        let either = |newer: &str, older: &str| offset(newer).or_else(|_| offset(older));
        let current_frame = match offset("PyThreadState.current_frame") {
            Ok(direct) => vec![direct],
            Err(_) => vec![
                offset("PyThreadState.cframe")?,
                offset("_PyCFrame.current_frame")?,
            ],
        };
        let (frame_instruction, instruction) = match offset("_PyInterpreterFrame.instr_ptr") {
            Ok(at) => (at, Instruction::Current),
            Err(_) => (
                offset("_PyInterpreterFrame.prev_instr")?,
                Instruction::Previous,
            ),
        };
        let entry = match offset("_PyInterpreterFrame.is_entry") {
            Ok(at) => EntryMark::IsEntry(at),
            Err(_) => EntryMark::Owner(offset("_PyInterpreterFrame.owner")?),
        };
        let size = |name: &str| -> std::result::Result<u32, String> {
            layout
                .sizes
                .get(name)
                .map(|&s| s as u32)
                .ok_or_else(|| format!("its DWARF does not describe `{name}`"))
        };
        Ok(PythonLayout {
            runtime: u32::try_from(runtime).map_err(|_| "`_PyRuntime` beyond 4 GiB")?,
            main_interpreter: offset("_PyRuntimeState.interpreters.main")?,
            threads_head: offset("PyInterpreterState.threads.head")?,
            current_frame,
            frame_code: either(
                "_PyInterpreterFrame.f_executable",
                "_PyInterpreterFrame.f_code",
            )?,
            frame_previous: offset("_PyInterpreterFrame.previous")?,
            frame_instruction,
            instruction,
            entry,
            code_qualname: offset("PyCodeObject.co_qualname")?,
            code_filename: offset("PyCodeObject.co_filename")?,
            code_linetable: offset("PyCodeObject.co_linetable")?,
            code_first_line: offset("PyCodeObject.co_firstlineno")?,
            code_bytecode: offset("PyCodeObject.co_code_adaptive")?,
            str_length: offset("PyASCIIObject.length")?,
            str_state: offset("PyASCIIObject.state")?,
            str_ascii_data: size("PyASCIIObject")?,
            str_compact_data: size("PyCompactUnicodeObject")?,
            bytes_size: offset("PyBytesObject.ob_base.ob_size")?,
            bytes_data: offset("PyBytesObject.ob_sval")?,
        })
    }
}
