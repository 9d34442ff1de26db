//! The frames of a JIT activation: the portable baseline interpreter's (PBL's), which runs
//! JavaScript in the weval engine (SpiderMonkey's vm/PortableBaselineInterpret.cpp).
//!
//! PBL keeps its frames on its own stack, laid out as the baseline JIT's (see the layout's
//! `jit_frame_*` and `baseline_frame_*` fields): a script's frame is a `BaselineFrame` right
//! below its fp, over the frame header (the caller's fp, a return address, a descriptor, the
//! callee token) and its arguments. A script called from another is called through a stub
//! frame, pushed as an exit frame (`Stack::pushExitFrame`) right above the callee's arguments,
//! whose link is the caller's fp; the activation's first script, called by
//! `PortableBaselineTrampoline`, has a `CppToJSJit` descriptor and links to the stack's top
//! as it was when the activation began.
//!
//! Where the innermost frame is. Neither of the two places the layout gives says it alone:
//! `JitActivation::packedExitFP_` goes stale as soon as a call into the VM returns, and the
//! PBL stack's `top` (`cx->runtime()->portableBaselineStack().top`) is current but names only
//! the innermost call into the VM in progress: PBL's fast path for a scripted call (the `Call`
//! op calling a function that has a `JitScript`, `fib` calling `fib`) pushes the stub frame
//! and the callee's frame without either, so the frames it pushes (most of a recursion) are
//! below `top`, and nothing in the heap points at them. The one place that does is the
//! trampoline's `Stack` (its `fp`, `base` and `top`: the layout's `pbl_stack_*`), a local in the
//! shadow stack of the Wasm code just below the `JitActivation` (which `EnterJit`, the
//! trampoline's caller, holds), whose `fp` PBL keeps current at every push and pop. Its place
//! is the build's, so the walk looks for it: the nearest words below the activation that
//! read as a `Stack` (`base` < `fp` < `top`, `top` at or above the current top) and from
//! whose `fp` a chain of frames checks out all the way to an entry frame linked to that
//! `top`, through the innermost exit in progress (just above the current `top`) where one is.
//!
//! A chain checks out when every frame is where its header says: an exit or stub frame's
//! descriptor is `BaselineJS` with no arguments (and its link above it); a script's frame's
//! arguments fill exactly the space up to its link (the stub frame, whose word below its fp,
//! the stub or exit type, ends them; for the entry frame, the `top` it links to), at least as
//! many as its descriptor counts (plus `this`); its `BaselineFrame` is flagged as running in
//! the interpreter; its script is the one its callee token names (so a frame just pushed,
//! whose fields PBL has not written yet, is not read as the one that was there before); its
//! pc lies in its script's bytecode (as [`Walk::frame`] checks). Anything else gives no stack.
//!
//! The pcs: PBL stores a frame's `interpreterPC_` at its entry, before each IC and at each
//! call into the VM only. A caller's pc is exact (at its call); the innermost frame's lags at
//! its last IC or call (as QuickJS's `cur_pc`): its line is that op's.
//!
//! Activations: a JIT activation's frames end with `Frame::Activation`, like an
//! interpreter activation's. The next JIT activation out, if any, sees as its current `top`
//! the one this activation began with (the value its entry frame links to).

use super::{Out, Walk};
use crate::runtimes::interpreted::{LoopCheck, MAX_STEPS};
use crate::shared::Memory;
use std::sync::atomic::Ordering;

/// How far below the `JitActivation` the trampoline's `Stack` is looked for: the shadow-stack
/// frames of `EnterJit` and `PortableBaselineTrampoline` (256 bytes in ComponentizeJS 0.23's
/// weval engine), whose sizes are the build's.
const STACK_SEARCH: u32 = 1024;
/// The most a PBL stack spans (its `top` above its `base`), a bound for what reads as a
/// `Stack`: SpiderMonkey's default is 512 KiB.
const STACK_SPAN: u32 = 64 << 20;
/// A `Value`'s size: PBL's stack slots, and so its arguments'.
const VALUE: u32 = 8;

