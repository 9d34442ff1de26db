//! QuickJS's JavaScript stack, read from an instance's linear memory where its thread stopped
//! (in the signal handler; in an epoch callback): the runtime's chain of `JSStackFrame`s, each
//! running a function object whose bytecode names it, its file, and, through its line table,
//! the line of the frame's saved PC, laid out as [`QuickJsLayout`] says.
//!
//! The walk is async-signal-safe: no allocation, no locks; every read goes through
//! [`Memory`], within the memory's current length; the frame chain is followed for at most
//! [`MAX_STEPS`] frames and line tables for at most [`LINE_TABLES_PER_WALK`](crate::runtimes::interpreted::LINE_TABLES_PER_WALK) bytes in all. A
//! chain that leaves memory, loops or does not end gives no stack, so the sample keeps its
//! Wasm frames.
//!
//! QuickJS saves a frame's PC (`cur_pc`) only before a call or an operation that may throw,
//! not at every instruction: a caller's line is the call's, and the innermost frame's is that
//! of the last call or throwing operation it began, its first line before any.

use super::layouts::QuickJsLayout;
use crate::runtimes::interpreted::{
    CodeKey, CodeNames, Frame, LineBudget, LoopCheck, RawStr, Text, MAX_STEPS,
};
use crate::runtimes::walk_counts::WalkCounts;
use crate::shared::Memory;

/// A QuickJS build's layout and the names of the functions its walks met.
pub struct JsCode {
    layout: &'static QuickJsLayout,
    names: CodeNames,
    counts: WalkCounts,
}

impl JsCode {
    pub fn new(layout: &'static QuickJsLayout) -> Self {
        JsCode {
            layout,
            names: CodeNames::new(),
            counts: WalkCounts::default(),
        }
    }

    pub fn layout(&self) -> &'static QuickJsLayout {
        self.layout
    }

    pub fn names(&self) -> &CodeNames {
        &self.names
    }

    /// Writes the JavaScript stack of the runtime (`JSRuntime`) at `rt` into `out`, innermost
    /// first, each frame followed by [`Frame::Activation`] (QuickJS runs each call of a
    /// JavaScript function in a call of its interpreter loop), as much as fits; how many
    /// words were written, 0 without a JavaScript stack or with a chain that does not check
    /// out (which [`Self::counts`] counts). Async-signal-safe.
    pub fn walk(&self, memory: &impl Memory, rt: u32, out: &mut [usize]) -> usize {
        let walk = Walk {
            code: self,
            memory,
            rt,
            lines: LineBudget::default(),
        };
        self.counts.count(walk.frames(out)).unwrap_or(0)
    }

    /// How the walks went.
    pub fn counts(&self) -> &WalkCounts {
        &self.counts
    }
}

struct Walk<'a, M> {
    code: &'a JsCode,
    memory: &'a M,
    rt: u32,
    lines: LineBudget,
}

