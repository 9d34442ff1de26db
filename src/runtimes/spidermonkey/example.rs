//! A SpiderMonkey engine's state as the walk reads it, laid out as ComponentizeJS 0.23.0's:
//! for the walk's tests, its fuzz target and guests that look like SpiderMonkey
//! (`tests/hostile.rs`).

// A test fixture, never run in the signal handler: a layout missing here is a broken test.
#![allow(clippy::unwrap_used)]

use super::layouts::{SpiderMonkeyLayout, LAYOUT};
use super::walk::ScriptCode;
use crate::runtimes::interpreted::image::Image;
use crate::runtimes::interpreted::Frame;

/// Where the example's `js::TlsContext` is: the walk's root.
pub const TLS_CONTEXT: u32 = 0x100;
pub const CX: u32 = 0x200;
pub const ACTIVATION: u32 = 0x400;
/// The interpreter's frames, innermost first: `fib` at its `Return`, `fib` at its first call,
/// a self-hosted `forEach`, `run` at its call.
pub const FRAMES: [u32; 4] = [0x800, 0x880, 0x900, 0x980];
/// The scripts of `fib`, `run` and the self-hosted `forEach`, and where each one's
/// `SharedImmutableScriptData` and `ImmutableScriptData` are.
pub const FIB: u32 = 0x1000;
pub const RUN: u32 = 0x1100;
pub const FOR_EACH: u32 = 0x1200;
const SHARED: u32 = 0x2000;
const ISD: u32 = 0x3000;
pub const FUNCTIONS: u32 = 0x4000;
pub const STRINGS: u32 = 0x5000;
const SOURCE_OBJECT: u32 = 0x6000;
const SOURCE: u32 = 0x6100;
const FILENAME_BOX: u32 = 0x6200;
pub const FILENAME: u32 = 0x6300;

/// fib's notes as the debug engine compiled it (see `notes`' tests): line 4 from bytecode
/// 0, line 5 from 66.
const FIB_NOTES: &[u8] = &[
    0x20, 0x03, 0x60, 0xa4, 0x00, 0x17, 0x05, 0xff, 0xff, 0xff, 0xfc, 0x50, 0x03, 0x0d, 0x07, 0x04,
    0x06, 0xff, 0xff, 0xff, 0xfc, 0x50, 0x19, 0x51, 0x80,
];
/// run's: a `NewLine` at bytecode 10 (line 9).
const RUN_NOTES: &[u8] = &[0x1a, 0x80];
const CODE_LENGTH: u32 = 70;

pub fn layout() -> &'static SpiderMonkeyLayout {
    &LAYOUT
}

/// The address of the bytecode of the script at `script`.
pub fn code_of(script: u32) -> u32 {
    ISD + (script - FIB) + LAYOUT.isd_code
}

/// The next activation out of [`ACTIVATION`], running `run` alone at line 8 (as after a
/// native between them called back into JavaScript).
pub const OUTER_ACTIVATION: u32 = ACTIVATION + 0x100;

/// Links [`OUTER_ACTIVATION`] outside [`ACTIVATION`] in `m`.
pub fn add_outer_activation(m: &mut Image) {
    let l = layout();
    let outer = OUTER_ACTIVATION;
    m.put(ACTIVATION + l.activation_prev, outer);
    m.put(outer + l.activation_kind, l.activation_kind_interpreter);
    m.put(outer + l.interpreter_regs_fp, FRAMES[3]);
    m.put(outer + l.interpreter_regs_pc, code_of(RUN) + 1);
    m.put(outer + l.interpreter_entry_frame, FRAMES[3]);
}

/// `code`'s walk of `memory` from [`TLS_CONTEXT`] as (name, line), `None` for an
/// activation's end: what the tests compare.
pub fn walked(code: &ScriptCode, memory: &Image) -> Vec<Option<(String, u32)>> {
    let mut out = vec![0; 64];
    let written = code.walk(memory, TLS_CONTEXT, &mut out);
    out[..written]
        .iter()
        .map(|&word| match Frame::unpack(word) {
            Frame::Code { id, line } => {
                let name = code.names().get(id).map(|n| n.qualname);
                Some((name.unwrap_or_default(), line))
            }
            Frame::Activation => None,
        })
        .collect()
}

