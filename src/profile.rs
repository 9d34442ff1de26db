//! The format-neutral profile model: samples of interned stacks, each sample carrying several
//! values (one per sample type). The record stage builds it; exporters only read it.

use std::borrow::Borrow;
use std::hash::Hash;
use std::marker::PhantomData;
use std::ops::{Index, IndexMut};
use std::sync::Arc;

use rustc_hash::FxHashMap;

/// Value indices of a sample: `samples`, what the clock measured (`cpu`, or `instructions`),
/// and in wall-clock mode `wall`.
///
/// This one: how many samples (`samples`/`count`).
pub const SAMPLES: usize = 0;
/// What the clock measured: the guest thread's CPU time (`cpu`/`nanoseconds`), or the Wasm
/// instructions it executed (`instructions`/`count`).
pub const CPU: usize = 1;
/// The wall time, in wall-clock mode (`wall`/`nanoseconds`).
pub const WALL: usize = 2;

/// Value indices of a heap profile's samples, as Go's.
///
/// This one: the blocks allocated (`alloc_objects`/`count`).
pub const ALLOC_OBJECTS: usize = 0;
/// The bytes allocated (`alloc_space`/`bytes`).
pub const ALLOC_SPACE: usize = 1;
/// The blocks allocated and not freed yet (`inuse_objects`/`count`).
pub const INUSE_OBJECTS: usize = 2;
/// The bytes allocated and not freed yet (`inuse_space`/`bytes`).
pub const INUSE_SPACE: usize = 3;

/// The place of an item in one of a profile's [`Table`]s. Each table has an id type of its
/// own, so that an id of one table cannot index another.
pub trait Id: Copy + Eq + Ord + Hash + std::fmt::Debug {
    /// The id of the item at `index` of its table.
    fn from_index(index: usize) -> Self;
    /// The item's place in its table, from 0.
    fn index(self) -> usize;
}

/// Declares id types: `ids! { /// doc \n Name; ... }`.
macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(usize);

        impl $crate::profile::Id for $name {
            fn from_index(index: usize) -> Self {
                $name(index)
            }

            fn index(self) -> usize {
                self.0
            }
        }
    )*};
}
pub(crate) use ids;

ids! {
    /// A [`Mapping`] of [`Profile::mappings`].
    MappingId;
    /// A [`Function`] of [`Profile::functions`].
    FunctionId;
    /// A [`Frame`] of [`Profile::frames`].
    FrameId;
    /// A stack of [`Profile::stacks`].
    StackId;
}

/// Items numbered by their own id type `I`, in the order they were added.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table<I, T> {
    items: Vec<T>,
    id: PhantomData<fn() -> I>,
}

impl<I: Id, T> Table<I, T> {
    /// Adds `item` last; its id.
    pub fn push(&mut self, item: T) -> I {
        self.items.push(item);
        I::from_index(self.items.len() - 1)
    }

    /// The item of `id`, if the table has one (indexing panics instead).
    pub fn get(&self, id: I) -> Option<&T> {
        self.items.get(id.index())
    }

    /// The first item added, if any (exporters name a profile after its first mapping).
    pub fn first(&self) -> Option<&T> {
        self.items.first()
    }

    /// How many items the table has.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the table has no item.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The items in id order.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.items.iter()
    }

    /// The items in id order, to change in place.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, T> {
        self.items.iter_mut()
    }

    /// The items with their ids.
    pub fn iter_ids(&self) -> impl DoubleEndedIterator<Item = (I, &T)> + ExactSizeIterator {
        self.items
            .iter()
            .enumerate()
            .map(|(i, item)| (I::from_index(i), item))
    }

    /// Every id of the table, in order.
    pub fn ids(&self) -> impl DoubleEndedIterator<Item = I> + ExactSizeIterator {
        (0..self.items.len()).map(I::from_index)
    }
}

impl<I, T> Default for Table<I, T> {
    fn default() -> Self {
        Table {
            items: Vec::new(),
            id: PhantomData,
        }
    }
}

impl<I, T> From<Vec<T>> for Table<I, T> {
    fn from(items: Vec<T>) -> Self {
        Table {
            items,
            id: PhantomData,
        }
    }
}

