//! Where a C program keeps its own data, as its DWARF says: the addresses of global variables
//! (`DW_OP_addr` locations, which Wasm data keeps even when a tool like wasm-opt rewrote the
//! code and lost the code's addresses) and the offsets of struct members, reached through
//! nested, anonymous and typedef'd members (`_PyRuntimeState.interpreters.main`). This is how
//! a profiler reads an interpreter's own state (CPython's frames) without hard-coding the
//! layout of each release.

use std::collections::HashMap;

use anyhow::{Context, Result};
use gimli::{AttributeValue, EndianSlice, LittleEndian, UnitOffset};
use wasmparser::{Parser, Payload};

type Reader<'a> = EndianSlice<'a, LittleEndian>;

/// A member reached by a path: its offset from the start of the outermost struct, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    pub offset: u64,
    pub size: Option<u64>,
}

/// What [`read`] found: variables' addresses and members' places, by the names asked for.
#[derive(Debug, Default)]
pub struct Layout {
    pub variables: HashMap<String, u64>,
    pub members: HashMap<String, Member>,
    /// Sizes of the structs the paths start from.
    pub sizes: HashMap<String, u64>,
}

/// DIE trees of real DWARF are shallow; a corrupt one may nest or loop.
const MAX_DEPTH: usize = 64;

