//! The messages of pprof's `profile.proto` (github.com/google/pprof/proto/profile.proto),
//! derived by hand for prost so that no protoc is needed.

/// A profile: its samples, the locations, functions and mappings they refer to, and one table
/// of every string the other messages index.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    /// What each value of a sample measures: one per value of each sample.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples recorded.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// The binaries loaded, by address range; `mapping[0]` is the main one, if one is.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// The locations samples refer to by `location_id`.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// The functions locations refer to by `Line::function_id`.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// All the strings the other messages index; index 0 is always `""`.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Frames whose function name fully matches this regexp are dropped, with their callees
    /// (string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Frames whose function name fully matches this regexp are kept, even if they match
    /// `drop_frames` (string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// Time of collection, in nanoseconds since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Duration of the profile, if a duration makes sense.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// The kind of events between sampled occurrences (e.g. `cpu`/`nanoseconds`).
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The number of events between sampled occurrences.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form text for the people who read the profile (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The type of the preferred sample value (string index); unset: the last one.
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
    /// wasmspy's: the machine code of the functions samples fell in (`annotate --native`).
    /// A number far from profile.proto's own; readers skip fields they do not know, as
    /// protobuf's decoders (and pprof's own) do.
    #[prost(message, repeated, tag = "1000")]
    pub wasmspy_code: Vec<MachineCode>,
}

/// wasmspy's: the machine code a Wasm function was compiled to.
#[derive(Clone, PartialEq, prost::Message)]
pub struct MachineCode {
    /// The id of the `Mapping` of its module.
    #[prost(uint64, tag = "1")]
    pub mapping_id: u64,
    /// The function's index in the module.
    #[prost(uint32, tag = "2")]
    pub func_index: u32,
    /// The instruction set, as Rust names it (string index).
    #[prost(int64, tag = "3")]
    pub arch: i64,
    /// The code.
    #[prost(bytes = "vec", tag = "4")]
    pub bytes: Vec<u8>,
    /// Pairs, flattened: offset in `bytes` where a Wasm instruction's code starts, then that
    /// instruction's offset in the module.
    #[prost(uint32, repeated, tag = "5")]
    pub instructions: Vec<u32>,
    /// The offsets in `bytes` of the machine instructions samples were taken at.
    #[prost(uint32, repeated, tag = "6")]
    pub sampled_offsets: Vec<u32>,
    /// Their samples' values, added up: one per sample type for each of `sampled_offsets`,
    /// in its order.
    #[prost(int64, repeated, tag = "7")]
    pub sampled_values: Vec<i64>,
}

/// What a value measures, and in which unit.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueType {
    /// The kind, e.g. `cpu` (string index).
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// The unit, e.g. `nanoseconds` (string index).
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// Values recorded in one program context: a stack, and labels.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// The stack, as ids of `Profile::location`; leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One per `Profile::sample_type`, in its order; merged samples add them up.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// More context for the sample: a thread id, an allocation's size, a request…
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// A sample's label: a key with a string or a number.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Label {
    /// What the label is, e.g. `allocation_size` (string index; `pprof::` keys are reserved).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// Its value as a string (string index); at most one of `str` and `num` is set.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// Its value as a number.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// The unit of `num`, e.g. `bytes` (string index); only with `num`.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// A binary mapped into an address range (here: a Wasm module, its addresses offsets in it).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// Unique nonzero id of the mapping.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Address at which the binary is loaded into memory.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// The limit of the address range the mapping occupies.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// Offset in the binary of the first mapped address.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// The object the mapping is loaded from: a file name, or e.g. `[vdso]` (string index).
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// What identifies the binary's version with high probability (string index).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Whether its locations are symbolized with functions.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Whether its locations are symbolized with file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Whether its locations are symbolized with line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Whether its locations are symbolized with inlined functions.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// A code address, with the functions and lines it is in.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Location {
    /// Unique nonzero id of the location.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The id of its `Mapping`; 0 when unknown or not applicable.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The instruction's address, within its mapping's range, if available.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Innermost inlined function first, the function the code belongs to last.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Whether several symbols map to the address (identical code folding); `line` shows one.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// A source position of a location.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Line {
    /// The id of its `Function`.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Line number in the source.
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// Column number in the source.
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// A function, as its locations' lines name it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Function {
    /// Unique nonzero id of the function.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its name, human-readable if available (string index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Its name as the system knows it, e.g. mangled (string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// The source file it is in (string index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// Its first line in the source file.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
