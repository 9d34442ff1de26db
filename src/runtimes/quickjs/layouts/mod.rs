//! The layouts of the QuickJS builds wasmspy reads: [`generated`], written by `generate.py`
//! from each rquickjs-sys release's vendored quickjs-ng source (never by hand).

mod generated;

pub use generated::LAYOUTS;

/// A bit field of a 32-bit word: its word's offset, its lowest bit and its width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BitField {
    pub at: u32,
    pub shift: u32,
    pub width: u32,
}

impl BitField {
    /// The field's value in `word`.
    pub fn of(&self, word: u32) -> u32 {
        (word >> self.shift) & ((1u64 << self.width) - 1) as u32
    }
}

/// Where a QuickJS build keeps what its walk reads, on wasm32: offsets of `JSRuntime`
/// (`rt_`), `JSContext` (`ctx_`), `JSStackFrame` (`frame_`), `JSObject` (`object_`),
/// `JSFunctionBytecode` (`bytecode_`), `JSShape` (`shape_`), `JSShapeProperty`
/// (`shape_property_`), `JSStringSlice` (`slice_`) and `JSString` (`string_`) fields, and the enum values
/// and line-table constants it uses, named as in `quickjs.c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuickJsLayout {
    /// The rquickjs-sys release the build vendors, as its `.dep-v0` section names it.
    pub crate_version: &'static str,
    /// The quickjs-ng release it vendors.
    pub engine_version: &'static str,
    pub rt_atom_size: u32,
    pub rt_atom_array: u32,
    pub rt_context_list: u32,
    pub rt_current_stack_frame: u32,
    pub ctx_rt: u32,
    pub ctx_link: u32,
    pub frame_prev: u32,
    pub frame_cur_func: u32,
    pub frame_cur_pc: u32,
    pub object_class_id: u32,
    pub object_shape: u32,
    pub object_prop: u32,
    pub object_function_bytecode: u32,
    /// A method's home object (`super`'s): a class's prototype for its field initializer.
    pub object_home_object: u32,
    pub shape_prop_hash_mask: u32,
    /// `JSShape.hash_table`: the buckets, then the shape's properties (`JSShapeProperty`).
    pub shape_hash_table: u32,
    pub shape_property_atom: u32,
    /// `JSStringSlice`'s fields: a slice string's characters are its parent's, from `start`.
    pub slice_parent: u32,
    pub slice_start: u32,
    pub bytecode_byte_code_buf: u32,
    pub bytecode_byte_code_len: u32,
    pub bytecode_filename: u32,
    pub bytecode_line_num: u32,
    pub bytecode_col_num: u32,
    pub bytecode_pc2line_len: u32,
    pub bytecode_pc2line_buf: u32,
    /// `sizeof(JSString)`: a normal string's characters follow it.
    pub string_size: u32,
    pub value_size: u32,
    pub shape_property_size: u32,
    pub property_size: u32,
    pub class_bytecode_function: u32,
    pub class_generator_function: u32,
    pub class_async_function: u32,
    pub class_async_generator_function: u32,
    pub atom_null: u32,
    pub atom_length: u32,
    pub atom_name: u32,
    pub atom_constructor: u32,
    pub string_kind_normal: u32,
    pub string_kind_slice: u32,
    /// `JS_PROP_TMASK`: the bits of a property's flags that say its kind; `JS_PROP_NORMAL`
    /// for a value.
    pub prop_tmask: u32,
    pub prop_normal: u32,
    pub pc2line_range: u32,
    pub pc2line_op_first: u32,
    pub tag_object: i32,
    pub tag_string: i32,
    pub pc2line_base: i32,
    pub string_len: BitField,
    pub string_is_wide_char: BitField,
    pub string_kind: BitField,
    pub shape_property_hash_next: BitField,
    pub shape_property_flags: BitField,
}

impl QuickJsLayout {
    /// The layout of rquickjs-sys release `version`, if wasmspy has it.
    pub fn of_crate(version: &str) -> Option<&'static QuickJsLayout> {
        LAYOUTS.iter().find(|l| l.crate_version == version)
    }

    /// Whether objects of class `class` run bytecode (`u.func` holds their bytecode).
    pub fn runs_bytecode(&self, class: u32) -> bool {
        [
            self.class_bytecode_function,
            self.class_generator_function,
            self.class_async_function,
            self.class_async_generator_function,
        ]
        .contains(&class)
    }
}
