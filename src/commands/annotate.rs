//! `wasmspy annotate`: a profile's hottest (or named) functions, instruction by instruction
//! (see [`crate::annotate`]), from the modules it was taken of: those given with `--wasm`, else
//! those it names, looked for beside it and in the current directory. Each is matched to the
//! profile's modules by its build id, so a rebuilt module is refused rather than misread.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use rustc_hash::FxHashMap;

use super::carried_sources::SourceText;
use super::module_files::{self, ModuleFile, Sidecars};
use super::outputs::replace_whole;
use super::report::{read, sample_index};
use crate::annotate::{annotate as annotated, page, render, ModuleCode, Row, Selection};
use crate::profile::{MappingId, Profile};

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct AnnotateArgs {
    /// The profile: pprof as `wasmspy record` or `serve` writes it (or as their live server
    /// serves it), whose frames carry their instructions' offsets.
    #[arg(value_name = "PROFILE")]
    pub profile: PathBuf,

    /// The functions to annotate, by name (the whole name, else a part of it); the hottest
    /// unless given.
    #[arg(value_name = "FUNCTION")]
    pub functions: Vec<String>,

    /// A module or component the profile was taken of, where the profile's name for it is not
    /// a file beside the profile or in the current directory; may be given several times,
    /// each matched to the profile's modules by its build id.
    #[arg(long, value_name = "MODULE")]
    pub wasm: Vec<PathBuf>,

    #[command(flatten)]
    pub sidecars: Sidecars,

    /// The sample type to annotate by, by name (`cpu`, `samples`, `alloc_space`...) or
    /// index; the profile's default unless given.
    #[arg(long, value_name = "TYPE")]
    pub sample_index: Option<String>,

    /// Write the listing to OUT rather than print it: a self-contained HTML page (a list of
    /// the functions, each one's source and Wasm columns, rows coloured by heat) when OUT
    /// ends in `.html`, else the text.
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,

    /// Show under each instruction the code it became, with the samples that fell on it: the
    /// machine code Cranelift or Winch compiled it to (kept in CPU profiles of the signal
    /// sampler for their hottest functions), disassembled; for a profile of Pulley
    /// (`record --target pulley64`), the opcodes of its bytecode, and their adjacent pairs, as
    /// `report --opcodes` tables them.
    #[arg(long)]
    pub native: bool,

    /// How many of the hottest functions to annotate, when none is named.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub top: usize,
}

pub fn annotate(args: AnnotateArgs) -> Result<i32> {
    let profile = read(&args.profile)?;
    let index = sample_index(&profile, args.sample_index.as_deref())?;
    let mappings = wasm_mappings(&profile);
    if mappings.is_empty() {
        bail!(
            "`{}` has no Wasm instruction addresses (a profile converted from another format, or of no Wasm code): annotate reads the pprof that `wasmspy record` or `serve` writes",
            args.profile.display()
        );
    }
    let given = !args.wasm.is_empty();
    let paths = if given {
        args.wasm.clone()
    } else {
        named_files(&profile, &mappings, &args.profile)
    };
    let (files, warnings) = module_files::open(&paths, &args.sidecars)?;
    for warning in warnings {
        eprintln!("wasmspy: warning: {warning}");
    }
    let mut modules = matched(&profile, &mappings, files, given)?;
    if modules.is_empty() {
        let names: Vec<&str> = mappings
            .iter()
            .map(|&m| profile.mappings[m].file_name.as_str())
            .collect();
        bail!(
            "none of the modules `{}` was taken of ({}) is beside it or in the current directory: give them with --wasm",
            args.profile.display(),
            names.join(", ")
        );
    }
    for &m in &mappings {
        if !modules.contains_key(&m) {
            eprintln!(
                "wasmspy: warning: `{}` is not among the modules found: its functions are left out (give it with --wasm)",
                profile.mappings[m].file_name
            );
        }
    }
    let selection = if args.functions.is_empty() {
        Selection::Hottest(args.top)
    } else {
        Selection::Named(&args.functions)
    };
    let mut annotation = annotated(&profile, index, &mut modules, selection, args.native)
        .with_context(|| format!("cannot annotate `{}`", args.profile.display()))?;
    for code in modules.values_mut() {
        for warning in code.take_warnings() {
            eprintln!("wasmspy: warning: {warning}");
        }
    }
    if annotation.functions.is_empty() {
        eprintln!(
            "wasmspy: `{}` has no samples of {} in the Wasm code of its modules",
            args.profile.display(),
            annotation.sample_type.kind
        );
        return Ok(0);
    }
    let mut sources = SourceText::of(&args.profile);
    for f in &mut annotation.functions {
        for row in &mut f.rows {
            if let Row::Source(source) = row {
                source.text = sources.line(&source.file, source.line).unwrap_or_default();
            }
        }
    }
    let Some(output) = &args.output else {
        print!("{}", render(&annotation));
        return Ok(0);
    };
    let html = output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm"));
    let text = match html {
        true => page(&annotation, &args.profile.display().to_string()),
        false => render(&annotation),
    };
    replace_whole(output, text.as_bytes())?;
    eprintln!(
        "wasmspy: wrote {} ({} functions{})",
        output.display(),
        annotation.functions.len(),
        if html { "; open it in a browser" } else { "" }
    );
    Ok(0)
}

