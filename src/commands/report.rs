//! `wasmspy report`, `wasmspy convert` and `wasmspy diff`: what is done with a profile file
//! once written.

use std::path::Path;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use super::carried_sources::SourceText;
use super::module_files::Sidecars;
use super::v8_wasm::V8WasmFrames;
use crate::commands::outputs::write_whole;
use crate::diff::{compare, negated_base, write_flamegraph};
use crate::export::{self, Format};
use crate::profile::Profile;
use crate::report::opcodes;
use crate::report::top;

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct ReportArgs {
    /// The profile: pprof (ours, Go's, pprof-rs's...), speedscope JSON, `.cpuprofile` (V8's
    /// too) or folded stacks.
    #[arg(value_name = "PROFILE")]
    pub profile: PathBuf,

    /// The sample type to rank by, by name (`cpu`, `samples`, `alloc_space`...) or index;
    /// the profile's default unless given.
    #[arg(long, value_name = "TYPE")]
    pub sample_index: Option<String>,

    /// A row per source line rather than per function, each with its text where the source is
    /// on disk, or in the copy its source map carried (`PROFILE.sources/`).
    #[arg(long)]
    pub lines: bool,

    /// Self time per Pulley opcode and per adjacent opcode pair (a profile recorded with
    /// `--target pulley64`), rather than per function.
    #[arg(long, conflicts_with = "lines")]
    pub opcodes: bool,

    /// Print only the first N rows.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
}

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct ConvertArgs {
    /// The profile to read: pprof, speedscope JSON, `.cpuprofile` (V8's too) or folded stacks.
    #[arg(value_name = "IN")]
    pub input: PathBuf,

    /// Where to write it, in the format its name says (or `--format`'s).
    #[arg(short, long, value_name = "OUT", required = true)]
    pub output: PathBuf,

    /// The output's format: pprof, firefox, speedscope, svg, folded or cpuprofile.
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<Format>,

    /// For the single-valued formats (svg, folded): the sample type to draw, by name or index;
    /// the profile's default unless given.
    #[arg(long, value_name = "TYPE")]
    pub sample_index: Option<String>,

    /// A Wasm module that a V8 `.cpuprofile` (Node's `--cpu-prof`, Chrome DevTools) shows as
    /// `wasm://wasm/...` frames: its functions named from its name section and DWARF, with
    /// file and line; may be given several times, each module found by its code.
    #[arg(long, value_name = "MODULE")]
    pub wasm: Vec<PathBuf>,

    #[command(flatten)]
    pub sidecars: Sidecars,
}

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct DiffArgs {
    /// The profile before (of the main branch, say): pprof, speedscope JSON, `.cpuprofile` or
    /// folded stacks.
    #[arg(value_name = "BASE")]
    pub base: PathBuf,

    /// The profile after (of the change).
    #[arg(value_name = "NEW")]
    pub new: PathBuf,

    /// Also write the difference, in the format its name says: `.svg`, a differential flame
    /// graph of NEW (red: grew, blue: shrank); `.pb.gz` (pprof), NEW's samples with BASE's
    /// negated, which `go tool pprof` shows as the difference, as `-diff_base` makes it; may
    /// be given several times.
    #[arg(short, long, value_name = "OUT")]
    pub output: Vec<PathBuf>,

    /// The sample type to compare, by name (`cpu`, `samples`, `instructions`...) or index;
    /// BASE's default unless given. Profiles of time are compared by share (NEW scaled to
    /// BASE's total), profiles of instructions as they are.
    #[arg(long, value_name = "TYPE")]
    pub sample_index: Option<String>,

    /// A row per source line rather than per function.
    #[arg(long)]
    pub lines: bool,

    /// Print only the first N rows.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub top: usize,

    /// Exit with 1, saying why in one line, when NEW's total exceeds BASE's by more than PCT
    /// percent.
    #[arg(long, value_name = "PCT")]
    pub fail_above: Option<f64>,

    /// Exit with 1, saying why in one line, when a function's cumulative value in NEW exceeds
    /// its value in BASE by more than PCT percent (a function under 1 % of BASE's total: by
    /// more than PCT percent of that total).
    #[arg(long, value_name = "PCT")]
    pub fail_above_function: Option<f64>,
}

pub fn report(args: ReportArgs) -> Result<i32> {
    let profile = read(&args.profile)?;
    let index = sample_index(&profile, args.sample_index.as_deref())?;
    if args.opcodes {
        let (ops, pairs) = opcodes(&profile, index).with_context(|| {
            format!(
                "`{}` has no Pulley opcodes: record with --target pulley64 and the signal sampler",
                args.profile.display()
            )
        })?;
        println!("Pulley opcodes, self time:");
        print!("{}", ops.render(args.top));
        println!("\nAdjacent opcode pairs, self time of both:");
        print!("{}", pairs.render(args.top));
        return Ok(0);
    }
    let mut table = top(&profile, index, args.lines);
    let mut sources = SourceText::of(&args.profile);
    for row in &mut table.rows {
        if let Some((file, line)) = &row.source {
            row.text = sources.line(file, *line).unwrap_or_default();
        }
    }
    if table.total == 0 {
        eprintln!("wasmspy: {}", no_samples(&profile, index, &args.profile));
    }
    print!("{}", table.render(args.top));
    Ok(0)
}

