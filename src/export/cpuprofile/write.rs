//! Writing a profile as a `.cpuprofile`: the call tree of its stacks, a node per function
//! under each parent, and its samples in time order, each lasting what it measured.

use std::collections::HashMap;
use std::io::Write;

use rustc_hash::FxHashMap;

use super::url::url_of;
use super::{CallFrame, File, Node, PositionTick, ROOT};
use crate::export::WriteError;
use crate::profile::{Function, FunctionId, Profile, Sample, StackId, ValueType};

/// Where written profiles start, in microseconds: a second, as V8's start at a monotonic
/// clock's time. Not a Unix date's: DevTools keeps times of that size (1.8e15 µs) to a few
/// microseconds only, which moves self time between functions in its Performance panel;
/// nor 0, at which its Performance panel shows nothing.
const START_US: f64 = 1e6;

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
