//! CPython's Python stack, read from a CPython instance's linear memory where its thread
//! stopped (in the signal handler; in an epoch callback): each Python frame's code object and
//! line, from the interpreter's own frame chain laid out as the module's DWARF says
//! ([`super::layout`]).
//!
//! The walk is async-signal-safe: no allocation, no locks; every read goes through
//! [`Memory`], within the memory's current length; the frame chain is followed for at most
//! [`MAX_STEPS`] frames (a chain that loops gives no stack), and line tables are read for at
//! most [`LINE_TABLES_PER_WALK`](crate::runtimes::interpreted::LINE_TABLES_PER_WALK) bytes in all.
//!
//! A code object's names (`str` objects of the guest) are copied into [`CodeNames`] the first
//! time a walk meets it, as [`crate::runtimes::interpreted`] says.
//!
//! Each activation of the eval loop (a call from C into Python) must link to the one that
//! called it as CPython links them (3.11, 3.12: its first frame's `previous` is the calling
//! activation's `current_frame`); where it does not, the thread was stopped while the
//! interpreter was entering or leaving one (3.12 publishes the new activation ~30 Wasm
//! instructions before its frame), and the walk starts again from the calling activation.

use std::sync::atomic::{AtomicU32, Ordering};

use super::layout::{line_at, CodeType, EntryMark, FrameChain, PythonLayout};
use crate::runtimes::interpreted::{
    CodeId, CodeKey, CodeNames, Frame, LineBudget, LoopCheck, RawStr, Text, MAX_STEPS,
};
use crate::runtimes::walk_counts::WalkCounts;
use crate::shared::Memory;

/// A CPython module's layout and the names of the code objects its walks met.
pub struct PythonCode {
    layout: PythonLayout,
    names: CodeNames,
    /// The type of code objects, once a walk told it by its name (see [`CodeType::Named`]).
    code_type: AtomicU32,
    counts: WalkCounts,
}

impl PythonCode {
    pub fn new(layout: PythonLayout) -> Self {
        PythonCode {
            layout,
            names: CodeNames::new(),
            code_type: AtomicU32::new(0),
            counts: WalkCounts::default(),
        }
    }

    pub fn names(&self) -> &CodeNames {
        &self.names
    }

    /// Writes the Python stack of `memory`'s interpreter into `out`, innermost first (see
    /// [`Frame::pack`]), as much as fits; how many were written, 0 without a Python stack
    /// (none running, or a chain that does not check out, which [`Self::counts`] counts).
    /// Async-signal-safe.
    pub fn walk(&self, memory: &impl Memory, out: &mut [usize]) -> usize {
        self.counts.count(self.walk_chain(memory, out)).unwrap_or(0)
    }

    /// How the walks went.
    pub fn counts(&self) -> &WalkCounts {
        &self.counts
    }

    /// [`Self::walk`]'s words, `None` for a chain that does not check out.
    fn walk_chain(&self, memory: &impl Memory, out: &mut [usize]) -> Option<usize> {
        let l = &self.layout;
        let field =
            |address: u32, offset: u32| memory.u32_at(u64::from(address) + u64::from(offset));
        // No interpreter or no thread yet (starting up): no stack, and nothing wrong.
        let interpreter = field(l.runtime, l.main_interpreter)?;
        if interpreter == 0 {
            return Some(0);
        }
        let tstate = field(interpreter, l.threads_head)?;
        if tstate == 0 {
            return Some(0);
        }
        let walk = Walk {
            code: self,
            memory,
            lines: LineBudget::default(),
        };
        match l.chain {
            FrameChain::Direct { current_frame } => {
                walk.frames(field(tstate, current_frame)?, None, out)
            }
            FrameChain::CFrames {
                cframe, previous, ..
            } => {
                let mut cf = field(tstate, cframe)?;
                // The innermost activation, else the one that called it.
                for _ in 0..2 {
                    if cf == 0 {
                        return Some(0);
                    }
                    if let Some(written) = walk.activation_frames(cf, out) {
                        return Some(written);
                    }
                    cf = field(cf, previous)?;
                }
                None
            }
        }
    }
}

struct Walk<'a, M> {
    code: &'a PythonCode,
    memory: &'a M,
    lines: LineBudget,
}

