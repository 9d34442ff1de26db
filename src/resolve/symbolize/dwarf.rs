//! File, line and inlined frames of Wasm code offsets, from the module's DWARF custom sections
//! (`.debug_*`), read with gimli in place from the module's bytes (shared, never copied).
//!
//! Memory is why this is not addr2line's `Context`: it keeps every compilation unit parsed
//! (abbreviations, line program header) for as long as it lives, ~28 KiB a unit, 28 MiB for
//! ripgrep's 996 units, about the module's own size. Here loading keeps only each unit's
//! address ranges; a batch of addresses is resolved unit by unit, each unit's line program
//! and DIE tree walked once for all of its addresses, and the parsed units dropped after.

use std::collections::hash_map::Entry;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use crate::shared::source_path::clean_keeping_scheme;
use crate::wasm::module_bytes::ModuleBytes;
use anyhow::{bail, Context as _, Result};
use gimli::{AttributeValue, DebuggingInformationEntry, Reader as _, Unit, UnitHeader, UnitOffset};
use rustc_hash::FxHashMap;

type Reader = gimli::EndianReader<gimli::LittleEndian, Arc<[u8]>>;

/// Where a module keeps its DWARF, found while scanning its sections.
#[derive(Clone, Debug, Default)]
pub struct DwarfSections {
    /// The code section's contents: DWARF addresses of Wasm code are offsets from its start.
    pub code: Option<Range<usize>>,
    /// `.debug_*` custom sections: (name, range of their contents in the module).
    pub sections: Vec<(String, Range<usize>)>,
}

impl DwarfSections {
    /// Whether there is anything to map code to source lines with.
    pub fn present(&self) -> bool {
        self.code.is_some() && self.sections.iter().any(|(n, _)| n == ".debug_info")
    }
}

/// One source frame as DWARF describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DwarfFrame {
    /// The symbol's name, often mangled.
    pub linkage_name: Option<String>,
    /// The name in the source, unqualified.
    pub name: Option<String>,
    pub file: Option<String>,
    pub line: u32,
    pub column: u32,
    /// The line where the function is declared.
    pub start_line: u32,
}

/// An address range of a unit's code.
struct UnitRange {
    range: Range<u64>,
    unit: usize,
    /// The largest end of this and all earlier ranges (by start): lets a lookup stop
    /// scanning back once no earlier range can reach the address.
    max_end: u64,
}

pub struct Dwarf {
    dwarf: gimli::Dwarf<Reader>,
    code_start: u64,
    /// Every unit's header, in section order (so by offset).
    units: Vec<UnitHeader<Reader>>,
    /// By start.
    ranges: Vec<UnitRange>,
    /// Set when some units cannot be read: the code they describe has no lines.
    pub unreadable_units: Option<String>,
}

/// DIE trees and origin chains are shallow in real DWARF; corrupt DWARF may nest or loop.
const MAX_DEPTH: usize = 128;
const MAX_ORIGIN_LINKS: usize = 8;

/// What a batch of addresses resolved to: each address's frames, innermost first (absent
/// when the DWARF does not describe it), and the first error met (its unit was skipped).
#[derive(Default)]
pub struct Resolved {
    pub frames: FxHashMap<u32, Vec<DwarfFrame>>,
    pub error: Option<gimli::Error>,
}

