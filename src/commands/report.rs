//! `wasmspy report`, `wasmspy convert` and `wasmspy diff`: what is done with a profile file
//! once written.

use std::path::Path;

use crate::diff::{compare, negated_base, write_flamegraph};
use crate::export::{self, Format};
use crate::profile::Profile;
use crate::report::opcodes;
use crate::report::top;
use crate::resolve::v8_wasm::V8WasmFrames;
use anyhow::{anyhow, bail, Context, Result};

use crate::cli::args::{ConvertArgs, DiffArgs, ReportArgs};
use crate::commands::outputs::write_whole;

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
    print!("{}", top(&profile, index, args.lines).render(args.top));
    Ok(0)
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
    let mut frames = V8WasmFrames::open(&args.wasm, &args.debug_file)?;
    let profile = export::read_cpuprofile(&bytes, &mut frames)
        .map_err(|e| anyhow!("`{}` {e:#}", path.display()))?;
    for warning in frames.take_warnings() {
        eprintln!("wasmspy: warning: {warning}");
    }
    Ok(profile)
}

fn read(path: &Path) -> Result<Profile> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    export::read(&bytes).map_err(|e| anyhow!("`{}` {e:#}", path.display()))
}

/// The sample type named or numbered `chosen`, else the profile's default.
fn sample_index(profile: &Profile, chosen: Option<&str>) -> Result<usize> {
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
