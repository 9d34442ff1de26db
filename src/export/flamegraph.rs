//! An interactive flame graph (SVG, with inferno's search and zoom scripts) of the profile's
//! default sample type, drawn from its folded stacks.

use std::io::Write;

use inferno::flamegraph::{self, Options};

use super::{folded, WriteError};
use crate::profile::Profile;

/// Writes the flame graph of the profile's default sample type as SVG;
/// [`WriteError::NothingToDraw`] when no stack has a positive value.
pub fn write(profile: &Profile, out: &mut dyn Write) -> Result<(), WriteError> {
    let index = profile.default_sample_type;
    let kind = &profile.sample_types[index];
    let lines: Vec<String> = folded::stacks(profile, index)
        .into_iter()
        .filter(|&(_, value)| value > 0)
        .map(|(stack, value)| format!("{stack} {value}"))
        .collect();
    if lines.is_empty() {
        return Err(WriteError::NothingToDraw(kind.kind.clone()));
    }
    let mut options = Options::default();
    options.title = match profile.mappings.first() {
        Some(m) => format!("{}: {}", m.file_name, kind.kind),
        None => kind.kind.clone(),
    };
    options.count_name = kind.unit.clone();
    options.deterministic = true;
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
        .map_err(WriteError::Io)
}
