//! What the tests, benchmarks and fuzz targets reach that is not the library's API: the stages'
//! internals (to drive a reader over memory they make up, a symbolizer over a module, a clock
//! they compare with), each private module's public items under the module's name. Compiled
//! with the `internals` feature only, hidden from the documentation; no stability promised.

/// Glob re-exports of private modules' public items, one module each.
macro_rules! mirror {
    ($($module:ident),* $(,)?) => {
        $(
            #[allow(unused_imports)]
            pub mod $module {
                pub use crate::$module::*;
            }
        )*
    };
}

mirror!(capture, clock, resolve, runtimes, shared, wasm);

pub use crate::runtimes::cpython::debug_offsets::encode as python_debug_offsets;

/// A QuickJS runtime's state running `fib` of `app.js` (as the walk's tests have it), for a
/// guest that looks like QuickJS.
pub struct QuickJsState {
    /// The rquickjs-sys release whose layout it has.
    pub crate_version: &'static str,
    /// Memory from address 0.
    pub image: Vec<u8>,
    /// Where the state is in it.
    pub arena: std::ops::Range<u32>,
    /// The address of the `JSRuntime`, and the offset of its `current_stack_frame`.
    pub runtime: u32,
    pub current_frame_offset: u32,
    /// The frames, innermost first, evenly spaced: `1 << frame_shift` bytes apart.
    pub frames: [u32; 3],
    pub frame_shift: u32,
}

pub fn quickjs_state() -> QuickJsState {
    use crate::runtimes::quickjs::example::*;
    // The look-alike picks a frame as `INNER + (n << frame_shift)`.
    const _: () = assert!(MIDDLE - INNER == OUTER - MIDDLE && (MIDDLE - INNER).is_power_of_two());
    QuickJsState {
        crate_version: CRATE_VERSION,
        image: running().0,
        arena: RT..CONTEXT + 0x100,
        runtime: RT,
        current_frame_offset: layout().rt_current_stack_frame,
        frames: [INNER, MIDDLE, OUTER],
        frame_shift: (MIDDLE - INNER).trailing_zeros(),
    }
}
pub use crate::runtimes::cpython::walk::PythonCode;

/// A SpiderMonkey engine's state, the walk's examples in one (`example.rs`): a JIT activation
/// running `fib` recursing under `run` in the portable baseline interpreter (PBL's frames,
/// found through the trampoline's `Stack` below the activation), inside the interpreter
/// activation running them again (through a self-hosted `forEach`), inside a third activation
/// running `run` alone (as after a native called back into JavaScript): for a guest that looks
/// like SpiderMonkey, whose walks go through both of the walk's readers.
pub struct SpiderMonkeyState {
    /// Memory from address 0.
    pub image: Vec<u8>,
    /// Where the state is in it.
    pub arena: std::ops::Range<u32>,
    /// Where `js::TlsContext` is: the address the look-alike's code must read.
    pub tls_context: u32,
    /// The interpreter's frames, innermost first, evenly spaced: `1 << frame_shift` bytes apart.
    pub frames: [u32; 4],
    pub frame_shift: u32,
    /// The PBL stack's frames, innermost first (scripts' frames and the stub frames between
    /// them), not evenly spaced: values a rewrite may link a frame to, besides `frames`.
    pub pbl_frames: [u32; 5],
    /// The words the walk follows to its frames and their names, each of which it reads:
    /// `js::TlsContext`, the context's activation and runtime, the PBL stack's `top` in the
    /// runtime; each activation's kind and link, an interpreter activation's registers (`fp`,
    /// `pc`) and entry frame; the trampoline's `Stack` (`fp`, `base`, `top`); each PBL frame's
    /// header (link, descriptor, callee token) and `BaselineFrame` (script, pc, flags), each
    /// stub frame's link and descriptor; each interpreter frame's script and, but the entry's,
    /// link and saved pc; each script's data and bytecode length and, but the self-hosted
    /// `forEach`'s, its notes' end, its function's script slot and its name's length. Not the
    /// names' characters, nor where a function starts: a walk that checks out names what those
    /// say.
    pub links: Vec<u32>,
}

