//! Where a native sample's leaf is in the machine code of its function, and that code, for a
//! profile to keep (see [`crate::profile::MachineCode`]): `annotate --native` shows it with the
//! samples on its instructions.

use super::pulley_ops::OpcodeAt;
use super::Resolver;
use crate::shared::{ModuleId, RawFrame};

/// Where in its function's compiled code a native sample's leaf was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeafCode {
    /// Pulley's bytecode: the opcode sampled, with its neighbours'.
    Pulley(OpcodeAt),
    /// Machine code (Cranelift's or Winch's): the PC's offset in its function's code.
    Machine(u32),
}

/// A function's machine code, and where each Wasm instruction's code starts in it: (offset
/// in `bytes`, offset in the module's bytes).
pub struct FunctionMachineCode {
    pub bytes: Vec<u8>,
    pub instructions: Vec<(u32, u32)>,
}

impl Resolver {
    /// The offset of `pc`, the leaf of a native sample whose frame is `leaf`, in its
    /// function's code; the function is noted, for its code to be kept in profiles.
    pub(super) fn machine_offset(&mut self, pc: usize, leaf: RawFrame) -> Option<u32> {
        let RawFrame::Wasm {
            module: Some(module),
            func_index,
            ..
        } = leaf
        else {
            return None;
        };
        let code = self.code_map.function_code(pc)?;
        self.sampled_code.entry((module, func_index)).or_insert(pc);
        Some((pc - code.start) as u32)
    }

    /// The machine code of function `func_index` of registered module `module`, when samples
    /// fell in it; where the module was rewritten (allocator wrappers), its instructions are
    /// the original module's.
    pub fn machine_code(&self, module: ModuleId, func_index: u32) -> Option<FunctionMachineCode> {
        let &pc = self.sampled_code.get(&(module, func_index))?;
        let function = self.code_map.function_at(pc)?;
        // SAFETY: `function.code` is a function of a registered module's text, which the
        // resolver keeps alive with the module, and which Wasmtime never writes after loading.
        let bytes = unsafe {
            std::slice::from_raw_parts(function.code.start as *const u8, function.code.len())
        };
        let instructions = function
            .instructions
            .iter()
            .map(|&(address, offset)| {
                let (_, offset, _) = self.original(module, function.func_index, offset);
                ((address - function.code.start) as u32, offset)
            })
            .collect();
        Some(FunctionMachineCode {
            bytes: bytes.to_vec(),
            instructions,
        })
    }
}