impl<M: Memory> Walk<'_, M> {
    fn u32(&self, address: u32, offset: u32) -> Option<u32> {
        self.memory.u32_at(u64::from(address) + u64::from(offset))
    }

    fn frames(&self, out: &mut [usize]) -> Option<usize> {
        let l = self.code.layout;
        let mut frame = self.u32(self.rt, l.rt_current_stack_frame)?;
        let mut written = 0;
        let mut loops = LoopCheck::default();
        for _ in 0..MAX_STEPS {
            if frame == 0 {
                return Some(written);
            }
            if loops.looped(frame) {
                return None;
            }
            if let Some(bytecode) = self.bytecode_of(frame)? {
                if written + 2 <= out.len() {
                    out[written] = self.frame_word(frame, bytecode)?;
                    out[written + 1] = Frame::Activation.pack();
                    written += 2;
                }
            }
            frame = self.u32(frame, l.frame_prev)?;
        }
        None
    }

    /// The bytecode `frame` runs, `None` for a frame of a native function; `Err` (as `None`
    /// of the outer option) where the frame is not in memory.
    fn bytecode_of(&self, frame: u32) -> Option<Option<u32>> {
        let l = self.code.layout;
        let func = self
            .memory
            .u64_at(u64::from(frame) + u64::from(l.frame_cur_func))?;
        if (func >> 32) as i32 != l.tag_object {
            return Some(None);
        }
        let object = func as u32;
        let mut class = [0; 2];
        self.memory
            .read(u64::from(object) + u64::from(l.object_class_id), &mut class)?;
        if !l.runs_bytecode(u32::from(u16::from_le_bytes(class))) {
            return Some(None);
        }
        self.u32(object, l.object_function_bytecode).map(Some)
    }

    /// The word of a frame running `bytecode`: its names' entry and its line.
    fn frame_word(&self, frame: u32, bytecode: u32) -> Option<usize> {
        let l = self.code.layout;
        let key = CodeKey {
            code: bytecode,
            qualname: self.atom_string(self.u32(bytecode, l.bytecode_func_name)?),
            filename: self.atom_string(self.u32(bytecode, l.bytecode_filename)?),
            first_line: self.u32(bytecode, l.bytecode_line_num)?,
        };
        let id = self.code.names.id_of(key, || {
            Some(Text {
                qualname: self.raw_string(key.qualname)?,
                filename: self.raw_string(key.filename)?,
            })
        })?;
        let line = self.line_of(frame, bytecode, key.first_line);
        Some(Frame::Code { id, line }.pack())
    }

    /// The string of atom `atom`, 0 for none (`JS_ATOM_NULL`, a free slot, one beyond the
    /// table).
    fn atom_string(&self, atom: u32) -> u32 {
        let l = self.code.layout;
        let string = (|| {
            let size = self.u32(self.rt, l.rt_atom_size)?;
            if atom == 0 || atom >= size {
                return None;
            }
            let array = self.u32(self.rt, l.rt_atom_array)?;
            self.u32(array, atom.checked_mul(4)?)
        })();
        // A free slot holds the next free one's index, tagged in its low bit.
        string.filter(|s| s & 1 == 0).unwrap_or(0)
    }

    /// A normal string's characters, as many as a [`RawStr`] holds; empty for none (0: an
    /// anonymous function); `None` for another kind (a slice of another string, or indirect),
    /// which atoms are not, or one that does not read as a name.
    fn raw_string(&self, string: u32) -> Option<RawStr> {
        let l = self.code.layout;
        if string == 0 {
            return Some(RawStr::default());
        }
        let len_word = self.u32(string, l.string_len.at)?;
        let kind_word = self.u32(string, l.string_kind.at)?;
        if l.string_kind.of(kind_word) != l.string_kind_normal {
            return None;
        }
        let wide = l
            .string_is_wide_char
            .of(self.u32(string, l.string_is_wide_char.at)?);
        let data = u64::from(string) + u64::from(l.string_size);
        RawStr::read(
            self.memory,
            data,
            l.string_len.of(len_word),
            1 + wide,
            false,
        )
    }

    /// The line `frame`'s saved PC is at in `bytecode`, its first line where it has none.
    fn line_of(&self, frame: u32, bytecode: u32, first_line: u32) -> u32 {
        let l = self.code.layout;
        let line = (|| {
            let saved = self.u32(frame, l.frame_cur_pc)?;
            let buf = self.u32(bytecode, l.bytecode_byte_code_buf)?;
            let len = self.u32(bytecode, l.bytecode_byte_code_len)?;
            // The saved PC is that of the instruction after the one running.
            let pc = saved.checked_sub(buf)?.checked_sub(1)?;
            if saved == 0 || pc >= len {
                return None;
            }
            let table = self.u32(bytecode, l.bytecode_pc2line_buf)?;
            let size = self.u32(bytecode, l.bytecode_pc2line_len)?;
            self.lines
                .decode(self.memory, u64::from(table), size, |bytes| {
                    line_at(l, bytes, first_line as i32, pc)
                })
        })();
        line.unwrap_or(first_line)
    }
}

/// The line of bytecode offset `pc` in a function's line table (`pc2line_buf`, as QuickJS's
/// `find_line_num` reads it), starting at `first_line`; `None` for a table that ends early.
pub fn line_at(
    l: &QuickJsLayout,
    mut table: impl Iterator<Item = u8>,
    first_line: i32,
    pc: u32,
) -> Option<u32> {
    let (mut at, mut line) = (0u32, first_line);
    while let Some(op) = table.next() {
        let next_line = if op == 0 {
            at = at.wrapping_add(leb128(&mut table)?);
            line.wrapping_add(zigzag(leb128(&mut table)?))
        } else {
            let op = u32::from(op).checked_sub(l.pc2line_op_first)?;
            at = at.wrapping_add(op / l.pc2line_range);
            line.wrapping_add((op % l.pc2line_range) as i32 + l.pc2line_base)
        };
        // The column.
        leb128(&mut table)?;
        if pc < at {
            break;
        }
        line = next_line;
    }
    u32::try_from(line).ok()
}

