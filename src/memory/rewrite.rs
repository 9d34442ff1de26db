//! Rewrites a module so that its allocator functions report sampled calls to the host,
//! changing nothing else's code.
//!
//! Each allocator function keeps its index, so every call to it, direct or through a table,
//! now reaches a small wrapper: the wrapper calls the original body, moved byte for byte to a
//! new function at the end of the index space, then decides in Wasm whether the host must
//! hear of the call, and if so reports (allocator, size, freed address, allocated address,
//! countdown) through `call_indirect` on a new one-element table that the host fills after
//! instantiation. A table, a type, globals and a memory are appended to their index spaces, so
//! no existing index moves and every other function body stays byte-identical; only their
//! positions in the code section shift, which [`Rewritten::original_offset`] undoes so that
//! names and DWARF of the original module still apply.
//!
//! Leaving Wasm costs far more than an allocation, so the sampling decision is made in the
//! wrapper: a countdown global of bytes until the next sample (Go's `nextSample`), which the
//! host resets after each sample, and, for frees, a 64 KiB memory of one flag per hash slot
//! of addresses, set while a sampled block hashing there is live: a free reaches the host only
//! if its block may have been sampled. The host's answer ([`report`]) carries the new countdown
//! and the flags of the slots involved, which the wrapper stores: the host needs no access to
//! the module's memory or globals, so a module inside a component, whose exports the host
//! cannot reach, is rewritten the same way (see [`crate::memory::component`]). A depth global
//! makes an allocator called from inside another (`realloc` calling `malloc`, `__rust_alloc`
//! calling `malloc`) report once.

use std::collections::HashMap;
use std::ops::Range;

use anyhow::{bail, Context, Result};
use wasm_encoder::reencode::{Reencode, RoundtripReencoder};
use wasm_encoder::{
    BlockType, CodeSection, ConstExpr, ExportKind, ExportSection, Function, FunctionSection,
    GlobalSection, GlobalType, MemArg, MemorySection, MemoryType, Module, RawSection, RefType,
    TableSection, TableType, TypeSection, ValType,
};
use wasmparser::{CompositeInnerType, KnownCustom, Name, Parser, Payload, TypeRef};

use crate::wasm::demangle::demangle;

/// The export holding the table whose element 0 the host sets to its report function, of type
/// `(allocator: i32, size: i32, freed: i32, allocated: i32, countdown: i64) -> i64`: called
/// when `countdown` (the bytes left before the next sample, less this allocation's) went below
/// zero, or when `freed` hashes to a flagged slot; it returns [`report`]. Until element 0 is
/// set, nothing is reported.
pub const HOOK_TABLE: &str = "wasmspy:allocator-hook";

/// The export of the `i64` global counting the bytes left before the next sampled allocation
/// (it starts at [`UNSEEDED`]).
pub const SAMPLE_COUNTDOWN: &str = "wasmspy:sample-countdown";

/// The export of the mutable `i32` global counting the wrappers running: while it is not zero,
/// the module's allocators neither count nor report. A component's gate raises every module's
/// while a function the host called runs ([`Allocator::HostCalled`]).
pub const NESTING_DEPTH: &str = "wasmspy:nesting-depth";

/// What a wrapper tells the hook, as the size of a call with [`Allocator::HostCalled`]'s code:
/// this bit set on entry, clear on exit.
pub const TOLD_ENTERING: i32 = 1;

/// Set by an allocator's wrapper (in a module without `malloc`), clear by a function the host
/// called: the allocator's callees are other modules' `malloc` and the like, so only the
/// modules whose wrappers do not tell ([`Rewritten::tells`]) need nesting in it, where
/// anything of the component may run in a function the host called.
pub const TOLD_BY_ALLOCATOR: i32 = 2;

/// Where every instance's countdown starts: far below zero, so that the first allocator call
/// reaches the host, which draws that instance's first interval then ([`bytes_unseeded`]).
/// A start drawn once and compiled in would sample the same allocation of every instance (a
/// server's store per request).
pub const UNSEEDED: i64 = i64::MIN / 2;

/// The bytes allocated since a countdown that the hook heard started at [`UNSEEDED`]; `None`
/// for a countdown the host had drawn (never more than one allocation's size below zero).
pub fn bytes_unseeded(countdown: i64) -> Option<u64> {
    (countdown < UNSEEDED / 2).then(|| countdown.abs_diff(UNSEEDED))
}

/// The hook's answer: the new countdown, and whether a live sampled block now hashes to the
/// slot of the freed address and to that of the allocated one.
pub fn report(countdown: i64, freed_slot_live: bool, allocated_slot_live: bool) -> i64 {
    countdown << 2 | i64::from(allocated_slot_live) << 1 | i64::from(freed_slot_live)
}

/// Fibonacci hashing: aligned addresses differ in their low bits, which this spreads over the
/// top 16 bits.
const SLOT_MULTIPLIER: u32 = 0x9E37_79B1;

