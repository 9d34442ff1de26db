//! CPython built for WASI, as a reader of its Python stack needs it: where the interpreter's
//! state is and how its structures are laid out, from the module's DWARF
//! ([`crate::wasm::dwarf_layout`]; 3.11 to 3.13) or from what CPython publishes of itself
//! ([`super::debug_offsets`]; 3.13 to 3.15), so that one reader serves them all.
//!
//! The chain from the runtime to the running Python frame (`Include/internal/pycore_*.h`):
//! `_PyRuntime.interpreters.main` → `PyInterpreterState.threads.head` (WASI runs one
//! thread) → the thread's current frame, `tstate->cframe->current_frame` before 3.13,
//! `tstate->current_frame` since → `_PyInterpreterFrame.previous` … Each frame names its code
//! object (`f_code`; `f_executable` in 3.13) and its instruction (`prev_instr` before 3.13,
//! which CPython sets as it starts an instruction; `instr_ptr` since), relative to the code
//! object's bytecode (`co_code_adaptive`). Each activation of the eval loop (a call from C)
//! is marked: 3.11 sets `is_entry` on its first frame; 3.12 and 3.13 push an entry frame of
//! their own (`owner == FRAME_OWNED_BY_CSTACK`), which runs no code.

use anyhow::Result;

use crate::wasm::dwarf_layout::{self, Layout, Member};

/// How the first frame of an activation of the eval loop is marked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryMark {
    /// `is_entry`, a bool at this offset, set on the activation's first frame (3.11).
    IsEntry(u32),
    /// `owner`, a char at this offset, 3 or more in an entry frame pushed under the
    /// activation's first frame: `FRAME_OWNED_BY_CSTACK` (3) in 3.12 and 3.13,
    /// `FRAME_OWNED_BY_INTERPRETER` (3) since 3.14, where `FRAME_OWNED_BY_CSTACK` (4, 3.14
    /// only) marks frames of C that run no code either.
    Owner(u32),
}

/// From a thread state to its current frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameChain {
    /// 3.11, 3.12: `tstate->cframe`, one `_PyCFrame` per activation of the eval loop (on the
    /// C stack), its `current_frame` and `previous` (the activation that called it).
    CFrames {
        cframe: u32,
        current_frame: u32,
        previous: u32,
    },
    /// 3.13: `tstate->current_frame`.
    Direct { current_frame: u32 },
}

/// How a walk tells that an object is a code object, by its type (`ob_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeType {
    /// `PyCode_Type` is at this address (its DWARF says).
    Address(u32),
    /// The type's name (`tp_name`, a C string, at this offset of a type object) is `code`.
    Named { tp_name: u32 },
}

