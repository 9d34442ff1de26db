//! A guest's stack as it is taken on the guest's own thread (at an epoch, in the allocator
//! hook): Wasmtime's backtrace, with the words of a language runtime's stack where one was
//! read; and the depth every sample is cut to.

use wasmtime::WasmBacktrace;

/// The innermost frames a sample keeps; deeper stacks lose their outermost frames.
pub const MAX_STACK_DEPTH: usize = 512;

/// A guest stack taken on the guest thread (a sample at an epoch, a sampled allocation):
/// Wasmtime's backtrace, and where a language runtime's stack was read, its words.
pub struct GuestStack {
    pub backtrace: WasmBacktrace,
    pub splice: Option<Spliced>,
}

/// A runtime's stack taken with a backtrace: it follows the backtrace's first `at` frames.
pub struct Spliced {
    pub at: usize,
    /// The runtime that read it ([`crate::runtimes::id_of`]).
    pub runtime: usize,
    pub words: Vec<usize>,
}

impl GuestStack {
    /// The backtrace alone.
    pub fn wasm(backtrace: WasmBacktrace) -> Self {
        GuestStack {
            backtrace,
            splice: None,
        }
    }
}
