/* What wasmspy reads of a QuickJS (quickjs-ng) engine built for wasm32-wasi, as the compiler
 * lays it out: compiled (not linked) by generate.py with rquickjs-sys's own flags, each
 * `wasmspy_*` constant read back from the assembly. The bit fields of JSString and JSShapeProperty are read from
 * the bytes of the initialised probes below. */
#include "quickjs.c"

#define FIELD(name, type, member) const unsigned wasmspy_##name = offsetof(type, member);

FIELD(rt_atom_size, JSRuntime, atom_size)
FIELD(rt_atom_array, JSRuntime, atom_array)
FIELD(rt_context_list, JSRuntime, context_list)
FIELD(rt_current_stack_frame, JSRuntime, current_stack_frame)
FIELD(ctx_rt, JSContext, rt)
FIELD(ctx_link, JSContext, link)
FIELD(frame_prev, JSStackFrame, prev_frame)
FIELD(frame_cur_func, JSStackFrame, cur_func)
FIELD(frame_cur_pc, JSStackFrame, cur_pc)
FIELD(object_class_id, JSObject, class_id)
FIELD(object_shape, JSObject, shape)
FIELD(object_prop, JSObject, prop)
FIELD(object_function_bytecode, JSObject, u.func.function_bytecode)
FIELD(object_home_object, JSObject, u.func.home_object)
FIELD(shape_prop_hash_mask, JSShape, prop_hash_mask)
FIELD(shape_hash_table, JSShape, hash_table)
FIELD(shape_property_atom, JSShapeProperty, atom)
FIELD(slice_parent, JSStringSlice, parent)
FIELD(slice_start, JSStringSlice, start)
FIELD(bytecode_byte_code_buf, JSFunctionBytecode, byte_code_buf)
FIELD(bytecode_byte_code_len, JSFunctionBytecode, byte_code_len)
FIELD(bytecode_filename, JSFunctionBytecode, filename)
FIELD(bytecode_line_num, JSFunctionBytecode, line_num)
FIELD(bytecode_col_num, JSFunctionBytecode, col_num)
FIELD(bytecode_pc2line_len, JSFunctionBytecode, pc2line_len)
FIELD(bytecode_pc2line_buf, JSFunctionBytecode, pc2line_buf)

const unsigned wasmspy_string_size = sizeof(JSString);
const unsigned wasmspy_value_size = sizeof(JSValue);
const unsigned wasmspy_shape_property_size = sizeof(JSShapeProperty);
const unsigned wasmspy_property_size = sizeof(JSProperty);
const int wasmspy_tag_object = JS_TAG_OBJECT;
const int wasmspy_tag_string = JS_TAG_STRING;
const unsigned wasmspy_class_bytecode_function = JS_CLASS_BYTECODE_FUNCTION;
const unsigned wasmspy_class_generator_function = JS_CLASS_GENERATOR_FUNCTION;
const unsigned wasmspy_class_async_function = JS_CLASS_ASYNC_FUNCTION;
const unsigned wasmspy_class_async_generator_function = JS_CLASS_ASYNC_GENERATOR_FUNCTION;
const unsigned wasmspy_atom_null = JS_ATOM_null;
const unsigned wasmspy_atom_length = JS_ATOM_length;
const unsigned wasmspy_atom_name = JS_ATOM_name;
const unsigned wasmspy_atom_constructor = JS_ATOM_constructor;
const unsigned wasmspy_string_kind_normal = JS_STRING_KIND_NORMAL;
const unsigned wasmspy_string_kind_slice = JS_STRING_KIND_SLICE;
const unsigned wasmspy_prop_tmask = JS_PROP_TMASK;
const unsigned wasmspy_prop_normal = JS_PROP_NORMAL;
const int wasmspy_pc2line_base = PC2LINE_BASE;
const unsigned wasmspy_pc2line_range = PC2LINE_RANGE;
const unsigned wasmspy_pc2line_op_first = PC2LINE_OP_FIRST;

/* Each bit field set to all ones alone: where its bits are. */
const JSString wasmspy_string_len = { .len = 0x7fffffff };
const JSString wasmspy_string_is_wide_char = { .is_wide_char = 1 };
const JSString wasmspy_string_kind = { .kind = 3 };
const JSShapeProperty wasmspy_shape_property_hash_next = { .hash_next = 0x3ffffff };
const JSShapeProperty wasmspy_shape_property_flags = { .flags = 0x3f };
