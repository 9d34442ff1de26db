//! File formats, each a consumer of the [`Profile`] model, and the
//! choice among them by name or by a file's name.

pub mod cpuprofile;
pub mod firefox;
#[cfg(feature = "flamegraph")]
pub mod flamegraph;
pub mod folded;
pub mod pprof;
pub mod pprof_proto;
mod read_error;
pub mod speedscope;
mod write_error;

pub use read_error::ReadError;
pub use write_error::WriteError;

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::str::FromStr;

use crate::profile::Profile;

/// A file format a [`Profile`] can be written in, chosen by name (`--format pprof`) or by the
/// output file's name.
///
/// # Examples
///
/// ```
/// use std::path::Path;
/// use wasmspy::export::Format;
///
/// assert_eq!("pprof".parse::<Format>(), Ok(Format::Pprof));
/// assert!("svgz".parse::<Format>().is_err());
/// assert_eq!(Format::of_path(Path::new("out.speedscope.json")), Some(Format::Speedscope));
/// assert_eq!(Format::for_output(None, Path::new("cpu.out")), Format::Pprof);
///
/// let profile = wasmspy::export::read(b"main;work 3\nmain;rest 1\n").unwrap();
/// let mut folded = Vec::new();
/// Format::Folded.write(&profile, &mut folded).unwrap();
/// assert_eq!(folded, b"main;rest 1\nmain;work 3\n");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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
    /// Chrome DevTools' CPU profile (`.cpuprofile`), which VS Code and Chrome DevTools open.
    CpuProfile,
}

const NAMES: [(&str, Format); 6] = [
    ("pprof", Format::Pprof),
    ("firefox", Format::Firefox),
    ("speedscope", Format::Speedscope),
    ("svg", Format::Svg),
    ("folded", Format::Folded),
    ("cpuprofile", Format::CpuProfile),
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
        } else if ends(".cpuprofile") {
            Format::CpuProfile
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

    /// Writes `profile` in this format to `out`. Fails for what the format cannot hold (a
    /// `.cpuprofile` of a heap profile), and for an SVG without the `flamegraph` feature.
    pub fn write(self, profile: &Profile, out: &mut dyn Write) -> Result<(), WriteError> {
        match self {
            Format::Pprof => Ok(out.write_all(&pprof::encode(profile)?)?),
            Format::Firefox => firefox::write(profile, out),
            Format::Speedscope => speedscope::write(profile, out),
            #[cfg(feature = "flamegraph")]
            Format::Svg => flamegraph::write(profile, out),
            #[cfg(not(feature = "flamegraph"))]
            Format::Svg => Err(WriteError::FeatureOff("flamegraph")),
            Format::Folded => folded::write(profile, out),
            Format::CpuProfile => cpuprofile::write(profile, out),
        }
    }

    /// Whether the format shows samples in time order (and needs them kept so).
    pub fn shows_time(self) -> bool {
        matches!(
            self,
            Format::Firefox | Format::Speedscope | Format::CpuProfile
        )
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
            Format::CpuProfile => {
                format!("open {path} in VS Code, or load it in Chrome DevTools' Performance panel")
            }
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
/// `.cpuprofile` (V8's too), folded stacks.
///
/// ```
/// use wasmspy::export::{read, ReadError};
///
/// let profile = read(b"main;work 3\nmain;rest 1\n").unwrap();
/// assert_eq!(profile.samples.len(), 2);
/// assert!(matches!(read(b"  \n"), Err(ReadError::Empty)));
/// assert!(matches!(read(b"main;work 3\nmain;re"), Err(ReadError::EndsEarly { .. })));
/// ```
pub fn read(bytes: &[u8]) -> Result<Profile, ReadError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ReadError::Empty);
    }
    let profile = if bytes.starts_with(&GZIP_MAGIC) {
        pprof::read(bytes)?
    } else {
        match std::str::from_utf8(bytes).map(str::trim_start) {
            Ok(json) if json.starts_with('{') => {
                if json.contains("speedscope.app/file-format-schema") {
                    speedscope::read(bytes)?
                } else if cpuprofile::is_cpuprofile(json) {
                    cpuprofile::read(bytes, &mut cpuprofile::AsNamed)?
                } else if json.contains("\"meta\"") && json.contains("\"threads\"") {
                    return Err(ReadError::Unsupported("is a Firefox Profiler profile, which cannot be read back: convert from the pprof profile instead".into()));
                } else {
                    return Err(ReadError::Foreign { detail: None });
                }
            }
            // A pprof message may happen to be valid UTF-8: try it first, and if it is
            // neither, say what the more likely one says (a cut pprof message).
            Ok(text) => match pprof::read(bytes) {
                Ok(profile) => profile,
                Err(pprof) => folded::read(text).map_err(|folded| match pprof {
                    ReadError::EndsEarly { .. } => pprof,
                    _ => folded,
                })?,
            },
            Err(_) => pprof::read(bytes)?,
        }
    };
    check_values(&profile)?;
    Ok(profile)
}

/// Whether a file is a `.cpuprofile`.
pub fn is_cpuprofile(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes).is_ok_and(|json| cpuprofile::is_cpuprofile(json.trim_start()))
}

/// Reads a `.cpuprofile`, some of its frames resolved by `frames`.
pub fn read_cpuprofile(
    bytes: &[u8],
    frames: &mut dyn cpuprofile::CallFrames,
) -> Result<Profile, ReadError> {
    let profile = cpuprofile::read(bytes, frames)?;
    check_values(&profile)?;
    Ok(profile)
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Values every consumer can add up: each sample type's absolute values sum within an i64.
fn check_values(profile: &Profile) -> Result<(), ReadError> {
    if profile.sample_types.is_empty() {
        return Err(ReadError::NoSampleTypes);
    }
    for (i, kind) in profile.sample_types.iter().enumerate() {
        let sum = profile.samples.iter().try_fold(0i64, |sum, s| {
            s.values
                .get(i)?
                .checked_abs()
                .and_then(|v| sum.checked_add(v))
        });
        if sum.is_none() {
            return Err(ReadError::TooLarge(format!(
                "{} values too large to add up",
                kind.kind
            )));
        }
    }
    Ok(())
}
