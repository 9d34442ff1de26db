//! The terminal report: a profile's top functions (or source lines) by one sample type, with
//! the numbers, units, rounding, dropped-node cutoff and order of `go tool pprof -top`, and a
//! last column of where each function is.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;

use crate::profile::{Profile, StackId, Table, ValueType};
use crate::shared::source_path::clean;

/// pprof's `-nodefraction`: nodes whose cumulative value is under this share are dropped.
const NODE_FRACTION: f64 = 0.005;

/// One row: a function, or with `lines` a function's source line.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Row {
    /// As pprof prints it: the function's name, with `file:line` when by line.
    pub name: String,
    /// `(inline)` when every call reaching it was inlined, `(partial-inline)` when some were.
    pub inline: &'static str,
    /// Where the function starts (`file:line`), when by function and it is known.
    pub location: String,
    /// The row's file and line, when by line and the line is known.
    pub source: Option<(String, u32)>,
    /// The text of that line, shown after the row where filled in (`wasmspy report --lines`
    /// reads it from the source file, or from the copy its source map carried).
    pub text: String,
    /// The value of the samples it is the leaf of.
    pub flat: i64,
    /// The value of the samples it is anywhere in (counted once per sample).
    pub cum: i64,
}

/// A profile's top table ([`top`]), as `go tool pprof -top` prints it ([`Top::render`]).
#[non_exhaustive]
pub struct Top {
    /// The sample type of the values.
    pub sample_type: ValueType,
    /// The sum of every sample's value (as absolute values), which percentages are of.
    pub total: i64,
    /// Rows kept, in pprof's order: flat value, then name, then cumulative value.
    pub rows: Vec<Row>,
    /// Rows left out for a cumulative value under `cutoff`.
    pub dropped: usize,
    /// The cumulative value rows are dropped under: pprof's `-nodefraction` (0.5%) of the
    /// flat values' sum.
    pub cutoff: i64,
}

#[derive(Default)]
struct Node {
    flat: i64,
    cum: i64,
    inline_in: bool,
    call_in: bool,
    location: String,
    source: Option<(String, u32)>,
}

/// Each function's (or with `lines` each line's) flat and cumulative value of `profile`'s
/// sample type `index`, as [`top`] counts them, with the sum of every sample's absolute value;
/// nothing dropped.
#[cfg(feature = "cli")]
pub fn values(profile: &Profile, index: usize, lines: bool) -> (HashMap<String, (i64, i64)>, i64) {
    let (_, nodes, total) = count(profile, index, lines);
    let values = nodes
        .into_iter()
        .map(|(name, n)| (name, (n.flat, n.cum)))
        .collect();
    (values, total)
}

/// Each stack's nodes, root first, with whether each is the outermost line of its frame;
/// each node's values; the sum of every sample's absolute value.
type Counted = (
    Table<StackId, Vec<(String, bool)>>,
    HashMap<String, Node>,
    i64,
);

/// The node a line of a frame counts to: its function, or with `lines` its function and line.
fn node_name(profile: &Profile, line: &crate::profile::Line, lines: bool) -> String {
    let f = &profile.functions[line.function];
    let name = shown_name(f);
    match (lines, line.line, f.file.is_empty()) {
        (false, _, _) => name,
        (true, 0, true) => name,
        (true, 0, false) => format!("{name} {}", clean(&f.file)),
        (true, n, _) => format!("{name} {}:{n}", clean(&f.file)),
    }
}

/// A function's name as `go tool pprof` shows it: a name the profile gives as its own system
/// name (a host function named from DWARF, `{async_fn#0}<T>`) pprof takes for one it could not
/// demangle, and, where it looks like demangled C++ (or Rust), drops its parameters and then
/// its template arguments, as its default (`simple`) demangling does. Two such functions that
/// differ by their arguments alone are one node.
fn shown_name(f: &crate::profile::Function) -> String {
    let looks_demangled = !f.name.contains(".<")
        && !f.name.contains("]).")
        && (f.name.contains(['<', '>', '[', ']']) || f.name.contains("::"));
    if f.name != f.system_name || !looks_demangled {
        return f.name.clone();
    }
    without_matching(&without_matching(&f.name, '(', ')'), '<', '>')
}

