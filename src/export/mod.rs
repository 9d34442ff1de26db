//! File formats, each a consumer of the [`Profile`](crate::profile::Profile) model, and the
//! choice among them by name or by a file's name.

pub mod firefox;
pub mod flamegraph;
pub mod folded;
pub mod pprof;
pub mod pprof_proto;
pub mod speedscope;

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::str::FromStr;

use anyhow::{bail, Result};

use crate::profile::Profile;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Gzipped pprof protobuf (`.pb.gz`, `.pprof`).
    Pprof,
    /// The Firefox Profiler's processed format (`.json`).
    Firefox,
    /// speedscope's file format (`.speedscope.json`).
    Speedscope,
    /// An interactive flame graph (`.svg`).
    Svg,
    /// Folded stacks (`.folded`).
    Folded,
}

const NAMES: [(&str, Format); 5] = [
    ("pprof", Format::Pprof),
    ("firefox", Format::Firefox),
    ("speedscope", Format::Speedscope),
    ("svg", Format::Svg),
    ("folded", Format::Folded),
];

impl Format {
    /// The format a file's name asks for, by its extension.
    pub fn of_path(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        let ends = |suffix: &str| name.ends_with(suffix);
        Some(if ends(".speedscope.json") {
            Format::Speedscope
        } else if ends(".json") {
            Format::Firefox
        } else if ends(".pb.gz") || ends(".pprof") || ends(".pb") {
            Format::Pprof
        } else if ends(".svg") {
            Format::Svg
        } else if ends(".folded") {
            Format::Folded
        } else {
            return None;
        })
    }

    /// `explicit` if given, else what the file's name says, else pprof (as Go's
    /// `-cpuprofile cpu.out` is).
    pub fn for_output(explicit: Option<Format>, path: &Path) -> Format {
        explicit
            .or_else(|| Format::of_path(path))
            .unwrap_or(Format::Pprof)
    }

    pub fn write(self, profile: &Profile, out: &mut dyn Write) -> Result<()> {
        match self {
            Format::Pprof => Ok(out.write_all(&pprof::encode(profile)?)?),
            Format::Firefox => firefox::write(profile, out),
            Format::Speedscope => speedscope::write(profile, out),
            Format::Svg => flamegraph::write(profile, out),
            Format::Folded => folded::write(profile, out),
        }
    }

    /// How to look at a file of this format.
    pub fn how_to_view(self, path: &Path) -> String {
        let path = path.display();
        match self {
            Format::Pprof => format!("go tool pprof -http=: {path}, or wasmspy report {path}"),
            Format::Firefox => {
                format!("load {path} in the Firefox Profiler (profiler.firefox.com)")
            }
            Format::Speedscope => format!("speedscope {path}"),
            Format::Svg => format!("open {path} in a browser"),
            Format::Folded => format!("inferno-flamegraph < {path} > flamegraph.svg"),
        }
    }
}

impl FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        NAMES
            .iter()
            .find(|(name, _)| *name == s)
            .map(|&(_, f)| f)
            .ok_or_else(|| {
                let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
                format!("unknown format `{s}` (one of: {})", names.join(", "))
            })
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = NAMES
            .iter()
            .find(|(_, format)| format == self)
            .map(|(n, _)| *n);
        f.write_str(name.unwrap_or("?"))
    }
}

/// Reads a profile file of any format that can be read: pprof (gzipped or not), speedscope,
/// folded stacks.
pub fn read(bytes: &[u8]) -> Result<Profile> {
    let text = std::str::from_utf8(bytes).ok();
    match text.map(str::trim_start) {
        Some(json) if json.starts_with('{') => {
            if json.contains("speedscope.app/file-format-schema") {
                speedscope::read(bytes)
            } else {
                bail!("only speedscope's JSON can be read back, not the Firefox Profiler's: convert from the pprof profile instead")
            }
        }
        Some(folded) if !folded.is_empty() && !bytes.starts_with(&[0x1f, 0x8b]) => {
            // A pprof message may happen to be valid UTF-8: try it first.
            pprof::read(bytes).or_else(|_| folded::read(folded))
        }
        _ => pprof::read(bytes),
    }
}
