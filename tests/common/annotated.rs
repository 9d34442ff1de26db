//! `wasmspy annotate`'s output, read back.

/// A row of an annotated function: flat and cumulative values (in nanoseconds or bytes), its
/// hot block's rank, its
/// text; a source line's row has no offset.
#[derive(Debug)]
pub struct Listed {
    pub flat: f64,
    pub cum: f64,
    pub hot: Option<u32>,
    pub offset: Option<u64>,
    pub text: String,
    /// With `--native`, the code it became that samples fell on, with their flat values.
    pub native: Vec<(f64, String)>,
}

/// The rows of each function `annotate` printed, by its heading (`NAME in MODULE`).
pub fn parse(out: &str) -> Vec<(String, Vec<Listed>)> {
    let mut functions: Vec<(String, Vec<Listed>)> = Vec::new();
    for line in out.lines() {
        if let Some(heading) = line.strip_prefix("ROUTINE ======================== ") {
            functions.push((heading.to_string(), Vec::new()));
            continue;
        }
        let Some((_, rows)) = functions.last_mut() else {
            continue;
        };
        let trimmed = line.trim_start();
        if trimmed.starts_with(";;") {
            rows.push(Listed {
                flat: 0.0,
                cum: 0.0,
                hot: None,
                offset: None,
                text: trimmed.to_string(),
                native: Vec::new(),
            });
            continue;
        }
        if let Some((value, code)) = line.split_once("|   ") {
            let row = rows.last_mut().expect("code under an instruction");
            row.native
                .push((base_units(value.trim()), code.to_string()));
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        // flat, cum, [#rank], offset, text...
        let Some(at) = words.iter().position(|w| w.starts_with("0x")) else {
            continue;
        };
        if at < 2 {
            continue;
        }
        let hot = words[2].strip_prefix('#').and_then(|r| r.parse().ok());
        let text_start = line.find(words[at]).unwrap() + words[at].len();
        rows.push(Listed {
            flat: base_units(words[0]),
            cum: base_units(words[1]),
            hot,
            offset: u64::from_str_radix(&words[at][2..], 16).ok(),
            text: line[text_start..].trim().to_string(),
            native: Vec::new(),
        });
    }
    functions
}

/// A value as annotate prints it, in its family's base unit (nanoseconds, bytes): `.`,
/// `12.5ms`, `1.2s`, `240B`, `7.94kB`...
fn base_units(value: &str) -> f64 {
    if value == "." {
        return 0.0;
    }
    let units = [
        ("ns", 1.0),
        ("us", 1e3),
        ("ms", 1e6),
        ("kB", 1024.0),
        ("MB", 1048576.0),
        ("GB", 1073741824.0),
        ("s", 1e9),
        ("B", 1.0),
    ];
    for (unit, factor) in units {
        if let Some(n) = value.strip_suffix(unit) {
            if let Ok(n) = n.parse::<f64>() {
                return n * factor;
            }
        }
    }
    panic!("not a value annotate prints: {value}")
}

/// `divide.c`'s `spin` as annotated (`rows`, printed as `text`): its instructions, and the
/// index among them of its `i32.div_u`, checked to hold the most samples, or the instruction
/// after it to (a timer's sample blames the instruction after a long one: skid).
pub fn division_hottest<'a>(rows: &'a [Listed], text: &str) -> (Vec<&'a Listed>, usize) {
    let code: Vec<&Listed> = rows.iter().filter(|r| r.offset.is_some()).collect();
    let hottest = (0..code.len())
        .max_by(|&a, &b| code[a].flat.total_cmp(&code[b].flat))
        .unwrap_or_else(|| panic!("no instruction: {text}"));
    let division = code
        .iter()
        .position(|r| r.text == "i32.div_u")
        .unwrap_or_else(|| panic!("no i32.div_u in spin: {text}"));
    assert!(
        hottest == division || hottest == division + 1,
        "the hottest instruction is `{}`, not the division or the one after it:\n{text}",
        code[hottest].text
    );
    (code, division)
}

/// Checks that each instruction's code (`--native`: its machine instructions) holds its flat
/// value: each value is printed to 0.01 ms at most, so the sum may differ from the row's by
/// as much for each value added.
pub fn native_adds_up(code: &[&Listed], text: &str) {
    for row in code {
        let on_code: f64 = row.native.iter().map(|(v, _)| v).sum();
        let rounding = 10_000.0 * (row.native.len() + 1) as f64;
        assert!(
            (on_code - row.flat).abs() <= rounding,
            "{}'s code holds {on_code}, it {}: {text}",
            row.text,
            row.flat
        );
    }
}
