//! An interactive flame graph (SVG, with inferno's search and zoom scripts) of the profile's
//! default sample type, drawn from its folded stacks.

use std::io::Write;

use anyhow::{Context, Result};
use inferno::flamegraph::{self, Options};

use super::folded;
use crate::profile::Profile;

pub fn write(profile: &Profile, out: &mut dyn Write) -> Result<()> {
    let index = profile.default_sample_type;
    let kind = &profile.sample_types[index];
    let lines: Vec<String> = folded::stacks(profile, index)
        .into_iter()
        .filter(|&(_, value)| value > 0)
        .map(|(stack, value)| format!("{stack} {value}"))
        .collect();
    if lines.is_empty() {
        return Err(NothingToDraw(kind.kind.clone()).into());
    }
    let mut options = Options::default();
    options.title = match profile.mappings.first() {
        Some(m) => format!("{}: {}", m.file_name, kind.kind),
        None => kind.kind.clone(),
    };
    options.count_name = kind.unit.clone();
    options.deterministic = true;
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .context("cannot draw the flame graph")
}

/// A flame graph of a profile without a positive value of the type drawn (a guest too short
/// to be sampled): there is nothing to draw.
#[derive(Debug)]
pub struct NothingToDraw(pub String);

impl std::fmt::Display for NothingToDraw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "nothing to draw: no sample has a positive {} value",
            self.0
        )
    }
}

impl std::error::Error for NothingToDraw {}
