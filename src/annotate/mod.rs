//! `wasmspy annotate`: where in a function its samples fall, instruction by instruction, as
//! `perf annotate` and `pprof -list` show it: the Wasm instructions as `wasm-tools print`
//! prints them, each with its flat and cumulative value, between the source lines they were
//! compiled from, the hottest basic blocks marked.
//!
//! A profile wasmspy wrote gives each Wasm frame its module (a mapping, with the module's build
//! id) and the offset of its instruction in the module's bytes: the sampled instruction for a
//! leaf, the call for a caller. Given the module's bytes, that is all it takes.
//!
//! With the code each instruction became (`--native`): a CPU profile of code Cranelift or
//! Winch compiled keeps the machine code of its hottest functions with the samples taken at
//! each machine instruction (see [`crate::profile::MachineCode`]); under each instruction,
//! its machine instructions by address ([`machine`]). A profile of Pulley's bytecode labels
//! each sample with the opcode it fell on, and the opcodes before and after it in the
//! bytecode (see [`crate::profile::PULLEY_OP_LABEL`]); under each instruction, the opcodes its
//! samples fell on and their adjacent pairs, as `report --opcodes` tables them for the whole
//! profile.

mod blocks;
mod counts;
mod html;
mod listing;
mod machine;
mod text;

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use rustc_hash::FxHashMap;

pub use counts::instruction;
pub use counts::Value;
use counts::{count, Counts};
pub use html::page;
use listing::Bodies;
use machine::MachineListing;
pub use text::render;

use crate::profile::{MappingId, Profile, Sample, ValueType};
use crate::report::{opcode_values, percentage, scaled_label, OpcodeValues};
use crate::resolve::symbolize::ModuleSymbolizer;
use crate::shared::source_path::clean;
use crate::warning::Warning;

/// How many of a function's basic blocks are marked as hot, the hottest first.
const HOT_BLOCKS: usize = 3;

/// A module's code, for its functions to be listed: its names and source lines (from its name
/// section, DWARF or source map) and its function bodies.
pub struct ModuleCode {
    symbolizer: ModuleSymbolizer,
    bodies: Bodies,
}

impl ModuleCode {
    /// The code of the module `symbolizer` reads.
    pub fn new(symbolizer: ModuleSymbolizer) -> Result<Self> {
        let bodies = Bodies::of(symbolizer.wasm())?;
        Ok(ModuleCode { symbolizer, bodies })
    }

    /// What was found wrong with the module's names or debug info, once each.
    pub fn take_warnings(&mut self) -> Vec<Warning> {
        self.symbolizer.take_warnings()
    }
}

/// The code each instruction became, for `--native`: the machine code the profile keeps, or
/// else the Pulley opcodes its samples fell on.
#[derive(Default)]
struct NativeCode {
    machine: MachineListing,
    opcodes: HashMap<counts::Instruction, OpcodeValues>,
}

/// Which functions to annotate.
pub enum Selection<'a> {
    /// The `n` with the highest flat value (then cumulative).
    Hottest(usize),
    /// Those of these names (each a function's whole name, else a part of it), in the order
    /// of their values.
    Named(&'a [String]),
}

/// The functions annotated, hottest first.
pub struct Annotation {
    pub sample_type: ValueType,
    /// Whether the instructions' code is shown ([`Row::Native`]).
    pub native: bool,
    /// The sum of every sample's value (as absolute values), which percentages are of.
    pub total: i64,
    pub functions: Vec<AnnotatedFunction>,
}

/// A function, line by line.
pub struct AnnotatedFunction {
    pub name: String,
    /// The module's name, as the profile's mapping gives it.
    pub module: String,
    pub index: u32,
    pub value: Value,
    pub rows: Vec<Row>,
}

/// A source line of a listing.
pub struct SourceLine {
    pub file: String,
    pub line: u32,
    /// The function the line is in, where it was inlined into the one listed.
    pub inlined: Option<String>,
    /// The line's text, where it was found (filled in by the caller).
    pub text: String,
}

