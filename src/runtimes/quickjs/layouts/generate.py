#!/usr/bin/env python3
"""Regenerates generated.rs: the layout of each QuickJS build wasmspy reads, derived from the
source the build vendors, never typed by hand.

For each rquickjs-sys release in VERSIONS (the crate that vendors quickjs-ng for rquickjs, which
componentize-qjs and Javy's plugins build on; a component names its version in its
cargo-auditable `.dep-v0` section), this downloads the crate from crates.io, compiles
offsets.c (which includes its quickjs.c) for wasm32-wasi with the defines rquickjs-sys's
build.rs gives a WASI build, and reads the constants back from the assembly.

Needs: python3, curl, clang with the wasm32 target and wasi-libc's headers (Debian: `apt-get
install clang lld wasi-libc`). Usage: src/runtimes/quickjs/layouts/generate.py
"""
import io
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request

# The rquickjs-sys releases of the componentize-qjs and Javy releases wasmspy reads.
VERSIONS = ["0.13.0"]

# rquickjs-sys's build.rs: `_GNU_SOURCE`, `NDEBUG` (its default features), and for WASI
# `EMSCRIPTEN=1`, `FE_DOWNWARD=0`, `FE_UPWARD=0`.
DEFINES = ["-D_GNU_SOURCE", "-DNDEBUG", "-DEMSCRIPTEN=1", "-DFE_DOWNWARD=0", "-DFE_UPWARD=0"]

HERE = os.path.dirname(os.path.abspath(__file__))

# Scalar constants of offsets.c, in generated.rs's order; negative ones are i32 in C.
SCALARS = [
    "rt_atom_size", "rt_atom_array", "rt_context_list", "rt_current_stack_frame",
    "ctx_rt", "ctx_link",
    "frame_prev", "frame_cur_func", "frame_cur_pc",
    "object_class_id", "object_shape", "object_prop", "object_function_bytecode", "object_home_object",
    "shape_prop_hash_mask", "shape_hash_table", "shape_property_atom", "slice_parent", "slice_start",
    "bytecode_byte_code_buf", "bytecode_byte_code_len",
    "bytecode_filename", "bytecode_line_num", "bytecode_col_num", "bytecode_pc2line_len", "bytecode_pc2line_buf",
    "string_size", "value_size", "shape_property_size", "property_size",
    "class_bytecode_function", "class_generator_function", "class_async_function",
    "class_async_generator_function",
    "atom_null", "atom_length", "atom_name", "atom_constructor",
    "string_kind_normal", "string_kind_slice", "prop_tmask", "prop_normal", "pc2line_range", "pc2line_op_first",
]
SIGNED = ["tag_object", "tag_string", "pc2line_base"]
BIT_FIELDS = ["string_len", "string_is_wide_char", "string_kind", "shape_property_hash_next",
              "shape_property_flags"]


def crate_source(version, into):
    url = f"https://static.crates.io/crates/rquickjs-sys/rquickjs-sys-{version}.crate"
    data = urllib.request.urlopen(url).read()
    tarfile.open(fileobj=io.BytesIO(data)).extractall(into)
    return os.path.join(into, f"rquickjs-sys-{version}", "quickjs")


def assembly(quickjs):
    return subprocess.run(
        ["clang", "--target=wasm32-wasi", "--sysroot=/usr", *DEFINES, "-O2", "-w",
         "-I", quickjs, "-S", "-o", "-", os.path.join(HERE, "offsets.c")],
        check=True, capture_output=True, text=True).stdout


def symbol_bytes(asm, name):
    """The initial bytes of data symbol wasmspy_NAME, from its directives."""
    out = bytearray()
    lines = asm[asm.index(f"\nwasmspy_{name}:\n") + 1:].splitlines()[1:]
    sizes = {".int8": 1, ".int16": 2, ".int32": 4, ".int64": 8}
    for line in lines:
        parts = line.split()
        if not parts or parts[0] == ".size":
            break
        if parts[0] in sizes:
            out += (int(parts[1]) % (1 << (8 * sizes[parts[0]]))).to_bytes(sizes[parts[0]], "little")
        elif parts[0] in (".zero", ".skip"):
            out += bytes(int(parts[1]))
        else:
            raise SystemExit(f"wasmspy_{name}: unexpected directive {line!r}")
    return bytes(out)


def bit_field(data):
    """(byte offset of its 32-bit word, shift, width) of the one field set in `data`."""
    words = [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data) - 3, 4)]
    (at, word), = [(i * 4, w) for i, w in enumerate(words) if w]
    shift = (word & -word).bit_length() - 1
    width = (word >> shift).bit_length()
    assert word == ((1 << width) - 1) << shift, hex(word)
    return at, shift, width


def layout(version):
    with tempfile.TemporaryDirectory() as tmp:
        quickjs = crate_source(version, tmp)
        header = open(os.path.join(quickjs, "quickjs.h")).read()
        engine = ".".join(re.search(rf"#define QJS_VERSION_{part} (\d+)", header).group(1)
                          for part in ("MAJOR", "MINOR", "PATCH"))
        asm = assembly(quickjs)
    fields = [f"        crate_version: {version!r},".replace("'", '"'),
              f'        engine_version: "{engine}",']
    for name in SCALARS:
        fields.append(f"        {name}: {int.from_bytes(symbol_bytes(asm, name), 'little')},")
    for name in SIGNED:
        fields.append(f"        {name}: {int.from_bytes(symbol_bytes(asm, name), 'little', signed=True)},")
    for name in BIT_FIELDS:
        at, shift, width = bit_field(symbol_bytes(asm, name))
        fields.append(f"        {name}: BitField {{ at: {at}, shift: {shift}, width: {width} }},")
    return "    QuickJsLayout {\n" + "\n".join(fields) + "\n    },\n"


def main():
    layouts = "".join(layout(v) for v in VERSIONS)
    text = ("// Generated by generate.py from the rquickjs-sys crates' quickjs-ng sources: do not edit.\n\n"
            "use super::{BitField, QuickJsLayout};\n\n"
            "/// The layouts of the QuickJS builds wasmspy reads, by rquickjs-sys release.\n"
            "pub const LAYOUTS: &[QuickJsLayout] = &[\n" + layouts + "];\n")
    with open(os.path.join(HERE, "generated.rs"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
