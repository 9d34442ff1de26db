//! Two profiles compared, for CI: each function's (or line's) flat and cumulative values before
//! and after, the changes that matter most first, totals first of all; a verdict against a
//! limit; a differential flame graph.
//!
//! Profiles of counted work (instructions) are compared as they are. Profiles of time (CPU or
//! wall time, samples) are normalised: the new one is scaled to the base's total, since two
//! runs of one program take different times on a loaded machine, and what a timed profile can
//! say is where the time went.

use std::collections::HashMap;
use std::fmt::Write;
use std::io;

use anyhow::{Context, Result};
use inferno::{differential, flamegraph};

use crate::export::folded;
use crate::profile::{Id, Profile, ValueType};
use crate::report::values;

/// Functions under this share of the base's total are judged by their change against that
/// total, not against their own base value (which is noise, or nothing).
const SMALL_SHARE: f64 = 0.01;

/// A function's (or line's) values in both profiles, the new one's normalised where the
/// comparison is.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub name: String,
    pub base_flat: f64,
    pub new_flat: f64,
    pub base_cum: f64,
    pub new_cum: f64,
}

impl Change {
    fn flat_delta(&self) -> f64 {
        self.new_flat - self.base_flat
    }

    fn cum_delta(&self) -> f64 {
        self.new_cum - self.base_cum
    }
}

/// Two profiles of one sample type compared.
pub struct Comparison {
    pub sample_type: ValueType,
    /// Whether the new profile was scaled to the base's total (a profile of time).
    pub normalised: bool,
    pub base_total: f64,
    pub new_total: f64,
    /// The new total before it was scaled.
    pub new_total_measured: f64,
    /// Largest change of flat value first, then of cumulative value.
    pub changes: Vec<Change>,
}

/// Whether values of `kind` count work done (compared as they are) rather than time.
fn counts_work(kind: &ValueType) -> bool {
    kind.kind == "instructions"
}

/// `base` and `new` compared by their sample types `base_index` and `new_index` (the same
/// kind), by function or with `lines` by source line.
pub fn compare(
    base: &Profile,
    base_index: usize,
    new: &Profile,
    new_index: usize,
    lines: bool,
) -> Comparison {
    let sample_type = base.sample_types[base_index].clone();
    let (base_values, base_total) = values(base, base_index, lines);
    let (new_values, new_total) = values(new, new_index, lines);
    let normalised = !counts_work(&sample_type);
    let scale = match (normalised, new_total) {
        (true, 1..) => base_total as f64 / new_total as f64,
        _ => 1.0,
    };
    let mut names: Vec<&String> = base_values.keys().chain(new_values.keys()).collect();
    names.sort();
    names.dedup();
    let of = |values: &HashMap<String, (i64, i64)>, name: &str| {
        values.get(name).copied().unwrap_or_default()
    };
    let mut changes: Vec<Change> = names
        .into_iter()
        .map(|name| {
            let (base_flat, base_cum) = of(&base_values, name);
            let (new_flat, new_cum) = of(&new_values, name);
            Change {
                name: name.clone(),
                base_flat: base_flat as f64,
                new_flat: new_flat as f64 * scale,
                base_cum: base_cum as f64,
                new_cum: new_cum as f64 * scale,
            }
        })
        .collect();
    // As pprof's -top orders by flat value: the code whose own work changed most first, then
    // the callers through which it was reached.
    changes.sort_by(|a, b| {
        (b.flat_delta().abs().total_cmp(&a.flat_delta().abs()))
            .then_with(|| b.cum_delta().abs().total_cmp(&a.cum_delta().abs()))
            .then_with(|| a.name.cmp(&b.name))
    });
    Comparison {
        sample_type,
        normalised,
        base_total: base_total as f64,
        new_total: new_total as f64 * scale,
        new_total_measured: new_total as f64,
        changes,
    }
}