impl SourceLine {
    /// As both listings show it: `file:line (inlined: F)  text`.
    fn label(&self) -> String {
        let mut label = format!("{}:{}", clean(&self.file), self.line);
        if let Some(function) = &self.inlined {
            label.push_str(&format!(" (inlined: {function})"));
        }
        if !self.text.is_empty() {
            label.push_str("  ");
            label.push_str(&self.text);
        }
        label
    }
}

/// A row of a function's listing.
pub enum Row {
    /// The source line the instructions below were compiled from.
    Source(SourceLine),
    /// A hot basic block starts: its rank (1 for the hottest) and its share of the function's
    /// flat value.
    HotBlock { rank: usize, flat: i64 },
    /// An instruction (or the function's other printed lines: its opening, its locals).
    Code {
        offset: usize,
        text: String,
        /// `None` for a line that is no instruction.
        value: Option<Value>,
        /// The rank of the hot block it is in.
        hot: Option<usize>,
    },
    /// Under an instruction, code it became, with its flat value: each machine instruction
    /// (`offset:  mnemonic operands`, by address), or the opcodes of Pulley's bytecode its
    /// samples fell on and their adjacent pairs (`pair: a b`).
    Native { text: String, flat: i64 },
}

impl Row {
    /// A hot block's announcement, its flat value in `unit` and its share of `function_flat`.
    fn hot_block_label(rank: usize, flat: i64, function_flat: i64, unit: &str) -> String {
        format!(
            "hot block #{rank}: {} flat, {} of the function's",
            shown_value(flat, unit),
            percentage(flat, function_flat).trim_start()
        )
    }

    /// A code row's flat, cumulative and hot-block cells as both listings show them: empty for
    /// a line that is no instruction.
    fn code_cells(value: &Option<Value>, hot: &Option<usize>, unit: &str) -> [String; 3] {
        let (flat, cum) = match value {
            Some(v) => (shown_value(v.flat, unit), shown_value(v.cum, unit)),
            None => (String::new(), String::new()),
        };
        [flat, cum, hot.map(|r| format!("#{r}")).unwrap_or_default()]
    }
}

/// A value as the listings show it, in `unit` scaled as pprof scales it: `.` for none.
fn shown_value(value: i64, unit: &str) -> String {
    if value == 0 {
        ".".to_string()
    } else {
        scaled_label(value, unit, "minimum")
    }
}

/// Annotates `selection`'s functions of `profile`, by its sample type `index`, from the
/// modules' code in `modules` (a mapping left out: its functions too); with the code each
/// instruction became if `native`, which fails where the profile has none.
pub fn annotate(
    profile: &Profile,
    index: usize,
    modules: &mut FxHashMap<MappingId, ModuleCode>,
    selection: Selection<'_>,
    native: bool,
) -> Result<Annotation> {
    let function_of = |(mapping, address): counts::Instruction| {
        let code = modules.get(&mapping)?;
        Some(code.bodies.at(usize::try_from(address).ok()?)?.0)
    };
    let counts = count(profile, index, function_of);
    let mut native_code = NativeCode::default();
    if native {
        native_code.machine = MachineListing::new(profile, index)?;
        if native_code.machine.is_empty() {
            let leaf = |s: &Sample| {
                let frame = *profile.stacks[s.stack].first()?;
                instruction(profile, &profile.frames[frame])
            };
            native_code.opcodes = opcode_values(profile, index, leaf);
        }
        if native_code.machine.is_empty() && native_code.opcodes.is_empty() {
            bail!("the profile has no code of its instructions: --native shows the machine code (Cranelift's, Winch's) or Pulley's bytecode of a CPU profile that wasmspy's signal sampler recorded");
        }
    }
    let chosen = choose(profile, modules, &counts, selection)?;
    let mut by_module: HashMap<MappingId, Vec<u32>> = HashMap::new();
    for &(mapping, index) in &chosen {
        by_module.entry(mapping).or_default().push(index);
    }
    let mut listed = HashMap::new();
    for (mapping, indices) in by_module {
        let code = modules
            .get_mut(&mapping)
            .context("a chosen function's module")?;
        let ranges: Vec<_> = indices
            .iter()
            .map(|&i| {
                code.bodies
                    .of_function(i)
                    .context("a chosen function's body")
            })
            .collect::<Result<_>>()?;
        let printed = listing::print(code.symbolizer.wasm(), &code.bodies, &ranges)?;
        for ((index, range), lines) in indices.into_iter().zip(ranges).zip(printed) {
            let rows = rows(code, &counts, &native_code, mapping, index, range, lines)?;
            listed.insert((mapping, index), rows);
        }
    }
    let functions = chosen
        .into_iter()
        .map(|(mapping, index)| AnnotatedFunction {
            name: modules[&mapping].symbolizer.function_name(index).name,
            module: profile.mappings[mapping].file_name.clone(),
            index,
            value: counts
                .functions
                .get(&(mapping, index))
                .copied()
                .unwrap_or_default(),
            rows: listed.remove(&(mapping, index)).unwrap_or_default(),
        })
        .collect();
    Ok(Annotation {
        sample_type: profile.sample_types[index].clone(),
        native,
        total: counts.total,
        functions,
    })
}