/// Reads `wasm`'s DWARF for the global `variables` and the member `paths` (`STRUCT.MEMBER…`,
/// `STRUCT` a struct's tag or typedef name); what it does not find is left out. An error only
/// for a module without readable DWARF.
pub fn read(wasm: &[u8], variables: &[&str], paths: &[&str]) -> Result<Layout> {
    let dwarf = sections(wasm)?;
    let mut layout = Layout::default();
    let structs: Vec<&str> = paths.iter().filter_map(|p| p.split('.').next()).collect();
    let mut units = dwarf.units();
    while let Some(header) = units.next().context("malformed DWARF unit header")? {
        let unit = dwarf.unit(header).context("malformed DWARF unit")?;
        let mut entries = unit.entries();
        while let Some(entry) = entries.next_dfs().context("malformed DWARF entry")? {
            let Some(name) = name_of(&dwarf, &unit, entry) else {
                continue;
            };
            match entry.tag() {
                gimli::DW_TAG_variable if variables.contains(&name) => {
                    if let Some(address) = address_of(entry) {
                        layout.variables.insert(name.to_string(), address);
                    }
                }
                gimli::DW_TAG_structure_type | gimli::DW_TAG_typedef
                    if structs.contains(&name) && !declaration(entry) =>
                {
                    let Some(start) = struct_at(&unit, entry.offset(), 0) else {
                        continue;
                    };
                    let root = unit.entry(start).ok();
                    if let Some(size) = root.as_ref().and_then(byte_size) {
                        layout.sizes.entry(name.to_string()).or_insert(size);
                    }
                    for path in paths.iter().filter(|p| p.split('.').next() == Some(name)) {
                        let members: Vec<&str> = path.split('.').skip(1).collect();
                        if let Some(member) = member_at(&dwarf, &unit, start, &members, 0) {
                            layout.members.entry(path.to_string()).or_insert(member);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(layout)
}

/// Where function `function` (a definition with parameters) keeps its parameters in its
/// frame, in order: their `DW_OP_fbreg` offsets, as unoptimized code spills them. `None`
/// when no definition of it says so.
pub fn parameter_offsets(wasm: &[u8], function: &str) -> Result<Option<Vec<i64>>> {
    let dwarf = sections(wasm)?;
    let mut units = dwarf.units();
    while let Some(header) = units.next().context("malformed DWARF unit header")? {
        let unit = dwarf.unit(header).context("malformed DWARF unit")?;
        let mut entries = unit.entries();
        while let Some(entry) = entries.next_dfs().context("malformed DWARF entry")? {
            if entry.tag() != gimli::DW_TAG_subprogram
                || declaration(entry)
                || name_of(&dwarf, &unit, entry) != Some(function)
            {
                continue;
            }
            let mut tree = unit
                .entries_tree(Some(entry.offset()))
                .context("malformed DWARF entry")?;
            let mut children = tree.root().context("malformed DWARF entry")?.children();
            let mut offsets = Vec::new();
            while let Some(child) = children.next().context("malformed DWARF entry")? {
                let child = child.entry();
                if child.tag() != gimli::DW_TAG_formal_parameter {
                    continue;
                }
                match frame_offset(child) {
                    Some(offset) => offsets.push(offset),
                    None => break,
                }
            }
            if !offsets.is_empty() {
                return Ok(Some(offsets));
            }
        }
    }
    Ok(None)
}

/// A location of one `DW_OP_fbreg`: the offset from the frame base.
fn frame_offset(entry: &gimli::DebuggingInformationEntry<Reader<'_>>) -> Option<i64> {
    let Some(AttributeValue::Exprloc(expression)) = entry.attr_value(gimli::DW_AT_location) else {
        return None;
    };
    let mut bytes = expression.0;
    if gimli::Reader::read_u8(&mut bytes).ok()? != gimli::DW_OP_fbreg.0 {
        return None;
    }
    let offset = gimli::Reader::read_sleb128(&mut bytes).ok()?;
    bytes.is_empty().then_some(offset)
}

/// The module's DWARF sections, in place.
fn sections(wasm: &[u8]) -> Result<gimli::Dwarf<Reader<'_>>> {
    let mut found: HashMap<&str, &[u8]> = HashMap::new();
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::CustomSection(section) = payload.context("malformed Wasm module")? {
            if section.name().starts_with(".debug_") {
                found.insert(section.name(), section.data());
            }
        }
    }
    anyhow::ensure!(found.contains_key(".debug_info"), "no DWARF");
    gimli::Dwarf::load(|id| -> Result<Reader<'_>> {
        let data = found.get(id.name()).copied().unwrap_or(&[]);
        Ok(EndianSlice::new(data, LittleEndian))
    })
}

fn name_of<'a>(
    dwarf: &gimli::Dwarf<Reader<'a>>,
    unit: &gimli::Unit<Reader<'a>>,
    entry: &gimli::DebuggingInformationEntry<Reader<'a>>,
) -> Option<&'a str> {
    let value = entry.attr_value(gimli::DW_AT_name)?;
    dwarf.attr_string(unit, value).ok()?.to_string().ok()
}

fn declaration(entry: &gimli::DebuggingInformationEntry<Reader<'_>>) -> bool {
    matches!(
        entry.attr_value(gimli::DW_AT_declaration),
        Some(AttributeValue::Flag(true))
    )
}

fn byte_size(entry: &gimli::DebuggingInformationEntry<Reader<'_>>) -> Option<u64> {
    entry.attr_value(gimli::DW_AT_byte_size)?.udata_value()
}

/// A variable's address: a location of one `DW_OP_addr` (4-byte addresses on wasm32).
fn address_of(entry: &gimli::DebuggingInformationEntry<Reader<'_>>) -> Option<u64> {
    let Some(AttributeValue::Exprloc(expression)) = entry.attr_value(gimli::DW_AT_location) else {
        return None;
    };
    match expression.0.slice() {
        [0x03, a, b, c, d] => Some(u64::from(u32::from_le_bytes([*a, *b, *c, *d]))),
        [0x03, rest @ ..] if rest.len() == 8 => Some(u64::from_le_bytes(rest.try_into().ok()?)),
        _ => None,
    }
}

/// The struct or union a type is, through typedefs and qualifiers.
fn struct_at(
    unit: &gimli::Unit<Reader<'_>>,
    mut offset: UnitOffset,
    depth: usize,
) -> Option<UnitOffset> {
    for _ in depth..MAX_DEPTH {
        let entry = unit.entry(offset).ok()?;
        match entry.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type => return Some(offset),
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_atomic_type => {
                let Some(AttributeValue::UnitRef(next)) = entry.attr_value(gimli::DW_AT_type)
                else {
                    return None;
                };
                offset = next;
            }
            _ => return None,
        }
    }
    None
}

