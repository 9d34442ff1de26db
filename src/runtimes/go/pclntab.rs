//! Go's `pclntab` as its linker lays it out in linear memory (Go's `runtime/symtab.go`, the
//! same from Go 1.21 to 1.27): a header (`pcHeader`, found by its magic number) with offsets
//! of the function-name, compilation-unit, file and pc-value tables and of the function table,
//! whose entries (entry, offset of a `_func`) are sorted by entry. An entry is the function's
//! Go "PC" `PC_F << 16` before Go 1.25 and `PC_F` from 1.25. Per function, pc-value tables
//! map its PCs (`PC_B`, the resume points within it) to the SP delta, file, line and inline
//! tree index; inlined calls are described by `inlinedCall` records (`runtime/symtabinl.go`).

use super::module::FIRST_PC_F;
use crate::runtimes::NamedFrame;

/// `pcHeader`'s first bytes: the magic number of Go 1.20's format, two pad bytes, the
/// instruction size quantum (1) and the pointer size (8).
const HEADER_START: [u8; 8] = [0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8];
/// `_func.flag`: the outermost frame of a stack (`runtime.goexit`, `mstart`, `rt0_go`).
pub const FLAG_TOP_FRAME: u8 = 1;
/// The `_func` pcdata index of the inline tree index, and funcdata index of the tree.
const PCDATA_INLINE_INDEX: u32 = 2;
const FUNCDATA_INLINE_TREE: u32 = 3;

/// A function's record (`_func`): `entryOff u32, nameOff i32, args i32, deferreturn u32,
/// pcsp u32, pcfile u32, pcln u32, npcdata u32, cuOffset u32, startLine i32, funcID u8,
/// flag u8, _ u8, nfuncdata u8, pcdata [npcdata]u32, funcdata [nfuncdata]u32`.
#[derive(Clone, Copy, Debug)]
pub struct Func {
    at: usize,
    pub flag: u8,
}

/// The table in the image of a module's data segments (offsets in it are addresses).
pub struct Pclntab {
    image: Vec<u8>,
    function_count: usize,
    names: usize,
    compilation_units: usize,
    files: usize,
    pc_values: usize,
    function_table: usize,
    /// `runtime.firstmoduledata.gofunc`, the base of funcdata offsets; `None` when the module
    /// data was not found (then no inline trees).
    go_func: Option<usize>,
    /// Entries are PCs (`PC_F << 16`), before Go 1.25.
    entries_are_pcs: bool,
}

impl Pclntab {
    /// `go_minor`: the Go release (1.x) that built the module, which places `gofunc` in the
    /// module data (unknown: taken as before 1.27).
    pub fn find(image: Vec<u8>, go_minor: Option<u32>) -> Option<Self> {
        let header = image
            .windows(HEADER_START.len())
            .position(|w| w == HEADER_START)?;
        let word = |offset: usize| -> Option<usize> {
            usize::try_from(u64::from_le_bytes(read(&image, header + offset)?)).ok()
        };
        let from_header = |offset: usize| header.checked_add(word(offset)?);
        let (names, function_table) = (from_header(32)?, from_header(64)?);
        let mut table = Pclntab {
            function_count: word(8)?,
            names,
            compilation_units: from_header(40)?,
            files: from_header(48)?,
            pc_values: from_header(56)?,
            function_table,
            go_func: None,
            entries_are_pcs: false,
            image: Vec::new(),
        };
        let first_entry = u32::from_le_bytes(read(&image, function_table)?);
        table.entries_are_pcs = first_entry >= FIRST_PC_F << 16;
        table.go_func = module_data(&image, header, names).and_then(|data| {
            let offset = if go_minor.unwrap_or(0) >= 27 {
                344
            } else {
                320
            };
            usize::try_from(u64::from_le_bytes(read(&image, data + offset)?)).ok()
        });
        table.image = image;
        Some(table)
    }

    /// Whether Go's release is before 1.25, whose table gives function entries as PCs, not
    /// as function indices.
    pub fn entries_are_pcs(&self) -> bool {
        self.entries_are_pcs
    }