/// `name` without its outermost `open`…`close` groups, as pprof removes them: up to a close
/// without its open, and not a group left open.
fn without_matching(name: &str, open: char, close: char) -> String {
    let mut kept = String::with_capacity(name.len());
    let mut depth = 0usize;
    let mut group_start = 0;
    for (i, c) in name.char_indices() {
        if c == open {
            if depth == 0 {
                group_start = i;
            }
            depth += 1;
        } else if c == close && depth == 0 {
            kept.push_str(&name[i..]);
            return kept;
        } else if c == close {
            depth -= 1;
        } else if depth == 0 {
            kept.push(c);
        }
    }
    if depth > 0 {
        kept.push_str(&name[group_start..]);
    }
    kept
}

fn count(profile: &Profile, index: usize, lines: bool) -> Counted {
    let key = |line: &crate::profile::Line| node_name(profile, line, lines);
    // Each stack's nodes, root first, with whether each is the outermost line of its frame
    // (called) rather than inlined into the one before it.
    let stack_nodes: Table<StackId, Vec<(String, bool)>> = profile
        .stacks
        .iter()
        .map(|stack| {
            stack
                .iter()
                .rev()
                .flat_map(|&f| {
                    let lines = &profile.frames[f].lines;
                    lines
                        .iter()
                        .enumerate()
                        .rev()
                        .map(move |(i, l)| (l, i == lines.len() - 1))
                })
                .map(|(l, outermost)| (key(l), outermost))
                .collect()
        })
        .collect();
    let mut nodes: HashMap<String, Node> = HashMap::new();
    let mut total = 0i64;
    for sample in &profile.samples {
        let value = sample.values[index];
        if value == 0 {
            continue;
        }
        total += value.abs();
        let stack = &stack_nodes[sample.stack];
        let mut seen = HashSet::new();
        for (name, _) in stack {
            if seen.insert(name.as_str()) {
                nodes.entry(name.clone()).or_default().cum += value;
            }
        }
        if let Some((leaf, _)) = stack.last() {
            nodes.entry(leaf.clone()).or_default().flat += value;
        }
    }
    (stack_nodes, nodes, total)
}