/// The functions `selection` names, hottest first.
fn choose(
    profile: &Profile,
    modules: &FxHashMap<MappingId, ModuleCode>,
    counts: &Counts,
    selection: Selection<'_>,
) -> Result<Vec<(MappingId, u32)>> {
    let value = |f: &(MappingId, u32)| counts.functions.get(f).copied().unwrap_or_default();
    let mut chosen: Vec<(MappingId, u32)> = match selection {
        Selection::Hottest(n) => {
            let mut hot: Vec<_> = counts
                .functions
                .iter()
                .filter(|(_, v)| v.flat != 0 || v.cum != 0)
                .map(|(&f, _)| f)
                .collect();
            sort(&mut hot, value, profile);
            hot.truncate(n);
            return Ok(hot);
        }
        Selection::Named(names) => {
            let mut chosen = Vec::new();
            for name in names {
                let found = named(modules, name);
                if found.is_empty() {
                    bail!("no function of the profile's modules is named `{name}`");
                }
                chosen.extend(found);
            }
            chosen
        }
    };
    sort(&mut chosen, value, profile);
    chosen.dedup();
    Ok(chosen)
}

/// By flat value, then cumulative, then module and index: the same order every run.
fn sort(
    functions: &mut [(MappingId, u32)],
    value: impl Fn(&(MappingId, u32)) -> Value,
    profile: &Profile,
) {
    functions.sort_by(|a, b| {
        let (va, vb) = (value(a), value(b));
        (vb.flat.abs(), vb.cum.abs())
            .cmp(&(va.flat.abs(), va.cum.abs()))
            .then_with(|| {
                let name = |f: &(MappingId, u32)| &profile.mappings[f.0].file_name;
                (name(a), a.1).cmp(&(name(b), b.1))
            })
    });
}

/// The functions whose name (or name as written in the module) is `name`; else those whose
/// name has it in it.
fn named(modules: &FxHashMap<MappingId, ModuleCode>, name: &str) -> Vec<(MappingId, u32)> {
    let mut whole = Vec::new();
    let mut part = Vec::new();
    for (&mapping, code) in modules {
        for &(_, index) in &code.bodies.bodies {
            let f = code.symbolizer.function_name(index);
            if f.name == name || f.system_name == name {
                whole.push((mapping, index));
            } else if f.name.contains(name) {
                part.push((mapping, index));
            }
        }
    }
    if whole.is_empty() {
        part
    } else {
        whole
    }
}

