//! The documentation's links resolve: the README, ARCHITECTURE.md, CONTRIBUTING.md and the
//! guides in docs/ link to each other's sections by anchor, and a heading renamed or a section
//! moved would otherwise break them silently (GitHub shows no error, the link just lands at the
//! top of the file).
//!
//! A link is `[text](target)` or `![alt](target)` outside fenced code blocks and inline code
//! spans; a target that is a web address is not fetched (the test stays offline). A relative
//! target must exist, and its `#anchor`, if any, must be a heading of that Markdown file (of
//! the same file for `#anchor` alone), named as GitHub names headings.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

#[test]
fn documentation_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut failures = Vec::new();

    let mut files = Vec::new();
    for name in ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"] {
        if !root.join(name).is_file() {
            failures.push(format!("{name}: missing"));
        }
        files.push(root.join(name));
    }
    match fs::read_dir(root.join("docs")) {
        Ok(entries) => {
            let mut guides: Vec<PathBuf> = entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
                .collect();
            guides.sort();
            files.extend(guides);
        }
        Err(error) => failures.push(format!("docs/: {error}")),
    }

    // Each target file's anchors, computed once however many links point into it.
    let mut anchors_of: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    for file in &files {
        let Ok(text) = fs::read_to_string(file) else {
            continue; // reported above as missing
        };
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        for target in link_targets(&strip_code_spans(&blank_fences(&text))) {
            if let Err(why) = check(file, &target, &mut anchors_of) {
                failures.push(format!("{shown}: {target} ({why})"));
            }
        }
    }

    assert!(
        failures.is_empty(),
        "broken documentation links:\n{}",
        failures.join("\n")
    );
}

/// Whether one link's target resolves from `file`.
fn check(
    file: &Path,
    target: &str,
    anchors_of: &mut HashMap<PathBuf, HashSet<String>>,
) -> Result<(), String> {
    if target.starts_with("http://")
        || target.starts_with("https://")
        || target.starts_with("mailto:")
    {
        return Ok(());
    }
    if target.is_empty() {
        return Err("empty target".into());
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let dest = if path.is_empty() {
        file.to_path_buf()
    } else {
        file.parent().unwrap_or(Path::new(".")).join(path)
    };
    if !dest.exists() {
        return Err("no such file".into());
    }
    if anchor.is_empty() {
        return Ok(());
    }
    if !dest.is_file() || dest.extension().is_none_or(|ext| ext != "md") {
        return Err("anchor into a file that is not Markdown".into());
    }
    // Canonical, so that `docs/x.md` and `../docs/x.md` share one entry.
    let key = dest.canonicalize().map_err(|error| error.to_string())?;
    let known = match anchors_of.entry(key) {
        Entry::Occupied(entry) => entry.into_mut(),
        Entry::Vacant(entry) => {
            let text = fs::read_to_string(entry.key()).map_err(|error| error.to_string())?;
            entry.insert(anchors(&text))
        }
    };
    if known.contains(anchor) {
        Ok(())
    } else {
        Err("no such heading".into())
    }
}

/// The text with every line of a fenced code block (fences included) emptied, so that
/// neither a `# comment` in a shell block counts as a heading nor `a](b)` in code as a link.
/// Line count is kept.
fn blank_fences(text: &str) -> String {
    let mut in_fence = false;
    let mut out = Vec::new();
    for line in text.split('\n') {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            out.push("");
        } else if in_fence {
            out.push("");
        } else {
            out.push(line);
        }
    }
    out.join("\n")
}

/// The text with inline code spans blanked: a span opens with a run of N backticks and closes
/// at the next run of exactly N (possibly on a later line, as in CommonMark); a run with no
/// such close is literal. Spans are replaced by spaces byte for byte (newlines kept): span
/// bounds are ASCII, so the result stays valid UTF-8.
fn strip_code_spans(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let run_end = |mut at: usize| {
        while at < bytes.len() && bytes[at] == b'`' {
            at += 1;
        }
        at
    };
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let open_end = run_end(i);
        let width = open_end - i;
        let mut close = None;
        let mut k = open_end;
        while k < bytes.len() {
            if bytes[k] == b'`' {
                let end = run_end(k);
                if end - k == width {
                    close = Some(end);
                    break;
                }
                k = end;
            } else {
                k += 1;
            }
        }
        match close {
            Some(end) => {
                out.extend(
                    bytes[i..end]
                        .iter()
                        .map(|&b| if b == b'\n' { b'\n' } else { b' ' }),
                );
                i = end;
            }
            None => {
                out.extend_from_slice(&bytes[i..open_end]);
                i = open_end;
            }
        }
    }
    String::from_utf8(out).expect("code spans are blanked whole")
}

/// Every `](target)` in prose: the part of `[text](target)` and `![alt](target)` that matters,
/// whatever the text (which may itself wrap onto another line). A title (`"..."`) after the
/// target and angle brackets around it are dropped.
fn link_targets(prose: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = prose;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        // A target ends at the first `)`; a line ending first means this was no link.
        let end = after.find([')', '\n']).unwrap_or(after.len());
        if after[end..].starts_with(')') {
            let target = after[..end].split_whitespace().next().unwrap_or("");
            let target = target
                .strip_prefix('<')
                .and_then(|t| t.strip_suffix('>'))
                .unwrap_or(target);
            targets.push(target.to_string());
        }
        rest = after;
    }
    targets
}

/// The anchors GitHub gives a file's headings: the heading's text lowercased, everything but
/// letters, digits, `-`, `_` and spaces dropped, spaces made `-`; a repeated heading gets
/// `-1`, `-2`... after the first.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = HashSet::new();
    for line in blank_fences(text).split('\n') {
        let hashes = line.len() - line.trim_start_matches('#').len();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes + 1..]
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *count == 0 {
            slug
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    anchors
}
