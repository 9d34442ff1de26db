//! SpiderMonkey's JavaScript stack, read from an instance's linear memory where its thread
//! stopped (in the signal handler; on the guest thread): from `js::TlsContext` the
//! `JSContext`, its chain of activations (innermost first), and in each interpreter activation
//! its chain of `InterpreterFrame`s from the current one (`regs_.fp_`, at `regs_.pc`) out to
//! its entry frame (each caller at the `prevpc_` its callee saved). A frame's script gives its
//! function's name (the `JSFunction`'s atom: what SpiderMonkey's stack traces print), its
//! file (its `ScriptSource`'s), where it starts and, through its source notes, the line of
//! its pc. Laid out as [`SpiderMonkeyLayout`] says.
//!
//! Self-hosted scripts (the engine's own JavaScript: `Array.prototype.forEach`, `map`) are
//! left out, as the engine's stack traces leave them out: their time is their caller's.
//!
//! The walk is async-signal-safe: no allocation, no locks; every read goes through
//! [`Memory`], within the memory's current length; activations and frames are followed for
//! at most [`MAX_STEPS`] in all, source notes for at most
//! [`LINE_TABLES_PER_WALK`](crate::runtimes::interpreted::LINE_TABLES_PER_WALK) bytes. Every
//! frame's pc must lie in its script's bytecode: an activation caught while it is being set
//! up (its fields not yet written), a chain that leaves memory, loops or does not end, gives
//! no stack, so the sample keeps its Wasm frames.

/// The portable baseline interpreter's frames (JIT activations): a part of the walk.
mod pbl;

use super::layouts::SpiderMonkeyLayout;
use super::notes;
use crate::runtimes::interpreted::{
    Bytes, CodeKey, CodeNames, Frame, LineBudget, LoopCheck, RawStr, Text, MAX_STEPS, RAW_STR_BYTES,
};
use crate::runtimes::walk_counts::WalkCounts;
use crate::shared::Memory;
use std::sync::atomic::AtomicU32;

/// Marks a script that is no function (a global, eval or module script) in its names' key,
/// beside its column (1-based, and far below 2³¹ in any source).
pub const NOT_A_FUNCTION: u32 = 1 << 31;

/// A SpiderMonkey build's layout and the names of the scripts its walks met.
pub struct ScriptCode {
    layout: &'static SpiderMonkeyLayout,
    names: CodeNames,
    counts: WalkCounts,
    /// How far below a JIT activation the last walk found the trampoline's `Stack` (0: none
    /// yet): see [`pbl`].
    pbl_stack_below: AtomicU32,
}

impl ScriptCode {
    pub fn new(layout: &'static SpiderMonkeyLayout) -> Self {
        ScriptCode {
            layout,
            names: CodeNames::new(),
            counts: WalkCounts::default(),
            pbl_stack_below: AtomicU32::new(0),
        }
    }

    pub fn names(&self) -> &CodeNames {
        &self.names
    }

    /// How the walks went.
    pub fn counts(&self) -> &WalkCounts {
        &self.counts
    }

    /// Writes the JavaScript stack of the `JSContext` that `js::TlsContext` (at `tls_context`)
    /// holds into `out`, innermost first, each activation's frames followed by
    /// [`Frame::Activation`], as much as fits; how many words were written, 0 without a
    /// JavaScript stack or with one that does not check out (which [`Self::counts`] counts).
    /// Async-signal-safe.
    pub fn walk(&self, memory: &impl Memory, tls_context: u32, out: &mut [usize]) -> usize {
        let walk = Walk {
            code: self,
            memory,
            lines: LineBudget::default(),
        };
        self.counts
            .count(walk.frames(tls_context, out))
            .unwrap_or(0)
    }
}

struct Walk<'a, M> {
    code: &'a ScriptCode,
    memory: &'a M,
    lines: LineBudget,
}

