//! The machine code a CPU profile keeps (see [`crate::profile::MachineCode`]): the samples
//! taken at each machine instruction of a Wasm function, added up as the samples of each
//! stack are (apart from them: a profile's samples stay one per labeled stack), and the code
//! of the hottest functions, within a budget.

use rustc_hash::FxHashMap;

use super::timeline::Tally;
use crate::profile::{MachineCode, MappingId, Table};
use crate::resolve::Resolver;
use crate::shared::ModuleId;

/// The most machine code a profile keeps, in bytes: a profile stays small next to the
/// modules it names, and a function listed by `annotate` is one of the hottest.
const BUDGET: usize = 4 << 20;

/// A machine instruction: its function (module, function index) and its offset in the
/// function's code.
type CodeAt = (ModuleId, u32, u32);

/// A function's samples (their count) and its sampled instructions' values.
type FunctionSamples = (u64, Vec<(u32, Vec<i64>)>);

/// What the samples taken at each machine instruction add up to.
#[derive(Clone, Debug, Default)]
pub struct CodeTallies {
    ids: FxHashMap<CodeAt, usize>,
    at: Vec<CodeAt>,
    totals: Vec<Tally>,
}

impl CodeTallies {
    /// Adds a sample taken at machine instruction `at`.
    pub fn add(&mut self, at: CodeAt, tally: Tally) {
        let id = *self.ids.entry(at).or_insert_with(|| {
            self.at.push(at);
            self.totals.push(Tally::default());
            self.at.len() - 1
        });
        self.totals[id].add(tally);
    }

    /// What each machine instruction gained since `earlier`, a copy taken before.
    fn since<'a>(&'a self, earlier: &'a CodeTallies) -> impl Iterator<Item = (CodeAt, Tally)> + 'a {
        self.at.iter().zip(&self.totals).filter_map(|(&at, t)| {
            let before = earlier
                .ids
                .get(&at)
                .map_or_else(Tally::default, |&i| earlier.totals[i]);
            let gained = t.since(before);
            (gained.samples > 0).then_some((at, gained))
        })
    }
}

/// The code of the hottest functions samples were taken in since `earlier`, with each
/// instruction's values (`values` makes a tally the profile's values), up to [`BUDGET`].
pub(super) fn kept_code(
    tallies: &CodeTallies,
    earlier: &CodeTallies,
    values: impl Fn(Tally) -> Vec<i64>,
    mappings: &Table<ModuleId, MappingId>,
    resolver: &Resolver,
) -> Vec<MachineCode> {
    let mut functions: FxHashMap<(ModuleId, u32), FunctionSamples> = FxHashMap::default();
    for ((module, func_index, offset), tally) in tallies.since(earlier) {
        let (heat, sampled) = functions.entry((module, func_index)).or_default();
        *heat += tally.samples;
        sampled.push((offset, values(tally)));
    }
    let mut hottest: Vec<_> = functions.into_iter().collect();
    hottest.sort_unstable_by_key(|&(function, (heat, _))| (std::cmp::Reverse(heat), function));
    let mut kept = Vec::new();
    let mut size = 0;
    for ((module, func_index), (_, mut sampled)) in hottest {
        let Some(code) = resolver.machine_code(module, func_index) else {
            continue;
        };
        if size + code.bytes.len() > BUDGET {
            continue;
        }
        size += code.bytes.len();
        sampled.sort_unstable_by_key(|&(offset, _)| offset);
        kept.push(MachineCode {
            mapping: mappings[module],
            func_index,
            arch: std::env::consts::ARCH.to_string(),
            bytes: code.bytes,
            instructions: code.instructions,
            sampled,
        });
    }
    kept
}
