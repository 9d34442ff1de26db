//! The generator: runs the rules on ComponentizeJS's three engines and writes `generated.rs`.
//!
//! The debug engine gives every field (each rule reads its named function; a field two rules
//! derive must agree) and its fixed addresses. The release and weval engines, stripped, are
//! checked: each rule whose function has a counterpart there ([`super::matching`]) must give
//! the same fields; their `js::TlsContext` is found by correspondence ([`super::addresses`]).
//! What was found where is written into `generated.rs` as comments, so a change shows in its
//! diff.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::addresses::{self, Addresses};
use super::code::Engine;
use super::matching::{Counterparts, Found};
use super::rules::{self, Fields};
use super::FIELDS;

/// The package, as `tests/fixtures/interpreters/build.sh` installs it.
pub fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/interpreters/node_modules/@bytecodealliance/componentize-js")
}

/// The package's directory, or `None` (with a note; a failure under CI, where
/// `scripts/test.sh` installs it) where it is missing, as `tests/common`'s `skip` does; `what`
/// names the test for the note.
pub fn package(what: &str) -> Option<PathBuf> {
    let dir = package_dir();
    if dir.join("lib").join(DEBUG).exists() {
        return Some(dir);
    }
    let why = format!(
        "{} is missing: tests/fixtures/interpreters/build.sh installs it",
        dir.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{what}: {why}, under CI");
    eprintln!("skipped: {what}: {why}");
    None
}

pub const DEBUG: &str = "starlingmonkey_embedding.debug.wasm";
/// The engines without names, checked against the debug engine.
pub const STRIPPED: [&str; 2] = [
    "starlingmonkey_embedding.wasm",
    "starlingmonkey_embedding_weval.wasm",
];

/// What the rules found in the package.
pub struct Derivation {
    pub version: String,
    pub fields: Fields,
    /// Each engine's addresses, the debug engine's first.
    pub addresses: Vec<(&'static str, Addresses)>,
    /// For each stripped engine, what was checked there.
    pub checked: Vec<Checked>,
}

/// What was checked in a stripped engine: each rule's function as found there, and how many
/// fields the rules found checked.
pub struct Checked {
    pub file: &'static str,
    pub rules: Vec<(&'static str, Found)>,
    pub fields: usize,
}

fn version(package: &Path) -> Result<String> {
    let json = std::fs::read_to_string(package.join("package.json"))?;
    let at = json
        .find("\"version\"")
        .context("package.json has no version")?;
    let value = json[at + 9..]
        .split('"')
        .nth(1)
        .context("package.json's version")?;
    Ok(value.to_string())
}

/// Runs the rules on the package's engines.
pub fn derive(package: &Path) -> Result<Derivation> {
    let read = |file: &str| {
        std::fs::read(package.join("lib").join(file)).with_context(|| format!("reading {file}"))
    };
    let debug_bytes = read(DEBUG)?;
    let debug = Engine::parse(&debug_bytes)?;
    let fields = rules::run(&debug, None, None)
        .with_context(|| DEBUG)?
        .fields;
    let missing: Vec<_> = FIELDS.iter().filter(|f| !fields.contains_key(*f)).collect();
    if !missing.is_empty() || fields.len() != FIELDS.len() {
        bail!(
            "the rules derive {:?}, the layout has {FIELDS:?} (missing {missing:?})",
            fields.keys()
        );
    }
    let named = addresses::named(&debug).with_context(|| DEBUG)?;
    let mut derivation = Derivation {
        version: version(package)?,
        fields,
        addresses: vec![(DEBUG, named.clone())],
        checked: Vec::new(),
    };
    for file in STRIPPED {
        let bytes = read(file)?;
        let engine = Engine::parse(&bytes)?;
        let counterparts = Counterparts::new(&engine)?;
        let outcome = rules::run(
            &engine,
            Some((&debug, &counterparts)),
            Some(&derivation.fields),
        )
        .with_context(|| file)?;
        let at = addresses::corresponding(&debug, &named, &engine, &counterparts)
            .with_context(|| file)?;
        derivation.addresses.push((file, at));
        derivation.checked.push(Checked {
            file,
            rules: outcome.rules,
            fields: outcome.fields.len(),
        });
    }
    Ok(derivation)
}

fn found(found: &Found) -> String {
    match found {
        Found::Exact(f) => format!("function {f}, same shape"),
        Found::Near(f, overlap) => format!("function {f}, {:.0} % alike", overlap * 100.0),
        Found::None { same_shape: 0 } => "no counterpart".to_string(),
        Found::None { same_shape } => {
            format!("no counterpart ({same_shape} functions of its shape)")
        }
    }
}

/// `generated.rs`'s text.
pub fn text(d: &Derivation) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "// Generated by the rules of rules*.rs from the engines of \
         @bytecodealliance/componentize-js {}: do not\n\
         // edit. `cargo test --features internals --lib spidermonkey::layouts -- --ignored \
         write_generated`\n\
         // writes it again.\n\
         //\n\
         // Every field from {DEBUG}, by the rule named above it. Checked in the\n\
         // stripped engines, each rule on its function's counterpart there:",
        d.version
    )?;
    for Checked {
        file,
        rules,
        fields,
    } in &d.checked
    {
        let matched = rules.iter().filter(|(_, f)| f.func().is_some()).count();
        writeln!(
            out,
            "//\n// {file}: {matched} of {} rules, {fields} of {} fields checked.",
            rules.len(),
            FIELDS.len()
        )?;
        for (rule, f) in rules {
            writeln!(out, "//   {rule}: {}", found(f))?;
        }
    }
    writeln!(
        out,
        "\n#[cfg(test)]\nuse super::EngineAddresses;\nuse super::SpiderMonkeyLayout;\n\n\
         pub const LAYOUT: SpiderMonkeyLayout = SpiderMonkeyLayout {{\n    \
         package_version: \"{}\",",
        d.version
    )?;
    for field in FIELDS {
        let (value, rule) = d.fields[field];
        // A tag or mask in hex, as SpiderMonkey's source spells it.
        let value = if value > 0xffff {
            format!("{value:#x}")
        } else {
            value.to_string()
        };
        writeln!(out, "    // Rule `{rule}`.\n    {field}: {value},")?;
    }
    writeln!(
        out,
        "}};\n\n#[cfg(test)]\npub const ENGINES: &[EngineAddresses] = &["
    )?;
    for (file, a) in &d.addresses {
        let context = a
            .context
            .map_or("None".to_string(), |c| format!("Some({c})"));
        let how = if *file == DEBUG {
            format!(
                "`{}` and `{}`",
                addresses::ENGINE_CX,
                addresses::CONTEXT_INIT
            )
        } else {
            format!(
                "the counterparts of {} functions that read js::TlsContext",
                a.tls_context_functions
            )
        };
        writeln!(
            out,
            "    // From {how}.\n    EngineAddresses {{\n        file: \"{file}\",\n        \
             context: {context},\n        tls_context: {},\n    }},",
            a.tls_context
        )?;
    }
    writeln!(out, "];")?;
    Ok(out)
}

/// Where the generator writes.
pub fn generated_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtimes/spidermonkey/layouts/generated.rs")
}

/// Every rule, by name (for the test that each one ran).
pub fn rule_names() -> Vec<&'static str> {
    rules::all().map(|r| r.name).collect()
}
