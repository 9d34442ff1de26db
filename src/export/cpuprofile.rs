//! Chrome DevTools' CPU profile (`.cpuprofile`: the DevTools protocol's `Profiler.Profile`),
//! which VS Code and Chrome DevTools open, and which Node's `--cpu-prof` writes.
//!
//! Written: a tree of call-frame nodes (each inlined function a node of its own), rooted at
//! `(root)`; the samples in the order they were taken, each lasting what it measured (so
//! the time axis is the guest's CPU time, or instructions at one a nanosecond); each
//! leaf's source lines as `positionTicks`. Read: V8's profiles and ours, each sample lasting
//! until the next one, as DevTools and VS Code count them; a [`CallFrames`] resolver may
//! replace frames (V8's frames of a Wasm module) by what they are in the source.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use super::read_error::damaged;
use super::{ReadError, WriteError};
use crate::profile::{
    FrameId, Function, FunctionId, Profile, ProfileBuilder, ProfileHeader, Sample, StackId,
    ValueType,
};

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

/// Where written profiles start, in microseconds: a second, as V8's start at a monotonic
/// clock's time. Not a Unix date's: DevTools keeps times of that size (1.8e15 µs) to a few
/// microseconds only, which moves self time between functions in its Performance panel;
/// nor 0, at which its Performance panel shows nothing.
const START_US: f64 = 1e6;

/// What V8 calls the root of every profile.
const ROOT: &str = "(root)";

/// Writes the profile as a `.cpuprofile`, each sample lasting its value of a sample type in
/// nanoseconds (the default one if it is), else its count of samples times the period, or its
/// instructions at one a nanosecond. Fails for a profile of anything else (a heap profile).
pub fn write(profile: &Profile, out: &mut dyn Write) -> Result<(), WriteError> {
    let (measure, ns_per_unit) = duration_measure(profile)?;
    let counts = profile
        .sample_types
        .iter()
        .position(|t| t.kind == "samples" && t.unit == "count");
    let mut tree = Tree::new();
    let mut order: Vec<&Sample> = profile.samples.iter().collect();
    order.sort_by_key(|s| s.time_ns);
    let (mut samples, mut deltas) = (Vec::new(), Vec::new());
    // Nanoseconds so far, and the microseconds written so far: deltas carry the rounding.
    let (mut ns, mut written_us) = (0u64, 0u64);
    let mut first = true;
    for sample in order {
        let measured = sample.values[measure];
        let count = counts.map_or(1, |i| sample.values[i]);
        if measured < 0 || count < 0 {
            return Err(WriteError::Unrepresentable(
                "has negative values (a difference of profiles?), which a .cpuprofile cannot show"
                    .into(),
            ));
        }
        if count == 0 {
            continue;
        }
        let (node, line) = tree.leaf(profile, sample.stack);
        let total = (measured as u64).saturating_mul(ns_per_unit);
        let count = count as u64;
        for k in 0..count {
            // The sample's duration split evenly among the samples it counts.
            let share = total / count + u64::from(k < total % count);
            tree.hit(node, line);
            samples.push(node);
            // A sample lasts until the next one starts.
            if first {
                deltas.push(0.0);
                first = false;
            } else {
                let now_us = ns / 1000;
                deltas.push((now_us - written_us) as f64);
                written_us = now_us;
            }
            ns = ns.saturating_add(share);
        }
    }
    let file = File {
        nodes: tree.nodes,
        start_time: START_US,
        end_time: START_US + (ns / 1000) as f64,
        samples,
        time_deltas: deltas,
    };
    serde_json::to_writer(out, &file).map_err(|e| WriteError::Io(e.into()))
}

