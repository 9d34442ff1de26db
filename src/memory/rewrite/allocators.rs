//! The allocator functions the rewriter wraps ([`Allocator`]): how each is recognised, by its
//! name in the `name` section and the signature it must have, and what its wrapper makes of it
//! (the code the hook hears, whether it returns a block, frees one, or leaves its blocks to a
//! garbage collector).

use crate::wasm::demangle::demangle;

// Named in the documentation only.
#[cfg(doc)]
use super::{NESTING_DEPTH, TOLD_ENTERING};

/// An allocator function the rewriter wraps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Allocator {
    /// C's `malloc(size)` (CPython's `PyObject_Malloc`, `PyMem_Malloc` too).
    Malloc,
    /// C's `calloc(count, size)` (CPython's `PyObject_Calloc`, `PyMem_Calloc` too).
    Calloc,
    /// C's `realloc(block, size)` (CPython's `PyObject_Realloc`, `PyMem_Realloc` too).
    Realloc,
    /// C's `free(block)` (CPython's `PyObject_Free`, `PyMem_Free` too).
    Free,
    /// C's `aligned_alloc(alignment, size)`.
    AlignedAlloc,
    /// POSIX's `posix_memalign(&block, alignment, size)`.
    PosixMemalign,
    /// Rust's `__rust_alloc(size, align)`.
    RustAlloc,
    /// Rust's `__rust_alloc_zeroed(size, align)`.
    RustAllocZeroed,
    /// Rust's `__rust_realloc(block, old_size, align, new_size)`.
    RustRealloc,
    /// Rust's `__rust_dealloc(block, size, align)`.
    RustDealloc,
    /// Go's `runtime.mallocgc` and its size-specialized variants (`mallocgc…SC<n>`), which
    /// the compiler calls directly for `new` of a known size.
    GoMallocgc,
    /// TinyGo's `runtime.alloc`.
    TinyGoAlloc,
    /// A function the host calls while the component may not call out: the `realloc` of a
    /// component's canonical options (placing the values the host passes in) or a
    /// `post-return` (freeing a result the host has read). Nothing allocated or freed while it
    /// runs can be reported, by this module or another of the component (componentize-py's
    /// `cabi_realloc` calls `libc.so`'s `malloc`): its wrapper marks this module's allocators
    /// as nested, and tells the hook it enters and leaves (code [`Allocator::code`], size
    /// [`TOLD_ENTERING`] and 0), on which the component's gate raises and lowers every
    /// module's [`NESTING_DEPTH`] ([`crate::memory::component`]).
    HostCalled,
}

const ALL: [Allocator; 13] = [
    Allocator::Malloc,
    Allocator::Calloc,
    Allocator::Realloc,
    Allocator::Free,
    Allocator::AlignedAlloc,
    Allocator::PosixMemalign,
    Allocator::RustAlloc,
    Allocator::RustAllocZeroed,
    Allocator::RustRealloc,
    Allocator::RustDealloc,
    Allocator::GoMallocgc,
    Allocator::TinyGoAlloc,
    Allocator::HostCalled,
];

impl Allocator {
    /// The allocator a function's name (as in the `name` section) says it is. Rust's are
    /// matched on the demangled path's last segment: current rustc mangles them (v0,
    /// `_RNv…___rust_alloc`) with a crate disambiguator. CPython's object and memory
    /// allocators (`PyObject_Malloc`, `PyMem_Free`…) are C's, for Python's objects (most of
    /// them in pymalloc's arenas, which only `malloc` would see).
    pub fn by_name(raw: &str) -> Option<Self> {
        let name = demangle(raw);
        let last = name.rsplit("::").next().unwrap_or(&name);
        Some(match (raw, last) {
            ("malloc" | "PyObject_Malloc" | "PyMem_Malloc", _) => Allocator::Malloc,
            ("calloc" | "PyObject_Calloc" | "PyMem_Calloc", _) => Allocator::Calloc,
            ("realloc" | "PyObject_Realloc" | "PyMem_Realloc", _) => Allocator::Realloc,
            ("free" | "PyObject_Free" | "PyMem_Free", _) => Allocator::Free,
            ("aligned_alloc", _) => Allocator::AlignedAlloc,
            ("posix_memalign", _) => Allocator::PosixMemalign,
            (_, "__rust_alloc") => Allocator::RustAlloc,
            (_, "__rust_alloc_zeroed") => Allocator::RustAllocZeroed,
            (_, "__rust_realloc") => Allocator::RustRealloc,
            (_, "__rust_dealloc") => Allocator::RustDealloc,
            ("runtime.alloc", _) => Allocator::TinyGoAlloc,
            _ if is_go_mallocgc(raw) => Allocator::GoMallocgc,
            _ => return None,
        })
    }

