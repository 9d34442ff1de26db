//! Chrome DevTools' CPU profile (`.cpuprofile`: the DevTools protocol's `Profiler.Profile`),
//! which VS Code and Chrome DevTools open, and which Node's `--cpu-prof` writes.
//!
//! Written: a tree of call-frame nodes (each inlined function a node of its own), rooted at
//! `(root)`; the samples in the order they were taken, each lasting what it measured (so
//! the time axis is the guest's CPU time, or instructions at one a nanosecond); each
//! leaf's source lines as `positionTicks`. Read: V8's profiles and ours, each sample lasting
//! until the next one, as DevTools and VS Code count them; a [`CallFrames`] resolver may
//! replace frames (V8's frames of a Wasm module) by what they are in the source.
//!
//! This module holds the file's JSON shapes, which the writer and the reader share.

mod read;
mod url;
mod write;

pub use read::{is_cpuprofile, read, AsNamed, CallFrames};
pub use write::write;

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    nodes: Vec<Node>,
    /// Microseconds.
    start_time: f64,
    end_time: f64,
    #[serde(default)]
    samples: Vec<u32>,
    /// Microseconds from the previous sample (the first: from `start_time`).
    #[serde(default)]
    time_deltas: Vec<f64>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Node {
    id: u32,
    call_frame: CallFrame,
    #[serde(default)]
    hit_count: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    children: Vec<u32>,
    /// Older profiles name a node's parent instead of its children.
    #[serde(default, skip_serializing)]
    parent: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    position_ticks: Vec<PositionTick>,
}

/// A node's function, as the profile names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallFrame {
    /// The function's name; empty for V8's anonymous functions.
    pub function_name: String,
    /// The script (source file) it is in, as the profile numbers them; `"0"` for none.
    #[serde(deserialize_with = "script_id")]
    pub script_id: String,
    /// The script's URL (a file's as `file://`); empty when unknown.
    pub url: String,
    /// 0-based; -1 when unknown. A Wasm function's is 0.
    pub line_number: i64,
    /// 0-based; -1 when unknown. A Wasm function's is its body's offset in the module.
    pub column_number: i64,
}

#[derive(Serialize, Deserialize)]
struct PositionTick {
    /// 1-based.
    line: u32,
    ticks: u64,
}

/// V8 writes script ids as strings; some tools as numbers.
fn script_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(i64),
    }
    Ok(match Id::deserialize(d)? {
        Id::Text(text) => text,
        Id::Number(n) => n.to_string(),
    })
}

/// What V8 calls the root of every profile.
const ROOT: &str = "(root)";