/// An engine running `fib` (file `fib.js`, from line 3, column 13) recursing once, called by
/// the self-hosted `forEach`, called by `run` (line 8, column 6) at line 9: one interpreter
/// activation.
pub fn running() -> Image {
    let l = layout();
    let mut m = Image(vec![0; 1 << 16]);
    m.put(TLS_CONTEXT, CX);
    m.put(CX + l.cx_activation, ACTIVATION);
    m.put(
        ACTIVATION + l.activation_kind,
        l.activation_kind_interpreter,
    );
    m.put(ACTIVATION + l.activation_prev, 0);
    m.put(ACTIVATION + l.interpreter_regs_fp, FRAMES[0]);
    m.put(ACTIVATION + l.interpreter_regs_pc, code_of(FIB) + 66);
    m.put(ACTIVATION + l.interpreter_entry_frame, FRAMES[3]);
    let called = [
        (FRAMES[0], FIB, code_of(FIB) + 41),
        (FRAMES[1], FIB, code_of(FOR_EACH) + 2),
        (FRAMES[2], FOR_EACH, code_of(RUN) + 12),
        (FRAMES[3], RUN, 0),
    ];
    for (i, (frame, script, caller_pc)) in called.into_iter().enumerate() {
        m.put(frame + l.frame_script, script);
        m.put(frame + l.frame_prevpc, caller_pc);
        m.put(
            frame + l.frame_prev,
            FRAMES.get(i + 1).copied().unwrap_or(0),
        );
    }
    m.put(SOURCE_OBJECT + l.source_object_source, SOURCE);
    m.put(SOURCE + l.source_filename, FILENAME_BOX);
    m.put(FILENAME_BOX + l.filename_chars, FILENAME);
    m.put_bytes(FILENAME, b"fib.js\0");
    let function = l.script_flag_is_function;
    for (script, name, line, column, flags, notes) in [
        (FIB, "fib", 3, 13, function, FIB_NOTES),
        (RUN, "run", 8, 6, function, RUN_NOTES),
        (
            FOR_EACH,
            "forEach",
            145,
            22,
            function | l.script_flag_self_hosted,
            RUN_NOTES,
        ),
    ] {
        m.sm_script(script, (name, line, column, flags), notes);
    }
    m
}

impl Image {
    pub fn put_bytes(&mut self, address: u32, bytes: &[u8]) {
        let a = address as usize;
        self.0[a..a + bytes.len()].copy_from_slice(bytes);
    }

    /// A function's script at `script` (one of [`FIB`], [`RUN`], [`FOR_EACH`]), named `name`
    /// (a Latin-1 inline string), starting at (`line`, `column`), of [`CODE_LENGTH`] bytes of
    /// bytecode followed by `notes`.
    fn sm_script(
        &mut self,
        script: u32,
        (name, line, column, flags): (&str, u32, u32, u32),
        notes: &[u8],
    ) {
        let l = layout();
        let n = script - FIB;
        let (shared, isd) = (SHARED + n, ISD + n);
        let (function, string) = (FUNCTIONS + n, STRINGS + n);
        self.put(script + l.script_immutable_flags, flags);
        self.put(script + l.script_function, function);
        self.put(script + l.script_source_object, SOURCE_OBJECT);
        self.put(script + l.script_lineno, line);
        self.put(script + l.script_column, column);
        self.put(script + l.script_shared_data, shared);
        self.put(shared + l.shared_data_isd, isd);
        self.put(isd + l.isd_code_length, CODE_LENGTH);
        let notes_at = l.isd_code + CODE_LENGTH;
        self.put_bytes(isd + notes_at, notes);
        self.put(isd + l.isd_opt_array_offset, notes_at + notes.len() as u32);
        self.put(function + l.function_atom, string);
        self.put(function + l.function_atom + 4, l.value_tag_string);
        self.sm_string(string, name);
    }

    /// A linear, inline, Latin-1 `JSString` of `text` at `string`.
    pub fn sm_string(&mut self, string: u32, text: &str) {
        let l = layout();
        self.put(
            string + l.string_flags,
            l.string_inline_bit | l.string_latin1_bit,
        );
        self.put(string + l.string_length, text.len() as u32);
        self.put_bytes(string + l.string_chars, text.as_bytes());
    }
}