/// The sample type whose values are a sample's duration, and nanoseconds per unit: the
/// default type if a time, else the first time; the instructions clock's counts at one
/// instruction a nanosecond; sample counts at the sampling period. Anything else (bytes of
/// a memory profile) is no time: an error.
fn duration_measure(profile: &Profile) -> Result<(usize, u64), WriteError> {
    let types = &profile.sample_types;
    let default = profile.default_sample_type;
    let is_time = |t: &ValueType| t.unit == "nanoseconds";
    if is_time(&types[default]) {
        return Ok((default, 1));
    }
    if let Some(time) = types.iter().position(is_time) {
        return Ok((time, 1));
    }
    match types[default].kind.as_str() {
        "samples" => {
            let period = match profile.period_type.unit.as_str() {
                "nanoseconds" if profile.period > 0 => profile.period as u64,
                _ => 1_000_000,
            };
            Ok((default, period))
        }
        "instructions" => Ok((default, 1)),
        kind => Err(WriteError::Unrepresentable(format!(
            "is a profile of {kind} ({}), and a .cpuprofile holds time",
            types[default].unit
        ))),
    }
}

/// The call tree as nodes are added: one node per function under each parent.
struct Tree {
    nodes: Vec<Node>,
    children: FxHashMap<(u32, FunctionId), u32>,
    scripts: HashMap<String, String>,
    /// Each stack's leaf node, and the line its leaf is at.
    leaves: FxHashMap<StackId, (u32, u32)>,
}

impl Tree {
    fn new() -> Self {
        let root = Node {
            id: 1,
            call_frame: CallFrame {
                function_name: ROOT.into(),
                script_id: "0".into(),
                url: String::new(),
                line_number: -1,
                column_number: -1,
            },
            hit_count: 0,
            children: Vec::new(),
            parent: None,
            position_ticks: Vec::new(),
        };
        Tree {
            nodes: vec![root],
            children: FxHashMap::default(),
            scripts: HashMap::new(),
            leaves: FxHashMap::default(),
        }
    }

    /// The node of `stack`'s leaf, each of its frames' lines (outermost first) a node, and
    /// the line the leaf is at.
    fn leaf(&mut self, profile: &Profile, stack: StackId) -> (u32, u32) {
        if let Some(&leaf) = self.leaves.get(&stack) {
            return leaf;
        }
        let mut node = 1;
        let mut line = 0;
        for &frame in profile.stacks[stack].iter().rev() {
            for l in profile.frames[frame].lines.iter().rev() {
                node = self.child(node, profile, l.function);
                line = l.line;
            }
        }
        self.leaves.insert(stack, (node, line));
        (node, line)
    }

    /// Counts a sample at `node`, and at its `line` (0: unknown).
    fn hit(&mut self, node: u32, line: u32) {
        let node = &mut self.nodes[node as usize - 1];
        node.hit_count += 1;
        if line == 0 {
            return;
        }
        match node.position_ticks.iter_mut().find(|t| t.line == line) {
            Some(tick) => tick.ticks += 1,
            None => node.position_ticks.push(PositionTick { line, ticks: 1 }),
        }
    }

    fn child(&mut self, parent: u32, profile: &Profile, function: FunctionId) -> u32 {
        if let Some(&id) = self.children.get(&(parent, function)) {
            return id;
        }
        let id = self.nodes.len() as u32 + 1;
        let call_frame = self.call_frame(&profile.functions[function]);
        self.nodes.push(Node {
            id,
            call_frame,
            hit_count: 0,
            children: Vec::new(),
            parent: None,
            position_ticks: Vec::new(),
        });
        self.nodes[parent as usize - 1].children.push(id);
        self.children.insert((parent, function), id);
        id
    }

    fn call_frame(&mut self, function: &Function) -> CallFrame {
        let url = url_of(&function.file);
        let next = self.scripts.len() + 1;
        let script_id = match url.is_empty() {
            true => "0".to_string(),
            false => self
                .scripts
                .entry(url.clone())
                .or_insert_with(|| next.to_string())
                .clone(),
        };
        let known = function.start_line > 0;
        CallFrame {
            function_name: function.name.clone(),
            script_id,
            url,
            line_number: if known {
                function.start_line as i64 - 1
            } else {
                -1
            },
            column_number: if known { 0 } else { -1 },
        }
    }
}

