//! What the rewriter appends beside the code ([`Added`], which holds their indices): the hook's
//! table, the memory of flags, the nesting depth and countdown globals, and their exports, each
//! added to the module's own section of its kind or, where the module has none, to a section
//! of the rewriter's, placed in the binary format's order ([`SectionId`]).

use wasm_encoder::{
    ConstExpr, ExportKind, ExportSection, GlobalSection, GlobalType, MemorySection, MemoryType,
    Module, RefType, TableSection, TableType, ValType,
};

use super::hook::{HOOK_TABLE, NESTING_DEPTH, SAMPLE_COUNTDOWN, UNSEEDED};
// Named in the documentation only.
#[cfg(doc)]
use super::{block_slot, rewrite_in_component};

/// The indices of what the rewriter appends.
pub(super) struct Added {
    /// The hook's function type.
    pub(super) hook_type: u32,
    pub(super) hook_table: u32,
    /// The memory of flags, a byte per [`block_slot`].
    pub(super) flags: u32,
    /// An `i32` global: how many wrappers are running.
    pub(super) depth: u32,
    /// The [`SAMPLE_COUNTDOWN`] global.
    pub(super) countdown: u32,
    /// Whether allocators' wrappers tell the hook they enter and leave (see
    /// [`rewrite_in_component`]).
    pub(super) tell: bool,
}

impl Added {
    pub(super) fn tables(&self, tables: &mut TableSection) {
        tables.table(TableType {
            element_type: RefType::FUNCREF,
            table64: false,
            minimum: 1,
            maximum: Some(1),
            shared: false,
        });
    }

    pub(super) fn memories(&self, memories: &mut MemorySection) {
        memories.memory(MemoryType {
            minimum: 1,
            maximum: Some(1),
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
    }

    pub(super) fn globals(&self, globals: &mut GlobalSection) {
        let mutable = |val_type| GlobalType {
            val_type,
            mutable: true,
            shared: false,
        };
        globals.global(mutable(ValType::I32), &ConstExpr::i32_const(0));
        globals.global(mutable(ValType::I64), &ConstExpr::i64_const(UNSEEDED));
    }

    pub(super) fn exports(&self, exports: &mut ExportSection) {
        exports.export(HOOK_TABLE, ExportKind::Table, self.hook_table);
        exports.export(SAMPLE_COUNTDOWN, ExportKind::Global, self.countdown);
        exports.export(NESTING_DEPTH, ExportKind::Global, self.depth);
    }

    /// A section of ours where the module had none of its kind.
    pub(super) fn emit_new(&self, out: &mut Module, id: SectionId) {
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
}

/// The sections the rewriter may have to create, in the binary format's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SectionId {
    Table,
    Memory,
    Global,
    Export,
}

impl SectionId {
    pub(super) fn order(self) -> u32 {
        match self {
            SectionId::Table => 4,
            SectionId::Memory => 5,
            SectionId::Global => 7,
            SectionId::Export => 8,
        }
    }

    /// The position of a section, by its id, in the order the binary format requires
    /// (custom sections, anywhere, have none).
    pub(super) fn order_of(id: u8) -> Option<u32> {
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
