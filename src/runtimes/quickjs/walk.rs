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

use std::cell::Cell;

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
            atoms: Cell::new(None),
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
    /// The runtime's atom table (its size, its array), read once a walk, at the first frame
    /// that needs it: every frame's file is an atom.
    atoms: Cell<Option<Option<(u32, u32)>>>,
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
        let line_num = self.u32(bytecode, l.bytecode_line_num)?;
        let mut start = (line_num, self.u32(bytecode, l.bytecode_col_num)?);
        if line_num == 0 {
            // A class's field initializer, which the engine gives no position: placed where its
            // class is, so that two classes' are two functions.
            start = self.class_position(object).unwrap_or(start);
        }
        let key = CodeKey {
            code: bytecode,
            qualname: self.name_of(object)?,
            filename: self.atom_string(self.u32(bytecode, l.bytecode_filename)?),
            first_line: start.0,
            first_column: start.1,
        };
        let id = self.code.names.id_of(key, || {
            Some(Text {
                qualname: self.raw_string(key.qualname)?,
                filename: self.raw_string(key.filename)?,
            })
        })?;
        let line = self.line_of(frame, bytecode, line_num);
        Some(Frame::Code { id, line }.pack())
    }

    /// The string of function `object`'s own `name` property, as QuickJS's `get_func_name`
    /// reads it for its stack traces: the value of a plain (not accessor) property `name`, if
    /// it is a string; 0 for none (the trace's `<anonymous>`). A class or object literal sets
    /// it when it defines a method (`get size`, `#secret`, `[Symbol.iterator]`), a binding when
    /// it names a function; the bytecode's own name has none of those. `None` where the object
    /// does not read ([`Self::own_property`]).
    fn name_of(&self, object: u32) -> Option<u32> {
        let l = self.code.layout;
        let value = self.own_property(object, l.atom_name)?;
        Some(match value {
            Some(value) if (value >> 32) as i32 == l.tag_string => value as u32,
            _ => 0,
        })
    }

    /// The value of `object`'s own plain property `atom`, found as QuickJS's
    /// `find_own_property` finds it (the atom's hash bucket in the object's shape, then the
    /// bucket's chain); `Some(None)` for none, or an accessor; `None` where the shape is not in
    /// memory, or the chain does not end within [`MAX_PROPERTY_STEPS`].
    fn own_property(&self, object: u32, atom: u32) -> Option<Option<u64>> {
        let l = self.code.layout;
        let shape = u64::from(self.u32(object, l.object_shape)?);
        let mask = u64::from(
            self.memory
                .u32_at(shape + u64::from(l.shape_prop_hash_mask))?,
        );
        let buckets = shape + u64::from(l.shape_hash_table);
        // `prop_hash_end(sh)[-h - 1]`: the buckets are read from the end, the properties follow.
        let bucket = buckets + 4 * (mask - (u64::from(atom) & mask));
        let properties = buckets + 4 * (mask + 1);
        let mut index = self.memory.u32_at(bucket)?;
        for _ in 0..MAX_PROPERTY_STEPS {
            let Some(at) = index.checked_sub(1).map(u64::from) else {
                return Some(None);
            };
            let property = properties + at * u64::from(l.shape_property_size);
            let word = self.memory.u32_at(property)?;
            let this = self
                .memory
                .u32_at(property + u64::from(l.shape_property_atom))?;
            if this == atom {
                if l.shape_property_flags.of(word) & l.prop_tmask != l.prop_normal {
                    return Some(None);
                }
                let values = u64::from(self.u32(object, l.object_prop)?);
                let value = values + at * u64::from(l.property_size);
                return self.memory.u64_at(value).map(Some);
            }
            index = l.shape_property_hash_next.of(word);
        }
        None
    }

    /// Where the class of field initializer `object` starts, its constructor's first line and
    /// column: QuickJS compiles a class's field initializers into one function with no
    /// position (line 0), whose home object is the class's prototype, whose `constructor` is
    /// the class. `None` for a function without a home object, or one that does not lead to a
    /// function of bytecode.
    fn class_position(&self, object: u32) -> Option<(u32, u32)> {
        let l = self.code.layout;
        let prototype = self.u32(object, l.object_home_object)?;
        if prototype == 0 {
            return None;
        }
        let class = self.own_property(prototype, l.atom_constructor)??;
        if (class >> 32) as i32 != l.tag_object {
            return None;
        }
        let mut id = [0; 2];
        let class = class as u32;
        self.memory
            .read(u64::from(class) + u64::from(l.object_class_id), &mut id)?;
        if !l.runs_bytecode(u32::from(u16::from_le_bytes(id))) {
            return None;
        }
        let bytecode = self.u32(class, l.object_function_bytecode)?;
        Some((
            self.u32(bytecode, l.bytecode_line_num)?,
            self.u32(bytecode, l.bytecode_col_num)?,
        ))
    }

    /// The string of atom `atom`, 0 for none (`JS_ATOM_NULL`, a free slot, one beyond the
    /// table).
    fn atom_string(&self, atom: u32) -> u32 {
        let l = self.code.layout;
        let table = self.atoms.get().unwrap_or_else(|| {
            let read = || {
                Some((
                    self.u32(self.rt, l.rt_atom_size)?,
                    self.u32(self.rt, l.rt_atom_array)?,
                ))
            };
            let table = read();
            self.atoms.set(Some(table));
            table
        });
        let string = (|| {
            let (size, array) = table?;
            if atom == 0 || atom >= size {
                return None;
            }
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
    while let Some((next_at, next_line)) = next_entry(l, &mut table, at, line)? {
        if pc < next_at {
            break;
        }
        (at, line) = (next_at, next_line);
    }
    u32::try_from(line).ok()
}

/// The bytecode offset and line of the line table's next entry, from those of the last
/// (`at`, `line`); `Some(None)` at the table's end, `None` for an entry cut short.
fn next_entry(
    l: &QuickJsLayout,
    table: &mut impl Iterator<Item = u8>,
    at: u32,
    line: i32,
) -> Option<Option<(u32, i32)>> {
    let Some(op) = table.next() else {
        return Some(None);
    };
    let next = if op == 0 {
        let at = at.wrapping_add(leb128(table)?);
        (at, line.wrapping_add(zigzag(leb128(table)?)))
    } else {
        let op = u32::from(op).checked_sub(l.pc2line_op_first)?;
        let line = line.wrapping_add((op % l.pc2line_range) as i32 + l.pc2line_base);
        (at.wrapping_add(op / l.pc2line_range), line)
    };
    // The column.
    leb128(table)?;
    Some(Some(next))
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
            m.js_properties(FUNCTION, (SHAPE, VALUES), properties);
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

    /// A class's field initializer, which QuickJS compiles with no position (line 0), is where
    /// its class's constructor is: its home object is the class's prototype, whose
    /// `constructor` is the class.
    #[test]
    fn a_field_initializer_is_where_its_class_is() {
        let l = layout();
        let (prototype, class, class_bytecode) = (0x4400, 0x4600, 0x4700);
        let start = |m: &Image| {
            let code = JsCode::new(layout());
            let mut out = vec![0; 8];
            assert_eq!(code.walk(m, RT, &mut out), 4);
            let Frame::Code { id, .. } = Frame::unpack(out[0]) else {
                panic!("{out:?}");
            };
            let names = code.names().get(id).unwrap();
            (names.first_line, names.first_column)
        };
        let mut m = running();
        m.put(BYTECODE + l.bytecode_line_num, 0);
        m.put(FUNCTION + l.object_home_object, prototype);
        let constructor = [(l.atom_constructor, l.tag_object, class)];
        m.js_properties(prototype, (0x4480, 0x4580), &constructor);
        m.js_object(class, l.class_bytecode_function);
        m.put(class + l.object_function_bytecode, class_bytecode);
        m.put(class_bytecode + l.bytecode_line_num, 40);
        m.put(class_bytecode + l.bytecode_col_num, 5);
        assert_eq!(start(&m), (40, 5));
        // Without a home object, or one whose `constructor` is no function: where the engine
        // puts it.
        let mut other = running();
        other.put(BYTECODE + l.bytecode_line_num, 0);
        assert_eq!(start(&other), (0, 3));
        m.js_object(class, 12);
        assert_eq!(start(&m), (0, 3));
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