/// A function's rows: its printed lines, each instruction with its values, the source lines
/// between, the hot blocks marked.
fn rows(
    code: &mut ModuleCode,
    counts: &Counts,
    native: &NativeCode,
    mapping: MappingId,
    index: u32,
    range: std::ops::Range<usize>,
    lines: Vec<listing::Line>,
) -> Result<Vec<Row>> {
    let wasm = code.symbolizer.wasm();
    let shape = blocks::shape(wasm, range)?;
    let value_at = |offset: usize| {
        counts
            .instructions
            .get(&(mapping, offset as u64))
            .copied()
            .unwrap_or_default()
    };
    // Each block's flat value; the hottest ranked.
    let mut block_flat = vec![0i64; shape.block_starts.len()];
    for &offset in &shape.instructions {
        block_flat[blocks::block_of(&shape.block_starts, offset)] += value_at(offset).flat;
    }
    let mut ranked: Vec<usize> = (0..block_flat.len())
        .filter(|&b| block_flat[b] != 0)
        .collect();
    ranked.sort_by_key(|&b| (std::cmp::Reverse(block_flat[b].abs()), b));
    ranked.truncate(HOT_BLOCKS);
    let rank_of = |block: usize| ranked.iter().position(|&b| b == block).map(|r| r + 1);

    let addresses: Vec<(u32, u32)> = shape
        .instructions
        .iter()
        .filter_map(|&o| Some((index, u32::try_from(o).ok()?)))
        .collect();
    code.symbolizer.symbolize(&addresses);
    let mut rows = Vec::with_capacity(lines.len() * 2);
    let mut last_source = None;
    for line in lines {
        let is_instruction = shape.instructions.binary_search(&line.offset).is_ok();
        if !is_instruction {
            rows.push(Row::Code {
                offset: line.offset,
                text: line.text,
                value: None,
                hot: None,
            });
            continue;
        }
        let frames = code
            .symbolizer
            .source_frames(index, u32::try_from(line.offset).unwrap_or(u32::MAX));
        if let Some(innermost) = frames.first().filter(|f| !f.file.is_empty()) {
            let source = (innermost.file.clone(), innermost.line);
            // Line 0: code of no line (the compiler's own); the next line is shown again.
            if source.1 != 0 && last_source.as_ref() != Some(&source) {
                let inlined = (frames.len() > 1).then(|| innermost.function.name.clone());
                rows.push(Row::Source(SourceLine {
                    file: source.0.clone(),
                    line: source.1,
                    inlined,
                    text: String::new(),
                }));
            }
            last_source = Some(source);
        }
        let block = blocks::block_of(&shape.block_starts, line.offset);
        let hot = rank_of(block);
        if let Some(rank) = hot {
            if shape.block_starts.get(block) == Some(&line.offset) {
                rows.push(Row::HotBlock {
                    rank,
                    flat: block_flat[block],
                });
            }
        }
        rows.push(Row::Code {
            offset: line.offset,
            text: line.text,
            value: Some(value_at(line.offset)),
            hot,
        });
        let at = line.offset as u64;
        rows.extend(native.machine.rows((mapping, index), at));
        if let Some(values) = native.opcodes.get(&(mapping, at)) {
            rows.extend(native_rows(values));
        }
    }
    Ok(rows)
}

/// The opcodes an instruction's samples fell on, then their adjacent pairs, each by flat
/// value, the highest first.
fn native_rows(values: &OpcodeValues) -> Vec<Row> {
    let sorted = |values: &HashMap<String, i64>| {
        let mut sorted: Vec<(String, i64)> = values.iter().map(|(k, &v)| (k.clone(), v)).collect();
        sorted.sort_by(|a, b| b.1.abs().cmp(&a.1.abs()).then_with(|| a.0.cmp(&b.0)));
        sorted
    };
    let ops = sorted(&values.ops).into_iter();
    let pairs = sorted(&values.pairs)
        .into_iter()
        .map(|(pair, v)| (format!("pair: {pair}"), v));
    ops.chain(pairs)
        .map(|(text, flat)| Row::Native { text, flat })
        .collect()
}