/// Why the table of sample type `index` is empty, and which types have samples to show
/// instead: a memory profile of a program that freed all it allocated opens on its in-use
/// bytes, none.
fn no_samples(profile: &Profile, index: usize, path: &Path) -> String {
    let others: Vec<String> = (0..profile.sample_types.len())
        .filter_map(|i| {
            let n = profile.samples.iter().filter(|s| s.values[i] != 0).count();
            (n > 0).then(|| format!("{} has {n}", profile.sample_types[i].kind))
        })
        .collect();
    if others.is_empty() {
        return format!("`{}` has no samples", path.display());
    }
    format!(
        "`{}` has no samples of {}; {} (--sample-index TYPE shows one)",
        path.display(),
        profile.sample_types[index].kind,
        others.join(", ")
    )
}

pub fn convert(args: ConvertArgs) -> Result<i32> {
    let mut profile = if args.wasm.is_empty() {
        read(&args.input)?
    } else {
        read_v8(&args)?
    };
    profile.default_sample_type = sample_index(&profile, args.sample_index.as_deref())?;
    let format = Format::for_output(args.format, &args.output);
    let mut bytes = Vec::new();
    format
        .write(&profile, &mut bytes)
        .with_context(|| format!("cannot write `{}`", args.output.display()))?;
    write_whole(&args.output, format, &bytes)?;
    Ok(0)
}

pub fn diff(args: DiffArgs) -> Result<i32> {
    let (base, new) = (read(&args.base)?, read(&args.new)?);
    let base_index = sample_index(&base, args.sample_index.as_deref())?;
    let kind = &base.sample_types[base_index].kind;
    let new_index = new.sample_index(kind).with_context(|| {
        format!(
            "`{}` has no sample type `{kind}`, which `{}` is compared by",
            args.new.display(),
            args.base.display()
        )
    })?;
    for output in &args.output {
        let format = Format::for_output(None, output);
        let mut bytes = Vec::new();
        let what = || format!("cannot write `{}`", output.display());
        match format {
            Format::Svg => write_flamegraph(&base, base_index, &new, new_index, &mut bytes),
            Format::Pprof => Format::Pprof
                .write(
                    &negated_base(&base, base_index, &new, new_index),
                    &mut bytes,
                )
                .map_err(anyhow::Error::from),
            other => Err(anyhow!(
                "a difference is written as a flame graph (.svg) or pprof (.pb.gz), not {other}"
            )),
        }
        .with_context(what)?;
        write_whole(output, format, &bytes)?;
    }
    let comparison = compare(&base, base_index, &new, new_index, args.lines);
    if comparison.normalised && args.fail_above.is_some() {
        eprintln!("wasmspy: warning: profiles of time are compared by share, so their totals are equal: --fail-above can only pass (use --fail-above-function, or profiles of instructions)");
    }
    print!("{}", comparison.render(args.top));
    let verdict = comparison.verdict(args.fail_above, args.fail_above_function);
    println!("{}", verdict.line);
    Ok(i32::from(verdict.failed))
}

/// A V8 `.cpuprofile` with its Wasm frames named from the `--wasm` modules.
fn read_v8(args: &ConvertArgs) -> Result<Profile> {
    let path = &args.input;
    let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    if !export::is_cpuprofile(&bytes) {
        bail!(
            "--wasm names the Wasm frames of a V8 .cpuprofile (Node's --cpu-prof, Chrome DevTools), and `{}` is not one",
            path.display()
        );
    }
    let mut frames = V8WasmFrames::open(&args.wasm, &args.sidecars)?;
    let profile = export::read_cpuprofile(&bytes, &mut frames)
        .map_err(|e| anyhow!("`{}` {e:#}", path.display()))?;
    for warning in frames.take_warnings() {
        eprintln!("wasmspy: warning: {warning}");
    }
    Ok(profile)
}

pub(super) fn read(path: &Path) -> Result<Profile> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    export::read(&bytes).map_err(|e| anyhow!("`{}` {e:#}", path.display()))
}

/// The sample type named or numbered `chosen`, else the profile's default.
pub(super) fn sample_index(profile: &Profile, chosen: Option<&str>) -> Result<usize> {
    let Some(chosen) = chosen else {
        return Ok(profile.default_sample_type);
    };
    profile.sample_index(chosen).with_context(|| {
        let kinds: Vec<&str> = profile
            .sample_types
            .iter()
            .map(|t| t.kind.as_str())
            .collect();
        format!(
            "the profile has no sample type `{chosen}` (it has: {})",
            kinds.join(", ")
        )
    })
}