/// A source file as V8 writes its scripts: an absolute path as a `file://` URL.
fn url_of(file: &str) -> String {
    if !file.starts_with('/') {
        return file.to_string();
    }
    let mut url = String::from("file://");
    for c in file.chars() {
        match c {
            ' ' => url.push_str("%20"),
            '%' => url.push_str("%25"),
            '#' => url.push_str("%23"),
            '?' => url.push_str("%3F"),
            c => url.push(c),
        }
    }
    url
}

/// A `file://` URL's path, as [`url_of`] writes it.
fn file_of(url: &str) -> String {
    let Some(path) = url.strip_prefix("file://") else {
        return url.to_string();
    };
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).and_then(|&b| hex(b)),
            bytes.get(i + 2).and_then(|&b| hex(b)),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What some call frames stand for in the source, where the profile's writer did not know
/// (V8's frames of a Wasm module, named from the module's DWARF).
pub trait CallFrames {
    /// The frame each of `calls` stands for, added to `builder`; `None` keeps a call frame as
    /// the profile names it. All at once, so that a frame can be told by the others of its
    /// script.
    fn resolve(
        &mut self,
        calls: &[&CallFrame],
        builder: &mut ProfileBuilder,
    ) -> Vec<Option<FrameId>>;
}

/// Resolves nothing: frames as the profile names them.
pub struct AsNamed;

impl CallFrames for AsNamed {
    fn resolve(&mut self, calls: &[&CallFrame], _: &mut ProfileBuilder) -> Vec<Option<FrameId>> {
        vec![None; calls.len()]
    }
}

/// Whether `json` (a file's text, whitespace trimmed) is a `.cpuprofile`.
pub fn is_cpuprofile(json: &str) -> bool {
    json.starts_with('{') && json.contains("\"nodes\"") && json.contains("\"callFrame\"")
}

/// Reads a `.cpuprofile`: samples of `samples`/`count` and `cpu`/`nanoseconds`, in time
/// order, a sample lasting until the next (the last until the profile's end).
pub fn read(bytes: &[u8], frames: &mut dyn CallFrames) -> Result<Profile, ReadError> {
    let file: File = match serde_json::from_slice(bytes) {
        Ok(file) => file,
        Err(e) if e.is_eof() => return Err(ReadError::EndsEarly { part: "its JSON" }),
        Err(e) => {
            return Err(ReadError::Unsupported(format!(
                "is not a .cpuprofile wasmspy can read ({e})"
            )))
        }
    };
    let nodes = NodeTree::of(&file.nodes)?;
    let hits = hits(&file, &nodes)?;
    let mut builder = ProfileBuilder::default();
    let calls: Vec<&CallFrame> = file.nodes.iter().map(|n| &n.call_frame).collect();
    let resolved = frames.resolve(&calls, &mut builder);
    let mut stacks = StackMaker {
        file: &file,
        nodes: &nodes,
        resolved,
        stacks: FxHashMap::default(),
        frames: 0,
    };
    // The lines of each node's samples, from its position ticks, in order.
    let mut lines: FxHashMap<usize, std::vec::IntoIter<(u32, u64)>> = FxHashMap::default();
    let mut current: FxHashMap<usize, (u32, u64)> = FxHashMap::default();
    let mut samples = Vec::with_capacity(hits.len());
    let first_time = hits.first().map_or(0.0, |h| h.time_us);
    for hit in &hits {
        let line = next_line(&file, hit.node, &mut lines, &mut current, hit.count);
        let stack = stacks.stack(hit.node, line, &mut builder)?;
        samples.push(Sample {
            stack,
            labels: Default::default(),
            thread: None,
            time_ns: ((hit.time_us - first_time) * 1000.0).max(0.0) as u64,
            values: vec![hit.count as i64, (hit.duration_us * 1000.0).round() as i64],
        });
    }
    let sum = |i: usize| {
        samples
            .iter()
            .fold(0i64, |sum, s| sum.saturating_add(s.values[i]))
    };
    let (count, total_ns) = (sum(0), sum(1));
    // A start before 2000 is a monotonic clock's (V8's), not a date.
    let start_ns = (file.start_time * 1000.0) as i64;
    let header = ProfileHeader {
        sample_types: vec![
            ValueType::new("samples", "count"),
            ValueType::new("cpu", "nanoseconds"),
        ],
        default_sample_type: 1,
        period_type: ValueType::new("cpu", "nanoseconds"),
        period: if count > 0 { total_ns / count } else { 0 },
        start_unix_ns: if start_ns > 946_684_800_000_000_000 {
            start_ns
        } else {
            0
        },
        duration_ns: ((file.end_time - file.start_time) * 1000.0).max(0.0) as i64,
        comments: Vec::new(),
    };
    Ok(builder.build(header, samples))
}

