//! The rewrite's result ([`Rewritten`]): the rewritten module, the functions wrapped, and the
//! map from its code back to the original's, function indices and code offsets, so that the
//! original's names and DWARF still apply; the map is made from both modules' bodies
//! ([`Scan::offset_map`]).

use std::ops::Range;

use anyhow::{bail, Context, Result};
use wasmparser::{Parser, Payload};

use super::allocators::Allocator;
use super::scan::Scan;
// Named in the documentation only.
#[cfg(doc)]
use super::{rewrite_in_component, HOOK_TABLE, NESTING_DEPTH, SAMPLE_COUNTDOWN};

/// The rewritten module, and where its code came from.
pub struct Rewritten {
    /// The rewritten module's bytes, which export [`HOOK_TABLE`], [`SAMPLE_COUNTDOWN`] and
    /// [`NESTING_DEPTH`].
    pub wasm: Vec<u8>,
    /// (function index, allocator) of each wrapped function.
    pub wrapped: Vec<(u32, Allocator)>,
    /// The index of the first moved original body; the others follow, in `wrapped` order.
    pub(super) first_moved: u32,
    /// Whether its allocators' wrappers tell the hook they enter and leave (see
    /// [`rewrite_in_component`]).
    pub tells: bool,
    /// Code ranges of the rewritten module, by start: (range, original offset of its start,
    /// whether the bytes are the original's). Wrappers map to their allocator's first byte.
    pub(super) moved: Vec<(Range<u32>, u32, bool)>,
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

    /// C's names of the C allocators wrapped (`malloc`...), by their function index: the
    /// names of the functions found by their code's shape, in a module without names.
    pub fn c_names(&self) -> std::collections::HashMap<u32, String> {
        self.wrapped
            .iter()
            .filter_map(|&(index, allocator)| Some((index, allocator.c_name()?.to_string())))
            .collect()
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

impl Scan {
    /// Where each function body of the rewritten module came from.
    pub(super) fn offset_map(
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
