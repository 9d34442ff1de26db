//! The library guide's list of the public API (docs/library.md, also the crate's front page)
//! names every item the crate root makes public: a new public item without its line in the
//! guide fails here.

use std::collections::BTreeSet;

/// The names `src/lib.rs` makes public and documented: `pub mod` and `pub use` items, but for
/// those under `#[doc(hidden)]`.
fn public_names(lib: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut hidden = false;
    for line in lib.lines().map(str::trim) {
        if line.starts_with("#[doc(hidden)]") {
            hidden = true;
            continue;
        }
        if line.starts_with("#[") || line.starts_with("//") {
            continue;
        }
        if let Some(module) = line.strip_prefix("pub mod ") {
            if !hidden {
                names.insert(module.trim_end_matches(';').to_string());
            }
        } else if let Some(path) = line.strip_prefix("pub use ") {
            let path = path.trim_end_matches(';');
            let items = match path.split_once('{') {
                Some((_, list)) => list.trim_end_matches('}').to_string(),
                None => path.rsplit("::").next().unwrap_or(path).to_string(),
            };
            names.extend(items.split(',').map(|i| i.trim().to_string()));
        }
        hidden = false;
    }
    names
}

#[test]
fn the_library_guide_lists_every_public_item() {
    let root = env!("CARGO_MANIFEST_DIR");
    let lib = std::fs::read_to_string(format!("{root}/src/lib.rs")).unwrap();
    let guide = std::fs::read_to_string(format!("{root}/docs/library.md")).unwrap();
    // The list is the guide's text before its first example.
    let list = &guide[..guide.find("```").expect("the guide has an example")];
    let names = public_names(&lib);
    assert!(
        names.len() > 10 && names.contains("Profiler") && names.contains("export"),
        "src/lib.rs was not read as expected: {names:?}"
    );
    let unlisted: Vec<&String> = names
        .iter()
        .filter(|name| !list.contains(&format!("`{name}`")))
        .collect();
    assert!(
        unlisted.is_empty(),
        "public in src/lib.rs but not in docs/library.md's list: {unlisted:?}"
    );
}