/// The nodes by id, each with its parent.
struct NodeTree {
    index: FxHashMap<u32, usize>,
    parent: Vec<Option<usize>>,
}

impl NodeTree {
    fn of(nodes: &[Node]) -> Result<Self, ReadError> {
        let mut index = FxHashMap::default();
        for (i, node) in nodes.iter().enumerate() {
            if index.insert(node.id, i).is_some() {
                return Err(damaged!("node {} is there twice", node.id));
            }
        }
        let find = |id: u32| {
            index
                .get(&id)
                .copied()
                .ok_or_else(|| damaged!("it names node {id}, which it does not have"))
        };
        let mut parent = vec![None; nodes.len()];
        for (i, node) in nodes.iter().enumerate() {
            for &child in &node.children {
                let child = find(child)?;
                if parent[child].replace(i).is_some_and(|p| p != i) {
                    return Err(damaged!("node {} has two parents", nodes[child].id));
                }
            }
        }
        for (i, node) in nodes.iter().enumerate() {
            if let Some(p) = node.parent {
                let p = find(p)?;
                if parent[i].replace(p).is_some_and(|q| q != p) {
                    return Err(damaged!("node {} has two parents", node.id));
                }
            }
        }
        depths(&parent)?;
        Ok(NodeTree { index, parent })
    }
}

/// The deepest node read: deeper than V8 samples (255 frames) or wasmspy writes.
const MAX_DEPTH: usize = 16_384;
/// The frames of all distinct stacks read at the most (a file's call tree can make stacks
/// that add up to the square of its size).
const MAX_STACK_FRAMES: usize = 1 << 24;

/// Each node's depth, in time linear in the nodes: an error where parents loop or a node is
/// deeper than [`MAX_DEPTH`].
fn depths(parent: &[Option<usize>]) -> Result<Vec<usize>, ReadError> {
    const UNKNOWN: usize = usize::MAX;
    let mut depth = vec![UNKNOWN; parent.len()];
    let mut path = Vec::new();
    for start in 0..parent.len() {
        // Up to a node of known depth (or the root), then down again.
        let mut at = Some(start);
        while let Some(node) = at.filter(|&n| depth[n] == UNKNOWN) {
            if path.len() > parent.len() {
                return Err(damaged!("its nodes' parents loop"));
            }
            path.push(node);
            at = parent[node];
        }
        let mut below = at.map_or(0, |n| depth[n] + 1);
        while let Some(node) = path.pop() {
            if below > MAX_DEPTH {
                return Err(ReadError::TooLarge(format!(
                    "a call tree deeper than {MAX_DEPTH} frames"
                )));
            }
            depth[node] = below;
            below += 1;
        }
    }
    Ok(depth)
}

/// A run of samples at one node.
struct Hit {
    node: usize,
    time_us: f64,
    duration_us: f64,
    count: u64,
}