impl<I, T> FromIterator<T> for Table<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(items: It) -> Self {
        Vec::from_iter(items).into()
    }
}

impl<'a, I: Id, T> IntoIterator for &'a Table<I, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<I: Id, T> Index<I> for Table<I, T> {
    type Output = T;

    fn index(&self, id: I) -> &T {
        &self.items[id.index()]
    }
}

impl<I: Id, T> IndexMut<I> for Table<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.items[id.index()]
    }
}

/// What a sample value measures, e.g. `cpu`/`nanoseconds`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValueType {
    /// What is measured: `cpu`, `samples`, `alloc_space`… (pprof's `type`).
    pub kind: String,
    /// Its unit: `nanoseconds`, `count`, `bytes`…
    pub unit: String,
}

impl ValueType {
    /// `kind` measured in `unit`.
    pub fn new(kind: &str, unit: &str) -> Self {
        ValueType {
            kind: kind.to_string(),
            unit: unit.to_string(),
        }
    }
}

/// A loaded Wasm module: the "binary" that frame addresses are offsets into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The name the module was registered under (a core module of a component:
    /// `component/module`).
    pub file_name: String,
    /// Hex digest of the module's bytes, so a profile names exactly the module it was taken of.
    pub build_id: String,
    /// Length of the module's bytes, which frame addresses are below.
    pub size: u64,
    /// For a host's object (its executable, a library), where it is loaded: its frames'
    /// addresses are the process's, from here to `start + size`. 0 for a Wasm module, whose
    /// frames' addresses are offsets in its bytes.
    pub start: u64,
}

/// A function of the guest's source (or of the host, or Wasmtime), as frames' lines name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    /// Demangled name.
    pub name: String,
    /// Name as it appears in the module (mangled).
    pub system_name: String,
    /// Source file it is defined in; empty when unknown.
    pub file: String,
    /// Line of `file` it starts at; 0 when unknown.
    pub start_line: u32,
}

/// One source position of a frame; a frame has several when calls were inlined.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Line {
    /// The function the position is in.
    pub function: FunctionId,
    /// Source line, from 1; 0 when unknown.
    pub line: u32,
    /// Source column, from 1; 0 when unknown.
    pub column: u32,
}

/// A code address with its symbolization.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The module the code is in: `None` for Wasmtime's and unknown host calls' frames, and
    /// in profiles read from formats that name no modules.
    pub mapping: Option<MappingId>,
    /// Offset of the instruction in the module's bytes.
    pub address: u64,
    /// Innermost (most deeply inlined) first; never empty.
    pub lines: Vec<Line>,
}

/// A sample's labels, as pprof's string labels (key, value), e.g. the store or request it was
/// taken in; empty for none.
pub type Labels = Arc<[(String, String)]>;

/// The labels of a sample of Pulley's bytecode: the opcode of the instruction sampled, and of
/// the instructions before and after it in its function's bytecode (see `report --opcodes`).
///
/// This one: the opcode of the instruction sampled.
pub const PULLEY_OP_LABEL: &str = "pulley_op";
/// The opcode of the instruction before the one sampled ([`PULLEY_OP_LABEL`]).
pub const PULLEY_PREV_LABEL: &str = "pulley_prev";
/// The opcode of the instruction after the one sampled ([`PULLEY_OP_LABEL`]).
pub const PULLEY_NEXT_LABEL: &str = "pulley_next";

/// The machine code a Wasm function was compiled to (by Cranelift or Winch), which a CPU
/// profile of the signal sampler keeps for the functions its samples' leaves are in, the
/// hottest first, with the samples taken at each machine instruction: a profile taken on one
/// machine is annotated on another, with no compiler or engine settings to reproduce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineCode {
    /// The module the function is in.
    pub mapping: MappingId,
    /// The function's index in the module (imports counted).
    pub func_index: u32,
    /// The instruction set, as Rust names it (`std::env::consts::ARCH`: `x86_64`, `aarch64`).
    pub arch: String,
    /// The function's code, from its first byte.
    pub bytes: Vec<u8>,
    /// Where the code of each Wasm instruction starts, by offset in `bytes`: (offset in
    /// `bytes`, the instruction's offset in the module's bytes), as Wasmtime's address map
    /// gives them; a Wasm instruction's code may come in several stretches.
    pub instructions: Vec<(u32, u32)>,
    /// The samples taken in the function's code, by the offset in `bytes` of the machine
    /// instruction they were taken at: their values (one per [`Profile::sample_types`]
    /// entry), added up. They are also among [`Profile::samples`], by stack.
    pub sampled: Vec<(u32, Vec<i64>)>,
}

