//! `wasmspy report` and `wasmspy convert`: what is done with a profile file once written.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use wasmspy::export::{self, Format};
use wasmspy::opcodes::opcodes;
use wasmspy::profile::Profile;
use wasmspy::top::top;

use crate::cli::{ConvertArgs, ReportArgs};

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
    let mut profile = read(&args.input)?;
    profile.default_sample_type = sample_index(&profile, args.sample_index.as_deref())?;
    let format = Format::for_output(args.format, &args.output);
    let mut bytes = Vec::new();
    let what = || format!("cannot write `{}`", args.output.display());
    format.write(&profile, &mut bytes).with_context(what)?;
    std::fs::write(&args.output, bytes).with_context(what)?;
    eprintln!(
        "wasmspy: wrote {} ({format}); view it with: {}",
        args.output.display(),
        format.how_to_view(&args.output)
    );
    Ok(0)
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