    /// The functions, each with its `PC_F`, in the table's order.
    pub fn functions(&self) -> impl Iterator<Item = Option<(u32, Func)>> + '_ {
        let shift = if self.entries_are_pcs { 16 } else { 0 };
        (0..self.function_count).map(move |i| {
            let entry = self.function_table + 8 * i;
            let pc_f = self.u32_at(entry)? >> shift;
            let at = self.function_table + self.u32_at(entry + 4)? as usize;
            Some((
                pc_f,
                Func {
                    at,
                    flag: *self.image.get(at + 41)?,
                },
            ))
        })
    }

    pub fn name(&self, func: Func) -> Option<String> {
        self.string_at(self.names + self.u32_at(func.at + 4)? as usize)
    }

    pub fn start_line(&self, func: Func) -> Option<u32> {
        self.u32_at(func.at + 36)
    }

    /// The file `func` starts in; empty when the table names none.
    pub fn start_file(&self, func: Func) -> String {
        self.file_at(func, 0).unwrap_or_default()
    }

    /// The frame size: the SP delta past the prologue, the largest its `pcsp` table gives.
    pub fn frame_size(&self, func: Func) -> Option<u32> {
        let table = self.u32_at(func.at + 16)?;
        let mut size = 0;
        self.values(table, |_, value| {
            size = size.max(u32::try_from(value).unwrap_or(0));
            true
        });
        Some(size)
    }

    /// The frames at PC `pc` (a `PC_B`) of `func`, innermost first: the calls inlined there,
    /// then `func` itself.
    pub fn frames_at(&self, func: Func, pc: u32) -> Option<Vec<NamedFrame>> {
        let line_table = self.u32_at(func.at + 24)?;
        let line_at = |at| self.value_at(line_table, at).map_or(0, |l| l.max(0) as u32);
        let mut frames = Vec::new();
        let mut at = pc;
        if let Some((tree, index_table)) = self.inline_tree(func) {
            // Each step goes out one level of inlining, to the PC of the call in its parent.
            for _ in 0..64 {
                let Some(index) = self.value_at(index_table, at).filter(|&i| i >= 0) else {
                    break;
                };
                // `inlinedCall`: funcID u8, _ [3]u8, nameOff i32, parentPc i32, startLine i32.
                let call = tree + 16 * index as usize;
                frames.push(NamedFrame {
                    name: self.string_at(self.names + self.u32_at(call + 4)? as usize)?,
                    file: self.file_at(func, at).unwrap_or_default(),
                    line: line_at(at),
                    start_line: self.u32_at(call + 12)?,
                });
                at = self.u32_at(call + 8)?;
            }
        }
        frames.push(NamedFrame {
            name: self.name(func)?,
            file: self.file_at(func, at).unwrap_or_default(),
            line: line_at(at),
            start_line: self.start_line(func)?,
        });
        Some(frames)
    }

    /// The inline tree's address and the offset of the pc-value table of indices into it.
    fn inline_tree(&self, func: Func) -> Option<(usize, u32)> {
        let pcdata_count = self.u32_at(func.at + 28)?;
        let funcdata_count = u32::from(*self.image.get(func.at + 43)?);
        if pcdata_count <= PCDATA_INLINE_INDEX || funcdata_count <= FUNCDATA_INLINE_TREE {
            return None;
        }
        let index_table = self.u32_at(func.at + 44 + 4 * PCDATA_INLINE_INDEX as usize)?;
        let funcdata = func.at + 44 + 4 * pcdata_count as usize;
        let tree = self.u32_at(funcdata + 4 * FUNCDATA_INLINE_TREE as usize)?;
        if index_table == 0 || tree == u32::MAX {
            return None;
        }
        Some((self.go_func?.checked_add(tree as usize)?, index_table))
    }

    fn file_at(&self, func: Func, pc: u32) -> Option<String> {
        let table = self.u32_at(func.at + 20)?;
        let unit = self.u32_at(func.at + 32)? as usize;
        let number = usize::try_from(self.value_at(table, pc)?).ok()?;
        let offset = self.u32_at(self.compilation_units + 4 * unit.checked_add(number)?)?;
        // `!0`: a file the unit does not use.
        (offset != u32::MAX).then(|| self.string_at(self.files + offset as usize))?
    }

    /// The value of pc-value table `table` at `pc`.
    fn value_at(&self, table: u32, pc: u32) -> Option<i32> {
        let mut found = None;
        self.values(table, |end, value| {
            if pc < end {
                found = Some(value);
                false
            } else {
                true
            }
        });
        found
    }

    /// Calls `each(end, value)` for the ranges `[previous end, end)` of table `table` (0:
    /// none), in order, while it returns true. Each entry is a zig-zag varint value
    /// delta (from -1) and a varint PC delta, until a zero value delta after the first.
    fn values(&self, table: u32, mut each: impl FnMut(u32, i32) -> bool) {
        if table == 0 {
            return;
        }
        let mut at = self.pc_values + table as usize;
        let (mut value, mut pc) = (-1i32, 0u32);
        let mut first = true;
        // A function has fewer than 65536 PCs: bounded.
        for _ in 0..=u16::MAX as usize {
            let Some((delta, next)) = self.varint(at) else {
                return;
            };
            if delta == 0 && !first {
                return;
            }
            first = false;
            let Some((pc_delta, next)) = self.varint(next) else {
                return;
            };
            at = next;
            let delta = if delta & 1 == 0 {
                (delta >> 1) as i32
            } else {
                !((delta >> 1) as i32)
            };
            value = value.wrapping_add(delta);
            pc = pc.saturating_add(pc_delta as u32);
            if !each(pc, value) {
                return;
            }
        }
    }

    fn varint(&self, at: usize) -> Option<(u64, usize)> {
        let (mut value, mut shift) = (0u64, 0);
        for (i, &byte) in self.image.get(at..)?.iter().take(10).enumerate() {
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some((value, at + i + 1));
            }
            shift += 7;
        }
        None
    }

    fn u32_at(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(read(&self.image, at)?))
    }

    fn string_at(&self, at: usize) -> Option<String> {
        let bytes = self.image.get(at..)?;
        let end = bytes.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }
}

/// `runtime.firstmoduledata`: it starts with the addresses of the header and of the name
/// table (`pcHeader *`, then `funcnametab []byte`'s pointer).
fn module_data(image: &[u8], header: usize, names: usize) -> Option<usize> {
    let mut needle = [0u8; 16];
    needle[..8].copy_from_slice(&(header as u64).to_le_bytes());
    needle[8..].copy_from_slice(&(names as u64).to_le_bytes());
    image.windows(16).position(|w| w == needle)
}

fn read<const N: usize>(image: &[u8], at: usize) -> Option<[u8; N]> {
    image.get(at..at.checked_add(N)?)?.try_into().ok()
}
