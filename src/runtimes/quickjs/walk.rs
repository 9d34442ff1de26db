//! QuickJS's JavaScript stack, read from an instance's linear memory where its thread stopped
//! (in the signal handler; in an epoch callback): the runtime's chain of `JSStackFrame`s, each
//! running a function object named by its own `name` property (as QuickJS's stack traces
//! name it), whose bytecode gives its file, where it starts and, through its line table, the
//! line of the frame's saved PC, laid out as [`QuickJsLayout`] says.
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

/// Properties of one hash bucket of a shape a name's lookup follows at most: QuickJS keeps a
/// shape's buckets at least as many as its properties, so real chains are a few long.
const MAX_PROPERTY_STEPS: usize = 64;

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
            if let Some((object, bytecode)) = self.bytecode_of(frame)? {
                if written + 2 <= out.len() {
                    out[written] = self.frame_word(frame, object, bytecode)?;
                    out[written + 1] = Frame::Activation.pack();
                    written += 2;
                }
            }
            frame = self.u32(frame, l.frame_prev)?;
        }
        None
    }

    /// The function object `frame` runs and its bytecode, `None` for a frame of a native
    /// function; `Err` (as `None` of the outer option) where the frame is not in memory.
    fn bytecode_of(&self, frame: u32) -> Option<Option<(u32, u32)>> {
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
        let bytecode = self.u32(object, l.object_function_bytecode)?;
        Some(Some((object, bytecode)))
    }

    /// The word of a frame running function `object`, of `bytecode`: its names' entry and its
    /// line. The name is the function object's, as QuickJS's stack traces take it
    /// ([`Self::name_of`]); the file and where it starts are its bytecode's.
    fn frame_word(&self, frame: u32, object: u32, bytecode: u32) -> Option<usize> {
        let l = self.code.layout;
        let key = CodeKey {
            code: bytecode,
            qualname: self.name_of(object)?,
            filename: self.atom_string(self.u32(bytecode, l.bytecode_filename)?),
            first_line: self.u32(bytecode, l.bytecode_line_num)?,
            first_column: self.u32(bytecode, l.bytecode_col_num)?,
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

    /// The string of function `object`'s own `name` property, as QuickJS's `get_func_name`
    /// reads it for its stack traces: the value of a plain (not accessor) property `name` of
    /// the object's shape, if it is a string; 0 for none (the trace's `<anonymous>`). A class
    /// or object literal sets it when it defines a method (`get size`, `#secret`,
    /// `[Symbol.iterator]`), a binding when it names a function; the bytecode's own name
    /// has none of those. `None` where the shape is not in memory, or its bucket's chain does
    /// not end within [`MAX_PROPERTY_STEPS`].
    fn name_of(&self, object: u32) -> Option<u32> {
        let l = self.code.layout;
        let shape = u64::from(self.u32(object, l.object_shape)?);
        let mask = u64::from(self.u32(shape as u32, l.shape_prop_hash_mask)?);
        let buckets = shape + u64::from(l.shape_hash_table);
        // `prop_hash_end(sh)[-h - 1]`: the buckets are read from the end, the properties follow.
        let bucket = buckets + 4 * (mask - (u64::from(l.atom_name) & mask));
        let properties = buckets + 4 * (mask + 1);
        let mut index = self.memory.u32_at(bucket)?;
        for _ in 0..MAX_PROPERTY_STEPS {
            let Some(at) = index.checked_sub(1).map(u64::from) else {
                return Some(0);
            };
            let property = properties + at * u64::from(l.shape_property_size);
            let word = self.memory.u32_at(property)?;
            let atom = self
                .memory
                .u32_at(property + u64::from(l.shape_property_atom))?;
            if atom == l.atom_name {
                if l.shape_property_flags.of(word) & l.prop_tmask != l.prop_normal {
                    return Some(0);
                }
                let values = u64::from(self.u32(object, l.object_prop)?);
                let value = self
                    .memory
                    .u64_at(values + at * u64::from(l.property_size))?;
                return Some(if (value >> 32) as i32 == l.tag_string {
                    value as u32
                } else {
                    0
                });
            }
            index = l.shape_property_hash_next.of(word);
        }
        None
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

    /// A string's characters, as many as a [`RawStr`] holds, read where a normal string
    /// keeps them (after its header) or a slice its parent's; empty for none (0: an anonymous
    /// function); `None` for another kind (indirect: a regular expression's bytecode), or one
    /// that does not read as a name.
    fn raw_string(&self, string: u32) -> Option<RawStr> {
        let l = self.code.layout;
        if string == 0 {
            return Some(RawStr::default());
        }
        let len_word = self.u32(string, l.string_len.at)?;
        let kind_word = self.u32(string, l.string_kind.at)?;
        let header_end = u64::from(string) + u64::from(l.string_size);
        let data = match l.string_kind.of(kind_word) {
            kind if kind == l.string_kind_normal => header_end,
            kind if kind == l.string_kind_slice => {
                let slice = |offset: u32| self.memory.u32_at(header_end + u64::from(offset));
                let parent = u64::from(slice(l.slice_parent)?);
                parent + u64::from(l.string_size) + u64::from(slice(l.slice_start)?)
            }
            _ => return None,
        };
        let wide = l
            .string_is_wide_char
            .of(self.u32(string, l.string_is_wide_char.at)?);
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

    /// The name is the function object's own `name` property, as QuickJS's stack traces read
    /// it: none, an accessor or a value that is not a string is anonymous (`<anonymous>`),
    /// the frames kept; a string made at run time (`get size`) or a slice of another is read.
    #[test]
    fn names_are_the_function_objects_name_properties() {
        let l = layout();
        let length = (l.atom_length, 0, 1);
        let name = |tag, payload| (l.atom_name, tag, payload);
        let named = |properties: &[(u32, i32, u32)], edit: &dyn Fn(&mut Image)| {
            let code = JsCode::new(layout());
            let mut m = running();
            m.0[(SHAPE as usize)..(VALUES as usize + 64)].fill(0);
            m.js_properties(FUNCTION, properties);
            edit(&mut m);
            let frames = walked(&code, &m);
            assert_eq!(frames.len(), 4);
            let (name, file, line) = frames[0].clone().unwrap();
            assert_eq!((file.as_str(), line), ("/app.js", 12));
            name
        };
        let nothing = &|_: &mut Image| {};
        assert_eq!(named(&[length], nothing), "");
        assert_eq!(named(&[length, name(0, NAME)], nothing), "");
        assert_eq!(named(&[name(l.tag_string, NAME), length], nothing), "fib");
        // An accessor `name` (a class's `static get name()`).
        let accessor = |m: &mut Image| {
            let property = SHAPE + l.shape_hash_table + 16 + l.shape_property_size;
            let word = m.get(property) | (1 << 4) << l.shape_property_flags.shift;
            m.put(property, word);
        };
        assert_eq!(named(&[length, name(l.tag_string, NAME)], &accessor), "");
        // Atoms 4 apart share a bucket: the chain is followed past the other one.
        let other = (l.atom_name + 4, l.tag_string, 0x1000);
        assert_eq!(
            named(&[name(l.tag_string, 0x1800), other], &|m| m
                .js_string(0x1800, "get size")),
            "get size"
        );
        // A slice: its characters are its parent's, from its start.
        let slice = |m: &mut Image| {
            m.js_string(0x1800, "set size");
            m.put(
                0x1800 + l.string_kind.at,
                l.string_kind_slice << l.string_kind.shift,
            );
            m.put(0x1800 + l.string_size + l.slice_parent, 0x1900);
            m.put(0x1800 + l.string_size + l.slice_start, 4);
            m.js_string(0x1900, "get/set size");
        };
        assert_eq!(
            named(&[length, name(l.tag_string, 0x1800)], &slice),
            "set size"
        );
    }

    /// A shape whose bucket's chain loops or leaves memory gives no stack.
    #[test]
    fn shapes_that_do_not_check_out_fail_the_walk() {
        let l = layout();
        let property = SHAPE + l.shape_hash_table + 16;
        // `name`'s bucket's property is another's, and links to itself.
        let looping = |m: &mut Image| {
            let named = property + l.shape_property_size;
            m.put(named, 2 << l.shape_property_hash_next.shift);
            m.put(named + l.shape_property_atom, l.atom_name + 4);
        };
        let outside = |m: &mut Image| m.put(FUNCTION + l.object_shape, 0xffff_0000);
        for edit in [&looping as &dyn Fn(&mut Image), &outside] {
            let code = JsCode::new(layout());
            let mut m = running();
            edit(&mut m);
            assert_eq!(walked(&code, &m), []);
        }
    }

    /// A name that is neither a normal string nor a slice, holds a control character, or
    /// is not in memory: the walk does not check out, and nothing is kept of the code's names.
    #[test]
    fn names_that_are_no_names_fail_the_walk() {
        let l = layout();
        let indirect = |m: &mut Image| m.put(NAME + l.string_kind.at, 2 << l.string_kind.shift);
        let nul = |m: &mut Image| m.js_string(NAME, "f\0b");
        let newline = |m: &mut Image| m.js_string(NAME, "f\nb");
        let huge = |m: &mut Image| m.put(NAME + l.string_len.at, 0x7fff_ffff);
        let outside = |m: &mut Image| m.put(VALUES + l.property_size, 0xffff_0000);
        let cases: [&dyn Fn(&mut Image); 5] = [&indirect, &nul, &newline, &huge, &outside];
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
