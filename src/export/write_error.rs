//! Why a profile cannot be written in a format.

use thiserror::Error as ThisError;

/// Why [`Format::write`](super::Format::write) (or one format's writer) wrote no profile.
#[derive(Debug, ThisError)]
#[non_exhaustive]
pub enum WriteError {
    /// The format cannot show this profile: a `.cpuprofile` holds time, not bytes of a memory
    /// profile, nor the negative values of a difference of two profiles.
    #[error("{0}")]
    Unrepresentable(String),
    /// A flame graph of a profile in which no stack has a positive value of the type drawn (a
    /// guest too short to be sampled): there is nothing to draw.
    #[error("nothing to draw: no sample has a positive {0} value")]
    NothingToDraw(String),
    /// The format is left out of this build (its cargo feature, named, is off).
    #[error("this build of wasmspy writes no {0} (its `{0}` feature is off)")]
    FeatureOff(&'static str),
    /// Writing to the output failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