/// The operating system's id of the thread a sample was taken on (Linux's `gettid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ThreadId(pub u32);

/// A stack's values: one sample, or the samples of a stack (with the same labels and thread)
/// added up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Its frames, in [`Profile::stacks`].
    pub stack: StackId,
    /// The labels it was taken with; empty for none.
    pub labels: Labels,
    /// The thread it was taken on, where known (formats that read profiles mostly do not say).
    pub thread: Option<ThreadId>,
    /// Since the start of the profile.
    pub time_ns: u64,
    /// One per [`Profile::sample_types`] entry.
    pub values: Vec<i64>,
}

/// A profile: what its values measure, the modules, functions, frames and stacks its samples
/// refer to, and the samples. The profiler makes one ([`Profiler::stop`](crate::Profiler::stop)),
/// [`export::read`](crate::export::read) reads one, a [`ProfileBuilder`] builds one;
/// [`Format::write`](crate::export::Format::write) writes it.
///
/// # Examples
///
/// ```
/// use wasmspy::profile::FrameKind;
///
/// let profile = wasmspy::export::read(b"main;work 3\nmain;rest 1\n").unwrap();
/// let value = profile.sample_index("value").unwrap();
/// assert_eq!(profile.total(value), 4);
/// // A stack lists its frames leaf first.
/// let leaf = profile.stacks[profile.samples[0].stack][0];
/// assert_eq!(profile.frame_name(leaf), "work");
/// assert_eq!(profile.frame_kind(leaf), FrameKind::Guest);
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Profile {
    /// What each of a sample's values measures, in order (pprof's `sample_type`).
    pub sample_types: Vec<ValueType>,
    /// Index into `sample_types` of the type a viewer shows first.
    pub default_sample_type: usize,
    /// What `period` counts: `cpu`/`nanoseconds`, `space`/`bytes`…
    pub period_type: ValueType,
    /// The (mean) interval between samples, in `period_type`'s unit.
    pub period: i64,
    /// When the recording started, in nanoseconds since the Unix epoch; 0 when unknown.
    pub start_unix_ns: i64,
    /// How long the recording lasted.
    pub duration_ns: i64,
    /// The modules the frames are in.
    pub mappings: Table<MappingId, Mapping>,
    /// The functions the frames' lines are in.
    pub functions: Table<FunctionId, Function>,
    /// The distinct frames of the stacks.
    pub frames: Table<FrameId, Frame>,
    /// Each stack lists frames leaf first, root last.
    pub stacks: Table<StackId, Vec<FrameId>>,
    /// The samples, each of a stack of `stacks`.
    pub samples: Vec<Sample>,
    /// Notes for whoever reads the profile: how it was recorded, what it leaves out.
    pub comments: Vec<String>,
    /// The machine code of the functions samples fell in, where the profile keeps it.
    pub code: Vec<MachineCode>,
}

/// The frame of samples in Wasmtime's own code.
pub const RUNTIME_FRAME: &str = "[wasmtime]";
/// The root of the host's frames outside any guest call (see
/// [`crate::ProfilerOptions::host_frames`]).
pub const HOST_ROOT_FRAME: &str = "[host]";
/// The frame of samples in a host function reached other than by a direct call.
pub const UNKNOWN_HOST_CALL_FRAME: &str = "[host call]";

/// Where a frame's code is, for viewers that color or categorize frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameKind {
    /// The guest's own code (or, in a profile read from elsewhere, any code).
    Guest,
    /// A host function the guest called (an import), or an unknown one.
    HostCall,
    /// Wasmtime itself, and the host's code around it (see
    /// [`crate::ProfilerOptions::host_frames`]): the group `[wasmtime]` names.
    Runtime,
}

