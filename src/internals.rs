//! What the fuzz targets (`fuzz/`) and tests (`tests/fuzz_corpus.rs`, `tests/hostile.rs`) reach
//! that is not the library's API: the readers of guest memory, to run over memory they make
//! up, and what makes a guest look like a runtime to them. Hidden from the documentation; no
//! stability promised.

pub use crate::runtimes::cpython::debug_offsets::encode as python_debug_offsets;
pub use crate::runtimes::cpython::walk::PythonCode;
