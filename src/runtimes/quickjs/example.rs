//! A QuickJS runtime's state as the walk reads it, laid out as rquickjs-sys 0.13.0's: for the
//! walk's tests and for guests that look like QuickJS (`tests/hostile.rs`).

// A test fixture, never run in the signal handler: a layout missing here is a broken test.
#![allow(clippy::unwrap_used)]

use super::layouts::QuickJsLayout;
use crate::runtimes::interpreted::image::Image;

pub const RT: u32 = 0x100;
pub const ATOMS: u32 = 0x2000;
pub const BYTECODE: u32 = 0x3000;
pub const CODE: u32 = 0x3100;
pub const LINES: u32 = 0x3200;
pub const FUNCTION: u32 = 0x4000;
pub const NATIVE: u32 = 0x4100;
pub const INNER: u32 = 0x5000;
pub const MIDDLE: u32 = 0x5100;
pub const OUTER: u32 = 0x5200;
pub const CONTEXT: u32 = 0x6000;
/// The function object's shape (its properties' names) and its properties' values.
pub const SHAPE: u32 = 0x4200;
pub const VALUES: u32 = 0x4300;
/// The string of the function's name (its `name` property's value).
pub const NAME: u32 = 0x10c0;
/// The atoms of the function's name and file.
pub const FIB: u32 = 60;
pub const FILE: u32 = 61;

/// The rquickjs-sys release whose layout this state has.
pub const CRATE_VERSION: &str = "0.13.0";

pub fn layout() -> &'static QuickJsLayout {
    QuickJsLayout::of_crate(CRATE_VERSION).unwrap()
}

/// A QuickJS runtime at [`RT`] running `fib` (from `app.js`, starting on line 10, column 3)
/// in two frames, a native function's frame between them: the inner one saved at bytecode 6
/// (line 12), the outer one not yet at any. The function object's properties are `length` and
/// `name`, as QuickJS defines them.
pub fn running() -> Image {
    let l = layout();
    let mut m = Image(vec![0; 1 << 16]);
    m.put(RT + l.rt_atom_size, 100);
    m.put(RT + l.rt_atom_array, ATOMS);
    m.put(RT + l.rt_context_list, CONTEXT + l.ctx_link);
    m.put(CONTEXT + l.ctx_rt, RT);
    m.put(RT + l.rt_current_stack_frame, INNER);
    for (atom, at, text) in [
        (l.atom_null, 0x1000, "null"),
        (l.atom_length, 0x1040, "length"),
        (l.atom_name, 0x1080, "name"),
        (FIB, NAME, "fib"),
        (FILE, 0x1100, "/app.js"),
    ] {
        m.put(ATOMS + 4 * atom, at);
        m.js_string(at, text);
    }
    m.put(BYTECODE + l.bytecode_filename, FILE);
    m.put(BYTECODE + l.bytecode_line_num, 10);
    m.put(BYTECODE + l.bytecode_col_num, 3);
    m.put(BYTECODE + l.bytecode_byte_code_buf, CODE);
    m.put(BYTECODE + l.bytecode_byte_code_len, 100);
    // Bytecode 0 on line 11, 5 on 12, 10 on 13 (one line and 5 bytes on each, column 0).
    let table = [3, 0, 28, 0, 28, 0];
    m.0[LINES as usize..LINES as usize + 6].copy_from_slice(&table);
    m.put(BYTECODE + l.bytecode_pc2line_buf, LINES);
    m.put(BYTECODE + l.bytecode_pc2line_len, 6);
    m.js_object(FUNCTION, l.class_bytecode_function);
    m.put(FUNCTION + l.object_function_bytecode, BYTECODE);
    let properties = [(l.atom_length, 0, 1), (l.atom_name, l.tag_string, NAME)];
    m.js_properties(FUNCTION, (SHAPE, VALUES), &properties);
    m.js_object(NATIVE, 12);
    m.js_frame(INNER, FUNCTION, CODE + 7, MIDDLE);
    m.js_frame(MIDDLE, NATIVE, 0, OUTER);
    m.js_frame(OUTER, FUNCTION, 0, 0);
    m
}

impl Image {
    /// A normal 8-bit `JSString` holding `text`.
    pub fn js_string(&mut self, at: u32, text: &str) {
        let l = layout();
        self.put(at + l.string_len.at, text.len() as u32);
        let chars = (at + l.string_size) as usize;
        self.0[chars..chars + text.len()].copy_from_slice(text.as_bytes());
    }

    /// Object `object`'s own properties, each an atom with a value (tag, payload), in a
    /// shape of 4 hash buckets at `shape`, their values at `values`: a bucket's chain runs
    /// from its last property back, as QuickJS links them.
    pub fn js_properties(
        &mut self,
        object: u32,
        (shape, values): (u32, u32),
        properties: &[(u32, i32, u32)],
    ) {
        let l = layout();
        let mask = 3;
        self.put(object + l.object_shape, shape);
        self.put(object + l.object_prop, values);
        self.put(shape + l.shape_prop_hash_mask, mask);
        let buckets = shape + l.shape_hash_table;
        let first = buckets + 4 * (mask + 1);
        for (i, &(atom, tag, payload)) in properties.iter().enumerate() {
            let bucket = buckets + 4 * (mask - (atom & mask));
            let next = self.get(bucket);
            self.put(bucket, i as u32 + 1);
            let property = first + i as u32 * l.shape_property_size;
            self.put(property, next << l.shape_property_hash_next.shift);
            self.put(property + l.shape_property_atom, atom);
            let value = values + i as u32 * l.property_size;
            self.put(value, payload);
            self.put(value + 4, tag as u32);
        }
    }

    pub fn js_object(&mut self, at: u32, class: u32) {
        let a = (at + layout().object_class_id) as usize;
        self.0[a..a + 2].copy_from_slice(&(class as u16).to_le_bytes());
    }

    pub fn js_frame(&mut self, at: u32, function: u32, pc: u32, previous: u32) {
        let l = layout();
        self.put(at + l.frame_prev, previous);
        self.put(at + l.frame_cur_func, function);
        self.put(at + l.frame_cur_func + 4, l.tag_object as u32);
        self.put(at + l.frame_cur_pc, pc);
    }
}