impl<M: Memory> Walk<'_, M> {
    fn u32(&self, address: u32, offset: u32) -> Option<u32> {
        self.memory.u32_at(u64::from(address) + u64::from(offset))
    }

    fn u8(&self, address: u32, offset: u32) -> Option<u8> {
        self.memory.u8_at(u64::from(address) + u64::from(offset))
    }

    /// The frames from activation `cf`'s current frame on (3.11, 3.12).
    fn activation_frames(&self, cf: u32, out: &mut [usize]) -> Option<usize> {
        let FrameChain::CFrames { current_frame, .. } = self.code.layout.chain else {
            return None;
        };
        self.frames(self.u32(cf, current_frame)?, Some(cf), out)
    }

    /// The frames from `frame`, innermost first; with `cframe` (3.11, 3.12), each activation
    /// checked against the chain of `_PyCFrame`s. None when the chain does not check out.
    fn frames(&self, mut frame: u32, mut cframe: Option<u32>, out: &mut [usize]) -> Option<usize> {
        let l = &self.code.layout;
        let (mut written, mut named) = (0, 0);
        let mut loops = LoopCheck::default();
        for _ in 0..MAX_STEPS {
            if frame == 0 {
                // Entry frames alone (the interpreter between calls) are no Python stack.
                return Some(if named == 0 { 0 } else { written });
            }
            if loops.looped(frame) {
                return None;
            }
            let previous = self.u32(frame, l.frame_previous)?;
            let (runs_code, first) = match l.entry {
                EntryMark::IsEntry(at) => (true, self.u8(frame, at)? != 0),
                EntryMark::Owner(at) => {
                    let entry = self.u8(frame, at)? >= FRAME_OWNED_BY_C;
                    (!entry, entry)
                }
            };
            // 3.14 tags the reference in its low bits; objects are aligned to 4 at least. An
            // entry frame's is not always a code object (`None` since 3.14).
            let code = self.u32(frame, l.frame_code)? & !3;
            if runs_code && !self.is_code(self.u32(code, l.object_type)?) {
                return None;
            }
            // Named only while the output has room; the rest of the chain is still checked.
            if let (true, Some(slot)) = (runs_code, out.get_mut(written)) {
                let instruction = self.u32(frame, l.frame_instruction)?;
                let key = self.key_of(code)?;
                *slot = Frame::Code {
                    id: self.id_of(key)?,
                    line: self.line_of(key, instruction).unwrap_or(0),
                }
                .pack();
                written += 1;
                named += 1;
            }
            if first {
                if let (
                    Some(cf),
                    FrameChain::CFrames {
                        previous: outer,
                        current_frame,
                        ..
                    },
                ) = (cframe, l.chain)
                {
                    let outer = self.u32(cf, outer)?;
                    let expected = match outer {
                        0 => 0,
                        outer => self.u32(outer, current_frame)?,
                    };
                    if previous != expected {
                        return None;
                    }
                    cframe = Some(outer);
                }
                if let Some(slot) = out.get_mut(written) {
                    *slot = Frame::Activation.pack();
                    written += 1;
                }
            }
            frame = previous;
        }
        None
    }

    /// Whether `ty` is the type of code objects; a type told by its name is remembered.
    fn is_code(&self, ty: u32) -> bool {
        match self.code.layout.code_type {
            CodeType::Address(code_type) => ty == code_type,
            CodeType::Named { tp_name } => {
                if ty != 0 && self.code.code_type.load(Ordering::Relaxed) == ty {
                    return true;
                }
                let mut name = [0; 5];
                let named = self
                    .u32(ty, tp_name)
                    .and_then(|at| self.memory.read(u64::from(at), &mut name))
                    .is_some_and(|()| &name == CODE_TYPE_NAME);
                if named {
                    self.code.code_type.store(ty, Ordering::Relaxed);
                }
                named
            }
        }
    }

    /// What identifies code object `code` (see [`CodeKey`]).
    fn key_of(&self, code: u32) -> Option<CodeKey> {
        let l = &self.code.layout;
        Some(CodeKey {
            code,
            qualname: self.u32(code, l.code_qualname)?,
            filename: self.u32(code, l.code_filename)?,
            first_line: self.u32(code, l.code_first_line)?,
            // A code object keeps no column.
            first_column: 0,
        })
    }

    /// The entry of the code object `key` names, made on first sight; `None` where its names
    /// do not read as names (a code object's qualified name is never empty: `<module>`,
    /// `<lambda>`...).
    fn id_of(&self, key: CodeKey) -> Option<CodeId> {
        self.code.names.id_of(key, || {
            let qualname = self.raw_str(key.qualname).filter(|q| !q.is_empty())?;
            Some(Text {
                qualname,
                filename: self.raw_str(key.filename)?,
            })
        })
    }

    /// A `str` object's characters, as many as a [`RawStr`] holds; `None` when it is not a
    /// compact string (names and file names are) or does not read as a name.
    fn raw_str(&self, object: u32) -> Option<RawStr> {
        let l = &self.code.layout;
        let (state, length) = (
            self.u32(object, l.str_state)?,
            self.u32(object, l.str_length)?,
        );
        // `state`'s bit fields, the same from 3.11 to 3.13: interned (2 bits), kind (3),
        // compact, ascii.
        let kind = (state >> 2) & 7;
        let (compact, ascii) = (state >> 5 & 1 == 1, state >> 6 & 1 == 1);
        if !compact {
            return None;
        }
        let data = u64::from(object)
            + u64::from(if ascii {
                l.str_ascii_data
            } else {
                l.str_compact_data
            });
        RawStr::read(self.memory, data, length, kind, ascii)
    }

    /// The line of the instruction at `instruction` in the code object of `key`; its first
    /// line before its first instruction.
    fn line_of(&self, key: CodeKey, instruction: u32) -> Option<u32> {
        let l = &self.code.layout;
        let (code, first_line) = (key.code, key.first_line as i32);
        let Some(offset) = instruction.checked_sub(code.checked_add(l.code_bytecode)?) else {
            return u32::try_from(first_line).ok();
        };
        let table = self.u32(code, l.code_linetable)?;
        let size = self.u32(table, l.bytes_size)?;
        let data = u64::from(table) + u64::from(l.bytes_data);
        self.lines.decode(self.memory, data, size, |bytes| {
            line_at(bytes, first_line, offset)
        })
    }
}

