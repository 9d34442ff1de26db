//! Why a profile file cannot be read. Each error's text is a phrase about the file, written to
//! follow its name (`profile.pb.gz ends early (its gzip stream is cut)`).

use thiserror::Error as ThisError;

/// What none of the readers understands: see [`ReadError::Foreign`].
const FOREIGN: &str = "is not a pprof, speedscope, .cpuprofile or folded-stacks profile";

/// Why [`read`](super::read) (or one format's reader) cannot read a file.
#[derive(Debug, ThisError)]
#[non_exhaustive]
pub enum ReadError {
    /// The file holds nothing, or only whitespace.
    #[error("is empty")]
    Empty,
    /// The file was cut short: `part` (its gzip stream, its pprof message, its JSON, its last
    /// line) ends before it should, as a file still being written or a partial copy does.
    #[error("ends early ({part} is cut)")]
    EndsEarly {
        /// What of the file is cut.
        part: &'static str,
    },
    /// The file is of none of the formats read.
    #[error("{FOREIGN}{}", detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Foreign {
        /// Where the file first parts from the nearest format, when known.
        detail: Option<String>,
    },
    /// The file is of a known format, but of a kind wasmspy does not read (a Firefox Profiler
    /// profile, a gzip file of something else, an evented speedscope profile…).
    #[error("{0}")]
    Unsupported(String),
    /// The file is of its format but contradicts itself (a sample naming a location it does
    /// not have, a node with two parents…).
    #[error("is damaged: {0}")]
    Damaged(String),
    /// The file is well formed but larger than a profile is read to be (its call tree's depth,
    /// its values' sum).
    #[error("has {0}")]
    TooLarge(String),
    /// The file has no sample types: nothing to count.
    #[error("has no sample types")]
    NoSampleTypes,
}

/// `Err(ReadError::Damaged(..))` from `format!`'s arguments.
macro_rules! damaged {
    ($($arg:tt)*) => {
        $crate::export::ReadError::Damaged(format!($($arg)*))
    };
}
pub(crate) use damaged;