impl Dwarf {
    pub fn load(wasm: &ModuleBytes, sections: &DwarfSections) -> Result<Self> {
        let code = sections
            .code
            .clone()
            .context("its DWARF debug info describes no code: it has no code section")?;
        let (buffer, module) = wasm.parts();
        let whole = Reader::new(buffer.clone(), gimli::LittleEndian).range(module);
        let dwarf = gimli::Dwarf::load(|id| -> Result<Reader> {
            let range = sections
                .sections
                .iter()
                .find(|(name, _)| name == id.name())
                .map_or(0..0, |(_, range)| range.clone());
            Ok(whole.range(range))
        })
        .context("cannot read its DWARF debug info")?;
        let (mut units, mut ranges) = (Vec::new(), Vec::new());
        let (mut readable, mut unreadable, mut first_error) = (0, 0, None);
        let mut headers = dwarf.units();
        loop {
            let header = match headers.next() {
                Ok(Some(header)) => header,
                Ok(None) => break,
                // Past a bad header, where the next unit starts is unknown.
                Err(e) => {
                    unreadable += 1;
                    first_error.get_or_insert(e);
                    break;
                }
            };
            let index = units.len();
            units.push(header.clone());
            let read = dwarf.unit(header).and_then(|unit| {
                let mut found = dwarf.unit_ranges(&unit)?;
                while let Some(r) = found.next()? {
                    if r.begin < r.end {
                        ranges.push(UnitRange {
                            range: r.begin..r.end,
                            unit: index,
                            max_end: 0,
                        });
                    }
                }
                Ok(())
            });
            match read {
                Ok(()) => readable += 1,
                Err(e) => {
                    unreadable += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
        if readable == 0 {
            match first_error {
                Some(e) => bail!("cannot read its DWARF debug info ({e})"),
                None => bail!("its DWARF debug info has no compilation units"),
            }
        }
        // Addresses of code removed at link time are tombstones or zeros; a module rewritten
        // after linking (wasm-opt) keeps DWARF whose addresses all became such.
        let code_size = code.len() as u64;
        let covered: u64 = ranges
            .iter()
            .map(|r| r.range.end.min(code_size).saturating_sub(r.range.start))
            .sum();
        if covered * 100 < code_size {
            bail!("its DWARF debug info describes almost none of its code ({covered} of {code_size} bytes; were its addresses lost when the module was rewritten after linking, e.g. by wasm-opt?)");
        }
        ranges.sort_unstable_by_key(|r| r.range.start);
        let mut max_end = 0;
        for r in &mut ranges {
            max_end = max_end.max(r.range.end);
            r.max_end = max_end;
        }
        let total = readable + unreadable;
        Ok(Dwarf {
            dwarf,
            code_start: code.start as u64,
            units,
            ranges,
            unreadable_units: first_error.map(|e| {
                format!("{unreadable} of its {total} DWARF compilation units are unreadable ({e})")
            }),
        })
    }

    /// The units whose code contains `probe`, in section order.
    fn units_containing(&self, probe: u64) -> Vec<usize> {
        let mut found = Vec::new();
        let end = self.ranges.partition_point(|r| r.range.start <= probe);
        for r in self.ranges[..end].iter().rev() {
            if r.max_end <= probe {
                break;
            }
            if r.range.end > probe && !found.contains(&r.unit) {
                found.push(r.unit);
            }
        }
        found.sort_unstable();
        found
    }

    /// The source frames of each instruction at the given module offsets.
    pub fn resolve(&self, offsets: &[u32]) -> Resolved {
        // Each address goes to the first unit claiming it; should that unit not describe it
        // (overlapping ranges of discarded code), to the next.
        let mut pending: Vec<(u32, Vec<usize>)> = offsets
            .iter()
            .filter_map(|&offset| {
                let probe = u64::from(offset).checked_sub(self.code_start)?;
                let mut units = self.units_containing(probe);
                units.reverse();
                (!units.is_empty()).then_some((offset, units))
            })
            .collect();
        let mut resolved = Resolved::default();
        // Units that names and declaration lines refer into, parsed for this batch only.
        let mut referenced = FxHashMap::default();
        while !pending.is_empty() {
            let mut by_unit: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
            for (offset, units) in &mut pending {
                if let Some(unit) = units.pop() {
                    by_unit
                        .entry(unit)
                        .or_default()
                        .push(u64::from(*offset) - self.code_start);
                }
            }
            if by_unit.is_empty() {
                break;
            }
            for (unit, mut probes) in by_unit {
                probes.sort_unstable();
                probes.dedup();
                match self.resolve_in_unit(unit, &probes, &mut referenced) {
                    Ok(frames) => {
                        for (probe, frames) in frames {
                            resolved
                                .frames
                                .insert((probe + self.code_start) as u32, frames);
                        }
                    }
                    Err(e) => {
                        resolved.error.get_or_insert(e);
                    }
                }
            }
            pending.retain(|(offset, units)| {
                !units.is_empty() && !resolved.frames.contains_key(offset)
            });
        }
        resolved
    }

    fn resolve_in_unit(
        &self,
        index: usize,
        probes: &[u64],
        referenced: &mut FxHashMap<usize, Unit<Reader>>,
    ) -> gimli::Result<Vec<(u64, Vec<DwarfFrame>)>> {
        let unit = &self.dwarf.unit(self.units[index].clone())?;
        let mut files = FileNames::default();
        let lines = line_rows(&self.dwarf, unit, probes, &mut files)?;
        let mut scopes: FxHashMap<u64, Vec<Scope>> = FxHashMap::default();
        let mut tree = unit.entries_tree(None)?;
        let mut chain = Vec::new();
        walk(
            unit.unit_ref(&self.dwarf),
            tree.root()?,
            probes,
            &mut chain,
            &mut scopes,
            0,
        )?;
        // Many addresses share their functions: each DIE is described once.
        let mut described: FxHashMap<UnitOffset, Names> = FxHashMap::default();
        let mut out = Vec::new();
        for &probe in probes {
            let line = lines.get(&probe);
            let Some(scopes) = scopes.get(&probe) else {
                // Lines without a function: the caller names the frame.
                if let Some(line) = line {
                    out.push((probe, vec![line.frame(Names::default())]));
                }
                continue;
            };
            // Innermost scope first: its position is the line row's; each outer scope's is
            // where the scope inside it was inlined.
            let mut frames = Vec::with_capacity(scopes.len());
            let mut position = line.cloned().unwrap_or_default();
            for scope in scopes.iter().rev() {
                let names = match described.entry(scope.die) {
                    Entry::Occupied(known) => known.into_mut(),
                    Entry::Vacant(slot) => slot.insert(self.describe(unit, scope.die, referenced)?),
                };
                frames.push(position.frame(names.clone()));
                position = Position {
                    file: match scope.call_file {
                        Some(file) => files.get(&self.dwarf, unit, file)?,
                        None => None,
                    },
                    line: scope.call_line,
                    column: scope.call_column,
                };
            }
            out.push((probe, frames));
        }
        Ok(out)
    }

    /// The names and declaration line of the function whose DIE, or an inlined call of it,
    /// is at `offset`, following abstract origins and specifications, across units if need be.
    fn describe(
        &self,
        unit: &Unit<Reader>,
        offset: UnitOffset,
        referenced: &mut FxHashMap<usize, Unit<Reader>>,
    ) -> gimli::Result<Names> {
        let mut in_unit: Option<usize> = None;
        let mut offset = offset;
        let mut names = Names::default();
        for _ in 0..MAX_ORIGIN_LINKS {
            let current = in_unit.map_or(unit, |i| &referenced[&i]);
            let entry = current.entry(offset)?;
            let text = |attr| -> gimli::Result<String> {
                let s = self.dwarf.attr_string(current, attr)?;
                Ok(s.to_string_lossy()?.into_owned())
            };
            if names.linkage_name.is_none() {
                if let Some(attr) = entry
                    .attr_value(gimli::DW_AT_linkage_name)
                    .or_else(|| entry.attr_value(gimli::DW_AT_MIPS_linkage_name))
                {
                    names.linkage_name = Some(text(attr)?);
                }
            }
            if names.name.is_none() {
                if let Some(attr) = entry.attr_value(gimli::DW_AT_name) {
                    names.name = Some(text(attr)?);
                }
            }
            if names.start_line == 0 {
                names.start_line = udata_u32(&entry, gimli::DW_AT_decl_line);
            }
            if names.linkage_name.is_some() && names.name.is_some() && names.start_line != 0 {
                break;
            }
            match origin(&entry) {
                Some(AttributeValue::UnitRef(next)) => offset = next,
                Some(AttributeValue::DebugInfoRef(target)) => {
                    let Some(index) = self.unit_index(target.0) else {
                        break;
                    };
                    let header = &self.units[index];
                    let Some(next) = target.to_unit_offset(header) else {
                        break;
                    };
                    offset = next;
                    if let Entry::Vacant(slot) = referenced.entry(index) {
                        slot.insert(self.dwarf.unit(header.clone())?);
                    }
                    in_unit = Some(index);
                }
                _ => break,
            }
        }
        Ok(names)
    }

    /// The unit whose bytes hold `.debug_info` offset `target`.
    fn unit_index(&self, target: usize) -> Option<usize> {
        let i = self.units.partition_point(|h| h.offset().0 <= target);
        let index = i.checked_sub(1)?;
        let header = &self.units[index];
        (target < header.offset().0 + header.length_including_self()).then_some(index)
    }
}

/// A subprogram or an inlined call containing an address; outermost first in a chain.
#[derive(Clone, Copy)]
struct Scope {
    die: UnitOffset,
    call_file: Option<u64>,
    call_line: u32,
    call_column: u32,
}

/// A position in the source: a line row's, or an inlined call's call site.
#[derive(Clone, Debug, Default)]
struct Position {
    file: Option<String>,
    line: u32,
    column: u32,
}

/// What a function's DIEs say of it.
#[derive(Clone, Default)]
struct Names {
    linkage_name: Option<String>,
    name: Option<String>,
    start_line: u32,
}

impl Position {
    fn frame(&self, names: Names) -> DwarfFrame {
        DwarfFrame {
            linkage_name: names.linkage_name,
            name: names.name,
            file: self.file.clone(),
            line: self.line,
            column: self.column,
            start_line: names.start_line,
        }
    }
}

fn origin(entry: &DebuggingInformationEntry<Reader>) -> Option<AttributeValue<Reader>> {
    entry
        .attr_value(gimli::DW_AT_abstract_origin)
        .or_else(|| entry.attr_value(gimli::DW_AT_specification))
}

/// Finds, for each probe, the chain of subprogram and inlined calls around it: one walk of
/// the unit's DIE tree, entering only the functions that contain some probe.
fn walk(
    unit: gimli::UnitRef<'_, Reader>,
    node: gimli::EntriesTreeNode<'_, '_, Reader>,
    probes: &[u64],
    chain: &mut Vec<Scope>,
    found: &mut FxHashMap<u64, Vec<Scope>>,
    depth: usize,
) -> gimli::Result<()> {
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    let mut children = node.children();
    while let Some(child) = children.next()? {
        let entry = child.entry();
        let tag = entry.tag();
        let in_function = !chain.is_empty();
        let scope = match tag {
            gimli::DW_TAG_subprogram if !in_function => Some(Scope {
                die: entry.offset(),
                call_file: None,
                call_line: 0,
                call_column: 0,
            }),
            gimli::DW_TAG_inlined_subroutine if in_function => Some(Scope {
                die: entry.offset(),
                call_file: match entry.attr_value(gimli::DW_AT_call_file) {
                    Some(AttributeValue::FileIndex(file)) => Some(file),
                    other => other.and_then(|v| v.udata_value()),
                },
                call_line: udata_u32(entry, gimli::DW_AT_call_line),
                call_column: udata_u32(entry, gimli::DW_AT_call_column),
            }),
            _ => None,
        };
        match scope {
            Some(scope) => {
                let inside = probes_in(unit, entry, probes)?;
                let function = tag == gimli::DW_TAG_subprogram;
                if function && inside.is_empty() {
                    continue;
                }
                chain.push(scope);
                // Deeper scopes are visited later and replace this chain.
                for &probe in &inside {
                    found.insert(probe, chain.clone());
                }
                // Inside a function every inlined call is walked, not only those holding an
                // address: TinyGo emits inlined calls whose ranges lie outside their parent's.
                // As in llvm-symbolizer, the innermost scope holding an address counts, with
                // every scope around it.
                let below = if function { &inside[..] } else { probes };
                walk(unit, child, below, chain, found, depth + 1)?;
                chain.pop();
            }
            // Functions nest in namespaces and types; inlined calls in lexical blocks.
            None if !in_function || tag == gimli::DW_TAG_lexical_block => {
                walk(unit, child, probes, chain, found, depth + 1)?
            }
            None => {}
        }
    }
    Ok(())
}

fn udata_u32(entry: &DebuggingInformationEntry<Reader>, name: gimli::DwAt) -> u32 {
    entry
        .attr_value(name)
        .and_then(|v| v.udata_value())
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(0)
}

/// The probes (sorted) that fall in the DIE's address ranges.
fn probes_in(
    unit: gimli::UnitRef<'_, Reader>,
    entry: &DebuggingInformationEntry<Reader>,
    probes: &[u64],
) -> gimli::Result<Vec<u64>> {
    let mut inside = Vec::new();
    let mut ranges = unit.die_ranges(entry)?;
    while let Some(r) = ranges.next()? {
        let from = probes.partition_point(|&p| p < r.begin);
        let to = probes.partition_point(|&p| p < r.end);
        inside.extend_from_slice(&probes[from..to.max(from)]);
    }
    inside.sort_unstable();
    inside.dedup();
    Ok(inside)
}

/// The line row of each probe: one run of the unit's line program. A row covers the
/// addresses from its own up to the next row's in the same sequence.
fn line_rows(
    dwarf: &gimli::Dwarf<Reader>,
    unit: &Unit<Reader>,
    probes: &[u64],
    files: &mut FileNames,
) -> gimli::Result<FxHashMap<u64, Position>> {
    let mut found = FxHashMap::default();
    let Some(program) = unit.line_program.clone() else {
        return Ok(found);
    };
    let mut rows = program.rows();
    let mut previous: Option<(u64, u64, u32, u32)> = None;
    while let Some((_, row)) = rows.next_row()? {
        let address = row.address();
        if let Some((start, file, line, column)) = previous {
            let from = probes.partition_point(|&p| p < start);
            let to = probes.partition_point(|&p| p < address);
            for &probe in &probes[from..to.max(from)] {
                found.insert(
                    probe,
                    Position {
                        file: files.get(dwarf, unit, file)?,
                        line,
                        column,
                    },
                );
            }
        }
        previous = (!row.end_sequence()).then(|| {
            let line = row.line().map_or(0, |l| l.get()).min(u64::from(u32::MAX)) as u32;
            let column = match row.column() {
                gimli::ColumnType::LeftEdge => 0,
                gimli::ColumnType::Column(c) => c.get().min(u64::from(u32::MAX)) as u32,
            };
            (address, row.file_index(), line, column)
        });
    }
    Ok(found)
}

/// The paths of one unit's files, by index in its line program.
#[derive(Default)]
struct FileNames(FxHashMap<u64, Option<String>>);

impl FileNames {
    fn get(
        &mut self,
        dwarf: &gimli::Dwarf<Reader>,
        unit: &Unit<Reader>,
        index: u64,
    ) -> gimli::Result<Option<String>> {
        Ok(match self.0.entry(index) {
            Entry::Occupied(known) => known.get().clone(),
            Entry::Vacant(slot) => slot.insert(file_name(dwarf, unit, index)?).clone(),
        })
    }
}

/// The path of file `index` of the unit's line program: its directory joined to the unit's
/// compilation directory, unless already absolute, [cleaned](clean_keeping_scheme).
fn file_name(
    dwarf: &gimli::Dwarf<Reader>,
    unit: &Unit<Reader>,
    index: u64,
) -> gimli::Result<Option<String>> {
    let Some(program) = &unit.line_program else {
        return Ok(None);
    };
    let header = program.header();
    let Some(file) = header.file(index) else {
        return Ok(None);
    };
    let text = |value| -> gimli::Result<String> {
        Ok(dwarf
            .attr_string(unit, value)?
            .to_string_lossy()?
            .into_owned())
    };
    let mut path = match &unit.comp_dir {
        Some(dir) => dir.to_string_lossy()?.into_owned(),
        None => String::new(),
    };
    if file.directory_index() != 0 {
        if let Some(dir) = file.directory(header) {
            join(&mut path, &text(dir)?);
        }
    }
    join(&mut path, &text(file.path_name())?);
    // Compilers write the parts DWARF joins as they were given (wasi-libc: `./build`,
    // `./libc-bottom-half/crt`, `crt1-command.c`), and one file must have one path in every
    // view of a profile.
    Ok(Some(clean_keeping_scheme(&path)))
}

fn join(path: &mut String, part: &str) {
    let absolute = part.starts_with('/')
        || part.starts_with('\\')
        || part.get(1..3).is_some_and(|s| s == ":/" || s == ":\\")
        // Toolchains name their own sources by URL, e.g. `wasisdk://v30.0/...`.
        || part.contains("://");
    if absolute || path.is_empty() {
        *path = part.to_string();
    } else {
        if !path.ends_with('/') {
            path.push('/');
        }
        path.push_str(part);
    }
}