/// Where CPython keeps its state and what its structures look like, in a module's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PythonLayout {
    /// `_PyRuntime`'s address.
    pub runtime: u32,
    /// `_PyRuntimeState.interpreters.main`.
    pub main_interpreter: u32,
    /// `PyInterpreterState.threads.head`.
    pub threads_head: u32,
    pub chain: FrameChain,
    /// `PyObject.ob_type`, and how a code object's type is told.
    pub object_type: u32,
    pub code_type: CodeType,
    /// `_PyInterpreterFrame` members.
    pub frame_code: u32,
    pub frame_previous: u32,
    /// `prev_instr` (3.11, 3.12), `instr_ptr` (3.13): the instruction running, or the call
    /// a caller waits in (both name it so; before its code's first instruction runs, the
    /// code unit before it).
    pub frame_instruction: u32,
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
    "_PyCFrame.previous",
    "PyObject.ob_type",
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
        let layout = dwarf_layout::read(wasm, &["_PyRuntime", "PyCode_Type"], PATHS)?;
        Ok(Self::of(&layout))
    }

    fn of(layout: &Layout) -> std::result::Result<Self, String> {
        let variable = |name: &str| -> std::result::Result<u32, String> {
            let address = layout
                .variables
                .get(name)
                .copied()
                .ok_or_else(|| format!("its DWARF does not locate `{name}`"))?;
            u32::try_from(address).map_err(|_| format!("`{name}` beyond 4 GiB"))
        };
        let runtime = variable("_PyRuntime")?;
        let member = |path: &str| -> std::result::Result<Member, String> {
            layout
                .members
                .get(path)
                .copied()
                .ok_or_else(|| format!("its DWARF does not describe `{path}`"))
        };
        let offset = |path: &str| member(path).map(|m| m.offset as u32);
        let either = |newer: &str, older: &str| offset(newer).or_else(|_| offset(older));
        let chain = match offset("PyThreadState.current_frame") {
            Ok(current_frame) => FrameChain::Direct { current_frame },
            Err(_) => FrameChain::CFrames {
                cframe: offset("PyThreadState.cframe")?,
                current_frame: offset("_PyCFrame.current_frame")?,
                previous: offset("_PyCFrame.previous")?,
            },
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
            runtime,
            main_interpreter: offset("_PyRuntimeState.interpreters.main")?,
            threads_head: offset("PyInterpreterState.threads.head")?,
            chain,
            object_type: offset("PyObject.ob_type")?,
            code_type: CodeType::Address(variable("PyCode_Type")?),
            frame_code: either(
                "_PyInterpreterFrame.f_executable",
                "_PyInterpreterFrame.f_code",
            )?,
            frame_previous: offset("_PyInterpreterFrame.previous")?,
            frame_instruction: either(
                "_PyInterpreterFrame.instr_ptr",
                "_PyInterpreterFrame.prev_instr",
            )?,
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

/// The function index of the eval loop, `_PyEval_EvalFrameDefault`, whose each activation runs
/// the Python frames of one call from C: by the `name` section's name, else by its DWARF
/// (whose code addresses a post-link rewrite may have zeroed, as in VMware's builds): the one
/// function that spills each parameter where the DWARF says it lives in its frame
/// (`local.get FP; local.get PARAM; i32.store offset=OFFSET`, as unoptimized code does).
pub fn eval_loop(wasm: &[u8]) -> Result<Option<u32>> {
    const NAME: &str = "_PyEval_EvalFrameDefault";
    let mut imported = 0;
    let mut bodies = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload? {
            wasmparser::Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if matches!(
                        import?.ty,
                        wasmparser::TypeRef::Func(_) | wasmparser::TypeRef::FuncExact(_)
                    ) {
                        imported += 1;
                    }
                }
            }
            wasmparser::Payload::CodeSectionEntry(body) => bodies.push(body),
            wasmparser::Payload::CustomSection(reader) => {
                if let wasmparser::KnownCustom::Name(names) = reader.as_known() {
                    for name in names {
                        if let Ok(wasmparser::Name::Function(map)) = name {
                            for naming in map.into_iter().flatten() {
                                if naming.name == NAME {
                                    return Ok(Some(naming.index));
                                }
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let Some(offsets) = dwarf_layout::parameter_offsets(wasm, NAME)? else {
        return Ok(None);
    };
    let mut found = None;
    for (i, body) in bodies.iter().enumerate() {
        if spills_parameters(body, &offsets).unwrap_or(false) {
            if found.is_some() {
                return Ok(None);
            }
            found = Some(imported + i as u32);
        }
    }
    Ok(found)
}

/// Whether `body` stores each parameter `p` at `offsets[p]` from a local (its frame base).
fn spills_parameters(body: &wasmparser::FunctionBody<'_>, offsets: &[i64]) -> Result<bool> {
    use wasmparser::Operator;
    let mut spilled = vec![false; offsets.len()];
    let mut ops = body.get_operators_reader()?;
    let (mut before, mut last) = (None, None);
    while !ops.eof() {
        let op = ops.read()?;
        if let (
            Some(Operator::LocalGet { .. }),
            Some(Operator::LocalGet { local_index }),
            Operator::I32Store { memarg } | Operator::I64Store { memarg },
        ) = (&before, &last, &op)
        {
            let p = *local_index as usize;
            if offsets
                .get(p)
                .is_some_and(|&o| u64::try_from(o) == Ok(memarg.offset))
            {
                spilled[p] = true;
            }
        }
        (before, last) = (last, Some(op));
    }
    Ok(spilled.iter().all(|&s| s))
}

/// The line of the instruction at byte offset `offset` of a code object's bytecode, from its
/// location table (`co_linetable`, the format of CPython 3.11 to 3.13,
/// `Objects/locations.md`): entries of a header byte (`0x80 | code << 3 | length − 1`,
/// the length in 2-byte code units) and the line change its code says; `None` where the table
/// says the instruction has no location, or does not reach it.
pub fn line_at(table: impl IntoIterator<Item = u8>, first_line: i32, offset: u32) -> Option<u32> {
    let mut bytes = table.into_iter().peekable();
    let (mut line, mut start) = (first_line, 0u32);
    while let Some(header) = bytes.next() {
        if header & 0x80 == 0 {
            return None;
        }
        let code = (header >> 3) & 15;
        let end = start + 2 * (u32::from(header & 7) + 1);
        let delta = match code {
            // No location.
            15 => 0,
            // Long form and no-column form: a signed varint first.
            13 | 14 => signed_varint(&mut bytes)?,
            // One-line forms: the line moves by 0, 1 or 2.
            10..=12 => i32::from(code - 10),
            // Short forms: the same line.
            _ => 0,
        };
        line = line.checked_add(delta)?;
        if (start..end).contains(&offset) {
            return (code != 15).then(|| u32::try_from(line).ok()).flatten();
        }
        // The rest of the entry: columns, end line.
        while bytes.peek().is_some_and(|&b| b & 0x80 == 0) {
            bytes.next();
        }
        start = end;
    }
    None
}

/// A varint of 6-bit chunks, bit 6 marking that another follows.
fn varint(bytes: &mut impl Iterator<Item = u8>) -> Option<u32> {
    let mut value = 0u32;
    for shift in (0..32).step_by(6) {
        let byte = bytes.next()?;
        value |= u32::from(byte & 63) << shift;
        if byte & 64 == 0 {
            return Some(value);
        }
    }
    None
}

fn signed_varint(bytes: &mut impl Iterator<Item = u8>) -> Option<i32> {
    let value = varint(bytes)?;
    let magnitude = (value >> 1) as i32;
    Some(if value & 1 == 1 {
        -magnitude
    } else {
        magnitude
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Check `line_at` on every 2-byte instruction of `ranges` (start, end, line), as
    /// CPython's `co_lines()` gave them for the table.
    fn check(table: &[u8], first_line: i32, ranges: &[(u32, u32, u32)]) {
        for &(start, end, line) in ranges {
            for offset in (start..end).step_by(2) {
                assert_eq!(
                    line_at(table.iter().copied(), first_line, offset),
                    Some(line),
                    "at {offset}"
                );
            }
        }
        let end = ranges.last().unwrap().1;
        assert_eq!(line_at(table.iter().copied(), first_line, end), None);
    }

    /// Tables CPython 3.11 compiled (`code.co_linetable`, `co_lines()`): a loop with a branch,
    /// an expression over two lines and a jump over blank lines (long and no-column forms,
    /// deltas up and down).
    #[test]
    fn lines_of_a_loop_with_a_branch() {
        let table = [
            128, 0, 216, 12, 13, 128, 69, 221, 13, 18, 144, 49, 137, 88, 140, 88, 240, 0, 8, 5, 23,
            240, 0, 8, 5, 23, 136, 1, 216, 11, 12, 136, 113, 137, 53, 144, 65, 138, 58, 136, 58,
            216, 12, 17, 144, 97, 216, 22, 23, 241, 3, 1, 23, 24, 241, 0, 1, 13, 25, 136, 69, 136,
            69, 240, 12, 0, 13, 18, 144, 81, 137, 74, 136, 69, 136, 69, 216, 11, 16, 128, 76,
        ];
        let ranges = [
            (0, 2, 2),
            (2, 6, 3),
            (6, 40, 4),
            (40, 58, 5),
            (58, 62, 6),
            (62, 64, 7),
            (64, 76, 6),
            (76, 88, 12),
            (88, 92, 13),
        ];
        check(&table, 2, &ranges);
    }

    #[test]
    fn lines_of_a_generator() {
        let table = [
            232, 0, 232, 0, 128, 0, 221, 13, 18, 144, 49, 137, 88, 140, 88, 240, 0, 2, 5, 14, 240,
            0, 2, 5, 14, 136, 1, 216, 14, 15, 216, 12, 13, 241, 3, 1, 15, 14, 240, 0, 1, 9, 14,
            240, 0, 1, 9, 14, 240, 0, 1, 9, 14, 240, 0, 1, 9, 14, 240, 3, 2, 5, 14, 240, 0, 2, 5,
            14,
        ];
        let ranges = [
            (0, 6, 2),
            (6, 40, 3),
            (40, 42, 4),
            (42, 44, 5),
            (44, 56, 4),
            (56, 60, 3),
        ];
        check(&table, 2, &ranges);
    }

    /// An entry without a location (code 15) has no line; the next one goes on from the line
    /// before it.
    #[test]
    fn an_instruction_without_a_location_has_no_line() {
        let table = [0x80 | 15 << 3, 0x80 | 11 << 3, 0, 1];
        assert_eq!(line_at(table, 7, 0), None);
        assert_eq!(line_at(table, 7, 2), Some(8));
    }
}
