//! The terminal report of a profile: `wasmspy report`'s table, as `go tool pprof -top`'s, and
//! (crate-private) its Pulley opcode tables.

#[cfg(feature = "cli")]
mod opcodes;
mod top;

#[cfg(feature = "cli")]
pub(crate) use opcodes::{opcode_values, opcodes, OpcodeValues};
#[cfg(feature = "cli")]
pub(crate) use top::{percentage, scaled_label, values};
pub use top::{top, Row, Top};
