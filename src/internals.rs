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