/// The top table of `profile` by its sample type `index`.
///
/// # Examples
///
/// ```
/// use wasmspy::report::top;
///
/// let profile = wasmspy::export::read(b"main;work 3\nmain;rest 1\n").unwrap();
/// let table = top(&profile, 0, false);
/// assert_eq!(table.total, 4);
/// let rows: Vec<(&str, i64, i64)> =
///     table.rows.iter().map(|r| (r.name.as_str(), r.flat, r.cum)).collect();
/// assert_eq!(rows, [("work", 3, 3), ("rest", 1, 1), ("main", 0, 4)]);
/// let text = table.render(None);
/// assert!(text.find("work").unwrap() < text.find("rest").unwrap());
/// ```
pub fn top(profile: &Profile, index: usize, lines: bool) -> Top {
    let (stack_nodes, mut nodes, total) = count(profile, index, lines);
    let flat_sum: i64 = nodes.values().map(|n| n.flat).sum();
    let cutoff = ((flat_sum as f64 * NODE_FRACTION) as i64).abs();
    let kept = |n: &Node| n.cum.abs() >= cutoff;
    let dropped = nodes.values().filter(|n| !kept(n)).count();
    // pprof marks a row inlined from the calls reaching it over the rows kept.
    let kept_names: HashSet<String> = nodes
        .iter()
        .filter(|(_, n)| kept(n))
        .map(|(k, _)| k.clone())
        .collect();
    for sample in &profile.samples {
        if sample.values[index] == 0 {
            continue;
        }
        let mut parent: Option<&str> = None;
        for (name, outermost) in &stack_nodes[sample.stack] {
            if !kept_names.contains(name) {
                continue;
            }
            if parent.is_some_and(|p| p != name) {
                let node = nodes
                    .get_mut(name.as_str())
                    .expect("every node was counted");
                if *outermost {
                    node.call_in = true;
                } else {
                    node.inline_in = true;
                }
            }
            parent = Some(name);
        }
    }
    if lines {
        for line in profile.frames.iter().flat_map(|f| &f.lines) {
            let f = &profile.functions[line.function];
            if line.line == 0 || f.file.is_empty() {
                continue;
            }
            if let Some(node) = nodes.get_mut(&node_name(profile, line, true)) {
                node.source = Some((clean(&f.file), line.line));
            }
        }
    } else {
        for line in profile.frames.iter().flat_map(|f| &f.lines) {
            let f = &profile.functions[line.function];
            if let Some(node) = nodes.get_mut(shown_name(f).as_str()) {
                if node.location.is_empty() && !f.file.is_empty() {
                    node.location = match f.start_line {
                        0 => f.file.clone(),
                        n => format!("{}:{n}", f.file),
                    };
                }
            }
        }
    }
    let mut rows: Vec<Row> = nodes
        .into_iter()
        .filter(|(_, n)| kept(n))
        .map(|(name, n)| Row {
            name,
            inline: match (n.inline_in, n.call_in) {
                (true, true) => "(partial-inline)",
                (true, false) => "(inline)",
                _ => "",
            },
            location: n.location,
            source: n.source,
            text: String::new(),
            flat: n.flat,
            cum: n.cum,
        })
        .collect();
    rows.sort_by(|a, b| {
        b.flat
            .abs()
            .cmp(&a.flat.abs())
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| b.cum.abs().cmp(&a.cum.abs()))
    });
    Top {
        sample_type: profile.sample_types[index].clone(),
        total,
        rows,
        dropped,
        cutoff,
    }
}

impl Top {
    /// The table as text, its first `limit` rows (all without one).
    pub fn render(&self, limit: Option<usize>) -> String {
        let unit = self.output_unit();
        let value = |v: i64| scaled_label(v, &self.sample_type.unit, &unit);
        let shown: i64 = self.rows.iter().map(|r| r.flat).sum();
        let mut out = String::new();
        let _ = writeln!(out, "Type: {}", self.sample_type.kind);
        let _ = writeln!(
            out,
            "Showing nodes accounting for {}, {} of {} total",
            value(shown),
            percentage(shown, self.total).trim_start(),
            value(self.total)
        );
        if self.dropped > 0 {
            // As Go's pprof: "1 node", "2 nodes".
            let _ = writeln!(
                out,
                "Dropped {} node{} (cum <= {})",
                self.dropped,
                if self.dropped == 1 { "" } else { "s" },
                value(self.cutoff)
            );
        }
        let rows = &self.rows[..limit.unwrap_or(self.rows.len()).min(self.rows.len())];
        if rows.len() < self.rows.len() {
            let _ = writeln!(
                out,
                "Showing top {} nodes out of {}",
                rows.len(),
                self.rows.len()
            );
        }
        let _ = writeln!(
            out,
            "{:>10} {:>5}% {:>5}% {:>10} {:>5}%",
            "flat", "flat", "sum", "cum", "cum"
        );
        let mut sum = 0;
        for row in rows {
            sum += row.flat;
            let mut name = row.name.clone();
            for extra in [row.inline, row.location.as_str()] {
                if !extra.is_empty() {
                    name.push(' ');
                    name.push_str(extra);
                }
            }
            if !row.text.is_empty() {
                name.push_str("  | ");
                name.push_str(&row.text);
            }
            let _ = writeln!(
                out,
                "{:>10} {} {} {:>10} {}  {name}",
                value(row.flat),
                percentage(row.flat, self.total),
                percentage(sum, self.total),
                value(row.cum),
                percentage(row.cum, self.total),
            );
        }
        out
    }

