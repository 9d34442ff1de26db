//! The generator's checks, rerun on the npm package: what the rules derive from its three
//! engines is `generated.rs`, text and all.

use super::generate::{self, Checked, STRIPPED};
use super::{SpiderMonkeyLayout, ENGINES, FIELDS, LAYOUT};

impl SpiderMonkeyLayout {
    /// Field `name`'s value.
    fn field(&self, name: &str) -> Option<u32> {
        Some(match name {
            "cx_activation" => self.cx_activation,
            "activation_prev" => self.activation_prev,
            "activation_kind" => self.activation_kind,
            "activation_kind_interpreter" => self.activation_kind_interpreter,
            "activation_kind_jit" => self.activation_kind_jit,
            "interpreter_regs_pc" => self.interpreter_regs_pc,
            "interpreter_regs_fp" => self.interpreter_regs_fp,
            "interpreter_entry_frame" => self.interpreter_entry_frame,
            "frame_flags" => self.frame_flags,
            "frame_script" => self.frame_script,
            "frame_prev" => self.frame_prev,
            "frame_prevpc" => self.frame_prevpc,
            "script_function" => self.script_function,
            "script_immutable_flags" => self.script_immutable_flags,
            "script_flag_is_function" => self.script_flag_is_function,
            "script_flag_self_hosted" => self.script_flag_self_hosted,
            "script_source_object" => self.script_source_object,
            "script_lineno" => self.script_lineno,
            "script_column" => self.script_column,
            "script_shared_data" => self.script_shared_data,
            "shared_data_isd" => self.shared_data_isd,
            "isd_code_length" => self.isd_code_length,
            "isd_code" => self.isd_code,
            "isd_opt_array_offset" => self.isd_opt_array_offset,
            "isd_flags" => self.isd_flags,
            "isd_opt_offsets_shift" => self.isd_opt_offsets_shift,
            "isd_opt_offsets_mask" => self.isd_opt_offsets_mask,
            "source_object_source" => self.source_object_source,
            "source_filename" => self.source_filename,
            "filename_chars" => self.filename_chars,
            "jit_activation_exit_fp" => self.jit_activation_exit_fp,
            "cx_runtime" => self.cx_runtime,
            "runtime_pbl_stack_top" => self.runtime_pbl_stack_top,
            "pbl_stack_top_below_exit_fp" => self.pbl_stack_top_below_exit_fp,
            "jit_frame_caller_fp" => self.jit_frame_caller_fp,
            "jit_frame_descriptor" => self.jit_frame_descriptor,
            "jit_frame_type_mask" => self.jit_frame_type_mask,
            "jit_frame_type_baseline_js" => self.jit_frame_type_baseline_js,
            "jit_frame_type_cpp_to_js_jit" => self.jit_frame_type_cpp_to_js_jit,
            "jit_frame_descriptor_argc_shift" => self.jit_frame_descriptor_argc_shift,
            "baseline_frame_size" => self.baseline_frame_size,
            "baseline_frame_script" => self.baseline_frame_script,
            "baseline_frame_pc" => self.baseline_frame_pc,
            "baseline_frame_flags" => self.baseline_frame_flags,
            "baseline_flag_running_in_interpreter" => self.baseline_flag_running_in_interpreter,
            "jit_frame_callee_token" => self.jit_frame_callee_token,
            "callee_token_tag_mask" => self.callee_token_tag_mask,
            "function_script" => self.function_script,
            "pbl_stack_fp" => self.pbl_stack_fp,
            "pbl_stack_base" => self.pbl_stack_base,
            "pbl_stack_top" => self.pbl_stack_top,
            "function_atom" => self.function_atom,
            "value_tag_undefined" => self.value_tag_undefined,
            "value_tag_string" => self.value_tag_string,
            "string_flags" => self.string_flags,
            "string_length" => self.string_length,
            "string_chars" => self.string_chars,
            "string_inline_bit" => self.string_inline_bit,
            "string_latin1_bit" => self.string_latin1_bit,
            _ => return None,
        })
    }
}

#[test]
fn generated_is_derived() {
    let Some(package) = generate::package("spidermonkey layout") else {
        return;
    };
    let derived = generate::derive(&package).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(derived.version, LAYOUT.package_version);
    for field in FIELDS {
        assert_eq!(
            LAYOUT.field(field).map(i64::from),
            Some(derived.fields[field].0),
            "{field}"
        );
    }
    for ((file, at), engine) in derived.addresses.iter().zip(ENGINES) {
        assert_eq!(
            (*file, at.context, at.tls_context),
            (engine.file, engine.context, engine.tls_context)
        );
    }
    // Every rule ran on the debug engine; each stripped engine had most rules' functions (the
    // release engine links the portable baseline interpreter's differently: most of its rules
    // are not checked there).
    for Checked { file, rules, .. } in &derived.checked {
        assert_eq!(
            rules.iter().map(|r| r.0).collect::<Vec<_>>(),
            generate::rule_names()
        );
        let matched = rules.iter().filter(|(_, f)| f.func().is_some()).count();
        assert!(
            matched * 2 > rules.len(),
            "{file}: {matched} of {} rules' functions found",
            rules.len()
        );
    }
    assert_eq!(
        derived.checked.iter().map(|c| c.file).collect::<Vec<_>>(),
        STRIPPED
    );
    let text = generate::text(&derived).unwrap();
    assert!(
        text == include_str!("generated.rs"),
        "generated.rs is not what the rules derive now: `cargo test --features internals --lib \
         spidermonkey::layouts -- --ignored write_generated` writes it again"
    );
}

/// The generator: writes `generated.rs`.
#[test]
#[ignore = "writes generated.rs"]
fn write_generated() {
    let package = generate::package("spidermonkey layout").expect("the npm package");
    let derived = generate::derive(&package).unwrap_or_else(|e| panic!("{e:?}"));
    std::fs::write(
        generate::generated_path(),
        generate::text(&derived).unwrap(),
    )
    .unwrap();
}