/// The samples in time order, each lasting until the next; without samples, each node's hit
/// count at the profile's average interval.
fn hits(file: &File, nodes: &NodeTree) -> Result<Vec<Hit>, ReadError> {
    let span = (file.end_time - file.start_time).max(0.0);
    if file.samples.is_empty() {
        let total = file
            .nodes
            .iter()
            .fold(0u64, |sum, n| sum.saturating_add(n.hit_count));
        let mut time = file.start_time;
        let mut hits = Vec::new();
        for (node, n) in file.nodes.iter().enumerate() {
            if n.hit_count == 0 {
                continue;
            }
            let duration_us = span * n.hit_count as f64 / total as f64;
            hits.push(Hit {
                node,
                time_us: time,
                duration_us,
                count: n.hit_count,
            });
            time += duration_us;
        }
        return Ok(hits);
    }
    if file.time_deltas.len() != file.samples.len() {
        return Err(damaged!(
            "{} samples but {} time deltas",
            file.samples.len(),
            file.time_deltas.len()
        ));
    }
    let mut time = file.start_time;
    let mut timed = Vec::with_capacity(file.samples.len());
    for (&id, &delta) in file.samples.iter().zip(&file.time_deltas) {
        let node = *nodes
            .index
            .get(&id)
            .ok_or_else(|| damaged!("a sample names node {id}, which it does not have"))?;
        time += delta;
        timed.push((time, node));
    }
    // As DevTools reads them: V8's deltas may go back in time.
    timed.sort_by(|a, b| a.0.total_cmp(&b.0));
    let end = file.end_time.max(timed.last().map_or(0.0, |t| t.0));
    Ok(timed
        .iter()
        .enumerate()
        .map(|(i, &(time_us, node))| Hit {
            node,
            time_us,
            duration_us: timed.get(i + 1).map_or(end, |next| next.0) - time_us,
            count: 1,
        })
        .collect())
}

/// The line of `node`'s next `count` samples: its position ticks handed out in order.
fn next_line(
    file: &File,
    node: usize,
    lines: &mut FxHashMap<usize, std::vec::IntoIter<(u32, u64)>>,
    current: &mut FxHashMap<usize, (u32, u64)>,
    count: u64,
) -> u32 {
    let queue = lines.entry(node).or_insert_with(|| {
        let mut ticks: BTreeMap<u32, u64> = BTreeMap::new();
        for t in &file.nodes[node].position_ticks {
            let line = ticks.entry(t.line).or_default();
            *line = line.saturating_add(t.ticks);
        }
        ticks.into_iter().collect::<Vec<_>>().into_iter()
    });
    let slot = current.entry(node).or_insert((0, 0));
    if slot.1 == 0 {
        *slot = queue.next().unwrap_or((0, u64::MAX));
    }
    slot.1 = slot.1.saturating_sub(count);
    slot.0
}

/// Stacks of the profile's nodes, each made once.
struct StackMaker<'a> {
    file: &'a File,
    nodes: &'a NodeTree,
    /// Each node's frame as the resolver gave it, or none.
    resolved: Vec<Option<FrameId>>,
    /// The stack of each (leaf, line) made so far, and their frames in all.
    stacks: FxHashMap<(usize, u32), StackId>,
    frames: usize,
}

