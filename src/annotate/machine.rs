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
    /// The indices in `instructions` of each Wasm instruction's, by its offset: a large
    /// function (an interpreter's loop) has hundreds of thousands.
    by_wasm: FxHashMap<u64, Vec<usize>>,
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
        let Some(indices) = d.by_wasm.get(&at) else {
            return Vec::new();
        };
        indices
            .iter()
            .map(|&i| {
                let (offset, text, _) = &d.instructions[i];
                Row::Native {
                    text: format!("{offset:>5x}:  {text}"),
                    flat: d.flat[i],
                }
            })
            .collect()
    }
}

/// `code`'s instructions, each with the Wasm instruction it is mapped to: the last mapped at
/// or before it, or before the first (the prologue) the first, as samples are resolved.
///
/// A function's code may hold data (the jump table of a `br_table`, after its indirect
/// jump), which a linear sweep misreads as instructions, and then reads the instructions
/// after it out of step. So the sweep starts again at every offset known to start an
/// instruction: where the address map says a Wasm instruction's code starts, and where
/// samples were taken (a sampled PC is an instruction's first byte). An instruction read
/// across such an offset was data: its bytes up to there are shown as such.
fn disassemble(code: &MachineCode) -> Result<Disassembled> {
    let disassembler = disassembler(&code.arch)?;
    let len = code.bytes.len() as u32;
    let mut starts: Vec<u32> = code
        .instructions
        .iter()
        .map(|&(offset, _)| offset)
        .chain(code.sampled.iter().map(|&(offset, _)| offset))
        .chain([0, len])
        .filter(|&offset| offset <= len)
        .collect();
    starts.sort_unstable();
    starts.dedup();
    let mut listed: Vec<(u32, String)> = Vec::new();
    for stretch in starts.windows(2) {
        let (from, to) = (stretch[0], stretch[1]);
        let bytes = &code.bytes[from as usize..to as usize];
        let decoded = disassembler.disasm_all(bytes, u64::from(from));
        let mut at = from;
        for i in decoded.iter().flat_map(|d| d.iter()) {
            let end = i.address() as u32 + i.len() as u32;
            if end > to {
                break;
            }
            let text = match (i.mnemonic(), i.op_str()) {
                (Some(m), Some(ops)) if !ops.is_empty() => format!("{m} {ops}"),
                (Some(m), _) => m.to_string(),
                (None, _) => "?".to_string(),
            };
            listed.push((at, text));
            at = end;
        }
        if at < to {
            listed.push((at, format!("(data: {} bytes)", to - at)));
        }
    }
    let instructions: Vec<(u32, String, u64)> = listed
        .into_iter()
        .filter_map(|(offset, text)| {
            let mapped = code
                .instructions
                .partition_point(|&(start, _)| start <= offset);
            let &(_, wasm) = code.instructions.get(mapped.saturating_sub(1))?;
            Some((offset, text, u64::from(wasm)))
        })
        .collect();
    let mut by_wasm: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
    for (i, &(_, _, wasm)) in instructions.iter().enumerate() {
        by_wasm.entry(wasm).or_default().push(i);
    }
    let flat = vec![0; instructions.len()];
    Ok(Disassembled {
        instructions,
        flat,
        by_wasm,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Id, MappingId, ValueType};

    /// The rows under Wasm instruction 10 of function 1 of a profile that keeps `code` (its
    /// `arch`, `bytes`, and samples of one type), all mapped to that instruction.
    fn rows_of(
        arch: &str,
        bytes: Vec<u8>,
        sampled: Vec<(u32, Vec<i64>)>,
    ) -> Result<Vec<(String, i64)>> {
        let code = MachineCode {
            mapping: MappingId::from_index(0),
            func_index: 1,
            arch: arch.into(),
            bytes,
            instructions: vec![(0, 10)],
            sampled,
        };
        let profile = Profile {
            sample_types: vec![ValueType::new("samples", "count")],
            code: vec![code],
            ..Profile::default()
        };
        let listing = MachineListing::new(&profile, 0)?;
        Ok(listing
            .rows((MappingId::from_index(0), 1), 10)
            .into_iter()
            .map(|r| match r {
                Row::Native { text, flat } => (text, flat),
                _ => unreachable!(),
            })
            .collect())
    }

    fn expected(rows: &[(&str, i64)]) -> Vec<(String, i64)> {
        rows.iter().map(|&(t, v)| (t.to_string(), v)).collect()
    }

    /// A profile taken on another machine is read on this one: aarch64's code, whatever the
    /// host; an instruction set Capstone is not built for is refused in one line.
    #[test]
    fn each_architectures_code_is_read_as_its_own() {
        // udiv w0, w1, w2; ret
        let bytes = vec![0x20, 0x08, 0xc2, 0x1a, 0xc0, 0x03, 0x5f, 0xd6];
        assert_eq!(
            rows_of("aarch64", bytes, vec![(4, vec![2])]).unwrap(),
            expected(&[("    0:  udiv w0, w1, w2", 0), ("    4:  ret", 2)])
        );
        let e = rows_of("mips", vec![0], Vec::new())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("mips code, which wasmspy cannot disassemble"),
            "{e}"
        );
    }

    /// After an indirect jump, two bytes of data that read as the start of a long `lea`; the
    /// sampled `nop` after them is read from its own first byte, the data shown as such.
    #[test]
    fn the_sweep_starts_again_where_a_sample_was_taken() {
        let bytes = vec![0xff, 0xe0, 0x48, 0x8d, 0x90, 0xc3];
        assert_eq!(
            rows_of("x86_64", bytes, vec![(4, vec![3])]).unwrap(),
            expected(&[
                ("    0:  jmp rax", 0),
                ("    2:  (data: 2 bytes)", 0),
                ("    4:  nop", 3),
                ("    5:  ret", 0),
            ])
        );
    }
}
