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

mirror!(capture, clock, diff, live_view, record, resolve, runtimes, sync, top, wasm);

pub use crate::runtimes::cpython::debug_offsets::encode as python_debug_offsets;
pub use crate::runtimes::cpython::walk::PythonCode;