impl StackMaker<'_> {
    /// The stack of a sample at `leaf`, its leaf at `line` (0: unknown), leaf first.
    fn stack(
        &mut self,
        leaf: usize,
        line: u32,
        builder: &mut ProfileBuilder,
    ) -> Result<StackId, ReadError> {
        if let Some(&stack) = self.stacks.get(&(leaf, line)) {
            return Ok(stack);
        }
        let mut frames = Vec::new();
        let mut at = Some(leaf);
        while let Some(node) = at {
            at = self.nodes.parent[node];
            let call = &self.file.nodes[node].call_frame;
            if at.is_none() && call.function_name == ROOT {
                break;
            }
            let line = if node == leaf { line } else { 0 };
            frames.push(self.frame(node, line, builder));
        }
        self.frames += frames.len();
        if self.frames > MAX_STACK_FRAMES {
            return Err(ReadError::TooLarge(format!(
                "stacks of more than {MAX_STACK_FRAMES} frames in all"
            )));
        }
        let stack = builder.stack(&frames);
        self.stacks.insert((leaf, line), stack);
        Ok(stack)
    }

    fn frame(&self, node: usize, line: u32, builder: &mut ProfileBuilder) -> FrameId {
        if let Some(frame) = self.resolved.get(node).copied().flatten() {
            return frame;
        }
        let call = &self.file.nodes[node].call_frame;
        let function = Function {
            name: match call.function_name.as_str() {
                "" => "(anonymous)".into(),
                name => name.into(),
            },
            system_name: call.function_name.clone(),
            file: file_of(&call.url),
            start_line: u32::try_from(call.line_number + 1).unwrap_or(0),
        };
        builder.line_frame(&function, line, None, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile of nodes `(id, name, children)`, each sampled once.
    fn profile(nodes: &[(u32, &str, &[u32])]) -> Vec<u8> {
        let nodes: Vec<String> = nodes
            .iter()
            .map(|(id, name, children)| {
                format!(
                    r#"{{"id":{id},"callFrame":{{"functionName":"{name}","scriptId":"1","url":"","lineNumber":-1,"columnNumber":-1}},"children":{children:?}}}"#
                )
            })
            .collect();
        let ids: Vec<u32> = (1..=nodes.len() as u32).collect();
        let deltas = vec![1000; ids.len()];
        format!(
            r#"{{"nodes":[{}],"startTime":0,"endTime":{},"samples":{ids:?},"timeDeltas":{deltas:?}}}"#,
            nodes.join(","),
            1000 * (ids.len() + 2)
        )
        .into_bytes()
    }

    fn error(bytes: &[u8]) -> String {
        format!("{:#}", read(bytes, &mut AsNamed).unwrap_err())
    }

    #[test]
    fn a_tree_is_read_with_its_times() {
        let p = read(
            &profile(&[(1, "(root)", &[2]), (2, "main", &[3]), (3, "leaf", &[])]),
            &mut AsNamed,
        )
        .unwrap();
        // Sample 1 at the root shows no frame; then main, then leaf under main, until the
        // end, a millisecond after it.
        let stacks: Vec<Vec<&str>> = p
            .samples
            .iter()
            .map(|s| p.stacks[s.stack].iter().map(|&f| p.frame_name(f)).collect())
            .collect();
        assert_eq!(stacks, [vec![], vec!["main"], vec!["leaf", "main"]]);
        let times: Vec<i64> = p.samples.iter().map(|s| s.values[1]).collect();
        assert_eq!(times, [1_000_000, 1_000_000, 2_000_000]);
    }

    #[test]
    fn damaged_trees_are_said_not_followed() {
        let looping = profile(&[(1, "a", &[2]), (2, "b", &[1])]);
        assert_eq!(error(&looping), "is damaged: its nodes' parents loop");
        let two = profile(&[(1, "(root)", &[2, 3]), (2, "b", &[3]), (3, "c", &[])]);
        assert_eq!(error(&two), "is damaged: node 3 has two parents");
        let missing = profile(&[(1, "(root)", &[7])]);
        assert_eq!(
            error(&missing),
            "is damaged: it names node 7, which it does not have"
        );
        // A chain deeper than any profile's.
        let chain: Vec<(u32, String, Vec<u32>)> = (1..=MAX_DEPTH as u32 + 2)
            .map(|id| (id, format!("f{id}"), vec![id + 1]))
            .collect();
        let mut nodes: Vec<(u32, &str, &[u32])> = chain
            .iter()
            .map(|(id, name, children)| (*id, name.as_str(), children.as_slice()))
            .collect();
        nodes.last_mut().unwrap().2 = &[];
        assert_eq!(
            error(&profile(&nodes)),
            format!("has a call tree deeper than {MAX_DEPTH} frames")
        );
    }

    #[test]
    fn urls_and_paths() {
        assert_eq!(url_of("/a b/x%.c"), "file:///a%20b/x%25.c");
        assert_eq!(file_of("file:///a%20b/x%25.c"), "/a b/x%.c");
        assert_eq!(url_of("src/x.c"), "src/x.c");
        assert_eq!(file_of("wasm://wasm/0001"), "wasm://wasm/0001");
    }
}
