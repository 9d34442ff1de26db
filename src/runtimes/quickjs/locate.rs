//! Where an instance's QuickJS runtime (`JSRuntime`) is: found once, as the instance is shown
//! (not in the signal handler), from what every QuickJS runtime holds. Atom 51 is always
//! "length" (`JS_ATOM_length`, built in at a fixed index): its string is in memory, the atom
//! table's entry points to it, and the runtime points to the table. A candidate is kept only
//! where the runtime checks out ([`is_runtime`]): its built-in atoms name what the layout
//! says, and its first context points back to it. An engine laid out otherwise, or not yet
//! started, is not found, and its samples keep their Wasm frames.

use std::collections::BTreeSet;

use super::layouts::QuickJsLayout;
use crate::shared::Memory;

/// Candidates kept at most at each step.
const MAX_CANDIDATES: usize = 64;
/// Bytes read at a time while scanning.
const CHUNK: usize = 1 << 16;

/// The `JSRuntime` in `memory` (its first `size` bytes), trying `hint` (where it was in
/// another instance of the same module) first. Three passes over memory at most, whatever it
/// holds: the strings "length", the words pointing to one (atom 51 of a table), the words
/// pointing to such a table (a runtime's `atom_array`).
pub fn find_runtime(l: &QuickJsLayout, memory: &impl Memory, size: u64, hint: u32) -> Option<u32> {
    if hint != 0 && is_runtime(l, memory, hint) {
        return Some(hint);
    }
    let name = b"length\0";
    let strings: BTreeSet<u32> = occurrences(memory, size, name)
        .filter_map(|text| text.checked_sub(l.string_size))
        .filter(|&string| string_is(l, memory, string, &name[..6]))
        .take(MAX_CANDIDATES)
        .collect();
    let arrays: BTreeSet<u32> = words_in(memory, size, &strings)
        .filter_map(|entry| entry.checked_sub(4 * l.atom_length))
        .take(MAX_CANDIDATES)
        .collect();
    let rt = words_in(memory, size, &arrays)
        .filter_map(|field| field.checked_sub(l.rt_atom_array))
        .find(|&rt| is_runtime(l, memory, rt));
    rt
}

/// Whether a `JSRuntime` is at `rt`: its atoms `null`, `length` and `name` are those strings,
/// and its first context's runtime is `rt`.
pub fn is_runtime(l: &QuickJsLayout, memory: &impl Memory, rt: u32) -> bool {
    let u32_at = |address: u32, offset: u32| memory.u32_at(u64::from(address) + u64::from(offset));
    let check = || {
        let size = u32_at(rt, l.rt_atom_size)?;
        let array = u32_at(rt, l.rt_atom_array)?;
        for (atom, name) in [
            (l.atom_null, &b"null"[..]),
            (l.atom_length, b"length"),
            (l.atom_name, b"name"),
        ] {
            if atom >= size || !string_is(l, memory, u32_at(array, 4 * atom)?, name) {
                return None;
            }
        }
        let head = rt.checked_add(l.rt_context_list)?;
        let first = u32_at(head, 0)?;
        if first == head {
            return None;
        }
        let context = first.checked_sub(l.ctx_link)?;
        (u32_at(context, l.ctx_rt)? == rt).then_some(())
    };
    rt != 0 && check().is_some()
}

/// Whether a normal 8-bit `JSString` holding `text` is at `string`.
fn string_is(l: &QuickJsLayout, memory: &impl Memory, string: u32, text: &[u8]) -> bool {
    let u32_at = |offset: u32| memory.u32_at(u64::from(string) + u64::from(offset));
    let check = || {
        let len = l.string_len.of(u32_at(l.string_len.at)?);
        let wide = l.string_is_wide_char.of(u32_at(l.string_is_wide_char.at)?);
        let kind = l.string_kind.of(u32_at(l.string_kind.at)?);
        if len as usize != text.len() || wide != 0 || kind != l.string_kind_normal {
            return None;
        }
        let mut chars = [0; 8];
        let chars = chars.get_mut(..text.len())?;
        memory.read(u64::from(string) + u64::from(l.string_size), chars)?;
        (chars == text).then_some(())
    };
    check().is_some()
}

/// The addresses at which `needle` (at most 16 bytes) is in `memory`'s first `size` bytes.
fn occurrences<'a>(
    memory: &'a impl Memory,
    size: u64,
    needle: &'a [u8],
) -> impl Iterator<Item = u32> + 'a {
    let overlap = needle.len() as u64 - 1;
    chunks(memory, size, overlap).flat_map(move |(start, bytes)| {
        memchr::memmem::find_iter(&bytes, needle)
            .map(move |at| start + at as u64)
            .filter_map(|at| u32::try_from(at).ok())
            .collect::<Vec<_>>()
    })
}

/// The 4-aligned addresses whose word is one of `values` (none when there are none).
fn words_in<'a>(
    memory: &'a impl Memory,
    size: u64,
    values: &'a BTreeSet<u32>,
) -> impl Iterator<Item = u32> + 'a {
    // Nothing to look for: nothing scanned.
    let size = if values.is_empty() { 0 } else { size };
    let (low, high) = (values.first().copied(), values.last().copied());
    // Most words are outside the values' range: a comparison each, not a search.
    let wanted = move |w: u32| Some(w) >= low && Some(w) <= high && values.contains(&w);
    chunks(memory, size, 0).flat_map(move |(start, bytes)| {
        bytes
            .chunks_exact(4)
            .enumerate()
            .filter(|(_, w)| wanted(u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
            .filter_map(|(i, _)| u32::try_from(start + 4 * i as u64).ok())
            .collect::<Vec<_>>()
    })
}

/// Memory in chunks of [`CHUNK`] bytes (`start`, bytes), each extended by `overlap` bytes
/// into the next so that nothing shorter is missed across a boundary.
fn chunks(
    memory: &impl Memory,
    size: u64,
    overlap: u64,
) -> impl Iterator<Item = (u64, Vec<u8>)> + '_ {
    (0..size.div_ceil(CHUNK as u64)).filter_map(move |i| {
        let start = i * CHUNK as u64;
        let len = (CHUNK as u64 + overlap).min(size - start);
        let mut bytes = vec![0; len as usize];
        memory.read(start, &mut bytes)?;
        Some((start, bytes))
    })
}
