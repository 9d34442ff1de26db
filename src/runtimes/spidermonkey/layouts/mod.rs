//! The layout of the SpiderMonkey that StarlingMonkey (ComponentizeJS) builds link:
//! [`generated`], written by the rules of [`rules`] from the code of the npm package's debug
//! engine, whose `name` section names its functions (it has no DWARF), never typed by hand.
//!
//! The generator is this module's ignored test `write_generated` (`cargo test --features
//! internals --lib spidermonkey::layouts -- --ignored write_generated`, with the package
//! installed by `tests/fixtures/interpreters/build.sh`); the test `generated_is_derived` runs
//! the same rules on the package's three engines and compares what they give with
//! `generated.rs`, text and all. How the rules read code is [`code`]'s; how a function of the
//! debug engine is found in the stripped release and weval engines, [`matching`]'s; where each
//! engine keeps the `JSContext*`, [`addresses`]'.

#[cfg(test)]
mod addresses;
#[cfg(test)]
mod code;
#[cfg(test)]
mod generate;
mod generated;
#[cfg(test)]
mod matching;
#[cfg(test)]
mod rules;

#[cfg(test)]
pub use generated::ENGINES;
pub use generated::LAYOUT;

/// Where an engine keeps the `JSContext*`, at addresses its linker chose.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineAddresses {
    /// The engine's file in the package's `lib/`.
    pub file: &'static str,
    /// StarlingMonkey's `CONTEXT`: derived in the debug engine only.
    pub context: Option<u32>,
    /// SpiderMonkey's `js::TlsContext`, which holds the same `JSContext*`.
    pub tls_context: u32,
}

/// Where SpiderMonkey 147 keeps what a walk of its interpreter's frames reads, on wasm32, as
/// offsets in bytes (bits and values where said), named `struct_field`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpiderMonkeyLayout {
    /// The ComponentizeJS release whose engines the layout was read from.
    pub package_version: &'static str,
    /// `JSContext::activation_`: the innermost `Activation`, interpreter's or JIT's.
    pub cx_activation: u32,
    /// `Activation::prev_`: the next activation out.
    pub activation_prev: u32,
    /// `Activation::kind_`, and its values `Interpreter` and `Jit`.
    pub activation_kind: u32,
    pub activation_kind_interpreter: u32,
    pub activation_kind_jit: u32,
    /// `InterpreterActivation::regs_.pc`: the current bytecode, kept current at every op.
    pub interpreter_regs_pc: u32,
    /// `InterpreterActivation::regs_.fp_`: the innermost `InterpreterFrame`.
    pub interpreter_regs_fp: u32,
    /// `InterpreterActivation::entryFrame_`: the activation's outermost frame (the walk of an
    /// activation's frames ends there).
    pub interpreter_entry_frame: u32,
    /// `InterpreterFrame::flags_`.
    pub frame_flags: u32,
    /// `InterpreterFrame::script_`: the frame's `JSScript`.
    pub frame_script: u32,
    /// `InterpreterFrame::prev_`: the caller's frame, in the same activation.
    pub frame_prev: u32,
    /// `InterpreterFrame::prevpc_`: the caller's bytecode at the call.
    pub frame_prevpc: u32,
    /// `BaseScript::functionOrGlobal_` (`function()`): the script's `JSFunction`, or for a
    /// global script the global object.
    pub script_function: u32,
    /// `BaseScript::sourceObject_`: its `ScriptSourceObject`.
    pub script_source_object: u32,
    /// `BaseScript::extent_.lineno`, `.column`: where the script starts (1-based).
    pub script_lineno: u32,
    pub script_column: u32,
    /// `BaseScript::sharedData_`: its `SharedImmutableScriptData`.
    pub script_shared_data: u32,
    /// `SharedImmutableScriptData::isd_`: its `ImmutableScriptData`.
    pub shared_data_isd: u32,
    /// `ImmutableScriptData::codeLength_`: the bytecode's length.
    pub isd_code_length: u32,
    /// Where the bytecode starts in `ImmutableScriptData` (after its header and flags byte);
    /// the source notes follow it, at `isd_code + codeLength_`.
    pub isd_code: u32,
    /// `ScriptSourceObject`'s `SOURCE_SLOT`: a PrivateValue, the `ScriptSource`'s address in
    /// its low word.
    pub source_object_source: u32,
    /// `ScriptSource::filename_`: a pointer to its `SharedImmutableString`'s box.
    pub source_filename: u32,
    /// The box's characters: a pointer to the NUL-terminated file name.
    pub filename_chars: u32,
    /// `JSFunction`'s `AtomSlot`: a Value, the function's name (an atom: a `JSString`) in
    /// its low word, or undefined.
    pub function_atom: u32,
    /// `JSString`'s flags word, `length`, and characters: inline at `string_chars` where
    /// the flags have `string_inline_bit`, else a pointer there; Latin-1 where they have
    /// `string_latin1_bit`, else UTF-16.
    pub string_flags: u32,
    pub string_length: u32,
    pub string_chars: u32,
    pub string_inline_bit: u32,
    pub string_latin1_bit: u32,
}

/// The fields of [`SpiderMonkeyLayout`] the rules derive, in its order.
#[cfg(test)]
const FIELDS: &[&str] = &[
    "cx_activation",
    "activation_prev",
    "activation_kind",
    "activation_kind_interpreter",
    "activation_kind_jit",
    "interpreter_regs_pc",
    "interpreter_regs_fp",
    "interpreter_entry_frame",
    "frame_flags",
    "frame_script",
    "frame_prev",
    "frame_prevpc",
    "script_function",
    "script_source_object",
    "script_lineno",
    "script_column",
    "script_shared_data",
    "shared_data_isd",
    "isd_code_length",
    "isd_code",
    "source_object_source",
    "source_filename",
    "filename_chars",
    "function_atom",
    "string_flags",
    "string_length",
    "string_chars",
    "string_inline_bit",
    "string_latin1_bit",
];

#[cfg(test)]
mod tests;
