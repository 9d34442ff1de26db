//! The live view (`wasmspy top`, `record --top`): the functions taking the CPU now, as py-spy's
//! `top` shows them. Each refresh is the profile of the last window (a second by default):
//! each function's share of it, own and total, beside its time since the view started.

use std::collections::HashMap;
use std::fmt::Write;

use crate::profile::Profile;
use crate::report::top;

/// The column rows are sorted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortBy {
    /// The function's own time (its samples as the leaf).
    Own,
    /// Its total time (its samples anywhere on the stack).
    Total,
}

impl std::str::FromStr for SortBy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "own" | "self" => Ok(SortBy::Own),
            "total" => Ok(SortBy::Total),
            _ => Err(format!("unknown column `{s}` (own or total)")),
        }
    }
}

/// A function in the view.
#[derive(Clone, Debug, Default)]
struct Function {
    /// Where it starts (`file:line`), when known.
    location: String,
    /// In the last window.
    own: i64,
    total: i64,
    /// Since the view started.
    own_since: i64,
    total_since: i64,
}

/// What the view shows, refresh after refresh.
#[derive(Debug, Default)]
pub struct LiveView {
    functions: HashMap<String, Function>,
    /// The last window's total, and how long it was.
    window_total: i64,
    window_ns: i64,
    samples: i64,
    /// Values in nanoseconds (else counts, as of instructions).
    timed: bool,
    refreshes: u64,
}

impl LiveView {
    /// Takes the profile of the window since the last refresh.
    pub fn update(&mut self, window: &Profile) {
        self.refreshes += 1;
        for f in self.functions.values_mut() {
            (f.own, f.total) = (0, 0);
        }
        let index = window
            .sample_index("cpu")
            .unwrap_or(window.default_sample_type);
        if index >= window.sample_types.len() {
            (self.window_total, self.samples, self.window_ns) = (0, 0, 0);
            return;
        }
        self.timed = window.sample_types[index].unit == "nanoseconds";
        let table = top(window, index, false);
        self.window_total = table.total;
        self.window_ns = window.duration_ns;
        self.samples = window
            .sample_index("samples")
            .map_or(0, |i| window.total(i));
        for row in table.rows {
            let f = self.functions.entry(row.name).or_default();
            if f.location.is_empty() {
                f.location = row.location;
            }
            (f.own, f.total) = (row.flat, row.cum);
            f.own_since += row.flat;
            f.total_since += row.cum;
        }
    }

    /// The view as text: `title` and the window's figures, the column sorted by and `help`,
    /// then the functions of the last window sorted by `sort`, as many as fit in `rows`
    /// lines; lines cut at `width`.
    pub fn render(
        &self,
        title: &str,
        help: &str,
        sort: SortBy,
        rows: usize,
        width: usize,
    ) -> String {
        let mut out = String::new();
        let cpu = match (self.timed, self.window_ns) {
            (true, 1..) => format!(
                ", CPU {:.0}%",
                100.0 * self.window_total as f64 / self.window_ns as f64
            ),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "{title}  (refresh {}: {} samples{cpu})",
            self.refreshes, self.samples
        );
        let sorted_by = match sort {
            SortBy::Own => "own",
            SortBy::Total => "total",
        };
        let _ = writeln!(out, "sorted by {sorted_by}{help}\n");
        let time = if self.timed { "Time" } else { "Count" };
        let _ = writeln!(
            out,
            "{:>7} {:>7} {:>10} {:>10}  Function (file:line)",
            "%Own",
            "%Total",
            format!("Own{time}"),
            format!("Total{time}")
        );
        let mut shown: Vec<(&String, &Function)> = self
            .functions
            .iter()
            .filter(|(_, f)| f.own != 0 || f.total != 0)
            .collect();
        let key = |f: &Function| match sort {
            SortBy::Own => (f.own, f.total),
            SortBy::Total => (f.total, f.own),
        };
        shown.sort_by(|a, b| key(b.1).cmp(&key(a.1)).then_with(|| a.0.cmp(b.0)));
        let percent = |v: i64| match self.window_total {
            0 => 0.0,
            t => 100.0 * v as f64 / t as f64,
        };
        let value = |v: i64| match self.timed {
            true => format!("{:.2}s", v as f64 / 1e9),
            false => v.to_string(),
        };
        for (name, f) in shown.into_iter().take(rows.saturating_sub(4)) {
            let place = match f.location.as_str() {
                "" => String::new(),
                at => format!(" ({at})"),
            };
            let line = format!(
                "{:>6.2}% {:>6.2}% {:>10} {:>10}  {name}{place}",
                percent(f.own),
                percent(f.total),
                value(f.own_since),
                value(f.total_since),
            );
            let _ = writeln!(out, "{}", cut(&line, width));
        }
        out
    }
}

/// `line` cut to `width` characters.
fn cut(line: &str, width: usize) -> &str {
    match line.char_indices().nth(width) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Function as F, ProfileBuilder, ProfileHeader, Sample, ValueType};

    fn window(stacks: &[(&[&str], i64)]) -> Profile {
        let mut b = ProfileBuilder::default();
        let samples = stacks
            .iter()
            .map(|(names, cpu)| {
                let frames: Vec<_> = names
                    .iter()
                    .map(|n| {
                        let f = F {
                            name: n.to_string(),
                            system_name: n.to_string(),
                            file: "a.c".into(),
                            start_line: 3,
                        };
                        b.function_frame(&f, None, 0)
                    })
                    .collect();
                Sample {
                    stack: b.stack(&frames),
                    labels: Default::default(),
                    thread: None,
                    time_ns: 0,
                    values: vec![1, *cpu],
                }
            })
            .collect();
        let header = ProfileHeader {
            sample_types: vec![
                ValueType::new("samples", "count"),
                ValueType::new("cpu", "nanoseconds"),
            ],
            default_sample_type: 1,
            duration_ns: 1_000_000_000,
            ..Default::default()
        };
        b.build(header, samples)
    }

    #[test]
    fn the_last_window_is_shown_sorted_with_times_since_the_start() {
        let mut view = LiveView::default();
        view.update(&window(&[(&["leaf", "main"], 300_000_000)]));
        view.update(&window(&[
            (&["leaf", "main"], 200_000_000),
            (&["main"], 600_000_000),
        ]));
        let text = view.render("t", "", SortBy::Own, 20, 200);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("refresh 2: 2 samples, CPU 80%"), "{text}");
        assert_eq!(
            &lines[4..],
            [
                " 75.00% 100.00%      0.60s      1.10s  main (a.c:3)",
                " 25.00%  25.00%      0.50s      0.50s  leaf (a.c:3)",
            ]
        );
        let by_total = view.render("t", "", SortBy::Total, 20, 200);
        assert!(by_total.lines().nth(4).unwrap().ends_with("main (a.c:3)"));
        // A function idle in the last window is not shown.
        view.update(&window(&[(&["main"], 100)]));
        let text = view.render("t", "", SortBy::Own, 20, 200);
        assert!(!text.contains("leaf"), "{text}");
        assert_eq!(
            view.render("t", "", SortBy::Own, 5, 30)
                .lines()
                .last()
                .unwrap()
                .len(),
            30
        );
    }
}