/// Words written to a walk's output, as far as it has room.
struct Out<'a> {
    words: &'a mut [usize],
    written: usize,
}

impl Out<'_> {
    fn push(&mut self, frame: Frame) {
        if let Some(word) = self.words.get_mut(self.written) {
            *word = frame.pack();
            self.written += 1;
        }
    }
}

impl<M: Memory> Walk<'_, M> {
    fn u32(&self, address: u32, offset: u32) -> Option<u32> {
        self.memory.u32_at(u64::from(address) + u64::from(offset))
    }

    fn frames(&self, tls_context: u32, words: &mut [usize]) -> Option<usize> {
        let l = self.code.layout;
        let cx = self.u32(tls_context, 0)?;
        if cx == 0 {
            return Some(0);
        }
        let mut out = Out { words, written: 0 };
        let mut activation = self.u32(cx, l.cx_activation)?;
        let mut activations = LoopCheck::default();
        let mut steps = 0;
        // The PBL stack's top for the next JIT activation out (`None`: the runtime's).
        let mut pbl_top = None;
        while activation != 0 {
            if activations.looped(activation) {
                return None;
            }
            let kind = self.u32(activation, l.activation_kind)?;
            if kind == l.activation_kind_jit {
                pbl_top = Some(self.jit_frames(cx, activation, pbl_top, &mut steps, &mut out)?);
            } else if kind == l.activation_kind_interpreter {
                self.interpreter_frames(activation, &mut steps, &mut out)?;
            } else {
                return None;
            }
            out.push(Frame::Activation);
            activation = self.u32(activation, l.activation_prev)?;
        }
        Some(out.written)
    }

    /// The frames of the interpreter activation at `activation`, innermost first.
    fn interpreter_frames(&self, activation: u32, steps: &mut usize, out: &mut Out) -> Option<()> {
        let l = self.code.layout;
        let mut fp = self.u32(activation, l.interpreter_regs_fp)?;
        let mut pc = self.u32(activation, l.interpreter_regs_pc)?;
        let entry = self.u32(activation, l.interpreter_entry_frame)?;
        let mut frames = LoopCheck::default();
        loop {
            *steps += 1;
            if *steps > MAX_STEPS || fp == 0 || frames.looped(fp) {
                return None;
            }
            let script = self.u32(fp, l.frame_script)?;
            if let Some(frame) = self.frame(script, pc)? {
                out.push(frame);
            }
            if fp == entry {
                return Some(());
            }
            pc = self.u32(fp, l.frame_prevpc)?;
            fp = self.u32(fp, l.frame_prev)?;
        }
    }

    /// The frame of `script` at `pc`: its names' entry and its line; `Some(None)` for a
    /// self-hosted script, `None` where the script does not read or `pc` is not in its
    /// bytecode.
    fn frame(&self, script: u32, pc: u32) -> Option<Option<Frame>> {
        let l = self.code.layout;
        let flags = self.u32(script, l.script_immutable_flags)?;
        let isd = self.u32(self.u32(script, l.script_shared_data)?, l.shared_data_isd)?;
        let code = isd.checked_add(l.isd_code)?;
        let code_length = self.u32(isd, l.isd_code_length)?;
        let at = pc.checked_sub(code).filter(|at| *at < code_length)?;
        if flags & l.script_flag_self_hosted != 0 {
            return Some(None);
        }
        let is_function = flags & l.script_flag_is_function != 0;
        let atom = if is_function {
            self.atom_of(self.u32(script, l.script_function)?)?
        } else {
            0
        };
        let source_object = self.u32(script, l.script_source_object)?;
        let source = self.u32(source_object, l.source_object_source)?;
        let filename = match self.u32(source, l.source_filename)? {
            0 => 0,
            boxed => self.u32(boxed, l.filename_chars)?,
        };
        let first_line = self.u32(script, l.script_lineno)?;
        let column = self.u32(script, l.script_column)?;
        let key = CodeKey {
            code: script,
            qualname: atom,
            filename,
            first_line,
            first_column: (column & !NOT_A_FUNCTION) | if is_function { 0 } else { NOT_A_FUNCTION },
        };
        let id = self.code.names.id_of(key, || {
            Some(Text {
                qualname: self.js_string(atom)?,
                filename: self.c_string(filename)?,
            })
        })?;
        let notes_at = code.checked_add(code_length)?;
        // `notesEnd()`: the optional arrays' offset, less the optional offsets before them.
        let flags = self.memory.u8_at(u64::from(isd) + u64::from(l.isd_flags))?;
        let offsets = (u32::from(flags) >> l.isd_opt_offsets_shift) & l.isd_opt_offsets_mask;
        let notes_end = isd
            .checked_add(self.u32(isd, l.isd_opt_array_offset)?)?
            .saturating_sub(offsets);
        let notes_size = notes_end.saturating_sub(notes_at);
        let line = self
            .lines
            .decode(self.memory, u64::from(notes_at), notes_size, |bytes| {
                notes::line_at(bytes, first_line, at)
            })
            .unwrap_or(first_line);
        Some(Some(Frame::Code { id, line }))
    }

    /// The name of the function at `function`: its atom slot's string, 0 for none (an
    /// anonymous function: its slot is undefined).
    fn atom_of(&self, function: u32) -> Option<u32> {
        let l = self.code.layout;
        let value = self
            .memory
            .u64_at(u64::from(function) + u64::from(l.function_atom))?;
        Some(if (value >> 32) as u32 == l.value_tag_string {
            value as u32
        } else {
            0
        })
    }

    /// A `JSString`'s characters (a linear string's: inline, or where its pointer says), as
    /// many as a [`RawStr`] holds; empty for none (0).
    fn js_string(&self, string: u32) -> Option<RawStr> {
        let l = self.code.layout;
        if string == 0 {
            return Some(RawStr::default());
        }
        let flags = self.u32(string, l.string_flags)?;
        let length = self.u32(string, l.string_length)?;
        let chars = if flags & l.string_inline_bit != 0 {
            string.checked_add(l.string_chars)?
        } else {
            self.u32(string, l.string_chars)?
        };
        let kind = if flags & l.string_latin1_bit != 0 {
            1
        } else {
            2
        };
        RawStr::read(self.memory, u64::from(chars), length, kind, false)
    }

    /// The NUL-terminated string at `chars` (a file name), as much as a [`RawStr`] holds;
    /// empty for none (0).
    fn c_string(&self, chars: u32) -> Option<RawStr> {
        if chars == 0 {
            return Some(RawStr::default());
        }
        let address = u64::from(chars);
        let length = Bytes::new(self.memory, address, RAW_STR_BYTES as u32 + 1)
            .take_while(|b| *b != 0)
            .count();
        RawStr::read(self.memory, address, length as u32, 1, false)
    }
}