/// The member at `path` inside the struct at `start`; anonymous members' own members are
/// found as C finds them, by their names alone.
fn member_at(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    start: UnitOffset,
    path: &[&str],
    depth: usize,
) -> Option<Member> {
    let (first, rest) = path.split_first()?;
    if depth >= MAX_DEPTH {
        return None;
    }
    let mut tree = unit.entries_tree(Some(start)).ok()?;
    let root = tree.root().ok()?;
    let mut children = root.children();
    while let Some(child) = children.next().ok()? {
        let entry = child.entry();
        if entry.tag() != gimli::DW_TAG_member {
            continue;
        }
        let offset = match entry.attr_value(gimli::DW_AT_data_member_location) {
            Some(value) => value.udata_value()?,
            // A union's members.
            None => 0,
        };
        let ty = match entry.attr_value(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(ty)) => Some(ty),
            _ => None,
        };
        let inner = ty.and_then(|ty| struct_at(unit, ty, depth + 1));
        match name_of(dwarf, unit, entry) {
            Some(name) if name == *first => {
                if rest.is_empty() {
                    let size = ty
                        .and_then(|ty| type_size(unit, ty, depth + 1))
                        .or_else(|| byte_size(entry));
                    return Some(Member { offset, size });
                }
                let found = member_at(dwarf, unit, inner?, rest, depth + 1)?;
                return Some(Member {
                    offset: offset + found.offset,
                    size: found.size,
                });
            }
            None => {
                // An anonymous struct or union: its members are the outer one's.
                if let Some(found) = inner.and_then(|s| member_at(dwarf, unit, s, path, depth + 1))
                {
                    return Some(Member {
                        offset: offset + found.offset,
                        size: found.size,
                    });
                }
            }
            Some(_) => {}
        }
    }
    None
}

/// The size of a type, through typedefs and qualifiers.
fn type_size(unit: &gimli::Unit<Reader<'_>>, mut ty: UnitOffset, depth: usize) -> Option<u64> {
    for _ in depth..MAX_DEPTH {
        let entry = unit.entry(ty).ok()?;
        if let Some(size) = byte_size(&entry) {
            return Some(size);
        }
        match entry.tag() {
            gimli::DW_TAG_pointer_type => return Some(u64::from(unit.encoding().address_size)),
            _ => {
                let Some(AttributeValue::UnitRef(next)) = entry.attr_value(gimli::DW_AT_type)
                else {
                    return None;
                };
                ty = next;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wasm::tests::fixture;

    /// `tests/fixtures/c/layout.c` on wasm32: members through typedefs, a named nested struct,
    /// an anonymous union, a pointer; the global's address is its data's.
    #[test]
    fn members_and_globals_are_where_the_compiler_put_them() {
        let wasm = fixture("c/layout.wasm");
        let paths = [
            "Outer.tag",
            "Outer.in.a",
            "Outer.in.b",
            "outer.named.x",
            "Outer.named.y",
            "Outer.u1",
            "Outer.u2",
            "Outer.ptr",
            "Outer.missing",
            "Inner.b",
        ];
        let layout = read(&wasm, &["the_outer", "nowhere"], &paths).unwrap();
        let member = |path: &str| layout.members.get(path).map(|m| (m.offset, m.size));
        assert_eq!(member("Outer.tag"), Some((0, Some(1))));
        assert_eq!(member("Outer.in.a"), Some((8, Some(4))));
        assert_eq!(member("Outer.in.b"), Some((16, Some(8))));
        assert_eq!(member("outer.named.x"), Some((24, Some(2))));
        assert_eq!(member("Outer.named.y"), Some((28, Some(4))));
        assert_eq!(member("Outer.u1"), Some((32, Some(4))));
        assert_eq!(member("Outer.u2"), Some((32, Some(8))));
        assert_eq!(member("Outer.ptr"), Some((40, Some(4))));
        assert_eq!(member("Inner.b"), Some((8, Some(8))));
        assert_eq!(member("Outer.missing"), None);
        assert_eq!(layout.sizes.get("Outer"), Some(&48));
        assert_eq!(layout.variables.get("nowhere"), None);
        // The global's bytes in the data segments: `tag` is 1.
        let address = layout.variables["the_outer"] as usize;
        assert_eq!(data_byte(&wasm, address), Some(1));
    }

    /// The byte at `address` as the active data segments lay memory out.
    fn data_byte(wasm: &[u8], address: usize) -> Option<u8> {
        for payload in Parser::new(0).parse_all(wasm) {
            if let Payload::DataSection(reader) = payload.unwrap() {
                for data in reader {
                    let data = data.unwrap();
                    let wasmparser::DataKind::Active { offset_expr, .. } = data.kind else {
                        continue;
                    };
                    let Ok(wasmparser::Operator::I32Const { value }) =
                        offset_expr.get_operators_reader().read()
                    else {
                        continue;
                    };
                    let start = value as usize;
                    if (start..start + data.data.len()).contains(&address) {
                        return Some(data.data[address - start]);
                    }
                }
            }
        }
        None
    }

    #[test]
    fn a_module_without_dwarf_says_so() {
        let error = read(&fixture("go/alloc.wasm"), &["x"], &[]).unwrap_err();
        assert_eq!(error.to_string(), "no DWARF");
    }
}