/// What a limit says of a comparison: the line a CI log shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub failed: bool,
    pub line: String,
}

impl Comparison {
    /// How much `change` grew, in percent: of its base value, or, for a function under
    /// [`SMALL_SHARE`] of the base's total (or new), of that total.
    fn growth(&self, change: &Change) -> f64 {
        let base = if change.base_cum >= SMALL_SHARE * self.base_total {
            change.base_cum
        } else {
            self.base_total
        };
        match base {
            0.0 => 0.0,
            base => 100.0 * change.cum_delta() / base,
        }
    }

    fn total_growth(&self) -> f64 {
        match self.base_total {
            0.0 => 0.0,
            base => 100.0 * (self.new_total - base) / base,
        }
    }

    /// The verdict against `total` (percent the new total may exceed the base's by) and
    /// `function` (percent any function's cumulative value may grow by); passing without
    /// either.
    pub fn verdict(&self, total: Option<f64>, function: Option<f64>) -> Verdict {
        let kind = &self.sample_type.kind;
        if let Some(limit) = total {
            let growth = self.total_growth();
            if growth > limit {
                return Verdict {
                    failed: true,
                    line: format!(
                        "FAIL: total {kind} grew {growth:+.2} % (limit {limit} %): {} → {}",
                        self.base_total, self.new_total
                    ),
                };
            }
        }
        if let Some(limit) = function {
            let worst = self
                .changes
                .iter()
                .map(|c| (c, self.growth(c)))
                .max_by(|a, b| a.1.total_cmp(&b.1));
            if let Some((change, growth)) = worst.filter(|&(_, g)| g > limit) {
                return Verdict {
                    failed: true,
                    line: format!(
                        "FAIL: {} grew {growth:+.2} % (limit {limit} % per function): {} → {} {kind}",
                        change.name,
                        round(change.base_cum),
                        round(change.new_cum)
                    ),
                };
            }
        }
        let limits: Vec<String> = [("total", total), ("per function", function)]
            .into_iter()
            .filter_map(|(what, limit)| Some(format!("{what} {}", limit?)))
            .collect();
        Verdict {
            failed: false,
            line: match limits.is_empty() {
                true => format!("total {kind} {:+.2} %", self.total_growth()),
                false => format!(
                    "ok: total {kind} {:+.2} % (limits, in %: {})",
                    self.total_growth(),
                    limits.join(", ")
                ),
            },
        }
    }

    /// The table: totals, then the `limit` largest changes.
    pub fn render(&self, limit: usize) -> String {
        let mut out = String::new();
        let unit = &self.sample_type.unit;
        let _ = writeln!(out, "Type: {} ({unit})", self.sample_type.kind);
        if self.normalised {
            let _ = writeln!(
                out,
                "Profiles of time are compared by share: NEW (total {}) is scaled to BASE's total.",
                round(self.new_total_measured)
            );
        }
        let _ = writeln!(
            out,
            "Total: {} → {} ({:+} {:+.2}%)",
            round(self.base_total),
            round(self.new_total),
            round(self.new_total - self.base_total),
            self.total_growth()
        );
        let _ = writeln!(
            out,
            "{:>14} {:>14} {:>14} {:>8} {:>14} {:>14} {:>8}  name",
            "flat base", "flat new", "flat Δ", "flat Δ%", "cum base", "cum new", "cum Δ%"
        );
        for c in self.changes.iter().take(limit) {
            let _ = writeln!(
                out,
                "{:>14} {:>14} {:>+14} {:>8} {:>14} {:>14} {:>8}  {}",
                round(c.base_flat),
                round(c.new_flat),
                round(c.flat_delta()),
                percent(c.flat_delta(), c.base_flat),
                round(c.base_cum),
                round(c.new_cum),
                percent(c.cum_delta(), c.base_cum),
                c.name
            );
        }
        if self.changes.len() > limit {
            let _ = writeln!(out, "({} more)", self.changes.len() - limit);
        }
        out
    }
}