/// The flag (a byte of the rewriter's memory of flags) that stands for the block at `address`.
pub fn block_slot(address: u32) -> usize {
    (address.wrapping_mul(SLOT_MULTIPLIER) >> 16) as usize
}

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
    fn accepts(self, params: usize, results: usize) -> bool {
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
    fn allocates(self) -> bool {
        !matches!(
            self,
            Allocator::Free | Allocator::RustDealloc | Allocator::HostCalled
        )
    }

    fn frees(self) -> bool {
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
fn is_cpython_api(name: &str) -> bool {
    name.starts_with("PyObject_") || name.starts_with("PyMem_")
}

/// The rewritten module, and where its code came from.
pub struct Rewritten {
    /// The rewritten module's bytes, which export [`HOOK_TABLE`], [`SAMPLE_COUNTDOWN`] and
    /// [`NESTING_DEPTH`].
    pub wasm: Vec<u8>,
    /// (function index, allocator) of each wrapped function.
    pub wrapped: Vec<(u32, Allocator)>,
    /// The index of the first moved original body; the others follow, in `wrapped` order.
    first_moved: u32,
    /// Whether its allocators' wrappers tell the hook they enter and leave (see
    /// [`rewrite_in_component`]).
    pub tells: bool,
    /// Code ranges of the rewritten module, by start: (range, original offset of its start,
    /// whether the bytes are the original's). Wrappers map to their allocator's first byte.
    moved: Vec<(Range<u32>, u32, bool)>,
}

impl Rewritten {
    /// Where code of the rewritten module came from: the original module's function index and
    /// code offset, and whether it is a wrapper (which stands for its allocator as a whole).
    pub fn original(&self, func_index: u32, offset: u32) -> Option<(u32, u32, bool)> {
        let (func_index, wrapper) = match self.moved_from(func_index) {
            Some(original) => (original, false),
            None => (func_index, self.is_wrapper(func_index)),
        };
        Some((func_index, self.original_offset(offset)?, wrapper))
    }

    /// The original function whose body function `func_index` of the rewritten module runs:
    /// itself, or the allocator whose body was moved there; `None` for an allocator's wrapper.
    pub fn original_function(&self, func_index: u32) -> Option<u32> {
        match self.moved_from(func_index) {
            Some(original) => Some(original),
            None => (!self.is_wrapper(func_index)).then_some(func_index),
        }
    }

    fn moved_from(&self, func_index: u32) -> Option<u32> {
        let j = func_index.checked_sub(self.first_moved)?;
        self.wrapped.get(j as usize).map(|&(original, _)| original)
    }

    /// Whether an allocator of the module reports (not only functions the host calls were
    /// wrapped).
    pub fn reports(&self) -> bool {
        self.wrapped
            .iter()
            .any(|&(_, a)| a != Allocator::HostCalled)
    }

    /// Whether function `func_index` of the rewritten module is an allocator's wrapper.
    pub fn is_wrapper(&self, func_index: u32) -> bool {
        self.wrapped.iter().any(|&(i, _)| i == func_index)
    }

    /// The offset in the original module of the code at `offset` in the rewritten one.
    pub fn original_offset(&self, offset: u32) -> Option<u32> {
        let i = self.moved.partition_point(|(r, _, _)| r.start <= offset);
        let (range, original, same) = self.moved.get(i.checked_sub(1)?)?;
        if !range.contains(&offset) {
            return None;
        }
        Some(if *same {
            original + (offset - range.start)
        } else {
            *original
        })
    }
}

/// A defined function's place in the module.
struct Defined {
    type_index: u32,
    /// The body's bytes (locals and code), without its size.
    body: Range<usize>,
}

/// Rewrites `wasm`'s allocator functions; `None` when it has none with the expected signature.
///
/// # Examples
///
/// Allocators are found by their names in the `name` section (which `wat` writes):
///
/// ```
/// use wasmspy::memory::rewrite::{rewrite, Allocator, HOOK_TABLE, SAMPLE_COUNTDOWN};
///
/// let wasm = wat::parse_str(
///     r#"(module
///         (memory (export "memory") 1)
///         (global $next (mut i32) (i32.const 1024))
///         (func $malloc (export "malloc") (param $size i32) (result i32)
///             (global.get $next)
///             (global.set $next (i32.add (global.get $next) (local.get $size))))
///         (func $free (export "free") (param i32))
///         (func $main (export "main") (drop (call $malloc (i32.const 16)))))"#,
/// )
/// .unwrap();
/// let rewritten = rewrite(&wasm).unwrap().expect("malloc and free are wrapped");
/// // Each keeps its index: every call reaches its wrapper.
/// assert_eq!(rewritten.wrapped, [(0, Allocator::Malloc), (1, Allocator::Free)]);
/// let engine = wasmtime::Engine::default();
/// let module = wasmtime::Module::new(&engine, &rewritten.wasm).unwrap();
/// let exports: Vec<&str> = module.exports().map(|e| e.name()).collect();
/// assert!(exports.contains(&HOOK_TABLE) && exports.contains(&SAMPLE_COUNTDOWN));
///
/// // A module without allocators is left as it is.
/// let plain = wat::parse_str(r#"(module (func (export "main")))"#).unwrap();
/// assert!(rewrite(&plain).unwrap().is_none());
/// ```
pub fn rewrite(wasm: &[u8]) -> Result<Option<Rewritten>, crate::Error> {
    rewrite_as(wasm, None).map_err(crate::Error::Malformed)
}

/// As [`rewrite`], for a core module of a component: the functions exported as `host_called`
/// (the `realloc` and `post-return` of the component's canonical options) wrapped as
/// [`Allocator::HostCalled`]. A module with only those is rewritten too (`None`: neither),
/// for its allocator-less `cabi_realloc` may call another module's `malloc`; see
/// [`Rewritten::reports`]. In a module that does not define `malloc`, whose allocators may
/// call another module's, the allocators' wrappers tell the hook they enter and leave as
/// [`Allocator::HostCalled`]'s do, so that the component's gate nests the other modules'
/// wrappers in them.
pub fn rewrite_in_component(
    wasm: &[u8],
    host_called: &[String],
) -> Result<Option<Rewritten>, crate::Error> {
    rewrite_as(wasm, Some(host_called)).map_err(crate::Error::Malformed)
}

/// [`rewrite`] (`host_called`: `None`) or [`rewrite_in_component`].
pub(super) fn rewrite_as(wasm: &[u8], host_called: Option<&[String]>) -> Result<Option<Rewritten>> {
    let scan = Scan::of(wasm)?;
    let defines_malloc = scan.names.iter().any(|(&index, name)| {
        name == "malloc" && scan.allocator_params(index, Allocator::Malloc).is_some()
    });
    let nests_across_modules = host_called.is_some() && !defines_malloc;
    let by_name = scan
        .names
        .iter()
        .filter(|(_, name)| defines_malloc || nests_across_modules || !is_cpython_api(name))
        .filter_map(|(&index, name)| Some((index, Allocator::by_name(name)?)));
    let by_export = host_called
        .unwrap_or_default()
        .iter()
        .filter_map(|name| Some((*scan.exports.get(name)?, Allocator::HostCalled)));
    let wrapped: Vec<(u32, Allocator)> = by_name
        .chain(by_export)
        .filter(|&(index, allocator)| scan.allocator_params(index, allocator).is_some())
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect();
    if wrapped.is_empty() {
        return Ok(None);
    }
    let module = scan.encode(wasm, &wrapped, nests_across_modules)?;
    let moved = scan.offset_map(&module, &wrapped)?;
    Ok(Some(Rewritten {
        wasm: module,
        wrapped,
        first_moved: scan.imported_functions + scan.defined.len() as u32,
        moved,
        tells: nests_across_modules,
    }))
}

/// What the rewriter needs to know of a module.
#[derive(Default)]
struct Scan {
    /// Function types' (params, results); `None` for other types (GC structs, arrays).
    types: Vec<Option<(Vec<wasmparser::ValType>, Vec<wasmparser::ValType>)>>,
    imported_functions: u32,
    imported_tables: u32,
    imported_memories: u32,
    defined: Vec<Defined>,
    tables: u32,
    memories: u32,
    /// Every global's (type, mutable), imported ones first.
    globals: Vec<(wasmparser::ValType, bool)>,
    names: HashMap<u32, String>,
    /// Exported functions, by export name.
    exports: HashMap<String, u32>,
}

impl Scan {
    fn of(wasm: &[u8]) -> Result<Self> {
        let mut scan = Scan::default();
        let mut function_types = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.context("malformed Wasm module")? {
                Payload::TypeSection(reader) => {
                    for group in reader {
                        for ty in group?.into_types() {
                            scan.types.push(match ty.composite_type.inner {
                                CompositeInnerType::Func(f) => {
                                    Some((f.params().to_vec(), f.results().to_vec()))
                                }
                                _ => None,
                            });
                        }
                    }
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        match import?.ty {
                            TypeRef::Func(_) | TypeRef::FuncExact(_) => {
                                scan.imported_functions += 1
                            }
                            TypeRef::Table(_) => scan.imported_tables += 1,
                            TypeRef::Memory(_) => scan.imported_memories += 1,
                            TypeRef::Global(g) => scan.globals.push((g.content_type, g.mutable)),
                            _ => {}
                        }
                    }
                }
                Payload::FunctionSection(reader) => {
                    for ty in reader {
                        function_types.push(ty?);
                    }
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export?;
                        if export.kind == wasmparser::ExternalKind::Func {
                            scan.exports.insert(export.name.to_string(), export.index);
                        }
                    }
                }
                Payload::TableSection(reader) => scan.tables = reader.count(),
                Payload::MemorySection(reader) => scan.memories = reader.count(),
                Payload::GlobalSection(reader) => {
                    for global in reader {
                        let ty = global?.ty;
                        scan.globals.push((ty.content_type, ty.mutable));
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let type_index = *function_types
                        .get(scan.defined.len())
                        .context("more function bodies than functions")?;
                    scan.defined.push(Defined {
                        type_index,
                        body: body.range(),
                    });
                }
                Payload::CustomSection(reader) => {
                    if let KnownCustom::Name(names) = reader.as_known() {
                        for subsection in names.into_iter().flatten() {
                            if let Name::Function(map) = subsection {
                                for naming in map.into_iter().flatten() {
                                    scan.names.insert(naming.index, naming.name.to_string());
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(scan)
    }

    fn defined(&self, index: u32) -> Option<&Defined> {
        self.defined
            .get(index.checked_sub(self.imported_functions)? as usize)
    }

    /// The (parameters, results) of defined function `index`.
    fn signature(
        &self,
        index: u32,
    ) -> Option<&(Vec<wasmparser::ValType>, Vec<wasmparser::ValType>)> {
        self.defined(index)
            .and_then(|d| self.types.get(d.type_index as usize))
            .and_then(Option::as_ref)
    }

    /// The number of parameters of function `index` if it can be `allocator`.
    fn allocator_params(&self, index: u32, allocator: Allocator) -> Option<u32> {
        let (params, results) = self.signature(index)?;
        if allocator == Allocator::HostCalled {
            return Some(params.len() as u32);
        }
        let i32s =
            |types: &[wasmparser::ValType]| types.iter().all(|&t| t == wasmparser::ValType::I32);
        // Go keeps its stack pointer in global 0, and the arguments at it.
        let go_stack = allocator != Allocator::GoMallocgc
            || self.globals.first() == Some(&(wasmparser::ValType::I32, true));
        (i32s(params)
            && i32s(results)
            && allocator.accepts(params.len(), results.len())
            && go_stack)
            .then_some(params.len() as u32)
    }

    /// The rewritten module's bytes; `tell`: whether allocators' wrappers tell the hook they
    /// enter and leave.
    fn encode(&self, wasm: &[u8], wrapped: &[(u32, Allocator)], tell: bool) -> Result<Vec<u8>> {
        let total_functions = self.imported_functions + self.defined.len() as u32;
        // The moved original bodies, in `wrapped` order, after every existing function.
        let moved_index: HashMap<u32, u32> = wrapped
            .iter()
            .enumerate()
            .map(|(j, &(index, _))| (index, total_functions + j as u32))
            .collect();
        let added = Added {
            hook_type: self.types.len() as u32,
            hook_table: self.imported_tables + self.tables,
            flags: self.imported_memories + self.memories,
            depth: self.globals.len() as u32,
            countdown: self.globals.len() as u32 + 1,
            tell,
        };

        let mut re = RoundtripReencoder;
        let mut out = Module::new();
        let mut pending = vec![
            SectionId::Table,
            SectionId::Memory,
            SectionId::Global,
            SectionId::Export,
        ];
        let mut code = CodeSection::new();
        let mut in_code = false;
        for payload in Parser::new(0).parse_all(wasm) {
            let payload = payload?;
            let id = payload.as_section().map(|(id, _)| id);
            // Sections we append to but the module lacks go where the binary format orders them.
            if let Some(order) = id.and_then(SectionId::order_of) {
                while let Some(&missing) = pending.first().filter(|s| s.order() < order) {
                    pending.remove(0);
                    added.emit_new(&mut out, missing);
                }
            }
            match payload {
                Payload::TypeSection(reader) => {
                    let mut types = TypeSection::new();
                    re.parse_type_section(&mut types, reader)?;
                    add_hook_type(&mut types);
                    out.section(&types);
                }
                Payload::FunctionSection(reader) => {
                    let mut functions = FunctionSection::new();
                    re.parse_function_section(&mut functions, reader)?;
                    for &(index, _) in wrapped {
                        functions.function(self.defined(index).context("not defined")?.type_index);
                    }
                    out.section(&functions);
                }
                Payload::TableSection(reader) => {
                    pending.retain(|&s| s != SectionId::Table);
                    let mut tables = TableSection::new();
                    re.parse_table_section(&mut tables, reader)?;
                    added.tables(&mut tables);
                    out.section(&tables);
                }
                Payload::MemorySection(reader) => {
                    pending.retain(|&s| s != SectionId::Memory);
                    let mut memories = MemorySection::new();
                    re.parse_memory_section(&mut memories, reader)?;
                    added.memories(&mut memories);
                    out.section(&memories);
                }
                Payload::GlobalSection(reader) => {
                    pending.retain(|&s| s != SectionId::Global);
                    let mut globals = GlobalSection::new();
                    re.parse_global_section(&mut globals, reader)?;
                    added.globals(&mut globals);
                    out.section(&globals);
                }
                Payload::ExportSection(reader) => {
                    pending.retain(|&s| s != SectionId::Export);
                    let mut exports = ExportSection::new();
                    re.parse_export_section(&mut exports, reader)?;
                    added.exports(&mut exports);
                    out.section(&exports);
                }
                Payload::CodeSectionStart { .. } => in_code = true,
                Payload::CodeSectionEntry(body) => {
                    let index = self.imported_functions + code.len();
                    match wrapped.iter().find(|&&(i, _)| i == index) {
                        Some(&(_, Allocator::HostCalled)) => {
                            let (params, results) =
                                self.signature(index).context("not a function")?;
                            let [params, results] = [params, results].map(|types| {
                                types
                                    .iter()
                                    .map(|&t| re.val_type(t))
                                    .collect::<Result<Vec<_>, _>>()
                            });
                            code.function(&added.host_called_wrapper(
                                &params?,
                                &results?,
                                moved_index[&index],
                            ));
                        }
                        Some(&(_, allocator)) => {
                            let params = self
                                .allocator_params(index, allocator)
                                .context("not an allocator")?;
                            code.function(&added.wrapper(allocator, params, moved_index[&index]));
                        }
                        None => {
                            code.raw(&wasm[body.range()]);
                        }
                    }
                    if code.len() as usize == self.defined.len() {
                        for &(index, _) in wrapped {
                            code.raw(
                                &wasm[self.defined(index).context("not defined")?.body.clone()],
                            );
                        }
                        out.section(&code);
                        in_code = false;
                    }
                }
                Payload::End(_) => {}
                other => {
                    if let Some((id, range)) = other.as_section() {
                        if !in_code {
                            out.section(&RawSection {
                                id,
                                data: &wasm[range],
                            });
                        }
                    }
                }
            }
        }
        for missing in pending {
            added.emit_new(&mut out, missing);
        }
        let bytes = out.finish();
        wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
            .validate_all(&bytes)
            .context("the rewritten module does not validate")?;
        Ok(bytes)
    }

    /// Where each function body of the rewritten module came from.
    fn offset_map(
        &self,
        rewritten: &[u8],
        wrapped: &[(u32, Allocator)],
    ) -> Result<Vec<(Range<u32>, u32, bool)>> {
        let mut bodies = Vec::new();
        for payload in Parser::new(0).parse_all(rewritten) {
            if let Payload::CodeSectionEntry(body) = payload? {
                bodies.push(body.range());
            }
        }
        let n = self.defined.len();
        if bodies.len() != n + wrapped.len() {
            bail!(
                "the rewritten module has {} bodies, not {}",
                bodies.len(),
                n + wrapped.len()
            );
        }
        let to_u32 = |r: &Range<usize>| r.start as u32..r.end as u32;
        let mut moved = Vec::with_capacity(bodies.len());
        for (k, defined) in self.defined.iter().enumerate() {
            let index = self.imported_functions + k as u32;
            let is_wrapper = wrapped.iter().any(|&(i, _)| i == index);
            moved.push((to_u32(&bodies[k]), defined.body.start as u32, !is_wrapper));
        }
        for (j, &(index, _)) in wrapped.iter().enumerate() {
            let original = self.defined(index).context("not defined")?;
            moved.push((to_u32(&bodies[n + j]), original.body.start as u32, true));
        }
        moved.sort_unstable_by_key(|(r, _, _)| r.start);
        Ok(moved)
    }
}

/// The indices of what the rewriter appends.
struct Added {
    /// The hook's function type.
    hook_type: u32,
    hook_table: u32,
    /// The memory of flags, a byte per [`block_slot`].
    flags: u32,
    /// An `i32` global: how many wrappers are running.
    depth: u32,
    /// The [`SAMPLE_COUNTDOWN`] global.
    countdown: u32,
    /// Whether allocators' wrappers tell the hook they enter and leave (see
    /// [`rewrite_in_component`]).
    tell: bool,
}

impl Added {
    fn tables(&self, tables: &mut TableSection) {
        tables.table(TableType {
            element_type: RefType::FUNCREF,
            table64: false,
            minimum: 1,
            maximum: Some(1),
            shared: false,
        });
    }

    fn memories(&self, memories: &mut MemorySection) {
        memories.memory(MemoryType {
            minimum: 1,
            maximum: Some(1),
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
    }

    fn globals(&self, globals: &mut GlobalSection) {
        let mutable = |val_type| GlobalType {
            val_type,
            mutable: true,
            shared: false,
        };
        globals.global(mutable(ValType::I32), &ConstExpr::i32_const(0));
        globals.global(mutable(ValType::I64), &ConstExpr::i64_const(UNSEEDED));
    }

    fn exports(&self, exports: &mut ExportSection) {
        exports.export(HOOK_TABLE, ExportKind::Table, self.hook_table);
        exports.export(SAMPLE_COUNTDOWN, ExportKind::Global, self.countdown);
        exports.export(NESTING_DEPTH, ExportKind::Global, self.depth);
    }

    /// A section of ours where the module had none of its kind.
    fn emit_new(&self, out: &mut Module, id: SectionId) {
        match id {
            SectionId::Table => {
                let mut tables = TableSection::new();
                self.tables(&mut tables);
                out.section(&tables);
            }
            SectionId::Memory => {
                let mut memories = MemorySection::new();
                self.memories(&mut memories);
                out.section(&memories);
            }
            SectionId::Global => {
                let mut globals = GlobalSection::new();
                self.globals(&mut globals);
                out.section(&globals);
            }
            SectionId::Export => {
                let mut exports = ExportSection::new();
                self.exports(&mut exports);
                out.section(&exports);
            }
        }
    }

    /// The body that replaces `allocator` (a function of `params` parameters): calls the
    /// original (now function `original`), then, unless called from inside another wrapper,
    /// counts the allocation down and calls the hook when it is sampled or frees a block that
    /// may have been.
    fn wrapper(&self, allocator: Allocator, params: u32, original: u32) -> Function {
        let returns = allocator.allocates();
        let result = params;
        let size = params + u32::from(returns);
        let (freed, allocated, countdown, answer) = (size + 1, size + 2, size + 3, size + 4);
        let told = size + 5;
        let mut f = Function::new([
            (u32::from(returns) + 3, ValType::I32),
            (2, ValType::I64),
            (1, ValType::I32),
        ]);
        let mut code = f.instructions();
        code.global_get(self.depth)
            .i32_const(1)
            .i32_add()
            .global_set(self.depth);
        if self.tell {
            self.tell_entering(&mut code, told, TOLD_BY_ALLOCATOR);
        }
        for p in 0..params {
            code.local_get(p);
        }
        code.call(original);
        if returns {
            code.local_set(result);
        }
        if self.tell {
            self.tell_leaving(&mut code, told, TOLD_BY_ALLOCATOR);
        }
        code.global_get(self.depth)
            .i32_const(1)
            .i32_sub()
            .global_set(self.depth);
        code.global_get(self.depth).i32_eqz();
        if allocator == Allocator::GoMallocgc {
            // Go returns 1 while it unwinds the Wasm stack to switch goroutines; the call
            // completes later, resumed through this wrapper, and is reported then.
            code.local_get(result).i32_eqz().i32_and();
        }
        code.if_(BlockType::Empty);
        match allocator {
            Allocator::Malloc | Allocator::RustAlloc | Allocator::RustAllocZeroed => {
                code.local_get(0).local_set(size);
                code.local_get(result).local_set(allocated);
            }
            Allocator::Calloc => {
                code.local_get(0).local_get(1).i32_mul().local_set(size);
                code.local_get(result).local_set(allocated);
            }
            Allocator::AlignedAlloc => {
                code.local_get(1).local_set(size);
                code.local_get(result).local_set(allocated);
            }
            Allocator::Realloc => {
                code.local_get(1).local_set(size);
                code.local_get(0).local_set(freed);
                code.local_get(result).local_set(allocated);
            }
            Allocator::RustRealloc => {
                code.local_get(3).local_set(size);
                code.local_get(0).local_set(freed);
                code.local_get(result).local_set(allocated);
            }
            Allocator::Free | Allocator::RustDealloc => {
                code.local_get(0).local_set(freed);
            }
            Allocator::PosixMemalign => {
                // On success the block's address is at the pointer given.
                code.local_get(2).local_set(size);
                code.local_get(result).i32_eqz().if_(BlockType::Empty);
                code.local_get(0)
                    .i32_load(memarg(2, 0))
                    .local_set(allocated);
                code.end();
            }
            Allocator::GoMallocgc => {
                // Returned, the callee has popped its return address: the caller's SP points
                // at the arguments, `size` first, the result after the three 8-byte slots of
                // (size, typ, needzero).
                code.global_get(0)
                    .i64_load(memarg(3, 0))
                    .i32_wrap_i64()
                    .local_set(size);
                code.global_get(0)
                    .i64_load(memarg(3, 24))
                    .i32_wrap_i64()
                    .local_set(allocated);
            }
            Allocator::TinyGoAlloc => {
                code.local_get(0).local_set(size);
                code.local_get(result).local_set(allocated);
            }
            // Its wrapper is `host_called_wrapper`.
            Allocator::HostCalled => {}
        }
        if allocator.allocates() {
            // A failed allocation (null) is not counted.
            code.global_get(self.countdown)
                .local_get(size)
                .i64_extend_i32_u()
                .i64_sub()
                .global_get(self.countdown)
                .local_get(allocated)
                .select();
        } else {
            code.global_get(self.countdown);
        }
        code.local_tee(countdown).i64_const(0).i64_lt_s();
        if allocator.frees() {
            code.local_get(freed)
                .i32_const(SLOT_MULTIPLIER as i32)
                .i32_mul()
                .i32_const(16)
                .i32_shr_u()
                .i32_load8_u(MemArg {
                    offset: 0,
                    align: 0,
                    memory_index: self.flags,
                })
                .i32_or();
        }
        code.if_(BlockType::Empty);
        code.i32_const(0)
            .table_get(self.hook_table)
            .ref_is_null()
            .i32_eqz()
            .if_(BlockType::Empty);
        code.i32_const(allocator.code())
            .local_get(size)
            .local_get(freed)
            .local_get(allocated)
            .local_get(countdown)
            .i32_const(0)
            .call_indirect(self.hook_table, self.hook_type)
            .local_tee(answer)
            .i64_const(2)
            .i64_shr_s()
            .local_set(countdown);
        // The flags of the slots of the freed and the allocated block, in that order, as
        // `report` packs them.
        for (address, bit, used) in [
            (freed, 0, allocator.frees()),
            (allocated, 1, allocator.allocates()),
        ] {
            if !used {
                continue;
            }
            code.local_get(address).if_(BlockType::Empty);
            code.local_get(address)
                .i32_const(SLOT_MULTIPLIER as i32)
                .i32_mul()
                .i32_const(16)
                .i32_shr_u()
                .local_get(answer)
                .i64_const(bit)
                .i64_shr_u()
                .i32_wrap_i64()
                .i32_const(1)
                .i32_and()
                .i32_store8(MemArg {
                    offset: 0,
                    align: 0,
                    memory_index: self.flags,
                });
            code.end();
        }
        code.end();
        code.end();
        code.local_get(countdown).global_set(self.countdown);
        code.end();
        if returns {
            code.local_get(result);
        }
        code.end();
        f
    }
}

impl Added {
    /// The body that replaces a function the host calls while the component may not call out
    /// ([`Allocator::HostCalled`]), of type `params -> results`: calls the original (now
    /// function `original`) as a wrapper running, so that this module's allocators report
    /// nothing, and tells the hook it enters and leaves, so that the other modules' do not
    /// either. The hook is told only if it was set on entry: it is the component's gate, or
    /// none yet.
    fn host_called_wrapper(
        &self,
        params: &[ValType],
        results: &[ValType],
        original: u32,
    ) -> Function {
        let told = params.len() as u32;
        let first_result = told + 1;
        let locals: Vec<_> = std::iter::once((1, ValType::I32))
            .chain(results.iter().map(|&t| (1, t)))
            .collect();
        let mut f = Function::new(locals);
        let mut code = f.instructions();
        code.global_get(self.depth)
            .i32_const(1)
            .i32_add()
            .global_set(self.depth);
        self.tell_entering(&mut code, told, 0);
        for p in 0..told {
            code.local_get(p);
        }
        code.call(original);
        for r in (0..results.len() as u32).rev() {
            code.local_set(first_result + r);
        }
        self.tell_leaving(&mut code, told, 0);
        code.global_get(self.depth)
            .i32_const(1)
            .i32_sub()
            .global_set(self.depth);
        for r in 0..results.len() as u32 {
            code.local_get(first_result + r);
        }
        code.end();
        f
    }

    /// Tells the hook, if it is set, that a wrapper enters (`by`: [`TOLD_BY_ALLOCATOR`] or
    /// 0); local `told` says whether it did.
    fn tell_entering(&self, code: &mut wasm_encoder::InstructionSink<'_>, told: u32, by: i32) {
        code.i32_const(0)
            .table_get(self.hook_table)
            .ref_is_null()
            .i32_eqz()
            .local_tee(told)
            .if_(BlockType::Empty);
        self.tell_hook(code, by | TOLD_ENTERING);
        code.end();
    }

    /// Tells the hook the wrapper leaves, if it told it that it entered.
    fn tell_leaving(&self, code: &mut wasm_encoder::InstructionSink<'_>, told: u32, by: i32) {
        code.local_get(told).if_(BlockType::Empty);
        self.tell_hook(code, by);
        code.end();
    }

    /// Calls the hook with [`Allocator::HostCalled`]'s code and `told` as the size.
    fn tell_hook(&self, code: &mut wasm_encoder::InstructionSink<'_>, told: i32) {
        code.i32_const(Allocator::HostCalled.code())
            .i32_const(told)
            .i32_const(0)
            .i32_const(0)
            .i64_const(0)
            .i32_const(0)
            .call_indirect(self.hook_table, self.hook_type)
            .drop();
    }
}

/// Adds the function type of the hook of [`HOOK_TABLE`] to `types`.
pub fn add_hook_type(types: &mut TypeSection) {
    types.ty().function(
        [
            ValType::I32,
            ValType::I32,
            ValType::I32,
            ValType::I32,
            ValType::I64,
        ],
        [ValType::I64],
    );
}

/// An access to the guest's memory 0.
fn memarg(align: u32, offset: u64) -> MemArg {
    MemArg {
        offset,
        align,
        memory_index: 0,
    }
}

/// The sections the rewriter may have to create, in the binary format's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SectionId {
    Table,
    Memory,
    Global,
    Export,
}

impl SectionId {
    fn order(self) -> u32 {
        match self {
            SectionId::Table => 4,
            SectionId::Memory => 5,
            SectionId::Global => 7,
            SectionId::Export => 8,
        }
    }

    /// The position of a section, by its id, in the order the binary format requires
    /// (custom sections, anywhere, have none).
    fn order_of(id: u8) -> Option<u32> {
        Some(match id {
            1 => 1,   // type
            2 => 2,   // import
            3 => 3,   // function
            4 => 4,   // table
            5 => 5,   // memory
            13 => 6,  // tag
            6 => 7,   // global
            7 => 8,   // export
            8 => 9,   // start
            9 => 10,  // element
            12 => 11, // data count
            10 => 12, // code
            11 => 13, // data
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::{Engine, Func, Instance, Ref, Store};

    /// A bump allocator whose `realloc` calls `malloc` and `free`, and a `run` that calls the
    /// allocators directly and through a table.
    const BUMP: &str = r#"(module
        (memory (export "memory") 1)
        (global $next (mut i32) (i32.const 1024))
        (type $one (func (param i32) (result i32)))
        (table 1 funcref)
        (elem (i32.const 0) $malloc)
        (func $malloc (param $size i32) (result i32) (local $p i32)
            (local.set $p (global.get $next))
            (global.set $next (i32.add (global.get $next) (local.get $size)))
            (local.get $p))
        (func $free (param i32))
        (func $realloc (param $old i32) (param $size i32) (result i32) (local $new i32)
            (local.set $new (call $malloc (local.get $size)))
            (call $free (local.get $old))
            (local.get $new))
        (func $unrelated (param i32) (result i32) (i32.mul (local.get 0) (i32.const 3)))
        (func (export "run") (result i32)
            (drop (call $malloc (i32.const 16)))
            (call $free
                (call $realloc
                    (call_indirect (type $one) (i32.const 8) (i32.const 0))
                    (i32.const 32)))
            (call $unrelated (i32.const 7))))"#;

    /// Each function body's bytes, in order.
    fn bodies(wasm: &[u8]) -> Vec<Range<usize>> {
        Parser::new(0)
            .parse_all(wasm)
            .filter_map(|p| match p.unwrap() {
                Payload::CodeSectionEntry(body) => Some(body.range()),
                _ => None,
            })
            .collect()
    }

    /// (allocator, size, freed, allocated, countdown).
    type Heard = (Allocator, i32, i32, i32, i64);

    /// Runs `run`, with a hook acting as the host does when `interval` is given: every sampled
    /// allocation's block flagged until freed, the countdown reset to `interval`. Returns
    /// what the hook heard.
    fn run(wasm: &[u8], interval: Option<i64>) -> (i32, Vec<Heard>) {
        let engine = Engine::default();
        let module = wasmtime::Module::new(&engine, wasm).unwrap();
        let mut store = Store::new(&engine, Vec::new());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        if let Some(interval) = interval {
            // The sampled blocks still live.
            let live = std::sync::Mutex::new(std::collections::HashSet::new());
            let countdown = instance.get_global(&mut store, SAMPLE_COUNTDOWN).unwrap();
            countdown
                .set(&mut store, wasmtime::Val::I64(interval))
                .unwrap();
            let report = Func::wrap(
                &mut store,
                move |mut caller: wasmtime::Caller<'_, Vec<_>>,
                      a: i32,
                      size: i32,
                      freed: i32,
                      new: i32,
                      countdown: i64|
                      -> i64 {
                    let allocator = Allocator::from_code(a).unwrap();
                    caller
                        .data_mut()
                        .push((allocator, size, freed, new, countdown));
                    let mut live = live.lock().unwrap();
                    live.remove(&freed);
                    let next = if new != 0 && countdown < 0 {
                        live.insert(new);
                        interval
                    } else {
                        countdown
                    };
                    let slot_live = |a: i32| {
                        live.iter()
                            .any(|&l| block_slot(l as u32) == block_slot(a as u32))
                    };
                    report(next, slot_live(freed), slot_live(new))
                },
            );
            let table = instance.get_table(&mut store, HOOK_TABLE).unwrap();
            table.set(&mut store, 0, Ref::Func(Some(report))).unwrap();
        }
        let run = instance
            .get_typed_func::<(), i32>(&mut store, "run")
            .unwrap();
        let result = run.call(&mut store, ()).unwrap();
        (result, store.into_data())
    }

    #[test]
    fn every_allocator_call_is_reported_once() {
        let original = wat::parse_str(BUMP).unwrap();
        let rewritten = rewrite(&original).unwrap().unwrap();
        let names: Vec<Allocator> = rewritten.wrapped.iter().map(|&(_, a)| a).collect();
        assert_eq!(
            names,
            [Allocator::Malloc, Allocator::Free, Allocator::Realloc]
        );
        assert_eq!(run(&original, None), (21, vec![]));
        // Every allocation sampled, as at --mem-rate 1.
        let (result, events) = run(&rewritten.wasm, Some(-1));
        assert_eq!(result, 21);
        // $malloc is function 0: its wrapper stands for it as a whole; its moved body
        // (function 5, after the five originals) is it, byte for byte.
        let (old, new) = (bodies(&original), bodies(&rewritten.wasm));
        let malloc = old[0].start as u32;
        let (wrapper, moved) = (new[0].start as u32, new[5].start as u32);
        assert_eq!(rewritten.original(0, wrapper + 2), Some((0, malloc, true)));
        assert_eq!(
            rewritten.original(5, moved + 3),
            Some((0, malloc + 3, false))
        );
        let unrelated = (old[3].start as u32, new[3].start as u32);
        assert_eq!(
            rewritten.original(3, unrelated.1 + 1),
            Some((3, unrelated.0 + 1, false))
        );
        assert_eq!(
            events,
            [
                (Allocator::Malloc, 16, 0, 1024, -17),
                // Through the table: the table holds the same index, now the wrapper.
                (Allocator::Malloc, 8, 0, 1040, -9),
                // realloc's own malloc and free are inside it: not reported again.
                (Allocator::Realloc, 32, 1040, 1048, -33),
                (Allocator::Free, 0, 1048, 0, -1),
            ]
        );
    }

    /// The wrapper counts bytes down and calls the host only for the allocation that crosses
    /// zero and for frees of flagged blocks.
    #[test]
    fn only_sampled_allocations_and_their_frees_reach_the_host() {
        let rewritten = rewrite(&wat::parse_str(BUMP).unwrap()).unwrap().unwrap();
        let (result, events) = run(&rewritten.wasm, Some(20));
        assert_eq!(result, 21);
        assert_eq!(
            events,
            [
                // 20 − 16 = 4 left: malloc(16) stays in Wasm; malloc(8) crosses zero.
                (Allocator::Malloc, 8, 0, 1040, -4),
                // Frees the sampled block at 1040, and crosses zero again (20 − 32).
                (Allocator::Realloc, 32, 1040, 1048, -12),
                // 1048 was sampled: its free is heard, without counting anything down.
                (Allocator::Free, 0, 1048, 0, 20),
            ]
        );
        // 100 bytes outlast the 56 allocated: nothing is sampled, no free is flagged.
        assert_eq!(run(&rewritten.wasm, Some(100)), (21, vec![]));
    }

    /// In a component, a function the host calls (of any signature) and the allocators of a
    /// module that does not define `malloc` (here `PyObject_Malloc`, calling an imported
    /// one) tell the hook they enter and leave, around their original, whose results they
    /// return; the allocator then reports as ever. Alone, such a module's `PyObject_Malloc`
    /// is not wrapped.
    #[test]
    fn wrappers_nesting_across_modules_tell_the_hook() {
        let original = wat::parse_str(
            r#"(module
            (import "libc" "malloc" (func $malloc (param i32) (result i32)))
            (func $PyObject_Malloc (export "PyObject_Malloc") (param i32) (result i32)
                (call $malloc (local.get 0)))
            (func (export "post") (param i64 f64) (result f32 i64)
                (f32.demote_f64 (local.get 1)) (local.get 0)))"#,
        )
        .unwrap();
        assert!(rewrite(&original).unwrap().is_none());
        let rewritten = rewrite_in_component(&original, &["post".into()])
            .unwrap()
            .unwrap();
        let kinds: Vec<Allocator> = rewritten.wrapped.iter().map(|&(_, a)| a).collect();
        assert_eq!(kinds, [Allocator::Malloc, Allocator::HostCalled]);

        let engine = Engine::default();
        let module = wasmtime::Module::new(&engine, &rewritten.wasm).unwrap();
        let mut store = Store::new(&engine, Vec::<String>::new());
        let malloc = Func::wrap(
            &mut store,
            |mut caller: wasmtime::Caller<'_, Vec<String>>, size: i32| -> i32 {
                caller.data_mut().push(format!("libc malloc {size}"));
                64
            },
        );
        let instance = Instance::new(&mut store, &module, &[malloc.into()]).unwrap();
        let hook = Func::wrap(
            &mut store,
            |mut caller: wasmtime::Caller<'_, Vec<String>>,
             a: i32,
             size: i32,
             _: i32,
             allocated: i32,
             countdown: i64|
             -> i64 {
                let allocator = Allocator::from_code(a).unwrap();
                let heard = format!("{allocator:?} {size} {allocated} {countdown}");
                caller.data_mut().push(heard);
                report(1000, false, false)
            },
        );
        let table = instance.get_table(&mut store, HOOK_TABLE).unwrap();
        table.set(&mut store, 0, Ref::Func(Some(hook))).unwrap();
        let countdown = instance.get_global(&mut store, SAMPLE_COUNTDOWN).unwrap();
        countdown.set(&mut store, wasmtime::Val::I64(1)).unwrap();

        let allocate = instance
            .get_typed_func::<i32, i32>(&mut store, "PyObject_Malloc")
            .unwrap();
        assert_eq!(allocate.call(&mut store, 10).unwrap(), 64);
        let post = instance
            .get_typed_func::<(i64, f64), (f32, i64)>(&mut store, "post")
            .unwrap();
        assert_eq!(post.call(&mut store, (5, 2.5)).unwrap(), (2.5, 5));
        assert_eq!(
            store.into_data(),
            [
                "HostCalled 3 0 0",
                "libc malloc 10",
                "HostCalled 2 0 0",
                "Malloc 10 64 -9",
                "HostCalled 1 0 0",
                "HostCalled 0 0 0",
            ]
        );
    }

    #[test]
    fn a_module_without_allocators_is_left_alone() {
        let wasm = wat::parse_str("(module (func $main))").unwrap();
        assert!(rewrite(&wasm).unwrap().is_none());
        // A `malloc` of another signature is not an allocator.
        let wasm =
            wat::parse_str("(module (func $malloc (param i64) (result i64) local.get 0))").unwrap();
        assert!(rewrite(&wasm).unwrap().is_none());
    }

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

    /// Every other body is byte-identical and every byte of it maps back to its original offset.
    #[test]
    fn other_code_is_unchanged_and_maps_back() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/rust/iter.wasm");
        let original = std::fs::read(path).unwrap();
        let rewritten = rewrite(&original).unwrap().unwrap();
        let kinds: Vec<Allocator> = rewritten.wrapped.iter().map(|&(_, a)| a).collect();
        for expected in [
            Allocator::Malloc,
            Allocator::Free,
            Allocator::RustAlloc,
            Allocator::RustDealloc,
        ] {
            assert!(kinds.contains(&expected), "{kinds:?}");
        }
        let (old, new) = (bodies(&original), bodies(&rewritten.wasm));
        let imported = Scan::of(&original).unwrap().imported_functions as usize;
        assert_eq!(new.len(), old.len() + rewritten.wrapped.len());
        let mut moved = old.len();
        for (k, old_body) in old.iter().enumerate() {
            let wrapped = rewritten
                .wrapped
                .iter()
                .any(|&(i, _)| i as usize == imported + k);
            let new_body = if wrapped {
                // The wrapper stands for the whole allocator.
                assert_eq!(
                    rewritten.original_offset(new[k].start as u32),
                    Some(old_body.start as u32)
                );
                moved += 1;
                &new[moved - 1]
            } else {
                &new[k]
            };
            assert_eq!(original[old_body.clone()], rewritten.wasm[new_body.clone()]);
            for (o, n) in old_body.clone().zip(new_body.clone()) {
                assert_eq!(rewritten.original_offset(n as u32), Some(o as u32));
            }
        }
    }
}
