//! What the fuzz targets (`fuzz/`) and `tests/fuzz_corpus.rs` reach that is not the library's
//! API: the readers of guest memory, to run over memory they make up. Hidden from the
//! documentation; no stability promised.

pub use crate::runtimes::cpython::walk::PythonCode;