/// `_PyInterpreterFrame.owner` of an entry frame, at least (see [`EntryMark::Owner`]).
const FRAME_OWNED_BY_C: u8 = 3;

/// A type's name that is a code object's (`tp_name`, a C string).
const CODE_TYPE_NAME: &[u8; 5] = b"code\0";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimes::interpreted::image::Image;
    use crate::runtimes::interpreted::{CodeName, CODE_SLOTS, RAW_STR_BYTES};

    const CODE_TYPE: u32 = 0x50;
    const RUNTIME: u32 = 0x100;
    const TSTATE: u32 = 0x300;

    /// CPython 3.12's layout on wasm32 (as `tests/python.rs` reads it from its DWARF).
    fn layout_312() -> PythonLayout {
        PythonLayout {
            runtime: RUNTIME,
            main_interpreter: 32,
            threads_head: 64,
            chain: FrameChain::CFrames {
                cframe: 40,
                current_frame: 0,
                previous: 4,
            },
            object_type: 4,
            code_type: CodeType::Address(CODE_TYPE),
            frame_code: 0,
            frame_previous: 4,
            frame_instruction: 28,
            entry: EntryMark::Owner(38),
            code_qualname: 88,
            code_filename: 80,
            code_linetable: 92,
            code_first_line: 44,
            code_bytecode: 124,
            str_length: 8,
            str_state: 16,
            str_ascii_data: 20,
            str_compact_data: 28,
            bytes_size: 8,
            bytes_data: 16,
        }
    }

    impl Image {
        fn new() -> Self {
            let mut image = Image(vec![0; 1 << 16]);
            image.put(RUNTIME + 32, 0x200);
            image.put(0x200 + 64, TSTATE);
            image
        }

        /// A compact `str` at `address` of `kind` (1, 2, 4) holding `text`.
        fn str(&mut self, address: u32, text: &str, kind: u32) {
            let ascii = text.is_ascii();
            self.put(address + 8, text.chars().count() as u32);
            self.put(address + 16, kind << 2 | 1 << 5 | u32::from(ascii) << 6);
            let mut at = (address + if ascii { 20 } else { 28 }) as usize;
            for c in text.chars() {
                let bytes = (c as u32).to_le_bytes();
                self.0[at..at + kind as usize].copy_from_slice(&bytes[..kind as usize]);
                at += kind as usize;
            }
        }

        /// A code object at `code` named `name`, in file "app.py", starting at line 10; its
        /// first three code units on lines 11, 12, 13. Its strings and line table follow it.
        fn code(&mut self, code: u32, name: &str) {
            self.put(code + 4, CODE_TYPE);
            self.put(code + 44, 10);
            self.put(code + 88, code + 0x100);
            self.str(code + 0x100, name, if name.is_ascii() { 1 } else { 2 });
            self.put(code + 80, 0x8000);
            self.str(0x8000, "app.py", 1);
            // Bytes: each entry one code unit, no columns, the line one further.
            self.put(code + 92, code + 0x400);
            self.put(code + 0x400 + 8, 6);
            let table = [0xe8, 2, 0xe8, 2, 0xe8, 2];
            let at = (code + 0x400 + 16) as usize;
            self.0[at..at + 6].copy_from_slice(&table);
        }

        /// A frame at `frame` running `code` at code unit `unit` (−1: not started).
        fn frame(&mut self, frame: u32, code: u32, unit: i32, previous: u32, owner: u8) {
            self.put(frame, code);
            self.put(frame + 4, previous);
            self.put(frame + 28, (code as i32 + 124 + 2 * unit) as u32);
            self.0[(frame + 38) as usize] = owner;
        }
    }

    const INNER: u32 = 0x1000;
    const MIDDLE: u32 = 0x2000;
    const MODULE: u32 = 0x3000;
    const TRAMPOLINE: u32 = 0x4000;
    const ROOT_CFRAME: u32 = 0x500;
    const OUTER_CFRAME: u32 = 0x510;
    const INNER_CFRAME: u32 = 0x520;

    /// `<module>` calls `middle`, which calls `inner` through C (a second activation of the
    /// eval loop): 3.12's frames, entry frames and `_PyCFrame`s.
    fn two_activations() -> Image {
        let mut m = Image::new();
        for (code, name) in [
            (INNER, "inner"),
            (MIDDLE, "middle"),
            (MODULE, "<module>"),
            (TRAMPOLINE, "<interpreter trampoline>"),
        ] {
            m.code(code, name);
        }
        let (f_inner, entry_inner, f_middle, f_module, entry_outer) =
            (0x6000, 0x6100, 0x6200, 0x6300, 0x6400);
        m.frame(f_inner, INNER, 1, entry_inner, 0);
        m.frame(entry_inner, TRAMPOLINE, 0, f_middle, 3);
        m.frame(f_middle, MIDDLE, 2, f_module, 0);
        m.frame(f_module, MODULE, 0, entry_outer, 0);
        m.frame(entry_outer, TRAMPOLINE, 0, 0, 3);
        m.put(ROOT_CFRAME, 0);
        m.put(OUTER_CFRAME, f_middle);
        m.put(OUTER_CFRAME + 4, ROOT_CFRAME);
        m.put(INNER_CFRAME, f_inner);
        m.put(INNER_CFRAME + 4, OUTER_CFRAME);
        m.put(TSTATE + 40, INNER_CFRAME);
        m
    }

    /// The walk's output as (name, line), `None` for an activation's end.
    fn walked(code: &PythonCode, memory: &Image, room: usize) -> Vec<Option<(String, u32)>> {
        let mut out = vec![0; room];
        let written = code.walk(memory, &mut out);
        out[..written]
            .iter()
            .map(|&word| match Frame::unpack(word) {
                Frame::Code { id, line } => Some((code.names().get(id).unwrap().qualname, line)),
                Frame::Activation => None,
            })
            .collect()
    }

    fn frame(name: &str, line: u32) -> Option<(String, u32)> {
        Some((name.to_string(), line))
    }

    /// What a walk of [`two_activations`] gives.
    fn two_activations_walked() -> Vec<Option<(String, u32)>> {
        vec![
            frame("inner", 12),
            None,
            frame("middle", 13),
            frame("<module>", 11),
            None,
        ]
    }

    #[test]
    fn frames_of_two_activations_with_their_lines() {
        let code = PythonCode::new(layout_312());
        let expected = two_activations_walked();
        assert_eq!(walked(&code, &two_activations(), 64), expected);
        // Met again: the same entries, one per code object that ran.
        assert_eq!(walked(&code, &two_activations(), 64), expected);
        let entries: Vec<CodeName> = (0..CODE_SLOTS as u32)
            .filter_map(|i| code.names().get(CodeId(i)))
            .collect();
        assert_eq!(entries.len(), 3);
        assert!(entries
            .iter()
            .all(|e| e.filename == "app.py" && e.first_line == 10));
        // As much as fits, innermost first.
        assert_eq!(walked(&code, &two_activations(), 2), expected[..2]);
    }

    /// Stopped as the interpreter enters a new activation: `tstate->cframe` names it, its
    /// `current_frame` not yet set (a stale value on the C stack). The walk goes on from the
    /// activation that called it, whether the stale value is garbage or a real frame.
    #[test]
    fn an_activation_being_entered_is_passed_over() {
        let code = PythonCode::new(layout_312());
        let expected = two_activations_walked();
        let new_cframe = 0x530;
        for stale in [0x7777, 0x6200] {
            let mut m = two_activations();
            m.put(new_cframe, stale);
            m.put(new_cframe + 4, INNER_CFRAME);
            m.put(TSTATE + 40, new_cframe);
            assert_eq!(walked(&code, &m, 64), expected, "stale {stale:#x}");
        }
    }

    /// The interpreter between calls from C (an activation's entry frame and nothing else):
    /// no Python stack, so the sample keeps its Wasm frames.
    #[test]
    fn entry_frames_alone_are_no_stack() {
        let code = PythonCode::new(layout_312());
        let mut m = two_activations();
        m.put(OUTER_CFRAME, 0x6400);
        m.put(TSTATE + 40, OUTER_CFRAME);
        assert_eq!(walked(&code, &m, 64), []);
    }

    #[test]
    fn a_frame_before_its_first_instruction_is_at_its_first_line() {
        let code = PythonCode::new(layout_312());
        let mut m = two_activations();
        m.frame(0x6000, INNER, -1, 0x6100, 0);
        assert_eq!(walked(&code, &m, 64)[0], frame("inner", 10));
    }

    /// A chain that leaves memory, or loops, gives no stack rather than a wrong one.
    #[test]
    fn chains_that_do_not_check_out_give_nothing() {
        let code = PythonCode::new(layout_312());
        let mut m = two_activations();
        m.put(0x6200 + 4, 0xffff_fff0);
        assert_eq!(walked(&code, &m, 64), []);
        let mut m = two_activations();
        m.put(0x6300 + 4, 0x6200);
        assert_eq!(walked(&code, &m, 64), []);
    }

    /// Non-ASCII names (Latin-1, UCS-2) are decoded; long ones cut.
    #[test]
    fn names_in_every_kind_of_str() {
        let code = PythonCode::new(layout_312());
        let mut m = two_activations();
        m.str(INNER + 0x100, "café", 1);
        m.str(MIDDLE + 0x100, "λx", 2);
        let long = "a".repeat(300);
        m.str(MODULE + 0x100, &long, 1);
        let names: Vec<String> = walked(&code, &m, 64)
            .into_iter()
            .flatten()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(names[..2], ["café", "λx"]);
        assert_eq!(names[2], format!("{}…", "a".repeat(RAW_STR_BYTES)));
    }

    /// 3.11: no entry frames; an activation's first frame says `is_entry`.
    #[test]
    fn frames_of_311_marked_by_is_entry() {
        let mut layout = layout_312();
        layout.entry = EntryMark::IsEntry(38);
        let code = PythonCode::new(layout);
        let mut m = two_activations();
        // inner (entry) → middle → <module> (entry) → end.
        m.frame(0x6000, INNER, 1, 0x6200, 1);
        m.frame(0x6300, MODULE, 0, 0, 1);
        let expected = two_activations_walked();
        assert_eq!(walked(&code, &m, 64), expected);
    }
}