impl Profile {
    /// Where a frame's code is: the recorder gives an import's frame its module's mapping
    /// and no address, and the runtime and unknown host calls their own names.
    pub fn frame_kind(&self, frame: FrameId) -> FrameKind {
        if self.is_host_frame(frame) {
            return FrameKind::Runtime;
        }
        let f = &self.frames[frame];
        match (f.mapping, self.frame_name(frame)) {
            (Some(_), _) if f.address == 0 => FrameKind::HostCall,
            (None, UNKNOWN_HOST_CALL_FRAME) => FrameKind::HostCall,
            (None, RUNTIME_FRAME | HOST_ROOT_FRAME) => FrameKind::Runtime,
            _ => FrameKind::Guest,
        }
    }

    /// Whether `frame` is the host's own code (an object loaded in the process, see
    /// [`crate::ProfilerOptions::host_frames`]).
    pub fn is_host_frame(&self, frame: FrameId) -> bool {
        self.frames[frame]
            .mapping
            .is_some_and(|m| self.mappings[m].start != 0)
    }

    /// The index of the sample type named `kind` (`cpu`, `alloc_space`…) or numbered so.
    pub fn sample_index(&self, kind: &str) -> Option<usize> {
        self.sample_types
            .iter()
            .position(|t| t.kind == kind)
            .or_else(|| kind.parse().ok().filter(|&i| i < self.sample_types.len()))
    }

    /// Sum of one value over all samples.
    pub fn total(&self, value_index: usize) -> i64 {
        self.samples.iter().map(|s| s.values[value_index]).sum()
    }

    /// Name of the function a frame shows (its innermost line's function).
    pub fn frame_name(&self, frame: FrameId) -> &str {
        &self.functions[self.frames[frame].lines[0].function].name
    }
}

/// Gives equal values one id, so each distinct function, frame and stack is stored once.
#[derive(Debug)]
struct Interner<I, T> {
    items: Table<I, T>,
    ids: FxHashMap<T, I>,
}

impl<I, T> Default for Interner<I, T> {
    fn default() -> Self {
        Interner {
            items: Table::default(),
            ids: FxHashMap::default(),
        }
    }
}

impl<I: Id, T: Clone + Eq + Hash> Interner<I, T> {
    fn intern<Q>(&mut self, item: &Q) -> I
    where
        T: Borrow<Q>,
        Q: ToOwned<Owned = T> + Eq + Hash + ?Sized,
    {
        if let Some(&id) = self.ids.get(item) {
            return id;
        }
        let id = self.items.push(item.to_owned());
        self.ids.insert(item.to_owned(), id);
        id
    }
}

/// Builds a [`Profile`] incrementally; the header fields are supplied when it is built.
///
/// # Examples
///
/// A profile of two stacks of functions known by name only, as folded stacks give them:
///
/// ```
/// use wasmspy::profile::{
///     FrameId, Function, ProfileBuilder, ProfileHeader, Sample, StackId, ValueType,
/// };
///
/// fn frame(builder: &mut ProfileBuilder, name: &str) -> FrameId {
///     let function = Function {
///         name: name.into(),
///         system_name: name.into(),
///         file: String::new(),
///         start_line: 0,
///     };
///     builder.function_frame(&function, None, 0)
/// }
/// let sample = |stack: StackId, count: i64| Sample {
///     stack,
///     labels: Default::default(),
///     thread: None,
///     time_ns: 0,
///     values: vec![count],
/// };
///
/// let mut builder = ProfileBuilder::default();
/// let (main, work) = (frame(&mut builder, "main"), frame(&mut builder, "work"));
/// // Equal frames and stacks get one id.
/// assert_eq!(frame(&mut builder, "work"), work);
/// let samples = vec![
///     sample(builder.stack(&[work, main]), 3),
///     sample(builder.stack(&[main]), 1),
/// ];
/// let header = ProfileHeader {
///     sample_types: vec![ValueType::new("samples", "count")],
///     ..ProfileHeader::default()
/// };
/// let profile = builder.build(header, samples);
/// assert_eq!((profile.functions.len(), profile.stacks.len()), (2, 2));
/// assert_eq!(profile.total(0), 4);
/// assert_eq!(profile.frame_name(profile.stacks[profile.samples[0].stack][0]), "work");
/// ```
#[derive(Debug, Default)]
pub struct ProfileBuilder {
    mappings: Table<MappingId, Mapping>,
    functions: Interner<FunctionId, Function>,
    frames: Interner<FrameId, Frame>,
    stacks: Interner<StackId, Vec<FrameId>>,
}

