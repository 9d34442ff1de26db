//! `annotate --native` on code Cranelift or Winch compiled: the machine code a profile keeps
//! for its hottest functions ([`MachineCode`]), disassembled by Capstone, each instruction
//! under the Wasm instruction Wasmtime's address map says it was compiled from, with the
//! samples that were taken at it.

use anyhow::{bail, Result};
use capstone::arch::{self, BuildsCapstone, BuildsCapstoneExtraMode};
use capstone::Capstone;
use rustc_hash::FxHashMap;

use super::counts::Function;
use super::Row;
use crate::profile::{MachineCode, Profile};

/// A function's machine instructions, and which Wasm instruction each was compiled from.
struct Disassembled {
    /// (offset in the function's code, `mnemonic operands`, the Wasm instruction's offset in
    /// the module), by offset.
    instructions: Vec<(u32, String, u64)>,
    /// Each machine instruction's flat value, by its index in `instructions`.
    flat: Vec<i64>,
}

/// The machine code of the functions a profile keeps, by function.
#[derive(Default)]
pub struct MachineListing {
    functions: FxHashMap<Function, Disassembled>,
}

impl MachineListing {
    /// The code `profile` keeps, disassembled, with sample type `index`'s values on its
    /// instructions.
    pub fn new(profile: &Profile, index: usize) -> Result<Self> {
        let mut functions = FxHashMap::default();
        for code in &profile.code {
            let mut d = disassemble(code)?;
            for (offset, values) in &code.sampled {
                // The instruction the samples' PC was at: the last that starts at or before it.
                let i = d
                    .instructions
                    .partition_point(|&(start, ..)| start <= *offset);
                if let (Some(i), Some(value)) = (i.checked_sub(1), values.get(index)) {
                    d.flat[i] += value;
                }
            }
            functions.insert((code.mapping, code.func_index), d);
        }
        Ok(MachineListing { functions })
    }

    /// Whether the profile keeps any machine code.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// The rows under Wasm instruction `at` of `function`: each machine instruction compiled
    /// from it, by address, as `offset: mnemonic operands` with its flat value.
    pub fn rows(&self, function: Function, at: u64) -> Vec<Row> {
        let Some(d) = self.functions.get(&function) else {
            return Vec::new();
        };
        d.instructions
            .iter()
            .zip(&d.flat)
            .filter(|((_, _, wasm), _)| *wasm == at)
            .map(|(&(offset, ref text, _), &flat)| Row::Native {
                text: format!("{offset:>5x}:  {text}"),
                flat,
            })
            .collect()
    }
}

/// `code`'s instructions, each with the Wasm instruction it is mapped to: the last mapped at
/// or before it, or before the first (the prologue) the first, as samples are resolved.
fn disassemble(code: &MachineCode) -> Result<Disassembled> {
    let disassembler = disassembler(&code.arch)?;
    let Ok(listed) = disassembler.disasm_all(&code.bytes, 0) else {
        bail!("Capstone could not disassemble {} code", code.arch);
    };
    let mut instructions = Vec::with_capacity(listed.len());
    for i in listed.iter() {
        let offset = i.address() as u32;
        let mapped = code
            .instructions
            .partition_point(|&(start, _)| start <= offset);
        let Some(&(_, wasm)) = code.instructions.get(mapped.saturating_sub(1)) else {
            continue;
        };
        let text = match (i.mnemonic(), i.op_str()) {
            (Some(m), Some(ops)) if !ops.is_empty() => format!("{m} {ops}"),
            (Some(m), _) => m.to_string(),
            (None, _) => "?".to_string(),
        };
        instructions.push((offset, text, u64::from(wasm)));
    }
    let flat = vec![0; instructions.len()];
    Ok(Disassembled { instructions, flat })
}

/// A disassembler of the instruction set Rust calls `arch`, in the syntax `wasmtime objdump`
/// shows.
fn disassembler(arch: &str) -> Result<Capstone> {
    let built = match arch {
        "x86_64" => Capstone::new()
            .x86()
            .mode(arch::x86::ArchMode::Mode64)
            .build(),
        "aarch64" => Capstone::new()
            .arm64()
            .mode(arch::arm64::ArchMode::Arm)
            .build(),
        "riscv64" => Capstone::new()
            .riscv()
            .mode(arch::riscv::ArchMode::RiscV64)
            .extra_mode([arch::riscv::ArchExtraMode::RiscVC].into_iter())
            .build(),
        "s390x" => Capstone::new()
            .sysz()
            .mode(arch::sysz::ArchMode::Default)
            .build(),
        other => {
            bail!("the profile's machine code is {other} code, which wasmspy cannot disassemble")
        }
    };
    built.map_err(|e| anyhow::anyhow!("Capstone: {e}"))
}