    /// pprof's "minimum" output unit: the one that suits the smallest value shown, or a
    /// larger one when that is a hundredth of the total or less.
    fn output_unit(&self) -> String {
        let unit = &self.sample_type.unit;
        let min = self
            .rows
            .iter()
            .map(|r| {
                if r.flat != 0 {
                    r.flat.abs()
                } else {
                    r.cum.abs()
                }
            })
            .filter(|&v| v > 0)
            .min()
            .unwrap_or(self.total);
        let (_, min_unit) = scale(min, unit, "minimum");
        let (_, max_unit) = scale(self.total, unit, "minimum");
        let chosen = if min_unit != max_unit && min.saturating_mul(100) < self.total {
            scale(min.saturating_mul(100), unit, "minimum").1
        } else {
            min_unit
        };
        if chosen.is_empty() {
            unit.clone()
        } else {
            chosen
        }
    }
}

/// pprof's unit families: (canonical name, aliases, factor to the family's base unit).
type Family = [(&'static str, &'static [&'static str], f64)];

const BYTES: &Family = &[
    ("B", &["b", "byte"], 1.0),
    ("kB", &["kb", "kbyte", "kilobyte"], 1024.0),
    ("MB", &["mb", "mbyte", "megabyte"], 1048576.0),
    ("GB", &["gb", "gbyte", "gigabyte"], 1073741824.0),
    ("TB", &["tb", "tbyte", "terabyte"], 1099511627776.0),
    ("PB", &["pb", "pbyte", "petabyte"], 1125899906842624.0),
];
const TIME: &Family = &[
    ("ns", &["ns", "nanosecond"], 1.0),
    ("us", &["μs", "us", "microsecond"], 1e3),
    ("ms", &["ms", "millisecond"], 1e6),
    ("s", &["s", "sec", "second"], 1e9),
    ("hrs", &["hour", "hr"], 3.6e12),
];
/// Each family with its default unit's position.
const FAMILIES: [(&Family, usize); 2] = [(BYTES, 0), (TIME, 3)];

/// pprof's unit sniffing: lower case, a plural `s` dropped.
fn find(family: &Family, unit: &str) -> Option<(&'static str, f64)> {
    let lower = unit.to_lowercase();
    let unit = match lower.strip_suffix('s') {
        Some(singular) if lower.chars().count() > 2 => singular,
        _ => &lower,
    };
    family
        .iter()
        .find(|(_, aliases, _)| aliases.contains(&unit))
        .map(|&(name, _, factor)| (name, factor))
}

/// `value` in `from` units as a number of `to` units (`minimum`: the largest that keeps it at
/// least 1), and that unit's name; no name for units pprof does not know (counts).
fn scale(value: i64, from: &str, to: &str) -> (f64, String) {
    if value < 0 {
        let (v, u) = scale(value.saturating_neg(), from, to);
        return (-v, u);
    }
    for (family, default) in FAMILIES {
        let Some((_, factor)) = find(family, from) else {
            continue;
        };
        let base = value as f64 * factor;
        let (name, factor) = if to == "minimum" || to == "auto" {
            family
                .iter()
                .rev()
                .find(|&&(_, _, f)| base / f >= 1.0)
                .map(|&(n, _, f)| (n, f))
                .unwrap_or((family[default].0, family[default].2))
        } else {
            find(family, to).unwrap_or((family[default].0, family[default].2))
        };
        return (base / factor, name.to_string());
    }
    match to {
        "count" | "sample" | "unit" | "minimum" | "auto" => (value as f64, String::new()),
        _ => (value as f64, to.to_string()),
    }
}

/// pprof's value label: two decimals, `.00` dropped.
pub(crate) fn scaled_label(value: i64, from: &str, to: &str) -> String {
    let (v, unit) = scale(value, from, to);
    let text = format!("{v:.2}");
    let text = text.strip_suffix(".00").unwrap_or(&text);
    if text == "0" || text == "-0" {
        return "0".into();
    }
    format!("{text}{unit}")
}

/// pprof's percentage: `  100%`, two decimals from 1 %, two significant digits (Go's `%.2g`)
/// below.
pub(crate) fn percentage(value: i64, total: i64) -> String {
    let ratio = if total != 0 {
        (value as f64 / total as f64).abs() * 100.0
    } else {
        0.0
    };
    if (99.95..=100.05).contains(&ratio) {
        "  100%".into()
    } else if ratio >= 1.0 {
        format!("{ratio:5.2}%")
    } else {
        format!("{:>5}%", go_g2(ratio))
    }
}

/// Go's `%.2g` of a number in [0, 1).
fn go_g2(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    // Two significant digits, trailing zeros dropped: Go's digits and decimal point.
    let e = format!("{x:.1e}");
    let (mantissa, exponent) = e.split_once('e').unwrap_or((&e, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits = mantissa.replace('.', "");
    let digits = digits.trim_end_matches('0');
    let nd = digits.len().max(1) as i32;
    if exponent < -4 {
        let mantissa = match digits.len() {
            0 | 1 => digits.to_string(),
            _ => format!("{}.{}", &digits[..1], &digits[1..]),
        };
        return format!("{mantissa}e-{:02}", -exponent);
    }
    let dp = exponent + 1;
    let decimals = (nd - dp).max(0) as usize;
    format!("{x:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The expected strings are what Go 1.27 prints for the same numbers.
    #[test]
    fn numbers_read_as_pprof_prints_them() {
        let cases = [
            (0.5, "0.5"),
            (0.05, "0.05"),
            (0.123, "0.12"),
            (0.0123, "0.012"),
            (0.00001234, "1.2e-05"),
            (0.00001, "1e-05"),
            (0.995, "0.99"),
            (0.996, "1"),
        ];
        for (x, go) in cases {
            assert_eq!(go_g2(x), go, "{x}");
        }
        assert_eq!(percentage(1, 3), "33.33%");
        assert_eq!(percentage(3, 3), "  100%");
        assert_eq!(percentage(1, 200), "  0.5%");
        assert_eq!(scaled_label(1_500_000_000, "nanoseconds", "s"), "1.50s");
        assert_eq!(scaled_label(10_000_000, "nanoseconds", "ms"), "10ms");
        assert_eq!(scaled_label(66100, "bytes", "kB"), "64.55kB");
        assert_eq!(scaled_label(2047, "count", "count"), "2047");
        assert_eq!(scaled_label(0, "nanoseconds", "ms"), "0");
        assert_eq!(scale(3_000_000, "nanoseconds", "minimum").1, "ms");
    }

    /// As `go tool pprof` shows the functions of a profile written with these names (checked
    /// against Go 1.27 on wasmspy's own profiles, whose host frames DWARF names).
    #[test]
    fn names_read_as_pprof_shows_them() {
        let function = |name: &str, system_name: &str| crate::profile::Function {
            name: name.into(),
            system_name: system_name.into(),
            file: String::new(),
            start_line: 0,
        };
        let same = |name: &str| shown_name(&function(name, name));
        assert_eq!(same("{async_fn#0}<&mut Store<Host>>"), "{async_fn#0}");
        assert_eq!(same("call_once<fn(), ()>"), "call_once");
        assert_eq!(same("a<b>c<d"), "ac<d");
        assert_eq!(same("f(int) const>x"), "f const>x");
        assert_eq!(same("hot_function"), "hot_function");
        assert_eq!(same("java.Class.<init>"), "java.Class.<init>");
        let demangled = "<core::pin::Pin<P> as Future>::poll";
        assert_eq!(shown_name(&function(demangled, "_RNvXs_poll")), demangled);
    }
}