    /// C's name of a C allocator (`malloc`...), for a function found by its code's shape.
    pub fn c_name(self) -> Option<&'static str> {
        Some(match self {
            Allocator::Malloc => "malloc",
            Allocator::Calloc => "calloc",
            Allocator::Realloc => "realloc",
            Allocator::Free => "free",
            Allocator::AlignedAlloc => "aligned_alloc",
            Allocator::PosixMemalign => "posix_memalign",
            _ => return None,
        })
    }

    /// The number the wrapper reports.
    pub fn code(self) -> i32 {
        ALL.iter().position(|&a| a == self).unwrap_or(0) as i32
    }

    /// The allocator of a number the wrapper reported ([`Allocator::code`]).
    pub fn from_code(code: i32) -> Option<Self> {
        usize::try_from(code).ok().and_then(|i| ALL.get(i)).copied()
    }

    /// Whether its blocks are freed by a garbage collector rather than by a call.
    pub fn collected(self) -> bool {
        matches!(self, Allocator::GoMallocgc | Allocator::TinyGoAlloc)
    }

    /// Whether a wasm32 function with `params` `i32` parameters and `results` `i32` results
    /// can be this allocator. Go passes arguments on its own stack: every Go function takes
    /// the resume point and returns whether to unwind. TinyGo's `runtime.alloc` has gained a
    /// layout and a context parameter over versions; the size is always the first.
    pub(super) fn accepts(self, params: usize, results: usize) -> bool {
        let count = match self {
            Allocator::TinyGoAlloc => return (1..=3).contains(&params) && results == 1,
            Allocator::Malloc | Allocator::GoMallocgc | Allocator::Free => 1,
            Allocator::Calloc | Allocator::AlignedAlloc | Allocator::Realloc => 2,
            Allocator::RustAlloc | Allocator::RustAllocZeroed => 2,
            Allocator::PosixMemalign | Allocator::RustDealloc => 3,
            Allocator::RustRealloc => 4,
            // Any signature: see `Scan::allocator_params`.
            Allocator::HostCalled => return true,
        };
        params == count && results == usize::from(self.allocates())
    }

    /// Whether it returns a block (the only `i32` result an allocator has).
    pub(super) fn allocates(self) -> bool {
        !matches!(
            self,
            Allocator::Free | Allocator::RustDealloc | Allocator::HostCalled
        )
    }

    pub(super) fn frees(self) -> bool {
        matches!(
            self,
            Allocator::Free | Allocator::RustDealloc | Allocator::Realloc | Allocator::RustRealloc
        )
    }
}

/// `runtime.mallocgc`, or one of the size-specialized entry points Go generates beside it
/// (`runtime.mallocgcSmallScanNoHeaderSC3`, `runtime.mallocgcTinySC2`…), which share its
/// arguments; not its internal helpers (`mallocgcLarge`, `…SlowPath`).
fn is_go_mallocgc(name: &str) -> bool {
    name.strip_prefix("runtime.mallocgc").is_some_and(|rest| {
        rest.is_empty()
            || rest.rsplit_once("SC").is_some_and(|(_, class)| {
                !class.is_empty() && class.bytes().all(|b| b.is_ascii_digit())
            })
    })
}

/// Whether `name` is one of CPython's allocator functions. They are wrapped only where
/// `malloc`'s wrapper then nests in theirs (a block `PyObject_Malloc` gets from `malloc` is
/// reported once, as Python's): in a module that defines `malloc` too, or in a component,
/// whose gate nests every module's wrappers in those of a module that does not (as
/// componentize-py's `libpython` beside `libc`). A module alone without `malloc` has its
/// blocks reported as `malloc`'s.
pub(super) fn is_cpython_api(name: &str) -> bool {
    name.starts_with("PyObject_") || name.starts_with("PyMem_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_allocators_are_found_by_their_demangled_names() {
        assert_eq!(
            Allocator::by_name("_RNvCs1234_7___rustc12___rust_alloc"),
            Some(Allocator::RustAlloc)
        );
        assert_eq!(
            Allocator::by_name("__rust_dealloc"),
            Some(Allocator::RustDealloc)
        );
        assert_eq!(Allocator::by_name("my_malloc"), None);
        for a in ALL {
            assert_eq!(Allocator::from_code(a.code()), Some(a));
        }
    }
}
