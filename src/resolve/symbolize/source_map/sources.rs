//! A source map's `sources` as paths a reader can open: relative to the map's directory, after
//! `sourceRoot`, as the format has it, except where that names no file and the source alone
//! does (AssemblyScript writes `sourceRoot` `./<output stem>`, a directory that does not exist).

use std::path::Path;

use crate::shared::source_path::{clean, clean_keeping_scheme};

/// Each of `sources` (of a map in `dir`, whose `sourceRoot` is `root`) as a profile shows it.
pub fn resolve(sources: &[String], root: Option<&str>, dir: &Path) -> Vec<String> {
    let root = root.filter(|r| !r.is_empty());
    sources.iter().map(|s| resolve_one(s, root, dir)).collect()
}

fn resolve_one(source: &str, root: Option<&str>, dir: &Path) -> String {
    if source.is_empty() {
        return String::new();
    }
    // A URL (`webpack://…`) or an absolute path is where it says; AssemblyScript's standard
    // library (`~lib/…`) is in no file.
    if source.contains("://") || source.starts_with('/') || source.starts_with('~') {
        return clean_keeping_scheme(source);
    }
    let Some(root) = root else {
        return path(&dir.join(source));
    };
    if root.contains("://") {
        return clean_keeping_scheme(&format!("{root}/{source}"));
    }
    let joined = dir.join(root).join(source);
    let alone = dir.join(source);
    if !joined.exists() && alone.exists() {
        path(&alone)
    } else {
        path(&joined)
    }
}

fn path(p: &Path) -> String {
    clean(&p.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_under_the_root_unless_only_the_source_exists() {
        // The library's unit tests go without `tempfile` (a dependency of the command line).
        let dir = std::env::temp_dir().join(format!("wasmspy-sources-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::write(dir.join("hot.ts"), "").unwrap();
        std::fs::write(dir.join("src/a.c"), "").unwrap();
        let d = dir.display();
        let sources = ["hot.ts", "a.c", "~lib/rt.ts", "/abs/x.c", "gone.c", ""].map(String::from);
        // AssemblyScript's bogus root: hot.ts is beside the map, not under ./hot.
        assert_eq!(
            resolve(&sources, Some("./hot"), &dir),
            [
                format!("{d}/hot.ts"),
                format!("{d}/hot/a.c"),
                "~lib/rt.ts".into(),
                "/abs/x.c".into(),
                format!("{d}/hot/gone.c"),
                String::new(),
            ]
        );
        assert_eq!(
            resolve(&sources[..2], Some("src/"), &dir),
            [format!("{d}/hot.ts"), format!("{d}/src/a.c")]
        );
        assert_eq!(resolve(&sources[..1], None, Path::new("")), ["hot.ts"]);
        assert_eq!(
            resolve(&sources[..1], Some("webpack://app/"), &dir),
            ["webpack://app/hot.ts"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