/// The example's JIT activation (the portable baseline interpreter's, PBL's), the runtime
/// holding PBL's stack's `top`, where the trampoline's `Stack` is (`fp`, `base`, `top`), and
/// the PBL stack's frames: `run`'s (the entry frame, linked to [`PBL_ENTRY_TOP`]), the stub
/// frame of its IC call (the innermost exit in progress), `fib`'s, the stub frame of its
/// fast-path call, `fib`'s again (the innermost: the `Stack`'s `fp`).
pub const JIT_ACTIVATION: u32 = 0x7000;
pub const RUNTIME: u32 = 0x7800;
pub const PBL_STACK: u32 = JIT_ACTIVATION - 256;
pub const PBL_BASE: u32 = 0x9000;
pub const PBL_ENTRY_TOP: u32 = 0xC000;
pub const PBL_FRAMES: [u32; 5] = [0xBEDC, 0xBF00, 0xBF5C, 0xBF80, 0xBFE8];
const FRAME_TYPE_BASELINE_STUB: u32 = 2;

/// [`running`], called into (by a native) from `fib` running in PBL: a JIT activation inside
/// the interpreter's, running `fib` (at its `Return`, its pc as PBL last stored it) called by
/// `fib` (at its first call) called by `run` (at its call), the entry frame.
pub fn running_pbl() -> Image {
    let l = layout();
    let mut m = running();
    m.put(CX + l.cx_activation, JIT_ACTIVATION);
    m.put(JIT_ACTIVATION + l.activation_kind, l.activation_kind_jit);
    m.put(JIT_ACTIVATION + l.activation_prev, ACTIVATION);
    m.put(CX + l.cx_runtime, RUNTIME);
    let [inner, fast_stub, fib, ic_stub, entry] = PBL_FRAMES;
    // The IC call from run is the innermost call into the VM in progress.
    m.put(
        RUNTIME + l.runtime_pbl_stack_top,
        ic_stub - l.pbl_stack_top_below_exit_fp,
    );
    m.put(JIT_ACTIVATION + l.jit_activation_exit_fp, ic_stub);
    m.put(PBL_STACK + l.pbl_stack_fp, inner);
    m.put(PBL_STACK + l.pbl_stack_base, PBL_BASE);
    m.put(PBL_STACK + l.pbl_stack_top, PBL_ENTRY_TOP);
    for script in [FIB, RUN] {
        m.put(FUNCTIONS + (script - FIB) + l.function_script, script);
    }
    let scripted = FRAME_TYPE_BASELINE_STUB | 1 << l.jit_frame_descriptor_argc_shift;
    for (fp, link, descriptor, script, pc) in [
        (inner, fast_stub, scripted, FIB, code_of(FIB) + 66),
        (fib, ic_stub, scripted, FIB, code_of(FIB) + 41),
        (
            entry,
            PBL_ENTRY_TOP,
            l.jit_frame_type_cpp_to_js_jit,
            RUN,
            code_of(RUN) + 12,
        ),
    ] {
        m.pbl_frame(fp, link, descriptor, script, pc);
    }
    for (stub, caller, word) in [(fast_stub, fib, 0), (ic_stub, entry, 0x7f00)] {
        m.put(stub + l.jit_frame_caller_fp, caller);
        m.put(stub + l.jit_frame_descriptor, l.jit_frame_type_baseline_js);
        m.put(stub - l.pbl_stack_top_below_exit_fp, word);
    }
    m
}

impl Image {
    /// A PBL script's frame at `fp`: its header (its link, its descriptor, its callee token:
    /// `script`'s function) and its `BaselineFrame` (`script` at `pc`).
    pub fn pbl_frame(&mut self, fp: u32, link: u32, descriptor: u32, script: u32, pc: u32) {
        let l = layout();
        self.put(fp + l.jit_frame_caller_fp, link);
        self.put(fp + l.jit_frame_descriptor, descriptor);
        self.put(fp + l.jit_frame_callee_token, FUNCTIONS + (script - FIB));
        let frame = fp - l.baseline_frame_size;
        self.put(frame + l.baseline_frame_script, script);
        self.put(frame + l.baseline_frame_pc, pc);
        self.put(
            frame + l.baseline_frame_flags,
            l.baseline_flag_running_in_interpreter,
        );
    }
}