impl<M: Memory> Walk<'_, M> {
    /// Writes the frames of the JIT activation at `activation`, innermost first, given the PBL
    /// stack's current `top` for it (`None`: the runtime's, for the innermost JIT activation).
    /// Gives the `top` the activation began with (the next one out's), `None` where no chain
    /// checks out (what was written for it is taken back).
    pub(super) fn jit_frames(
        &self,
        cx: u32,
        activation: u32,
        top: Option<u32>,
        steps: &mut usize,
        out: &mut Out,
    ) -> Option<u32> {
        let l = self.code.layout;
        let top = match top {
            Some(top) => top,
            None => self.u32(self.u32(cx, l.cx_runtime)?, l.runtime_pbl_stack_top)?,
        };
        // Where the last walk found it first (the build's frames put it at the same distance
        // below every activation), then every place in reach.
        let known = self.code.pbl_stack_below.load(Ordering::Relaxed);
        let last_field = l.pbl_stack_fp.max(l.pbl_stack_base).max(l.pbl_stack_top);
        let places = std::iter::once(known).filter(|&below| below != 0).chain(
            (last_field + 4..=STACK_SEARCH)
                .step_by(4)
                .filter(|&b| b != known),
        );
        for below in places {
            let Some(stack) = activation.checked_sub(below) else {
                break;
            };
            if let Some(entry_top) = self.stack_frames(stack, top, steps, out) {
                self.code.pbl_stack_below.store(below, Ordering::Relaxed);
                return Some(entry_top);
            }
        }
        None
    }

    /// The frames of the `Stack` at `stack`, if it reads as one and its chain checks out (what
    /// was written for it is taken back where not); the `top` it began with.
    fn stack_frames(&self, stack: u32, top: u32, steps: &mut usize, out: &mut Out) -> Option<u32> {
        let l = self.code.layout;
        let fp = self.u32(stack, l.pbl_stack_fp)?;
        let base = self.u32(stack, l.pbl_stack_base)?;
        let entry_top = self.u32(stack, l.pbl_stack_top)?;
        if !(base < fp && fp < entry_top && entry_top >= top && entry_top - base <= STACK_SPAN) {
            return None;
        }
        let written = out.written;
        if self.chain(fp, top, entry_top, steps, out).is_none() {
            out.written = written;
            return None;
        }
        Some(entry_top)
    }

    /// The frames from `fp` (the `Stack`'s) out to the entry frame, which must link to
    /// `entry_top`, passing the innermost exit in progress (`pbl_stack_top_below_exit_fp`
    /// above `top`) unless `top` is `entry_top` (none in progress).
    fn chain(
        &self,
        mut fp: u32,
        top: u32,
        entry_top: u32,
        steps: &mut usize,
        out: &mut Out,
    ) -> Option<()> {
        let l = self.code.layout;
        let innermost_exit = top.checked_add(l.pbl_stack_top_below_exit_fp)?;
        let mut met_exit = top == entry_top;
        let mut frames = LoopCheck::default();
        loop {
            *steps += 1;
            if *steps > MAX_STEPS || frames.looped(fp) {
                return None;
            }
            let descriptor = self.u32(fp, l.jit_frame_descriptor)?;
            let link = self.u32(fp, l.jit_frame_caller_fp)?;
            if link <= fp || link > entry_top {
                return None;
            }
            let kind = descriptor & l.jit_frame_type_mask;
            if fp == innermost_exit || kind == l.jit_frame_type_baseline_js {
                // An exit or stub frame (a call into the VM, a native's call, a scripted
                // call's stub): no script; its caller's frame (or, a native's exit, the VM
                // call's exit) is its link.
                met_exit |= fp == innermost_exit;
                if kind == l.jit_frame_type_baseline_js
                    && descriptor >> l.jit_frame_descriptor_argc_shift != 0
                {
                    return None;
                }
                fp = link;
                continue;
            }
            let entry = kind == l.jit_frame_type_cpp_to_js_jit;
            // Where its arguments end: at the stub frame's exit word, or the entry's top.
            let arguments_end = if entry {
                if link != entry_top {
                    return None;
                }
                entry_top
            } else {
                let stub = self.u32(link, l.jit_frame_descriptor)?;
                if stub != l.jit_frame_type_baseline_js {
                    return None;
                }
                link.checked_sub(l.pbl_stack_top_below_exit_fp)?
            };
            // The arguments follow the callee token.
            let arguments = fp.checked_add(l.jit_frame_callee_token + 4)?;
            let span = arguments_end.checked_sub(arguments)?;
            let argc = descriptor >> l.jit_frame_descriptor_argc_shift;
            if span % VALUE != 0 || span / VALUE <= argc {
                return None;
            }
            let frame = fp.checked_sub(l.baseline_frame_size)?;
            let flags = self.u32(frame, l.baseline_frame_flags)?;
            let script = self.u32(frame, l.baseline_frame_script)?;
            if flags & l.baseline_flag_running_in_interpreter == 0
                || !self.token_names(self.u32(fp, l.jit_frame_callee_token)?, script)?
            {
                return None;
            }
            let pc = self.u32(frame, l.baseline_frame_pc)?;
            if let Some(frame) = self.frame(script, pc)? {
                out.push(frame);
            }
            if entry {
                return met_exit.then_some(());
            }
            fp = link;
        }
    }

    /// Whether a callee token names `script`: a script's token is the script itself (tagged),
    /// a function's is the function, whose script slot holds it. Either way, without reading
    /// the tag's meaning.
    fn token_names(&self, token: u32, script: u32) -> Option<bool> {
        let l = self.code.layout;
        let pointer = token & !l.callee_token_tag_mask;
        Some(pointer == script || self.u32(pointer, l.function_script)? == script)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::example::*;
    use super::super::ScriptCode;
    use crate::runtimes::interpreted::image::Image;

    fn frame(name: &str, line: u32) -> Option<(String, u32)> {
        Some((name.into(), line))
    }

    fn expected() -> Vec<Option<(String, u32)>> {
        let frames = [frame("fib", 5), frame("fib", 4), frame("run", 9), None];
        [frames.clone(), frames].concat()
    }

    #[test]
    fn a_jit_activations_frames_precede_the_interpreters() {
        let code = ScriptCode::new(layout());
        assert_eq!(walked(&code, &running_pbl()), expected());
        // No call into the VM in progress: `top` is the one the activation began with.
        let l = layout();
        let mut m = running_pbl();
        m.put(RUNTIME + l.runtime_pbl_stack_top, PBL_ENTRY_TOP);
        assert_eq!(walked(&code, &m), expected());
        assert_eq!(code.counts().warning("x"), None);
    }

    /// The `Stack` is looked for below the activation: words that do not read as one are
    /// passed over.
    #[test]
    fn the_stack_is_found_below_the_activation() {
        let l = layout();
        let stack = |m: &mut Image, at: u32, [fp, base, top]: [u32; 3]| {
            m.put(at + l.pbl_stack_fp, fp);
            m.put(at + l.pbl_stack_base, base);
            m.put(at + l.pbl_stack_top, top);
        };
        let mut m = running_pbl();
        stack(&mut m, PBL_STACK, [0; 3]);
        stack(
            &mut m,
            PBL_STACK - 100,
            [PBL_FRAMES[0], PBL_BASE, PBL_ENTRY_TOP],
        );
        // Something like a `Stack` nearer the activation, whose chain does not check out.
        stack(
            &mut m,
            JIT_ACTIVATION - 40,
            [PBL_FRAMES[1] - 8, PBL_BASE, PBL_ENTRY_TOP],
        );
        let code = ScriptCode::new(layout());
        assert_eq!(walked(&code, &m), expected());
        // Found once, it is looked at first; moved, it is looked for again.
        assert_eq!(walked(&code, &m), expected());
        let mut moved = running_pbl();
        stack(&mut moved, PBL_STACK, [0; 3]);
        stack(
            &mut moved,
            PBL_STACK - 40,
            [PBL_FRAMES[0], PBL_BASE, PBL_ENTRY_TOP],
        );
        assert_eq!(walked(&code, &moved), expected());
        assert_eq!(code.counts().warning("x"), None);
    }

    /// Anything that does not check out gives no frames: a frame just pushed (its callee
    /// token not its script's), an innermost exit in progress the chain does not pass, a
    /// frame whose arguments do not fill its place, an entry frame linked elsewhere, a frame
    /// not flagged as PBL's, a `Stack` whose fp is its top (no frame yet), no `Stack`.
    #[test]
    fn chains_that_do_not_check_out_give_nothing() {
        let l = layout();
        let [inner, _, fib, _, entry] = PBL_FRAMES;
        let broken: [&dyn Fn(&mut Image); 7] = [
            &|m| m.put(inner + l.jit_frame_descriptor + 4, FUNCTIONS + (RUN - FIB)),
            &|m| m.put(RUNTIME + l.runtime_pbl_stack_top, 0xB000),
            &|m| {
                m.put(
                    fib + l.jit_frame_descriptor,
                    2 | 2 << l.jit_frame_descriptor_argc_shift,
                )
            },
            &|m| m.put(entry + l.jit_frame_caller_fp, PBL_ENTRY_TOP + 8),
            &|m| m.put(inner - l.baseline_frame_size + l.baseline_frame_flags, 0),
            &|m| m.put(PBL_STACK + l.pbl_stack_fp, PBL_ENTRY_TOP),
            &|m| m.put(PBL_STACK + l.pbl_stack_top, 0),
        ];
        for (i, breaks) in broken.iter().enumerate() {
            let mut m = running_pbl();
            breaks(&mut m);
            let code = ScriptCode::new(layout());
            assert_eq!(walked(&code, &m), vec![], "case {i}");
            assert!(code.counts().warning("x").is_some(), "case {i}");
        }
    }
}