#[cfg(test)]
mod tests {
    use super::super::example::*;
    use super::*;
    use crate::runtimes::interpreted::image::Image;

    /// The walk's output as (name, file, line, a function?), `None` for an activation's end.
    fn walked(code: &ScriptCode, memory: &Image) -> Vec<Option<(String, String, u32, bool)>> {
        let mut out = vec![0; 64];
        let written = code.walk(memory, TLS_CONTEXT, &mut out);
        out[..written]
            .iter()
            .map(|&word| match Frame::unpack(word) {
                Frame::Code { id, line } => {
                    let names = code.names().get(id).unwrap();
                    let function = names.first_column & NOT_A_FUNCTION == 0;
                    Some((names.qualname, names.filename, line, function))
                }
                Frame::Activation => None,
            })
            .collect()
    }

    fn frame(name: &str, line: u32) -> Option<(String, String, u32, bool)> {
        Some((name.into(), "fib.js".into(), line, true))
    }

    #[test]
    fn frames_with_their_lines_self_hosted_ones_left_out() {
        let code = ScriptCode::new(layout());
        let expected = vec![frame("fib", 5), frame("fib", 4), frame("run", 9), None];
        assert_eq!(walked(&code, &running()), expected);
        // One entry per script: the two fib frames share theirs.
        let mut out = vec![0; 8];
        code.walk(&running(), TLS_CONTEXT, &mut out);
        assert_eq!(out[0] >> 32, out[1] >> 32);
    }

