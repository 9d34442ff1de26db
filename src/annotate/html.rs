//! An annotation as one self-contained HTML page (`annotate -o FILE.html`): a list of the
//! functions, then each function's table with a column of its source lines and one of its
//! Wasm instructions (and, with `--native`, one of the code each became, a row each), every
//! instruction's row coloured by its share of the function's hottest row.

use std::fmt::Write;

use super::{shown_value, AnnotatedFunction, Annotation, Row};
use crate::report::percentage;

/// `annotation` of the profile `title` names, as a page.
pub fn page(annotation: &Annotation, title: &str) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\">\n<title>wasmspy annotate: {}</title>\n<style>{STYLE}</style></head>\n<body>\n<nav><h1>{}</h1><p>{} of {} in total</p><ol id=\"functions\">\n",
        escape(title),
        escape(title),
        escape(&annotation.sample_type.kind),
        escape(&shown_value(annotation.total, &annotation.sample_type.unit))
    );
    for (i, f) in annotation.functions.iter().enumerate() {
        let _ = writeln!(
            out,
            "<li><a href=\"#f{i}\">{}</a> <span class=\"module\">{}</span> <span class=\"share\">{}</span></li>",
            escape(&f.name),
            escape(&f.module),
            percentage(f.value.flat, annotation.total).trim()
        );
    }
    out.push_str("</ol></nav>\n<main>\n");
    for (i, f) in annotation.functions.iter().enumerate() {
        function(&mut out, i, f, annotation);
    }
    out.push_str("</main>\n</body></html>\n");
    out
}

/// One function's section.
fn function(out: &mut String, i: usize, f: &AnnotatedFunction, annotation: &Annotation) {
    let unit = &annotation.sample_type.unit;
    let hottest = f
        .rows
        .iter()
        .filter_map(|r| match r {
            Row::Code { value: Some(v), .. } => Some(v.flat.abs()),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "<section id=\"f{i}\" data-name=\"{}\"><h2>{} <small>{}, function {}</small></h2>\n<p>flat {}, cumulative {} ({} of the total)</p>",
        escape(&f.name),
        escape(&f.name),
        escape(&f.module),
        f.index,
        escape(&shown_value(f.value.flat, unit)),
        escape(&shown_value(f.value.cum, unit)),
        percentage(f.value.cum, annotation.total).trim()
    );
    let native = annotation.native;
    let columns = if native { 7 } else { 6 };
    let _ = writeln!(
        out,
        "<table><thead><tr><th>flat</th><th>cum</th><th>hot</th><th>source</th><th>offset</th><th>Wasm</th>{}</tr></thead><tbody>",
        if native { "<th>code</th>" } else { "" }
    );
    let mut source = String::new();
    for row in &f.rows {
        match row {
            Row::Source(line) => source = line.label(),
            Row::HotBlock { rank, flat } => {
                let label = Row::hot_block_label(*rank, *flat, f.value.flat, unit);
                let _ = writeln!(
                    out,
                    "<tr class=\"block\"><td colspan=\"{columns}\">{}</td></tr>",
                    escape(&label)
                );
            }
            Row::Code {
                offset,
                text,
                value: v,
                hot,
            } => {
                let [flat, cum, hot] = Row::code_cells(v, hot, unit);
                let heat = v.map_or(0.0, |v| v.flat.abs() as f64 / hottest.max(1) as f64);
                let style = if heat > 0.0 {
                    // White to red by the row's share of the hottest row.
                    format!(
                        " style=\"background: hsl(0, 100%, {:.0}%)\"",
                        100.0 - 45.0 * heat
                    )
                } else {
                    String::new()
                };
                let _ = writeln!(
                    out,
                    "<tr class=\"code\" data-flat=\"{}\"{style}><td>{}</td><td>{}</td><td>{hot}</td><td class=\"source\">{}</td><td>{offset:#x}</td><td class=\"wasm\">{}</td>{}</tr>",
                    v.map_or(0, |v| v.flat),
                    escape(&flat),
                    escape(&cum),
                    escape(&std::mem::take(&mut source)),
                    escape(text),
                    if native { "<td></td>" } else { "" }
                );
            }
            Row::Native { text, flat } => {
                let _ = writeln!(
                    out,
                    "<tr class=\"native\" data-flat=\"{flat}\"><td>{}</td><td></td><td></td><td></td><td></td><td></td><td class=\"native\">{}</td></tr>",
                    escape(&shown_value(*flat, unit)),
                    escape(text)
                );
            }
        }
    }
    out.push_str("</tbody></table></section>\n");
}

/// `text` safe inside HTML's text and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:0;display:flex}\
nav{width:22em;padding:0 1em;border-right:1px solid #ccc;height:100vh;overflow:auto;position:sticky;top:0}\
nav h1{font-size:1em;word-break:break-all}nav .module{color:#777}nav .share{float:right}\
main{padding:0 1em;overflow:auto}\
table{border-collapse:collapse;font-family:monospace;white-space:pre}\
td,th{padding:0 .6em;text-align:left}td:nth-child(-n+2){text-align:right}\
td.source{color:#2a5db0}tr.block td{color:#a00;font-style:italic}td.native{color:#555}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
    }
}
