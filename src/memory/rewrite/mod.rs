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

mod allocators;
mod encode;
mod hook;
mod rewritten;
mod scan;
mod sections;
mod shape;
mod wrappers;

use anyhow::Result;

use allocators::is_cpython_api;
pub use allocators::Allocator;
pub use hook::{
    add_hook_type, block_slot, bytes_unseeded, report, HOOK_TABLE, NESTING_DEPTH, SAMPLE_COUNTDOWN,
    TOLD_BY_ALLOCATOR, TOLD_ENTERING, UNSEEDED,
};
pub use rewritten::Rewritten;
use scan::Scan;
use shape::Shape;

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
    rewrite_as(wasm, None)
        .map(|(rewritten, _)| rewritten)
        .map_err(crate::Error::Malformed)
}

/// As [`rewrite`], for a core module of a component: the functions exported as `host_called`
/// (the `realloc` and `post-return` of the component's canonical options) wrapped as
/// [`Allocator::HostCalled`]. A module with only those is rewritten too (`None`: neither),
/// for its allocator-less `cabi_realloc` may call another module's `malloc`; see
/// [`Rewritten::reports`]. In a module that does not define `malloc`, whose allocators may
/// call another module's, the allocators' wrappers tell the hook they enter and leave as
/// [`Allocator::HostCalled`]'s do, so that the component's gate nests the other modules'
/// wrappers in them. A module that names no allocator has C's found by their code's shape,
/// from its `cabi_realloc`, if it is recognised (`shape.rs`).
pub fn rewrite_in_component(
    wasm: &[u8],
    host_called: &[String],
) -> Result<Option<Rewritten>, crate::Error> {
    rewrite_as(wasm, Some(host_called))
        .map(|(rewritten, _)| rewritten)
        .map_err(crate::Error::Malformed)
}

/// [`rewrite`] (`host_called`: `None`) or [`rewrite_in_component`]; with why a module of a
/// component whose allocators have no names was not recognised, if it was not (see
/// [`shape`]).
pub(super) fn rewrite_as(
    wasm: &[u8],
    host_called: Option<&[String]>,
) -> Result<(Option<Rewritten>, Option<String>)> {
    let scan = Scan::of(wasm)?;
    // A module of a component without allocators by name may have them by their code's shape.
    let named = scan
        .names
        .values()
        .any(|name| Allocator::by_name(name).is_some());
    let (shaped, unrecognised) = match host_called.is_some() && !named {
        true => match shape::from_canonical_realloc(&scan, wasm) {
            Shape::Found(found) => (found, None),
            Shape::Unrecognised(why) => (Vec::new(), Some(why)),
            Shape::NoAnchor => (Vec::new(), None),
        },
        false => (Vec::new(), None),
    };
    let defines_malloc = shaped.iter().any(|&(_, a)| a == Allocator::Malloc)
        || scan.names.iter().any(|(&index, name)| {
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
        .chain(shaped)
        .chain(by_export)
        .filter(|&(index, allocator)| scan.allocator_params(index, allocator).is_some())
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect();
    if wrapped.is_empty() {
        return Ok((None, unrecognised));
    }
    let module = scan.encode(wasm, &wrapped, nests_across_modules)?;
    let moved = scan.offset_map(&module, &wrapped)?;
    let rewritten = Rewritten {
        wasm: module,
        wrapped,
        first_moved: scan.imported_functions + scan.defined.len() as u32,
        moved,
        tells: nests_across_modules,
    };
    Ok((Some(rewritten), unrecognised))
}

#[cfg(test)]
mod tests;