fn round(value: f64) -> i64 {
    value.round() as i64
}

/// A change in percent of `base`, `new` where there was none.
fn percent(delta: f64, base: f64) -> String {
    match (base, delta) {
        (0.0, 0.0) => "0".into(),
        (0.0, _) => "new".into(),
        _ => format!("{:+.1}", 100.0 * delta / base),
    }
}

/// A differential flame graph: NEW's stacks, each coloured by how it changed from BASE (red:
/// grew, blue: shrank), as inferno draws them; of time, the base scaled to the new total.
pub fn write_flamegraph(
    base: &Profile,
    base_index: usize,
    new: &Profile,
    new_index: usize,
    out: &mut dyn io::Write,
) -> Result<()> {
    let folded_of = |profile: &Profile, index: usize| -> String {
        folded::stacks(profile, index)
            .into_iter()
            .filter(|&(_, value)| value > 0)
            .map(|(stack, value)| format!("{stack} {value}\n"))
            .collect()
    };
    let kind = &base.sample_types[base_index];
    let mut lines = Vec::new();
    let options = differential::Options {
        normalize: !counts_work(kind),
        strip_hex: false,
    };
    differential::from_readers(
        options,
        folded_of(base, base_index).as_bytes(),
        folded_of(new, new_index).as_bytes(),
        &mut lines,
    )
    .context("cannot compare the stacks")?;
    let lines = String::from_utf8(lines).context("the stacks are not text")?;
    let mut options = flamegraph::Options::default();
    options.title = format!("{}: NEW against BASE", kind.kind);
    options.subtitle = Some("red: grew, blue: shrank (the colour's depth: by how much)".into());
    options.count_name = kind.unit.clone();
    options.deterministic = true;
    flamegraph::from_lines(&mut options, lines.lines(), out).context("cannot draw the flame graph")
}

/// One profile of the compared sample type holding NEW's samples and BASE's negated (of time,
/// scaled to NEW's total first), which pprof shows as the difference, as `go tool pprof
/// -diff_base=BASE NEW` does.
pub fn negated_base(base: &Profile, base_index: usize, new: &Profile, new_index: usize) -> Profile {
    let kind = base.sample_types[base_index].clone();
    let (base_total, new_total) = (base.total(base_index), new.total(new_index));
    let scale = match (counts_work(&kind), base_total) {
        (false, 1..) => new_total as f64 / base_total as f64,
        _ => 1.0,
    };
    let mut out = new.clone();
    out.sample_types = vec![kind];
    out.default_sample_type = 0;
    for sample in &mut out.samples {
        sample.values = vec![sample.values[new_index]];
    }
    let (mappings, functions) = (out.mappings.len(), out.functions.len());
    let (frames, stacks) = (out.frames.len(), out.stacks.len());
    for mapping in base.mappings.iter() {
        out.mappings.push(mapping.clone());
    }
    for function in base.functions.iter() {
        out.functions.push(function.clone());
    }
    for frame in base.frames.iter() {
        let mut frame = frame.clone();
        frame.mapping = frame.mapping.map(|m| Id::from_index(mappings + m.index()));
        for line in &mut frame.lines {
            line.function = Id::from_index(functions + line.function.index());
        }
        out.frames.push(frame);
    }
    for stack in base.stacks.iter() {
        let stack = stack.iter().map(|f| Id::from_index(frames + f.index()));
        out.stacks.push(stack.collect());
    }
    for sample in &base.samples {
        let value = -(sample.values[base_index] as f64 * scale).round() as i64;
        if value == 0 {
            continue;
        }
        let mut sample = sample.clone();
        sample.stack = Id::from_index(stacks + sample.stack.index());
        sample.values = vec![value];
        out.samples.push(sample);
    }
    out.comments
        .push("a difference: the base's samples are negated".into());
    out
}