pub fn spidermonkey_state() -> SpiderMonkeyState {
    use crate::runtimes::spidermonkey::example::*;
    let l = layout();
    let mut m = running_pbl();
    // The look-alike picks a frame as `FRAMES[0] + (n << frame_shift)`.
    const _: () = assert!(
        FRAMES[1] - FRAMES[0] == FRAMES[2] - FRAMES[1]
            && FRAMES[3] - FRAMES[2] == FRAMES[1] - FRAMES[0]
            && (FRAMES[1] - FRAMES[0]).is_power_of_two()
    );
    add_outer_activation(&mut m);
    let mut links = vec![
        TLS_CONTEXT,
        CX + l.cx_activation,
        CX + l.cx_runtime,
        RUNTIME + l.runtime_pbl_stack_top,
        JIT_ACTIVATION + l.activation_kind,
        JIT_ACTIVATION + l.activation_prev,
    ];
    links.extend([l.pbl_stack_fp, l.pbl_stack_base, l.pbl_stack_top].map(|o| PBL_STACK + o));
    let [inner, fast_stub, fib, ic_stub, entry] = PBL_FRAMES;
    for fp in [inner, fib, entry] {
        let frame = fp - l.baseline_frame_size;
        links.extend([
            fp + l.jit_frame_caller_fp,
            fp + l.jit_frame_descriptor,
            fp + l.jit_frame_callee_token,
            frame + l.baseline_frame_script,
            frame + l.baseline_frame_pc,
            frame + l.baseline_frame_flags,
        ]);
    }
    for stub in [fast_stub, ic_stub] {
        links.extend([stub + l.jit_frame_caller_fp, stub + l.jit_frame_descriptor]);
    }
    for activation in [ACTIVATION, OUTER_ACTIVATION] {
        links.extend(
            [
                l.activation_kind,
                l.activation_prev,
                l.interpreter_regs_fp,
                l.interpreter_regs_pc,
                l.interpreter_entry_frame,
            ]
            .map(|offset| activation + offset),
        );
    }
    // The last frame is both activations' entry: the walk stops there, before its link.
    for (i, frame) in FRAMES.into_iter().enumerate() {
        links.push(frame + l.frame_script);
        if i + 1 < FRAMES.len() {
            links.extend([frame + l.frame_prev, frame + l.frame_prevpc]);
        }
    }
    for script in [FIB, RUN, FOR_EACH] {
        let shared = m.get(script + l.script_shared_data);
        let isd = m.get(shared + l.shared_data_isd);
        links.extend([
            script + l.script_shared_data,
            shared + l.shared_data_isd,
            isd + l.isd_code_length,
        ]);
        // The engine's own `forEach` is left out once its pc is checked: its function and
        // notes are never read.
        if script != FOR_EACH {
            let function = m.get(script + l.script_function);
            let atom = m.get(function + l.function_atom);
            links.extend([
                isd + l.isd_opt_array_offset,
                function + l.function_script,
                atom + l.string_length,
            ]);
        }
    }
    let used = m.0.iter().rposition(|b| *b != 0).unwrap_or(0) as u32 + 1;
    SpiderMonkeyState {
        arena: TLS_CONTEXT..used.next_multiple_of(4),
        image: m.0,
        tls_context: TLS_CONTEXT,
        frames: FRAMES,
        frame_shift: (FRAMES[1] - FRAMES[0]).trailing_zeros(),
        pbl_frames: PBL_FRAMES,
        links,
    }
}

#[cfg(test)]
mod tests {
    use super::spidermonkey_state;
    use crate::runtimes::interpreted::image::Image;
    use crate::runtimes::spidermonkey::example::{layout, walked};
    use crate::runtimes::spidermonkey::ScriptCode;

    fn walked_from_state(image: &Image) -> Vec<Option<(String, u32)>> {
        walked(&ScriptCode::new(layout()), image)
    }

    /// The look-alike's state walks through the JIT activation's PBL frames, then the
    /// interpreter's, then the outer activation's; each word it lists matters (rewritten to 0
    /// or to a pointer past memory, the walk gives something else), so each of its rewrites
    /// reaches the walk.
    #[test]
    fn the_spidermonkey_look_alikes_state_walks_both_activations_through_its_links() {
        let state = spidermonkey_state();
        let frame = |name: &str, line| Some((name.to_string(), line));
        let activation = [frame("fib", 5), frame("fib", 4), frame("run", 9), None];
        let expected = [&activation[..], &activation, &[frame("run", 8), None]].concat();
        let image = Image(state.image.clone());
        assert_eq!(walked_from_state(&image), expected);
        let mut seen = std::collections::HashSet::new();
        for &link in &state.links {
            assert!(seen.insert(link), "{link:#x} listed twice");
            assert!(state.arena.contains(&link), "{link:#x} outside the arena");
            let changed = [0, 0xFFFF_FFF0].iter().any(|&value| {
                let mut image = Image(state.image.clone());
                image.put(link, value);
                walked_from_state(&image) != expected
            });
            assert!(changed, "{link:#x} does not matter to the walk");
        }
    }
}
