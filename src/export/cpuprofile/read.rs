//! Reading a `.cpuprofile`, V8's or ours: its call tree checked, its samples each lasting
//! until the next, and the [`CallFrames`] hook that names frames the writer could not.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::url::file_of;
use super::{CallFrame, File, Node, ROOT};
use crate::export::read_error::damaged;
use crate::export::ReadError;
use crate::profile::{
    FrameId, Function, Profile, ProfileBuilder, ProfileHeader, Sample, StackId, ValueType,
};

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
}