/// An unsigned LEB128 of at most 5 bytes, as QuickJS writes them.
fn leb128(bytes: &mut impl Iterator<Item = u8>) -> Option<u32> {
    let mut value = 0u32;
    for i in 0..5 {
        let b = bytes.next()?;
        value |= u32::from(b & 0x7f) << (i * 7);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn zigzag(value: u32) -> i32 {
    (value >> 1) as i32 ^ -((value & 1) as i32)
}

#[cfg(test)]
mod tests {
    use super::super::example::*;
    use super::super::locate::{find_runtime, is_runtime};
    use super::*;
    use crate::runtimes::interpreted::image::Image;
    use crate::runtimes::interpreted::CodeId;

    /// The walk's output as (name, file, line), `None` for an activation's end.
    fn walked(code: &JsCode, memory: &Image) -> Vec<Option<(String, String, u32)>> {
        let mut out = vec![0; 64];
        let written = code.walk(memory, RT, &mut out);
        out[..written]
            .iter()
            .map(|&word| match Frame::unpack(word) {
                Frame::Code { id, line } => {
                    let names = code.names().get(id).unwrap();
                    Some((names.qualname, names.filename, line))
                }
                Frame::Activation => None,
            })
            .collect()
    }

    fn fib(line: u32) -> Option<(String, String, u32)> {
        Some(("fib".into(), "/app.js".into(), line))
    }

    #[test]
    fn frames_with_the_lines_their_saved_pcs_are_at() {
        let code = JsCode::new(layout());
        let expected = vec![fib(12), None, fib(10), None];
        assert_eq!(walked(&code, &running()), expected);
        // Met again: the same entry.
        assert_eq!(walked(&code, &running()), expected);
        let entries = (0..crate::runtimes::interpreted::CODE_SLOTS as u32)
            .filter(|&i| code.names().get(CodeId(i)).is_some())
            .count();
        assert_eq!(entries, 1);
    }

    #[test]
    fn a_line_table_read_as_quickjs_reads_it() {
        let l = layout();
        let table = [3u8, 0, 28, 0, 28, 0];
        let line = |pc| line_at(l, table.iter().copied(), 10, pc);
        assert_eq!(
            [line(0), line(4), line(5), line(9), line(10), line(99)],
            [Some(11), Some(11), Some(12), Some(12), Some(13), Some(13)]
        );
        // The long form: bytecode +300 (LEB128), line -2 (zigzag 3), column 0.
        let long = [0u8, 0xac, 0x02, 3, 0];
        assert_eq!(line_at(l, long.iter().copied(), 10, 300), Some(8));
        assert_eq!(line_at(l, long.iter().copied(), 10, 299), Some(10));
        // Ends inside an entry.
        assert_eq!(line_at(l, [0u8, 0xac].iter().copied(), 10, 300), None);
    }

    /// A chain that loops, or leaves memory, gives no stack rather than a wrong one.
    #[test]
    fn chains_that_do_not_check_out_give_nothing() {
        let code = JsCode::new(layout());
        let l = layout();
        let mut m = running();
        m.put(OUTER + l.frame_prev, INNER);
        assert_eq!(walked(&code, &m), []);
        let mut m = running();
        m.put(MIDDLE + l.frame_prev, 0xffff_fff0);
        assert_eq!(walked(&code, &m), []);
        let mut m = running();
        m.put(RT + l.rt_current_stack_frame, 0);
        assert_eq!(walked(&code, &m), []);
    }

    /// A function whose name atom names no string (one beyond the table, a free slot) is
    /// anonymous, its frames kept.
    #[test]
    fn names_of_no_atom_are_empty() {
        let code = JsCode::new(layout());
        let l = layout();
        for (atom, entry) in [(500, None), (FIB, Some(0x10c1))] {
            let mut m = running();
            m.put(BYTECODE + l.bytecode_func_name, atom);
            if let Some(entry) = entry {
                m.put(ATOMS + 4 * FIB, entry);
            }
            let frames = walked(&code, &m);
            assert_eq!(frames.len(), 4);
            let (name, file, line) = frames[0].clone().unwrap();
            assert_eq!((name.as_str(), file.as_str(), line), ("", "/app.js", 12));
        }
    }

    /// A name that is not a normal string (an atom's never is), holds a control character, or
    /// is not in memory: the walk does not check out, and nothing is kept of the code's names.
    #[test]
    fn names_that_are_no_names_fail_the_walk() {
        let l = layout();
        let slice = |m: &mut Image| m.put(0x10c0 + l.string_kind.at, 1 << l.string_kind.shift);
        let nul = |m: &mut Image| m.js_string(0x10c0, "f\0b");
        let newline = |m: &mut Image| m.js_string(0x10c0, "f\nb");
        let huge = |m: &mut Image| m.put(0x10c0 + l.string_len.at, 0x7fff_ffff);
        let outside = |m: &mut Image| m.put(ATOMS + 4 * FIB, 0xffff_0000);
        let cases: [&dyn Fn(&mut Image); 5] = [&slice, &nul, &newline, &huge, &outside];
        for (i, break_it) in cases.iter().enumerate() {
            let code = JsCode::new(layout());
            let mut m = running();
            break_it(&mut m);
            assert_eq!(walked(&code, &m), [], "case {i}");
            // Mended, the same code is named: nothing was kept of the failed read.
            assert_eq!(walked(&code, &running())[0].clone().unwrap().0, "fib");
        }
    }

    #[test]
    fn the_runtime_is_found_from_the_atom_length_and_checked() {
        let l = layout();
        let m = running();
        let size = m.0.len() as u64;
        assert_eq!(find_runtime(l, &m, size, 0), Some(RT));
        assert_eq!(find_runtime(l, &m, size, RT), Some(RT));
        assert_eq!(find_runtime(l, &m, size, 0x7000), Some(RT));
        // Its context does not point back to it, or its atom `name` is another string.
        let mut m = running();
        m.put(CONTEXT + l.ctx_rt, 0x200);
        assert!(!is_runtime(l, &m, RT));
        assert_eq!(find_runtime(l, &m, size, 0), None);
        let mut m = running();
        m.js_string(0x1080, "nome");
        assert_eq!(find_runtime(l, &m, size, 0), None);
    }
}