/// The parts of a profile that describe the whole recording rather than its samples.
#[derive(Clone, Debug, Default)]
pub struct ProfileHeader {
    /// As [`Profile::sample_types`].
    pub sample_types: Vec<ValueType>,
    /// As [`Profile::default_sample_type`].
    pub default_sample_type: usize,
    /// As [`Profile::period_type`].
    pub period_type: ValueType,
    /// As [`Profile::period`].
    pub period: i64,
    /// As [`Profile::start_unix_ns`].
    pub start_unix_ns: i64,
    /// As [`Profile::duration_ns`].
    pub duration_ns: i64,
    /// As [`Profile::comments`].
    pub comments: Vec<String>,
}

impl ProfileBuilder {
    /// Adds a module (each call adds one, the same module again too).
    pub fn add_mapping(&mut self, mapping: Mapping) -> MappingId {
        self.mappings.push(mapping)
    }

    /// The id of `function`, added if it is new.
    pub fn function(&mut self, function: &Function) -> FunctionId {
        self.functions.intern(function)
    }

    /// The id of `frame`, added if it is new.
    pub fn frame(&mut self, frame: &Frame) -> FrameId {
        self.frames.intern(frame)
    }

    /// A frame that is `function` alone, without a line: a function known by name only.
    pub fn function_frame(
        &mut self,
        function: &Function,
        mapping: Option<MappingId>,
        address: u64,
    ) -> FrameId {
        self.line_frame(function, 0, mapping, address)
    }

    /// A frame at `line` of `function` (0: unknown).
    pub fn line_frame(
        &mut self,
        function: &Function,
        line: u32,
        mapping: Option<MappingId>,
        address: u64,
    ) -> FrameId {
        let function = self.function(function);
        self.frame(&Frame {
            mapping,
            address,
            lines: vec![Line {
                function,
                line,
                column: 0,
            }],
        })
    }

    /// The id of the stack of `frames` (leaf first), added if it is new.
    pub fn stack(&mut self, frames: &[FrameId]) -> StackId {
        self.stacks.intern(frames)
    }

    /// A profile of `samples`, whose stacks are this builder's.
    pub fn build(&self, header: ProfileHeader, samples: Vec<Sample>) -> Profile {
        Profile {
            sample_types: header.sample_types,
            default_sample_type: header.default_sample_type,
            period_type: header.period_type,
            period: header.period,
            start_unix_ns: header.start_unix_ns,
            duration_ns: header.duration_ns,
            mappings: self.mappings.clone(),
            functions: self.functions.items.clone(),
            frames: self.frames.items.clone(),
            stacks: self.stacks.items.clone(),
            samples,
            comments: header.comments,
            code: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str) -> Function {
        Function {
            name: name.into(),
            system_name: name.into(),
            file: String::new(),
            start_line: 0,
        }
    }

    #[test]
    fn equal_items_share_one_id() {
        let mut b = ProfileBuilder::default();
        let f = b.function(&function("a"));
        assert_eq!(b.function(&function("a")), f);
        assert_ne!(b.function(&function("b")), f);
        let frame = Frame {
            mapping: None,
            address: 7,
            lines: vec![Line {
                function: f,
                line: 0,
                column: 0,
            }],
        };
        let fr = b.frame(&frame);
        assert_eq!(b.frame(&frame.clone()), fr);
        let s = b.stack(&[fr]);
        assert_eq!(b.stack(&[fr]), s);
        assert_ne!(b.stack(&[fr, fr]), s);
        let sample = |time_ns, cpu| Sample {
            stack: s,
            labels: Default::default(),
            thread: None,
            time_ns,
            values: vec![1, cpu],
        };
        let p = b.build(ProfileHeader::default(), vec![sample(0, 10), sample(5, 30)]);
        assert_eq!(p.functions.len(), 2);
        assert_eq!(p.stacks, Table::from(vec![vec![fr], vec![fr, fr]]));
        assert_eq!(p.total(1), 40);
        assert_eq!(p.frame_name(fr), "a");
    }
}
