//! The layout of the SpiderMonkey that StarlingMonkey (ComponentizeJS) builds link:
//! [`generated`], written by the rules of [`rules`] (and of [`rules_script`], for scripts'
//! flags, notes and `Value` tags, and [`rules_pbl`], for the portable baseline interpreter's
//! frames) from the code of the npm package's debug engine, whose `name` section names its
//! functions (it has no DWARF), never typed by hand.
//!
//! The generator is this module's ignored test `write_generated` (`cargo test --features
//! internals --lib spidermonkey::layouts -- --ignored write_generated`, with the package
//! installed by `tests/fixtures/interpreters/build.sh`); the test `generated_is_derived` runs
//! the same rules on the package's three engines and compares what they give with
//! `generated.rs`, text and all. How the rules read code is [`code`]'s (and, for arithmetic it
//! leaves out, [`straight`]'s); how a function of the debug engine is found in the stripped
//! release and weval engines, [`matching`]'s; where each engine keeps the `JSContext*`,
//! [`addresses`]'.

#[cfg(test)]
mod addresses;
#[cfg(test)]
mod code;
#[cfg(test)]
mod fingerprints;
#[cfg(test)]
pub(super) mod generate;
mod generated;
#[cfg(test)]
mod matching;
#[cfg(test)]
mod rules;
#[cfg(test)]
mod rules_pbl;
#[cfg(test)]
mod rules_script;
#[cfg(test)]
mod straight;

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
    /// `BaseScript::immutableFlags_` (32 bits), and its bits `IsFunction` (the script is a
    /// function's: `script_function` is its `JSFunction`) and `SelfHosted` (a self-hosted
    /// builtin's, whose frames SpiderMonkey's stack traces leave out).
    pub script_immutable_flags: u32,
    pub script_flag_is_function: u32,
    pub script_flag_self_hosted: u32,
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
    /// `ImmutableScriptData::optArrayOffset_`: the offset (from the `ImmutableScriptData`) of
    /// its optional arrays, which the optional offsets (32 bits each) precede, and the notes
    /// (then padding) these: the notes end (`notesEnd()`) at `isd + optArrayOffset_ -
    /// ((flags >> isd_opt_offsets_shift) & isd_opt_offsets_mask)`, `flags` the byte at
    /// `isd_flags` (just before the code), the mask giving the optional offsets' size in bytes.
    pub isd_opt_array_offset: u32,
    pub isd_flags: u32,
    pub isd_opt_offsets_shift: u32,
    pub isd_opt_offsets_mask: u32,
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
    /// The high word (`JSVAL_TAG_CLEAR | JSVAL_TYPE_*`, 32-bit `Value`s) of an undefined
    /// `Value` and of a string's.
    pub value_tag_undefined: u32,
    pub value_tag_string: u32,
    /// `JSString`'s flags word, `length`, and characters: inline at `string_chars` where
    /// the flags have `string_inline_bit`, else a pointer there; Latin-1 where they have
    /// `string_latin1_bit`, else UTF-16.
    pub string_flags: u32,
    pub string_length: u32,
    pub string_chars: u32,
    pub string_inline_bit: u32,
    pub string_latin1_bit: u32,
    /// `JitActivation::packedExitFP_`: the fp of the exit frame of the portable baseline
    /// interpreter's (PBL's) latest call into the VM. PBL sets it at each such call and never
    /// clears it: once the call returns, it is stale (frames below it may have returned,
    /// frames above it are missing).
    pub jit_activation_exit_fp: u32,
    /// `JSContext::runtime_`, and in `JSRuntime` its `PortableBaselineStack`'s `top`: PBL sets
    /// it to `pbl_stack_top_below_exit_fp` bytes below the exit frame's fp at each call into
    /// the VM (a scripted call through an IC is one) and restores it when the call returns, so
    /// that (unlike `packedExitFP_`) it always gives the innermost call in progress, if any.
    pub cx_runtime: u32,
    pub runtime_pbl_stack_top: u32,
    pub pbl_stack_top_below_exit_fp: u32,
    /// Where a JIT (PBL) frame, from its fp, keeps its caller's fp (`CommonFrameLayout::
    /// callerFramePtr_`), and its descriptor, whose bits `jit_frame_type_mask` are the
    /// caller's `FrameType` (`BaselineJS` for a PBL script's frame, `CppToJSJit` above the
    /// activation's first frame) and whose bits from `jit_frame_descriptor_argc_shift` up
    /// the number of actual arguments.
    pub jit_frame_caller_fp: u32,
    pub jit_frame_descriptor: u32,
    pub jit_frame_type_mask: u32,
    pub jit_frame_type_baseline_js: u32,
    pub jit_frame_type_cpp_to_js_jit: u32,
    pub jit_frame_descriptor_argc_shift: u32,
    /// `JitFrameLayout::calleeToken_`, from a frame's fp (the arguments follow it): a
    /// `JSFunction*` or a `JSScript*` (a global or eval script's entry frame) with its kind in
    /// the bits `callee_token_tag_mask`; a function's script is its slot at
    /// `function_script` (the `BaseScript*`, a `PrivateValue`'s low word).
    pub jit_frame_callee_token: u32,
    pub callee_token_tag_mask: u32,
    pub function_script: u32,
    /// `BaselineFrame::Size()`: a PBL script's `BaselineFrame` lies right below its fp
    /// (`fp - Size()`); its `interpreterScript_` (the `JSScript`), `interpreterPC_` (the
    /// bytecode, stored at the frame's entry, at each IC and at each call into the VM only),
    /// and `flags_`, with `RUNNING_IN_INTERPRETER` (always, in PBL), as offsets in the frame.
    pub baseline_frame_size: u32,
    pub baseline_frame_script: u32,
    pub baseline_frame_pc: u32,
    pub baseline_frame_flags: u32,
    pub baseline_flag_running_in_interpreter: u32,
    /// `js::pbl::Stack`'s `fp` (the innermost frame's, which PBL keeps current at every push
    /// and pop, unlike anything in the heap), `base` and `top` (the runtime's stack's top when
    /// the trampoline began), as offsets in the `Stack`, a local of the trampoline.
    pub pbl_stack_fp: u32,
    pub pbl_stack_base: u32,
    pub pbl_stack_top: u32,
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
    "script_immutable_flags",
    "script_flag_is_function",
    "script_flag_self_hosted",
    "script_source_object",
    "script_lineno",
    "script_column",
    "script_shared_data",
    "shared_data_isd",
    "isd_code_length",
    "isd_code",
    "isd_opt_array_offset",
    "isd_flags",
    "isd_opt_offsets_shift",
    "isd_opt_offsets_mask",
    "source_object_source",
    "source_filename",
    "filename_chars",
    "function_atom",
    "value_tag_undefined",
    "value_tag_string",
    "string_flags",
    "string_length",
    "string_chars",
    "string_inline_bit",
    "string_latin1_bit",
    "jit_activation_exit_fp",
    "cx_runtime",
    "runtime_pbl_stack_top",
    "pbl_stack_top_below_exit_fp",
    "jit_frame_caller_fp",
    "jit_frame_descriptor",
    "jit_frame_type_mask",
    "jit_frame_type_baseline_js",
    "jit_frame_type_cpp_to_js_jit",
    "jit_frame_descriptor_argc_shift",
    "jit_frame_callee_token",
    "callee_token_tag_mask",
    "function_script",
    "baseline_frame_size",
    "baseline_frame_script",
    "baseline_frame_pc",
    "baseline_frame_flags",
    "baseline_flag_running_in_interpreter",
    "pbl_stack_fp",
    "pbl_stack_base",
    "pbl_stack_top",
];

#[cfg(test)]
mod tests;