/// The profile's modules whose frames have instruction addresses, in its order.
fn wasm_mappings(profile: &Profile) -> Vec<MappingId> {
    let mut found: Vec<MappingId> = profile
        .frames
        .iter()
        .filter_map(|f| crate::annotate::instruction(profile, f).map(|(m, _)| m))
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// Where the files the profile names its modules by may be: beside the profile, then in the
/// current directory (a component's core module, `FILE/NAME`: `FILE`). Those that exist.
fn named_files(profile: &Profile, mappings: &[MappingId], at: &Path) -> Vec<PathBuf> {
    let beside = at.parent().unwrap_or(Path::new(""));
    let mut paths: Vec<PathBuf> = Vec::new();
    for &m in mappings {
        let name = &profile.mappings[m].file_name;
        let file = name.split('/').next().unwrap_or(name);
        for dir in [beside, Path::new("")] {
            let path = dir.join(file);
            if path.is_file() && !paths.contains(&path) {
                paths.push(path);
                break;
            }
        }
    }
    paths
}

/// Each of the profile's `mappings` with the module of its build id among `files`. A file
/// `given` on the command line of which no module is the profile's is refused.
fn matched(
    profile: &Profile,
    mappings: &[MappingId],
    files: Vec<ModuleFile>,
    given: bool,
) -> Result<FxHashMap<MappingId, ModuleCode>> {
    let mut modules = FxHashMap::default();
    let mut unmatched: Vec<(PathBuf, String)> = Vec::new();
    let mut matched_paths: Vec<PathBuf> = Vec::new();
    for file in files {
        let mapping = mappings
            .iter()
            .copied()
            .find(|&m| profile.mappings[m].build_id == file.build_id && !modules.contains_key(&m));
        match mapping {
            Some(m) => {
                matched_paths.push(file.path.clone());
                modules.insert(m, ModuleCode::new(file.symbolizer)?);
            }
            None => unmatched.push((file.path, file.build_id)),
        }
    }
    for (path, id) in unmatched {
        if matched_paths.contains(&path) {
            // Another core module of a component that matched.
            continue;
        }
        let profiles: Vec<String> = mappings
            .iter()
            .map(|&m| short(&profile.mappings[m].build_id))
            .collect();
        let message = format!(
            "`{}` is not a module this profile was taken of: its build id {} is none of the profile's ({})",
            path.display(),
            short(&id),
            profiles.join(", ")
        );
        if given {
            bail!(message);
        }
        eprintln!("wasmspy: warning: {message}");
    }
    Ok(modules)
}

/// A build id's first 12 digits, as enough to tell two apart.
fn short(id: &str) -> String {
    match id.get(..12) {
        Some(start) => format!("{start}…"),
        None if id.is_empty() => "(none)".to_string(),
        None => id.to_string(),
    }
}
