//! An annotation as text, laid out as `pprof -list` lays out a function: a heading per
//! function with its flat and cumulative value and share of the total, then a row per line,
//! `.` for nothing; under an instruction, the code it became, each row `|`-marked with its
//! flat value, as `perf annotate` shows machine code.

use std::fmt::Write;

use super::{shown_value, Annotation, Row};
use crate::report::percentage;

/// `annotation` as text.
pub fn render(annotation: &Annotation) -> String {
    let unit = &annotation.sample_type.unit;
    let value = |v: i64| shown_value(v, unit);
    let mut out = String::new();
    for f in &annotation.functions {
        let _ = writeln!(
            out,
            "ROUTINE ======================== {} in {} (function {})",
            f.name, f.module, f.index
        );
        let _ = writeln!(
            out,
            "{:>10} {:>10} (flat, cum) {} of Total",
            value(f.value.flat),
            value(f.value.cum),
            percentage(f.value.cum, annotation.total).trim_start()
        );
        let _ = writeln!(
            out,
            "{:>10} {:>10} {:>3} {:>8}",
            "flat", "cum", "hot", "offset"
        );
        for row in &f.rows {
            match row {
                Row::Source(source) => {
                    let _ = writeln!(out, "{:36};; {}", "", source.label());
                }
                Row::HotBlock { rank, flat } => {
                    let label = Row::hot_block_label(*rank, *flat, f.value.flat, unit);
                    let _ = writeln!(out, "{:36};; {label}", "");
                }
                Row::Code {
                    offset,
                    text,
                    value: v,
                    hot,
                } => {
                    let [flat, cum, hot] = Row::code_cells(v, hot, unit);
                    let _ = writeln!(out, "{flat:>10} {cum:>10} {hot:>3} {offset:>#8x}  {text}");
                }
                Row::Native { text, flat } => {
                    let _ = writeln!(out, "{:>10} {:25}|   {text}", value(*flat), "");
                }
            }
        }
        out.push('\n');
    }
    out
}