    #[test]
    fn anonymous_functions_and_top_levels_have_no_name() {
        let l = layout();
        let mut m = running();
        // fib's atom slot undefined (an anonymous function); run no function at all.
        m.put(FUNCTIONS + l.function_atom + 4, 0xFFFF_FF83);
        m.put(RUN + l.script_immutable_flags, 0);
        let code = ScriptCode::new(layout());
        let nameless = |line, function| Some((String::new(), "fib.js".into(), line, function));
        let expected = vec![
            nameless(5, true),
            nameless(4, true),
            nameless(9, false),
            None,
        ];
        assert_eq!(walked(&code, &m), expected);
    }

    #[test]
    fn a_second_activation_follows_the_first() {
        let mut m = running();
        add_outer_activation(&mut m);
        let code = ScriptCode::new(layout());
        let expected = vec![
            frame("fib", 5),
            frame("fib", 4),
            frame("run", 9),
            None,
            frame("run", 8),
            None,
        ];
        assert_eq!(walked(&code, &m), expected);
    }

    /// Anything that does not check out gives no frames, and is counted: a pc outside its
    /// script's bytecode (an activation being set up), a frame chain that loops or leaves
    /// memory, an activation of another kind, activations that loop.
    #[test]
    fn chains_that_do_not_check_out_give_nothing() {
        let l = layout();
        let broken: [&dyn Fn(&mut Image); 6] = [
            &|m| m.put(ACTIVATION + l.interpreter_regs_pc, code_of(FIB) + 70),
            &|m| m.put(FRAMES[1] + l.frame_prev, FRAMES[0]),
            &|m| m.put(FRAMES[1] + l.frame_prev, 0xffff_fff0),
            &|m| m.put(ACTIVATION + l.activation_kind, 7),
            &|m| m.put(ACTIVATION + l.activation_prev, ACTIVATION),
            &|m| m.put(FIB + l.script_shared_data, 0x7fff_0000),
        ];
        for (i, breaks) in broken.iter().enumerate() {
            let mut m = running();
            breaks(&mut m);
            let code = ScriptCode::new(layout());
            assert_eq!(walked(&code, &m), vec![], "case {i}");
            assert!(code.counts().warning("x").is_some(), "case {i}");
        }
        // No context yet, or no activation (outside JavaScript): nothing, and all is well.
        for (at, value) in [(TLS_CONTEXT, 0), (CX + l.cx_activation, 0)] {
            let mut m = running();
            m.put(at, value);
            let code = ScriptCode::new(layout());
            assert_eq!(walked(&code, &m), vec![]);
            assert_eq!(code.counts().warning("x"), None);
        }
    }

    /// Names that are no names (a control character) fail the walk; a file name without its
    /// NUL is cut where a name's room ends.
    #[test]
    fn strings_are_read_as_far_as_they_are_names() {
        let l = layout();
        let mut m = running();
        m.put_bytes(STRINGS + l.string_chars, b"f\x01b");
        let code = ScriptCode::new(layout());
        assert_eq!(walked(&code, &m), vec![]);
        let mut m = running();
        m.put_bytes(FILENAME, &[b'a'; 300]);
        let code = ScriptCode::new(layout());
        let walked = walked(&code, &m);
        let (_, file, ..) = walked[0].clone().unwrap();
        assert_eq!(file, format!("{}…", "a".repeat(128)));
    }
}
