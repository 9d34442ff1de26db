//! QuickJS (quickjs-ng, as rquickjs vendors it: componentize-qjs's engine): the JavaScript
//! frames of the engine's own frame chain ([`walk`]), named by their functions with the line
//! each runs, in place of the engine's Wasm frames, or each call of the interpreter loop
//! (`JS_CallInternal`) replaced by the JavaScript frame it runs (`--native`).
//!
//! The engine has no DWARF and no name section, so it is recognised by what its build says
//! of itself and checked against its code and its memory: its cargo-auditable `.dep-v0`
//! section names the rquickjs-sys release it vendors, whose layout wasmspy derived from that
//! release's source ([`layouts`]); its interpreter loop is the one function storing the
//! runtime's current frame at that layout's offset on entry and on each way out; and each
//! instance's `JSRuntime` is found and checked in its memory when it is shown
//! ([`locate`]). A build that fails any of these gets one warning and its Wasm frames.

#[cfg(any(test, feature = "internals"))]
pub mod example;
mod layouts;
mod locate;
mod walk;

use std::io::Read;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use wasmparser::{Operator, Parser, Payload};

use super::interpreted::{is_function, splice_frames, CodeId};
use super::{ModuleFacts, Runtime, SpliceContext};
use crate::profile::Function;
use crate::shared::LinearMemory;
use crate::shared::RawFrame;
use crate::warning::{Warning, WarningKind};
use layouts::{QuickJsLayout, LAYOUTS};
use walk::JsCode;

/// The cargo-auditable section: zlib-compressed JSON of the crates a build was made of.
const DEPENDENCIES_SECTION: &str = ".dep-v0";
/// The crate that vendors QuickJS for rquickjs.
const QUICKJS_CRATE: &str = "rquickjs-sys";
/// Decompressed bytes of [`DEPENDENCIES_SECTION`] read at most.
const MAX_DEPENDENCIES: u64 = 1 << 22;

/// A QuickJS engine module.
pub struct QuickJs {
    code: JsCode,
    /// The module's function index of its interpreter loop.
    interpreter: u32,
    /// Where the last instance shown had its runtime: the next is tried there first (a
    /// Wizer-initialised engine has it at the same address in every instance).
    last_runtime: AtomicU32,
}

/// QuickJS in `wasm`, if it is a build whose layout wasmspy has; a warning where it is QuickJS
/// but its JavaScript frames cannot be read.
pub fn detect(
    file_name: &str,
    wasm: &[u8],
    facts: &ModuleFacts<'_>,
    warnings: &mut Vec<Warning>,
) -> Option<Arc<dyn Runtime>> {
    if !facts.custom_sections.contains(&DEPENDENCIES_SECTION) {
        return None;
    }
    let version = quickjs_crate_version(wasm)?;
    let unavailable = |why: &str| {
        Warning::about(file_name, WarningKind::RuntimeUnreadable {
            why: format!("QuickJS (rquickjs-sys {version}), but {why}: samples show its Wasm functions, not JavaScript frames"),
        })
    };
    let Some(layout) = QuickJsLayout::of_crate(&version) else {
        let known: Vec<&str> = LAYOUTS.iter().map(|l| l.crate_version).collect();
        warnings.push(unavailable(&format!(
            "wasmspy has no layout for that build (it has rquickjs-sys {})",
            known.join(", ")
        )));
        return None;
    };
    match interpreter_loop(wasm, layout) {
        Ok(interpreter) => Some(Arc::new(QuickJs {
            code: JsCode::new(layout),
            interpreter,
            last_runtime: AtomicU32::new(0),
        })),
        Err(why) => {
            warnings.push(unavailable(&why));
            None
        }
    }
}

/// The rquickjs-sys release `wasm`'s `.dep-v0` section names, if it names one.
fn quickjs_crate_version(wasm: &[u8]) -> Option<String> {
    let data = Parser::new(0)
        .parse_all(wasm)
        .find_map(|payload| match payload {
            Ok(Payload::CustomSection(section)) if section.name() == DEPENDENCIES_SECTION => {
                Some(section.data())
            }
            _ => None,
        })?;
    let mut json = Vec::new();
    flate2::read::ZlibDecoder::new(data)
        .take(MAX_DEPENDENCIES)
        .read_to_end(&mut json)
        .ok()?;
    let dependencies: serde_json::Value = serde_json::from_slice(&json).ok()?;
    dependencies["packages"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == QUICKJS_CRATE)?["version"]
        .as_str()
        .map(str::to_string)
}

/// The function index of `JS_CallInternal`: the one function that stores the runtime's
/// current frame (`i32.store` at `rt_current_stack_frame`) more than twice (once on entry, on
/// each of its ways out); others (native calls, generators) store it twice at most.
fn interpreter_loop(wasm: &[u8], l: &QuickJsLayout) -> Result<u32, String> {
    let mut imported = 0;
    let mut defined = 0;
    let mut found = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(|e| format!("its code is unreadable ({e})"))? {
            Payload::ImportSection(imports) => {
                for import in imports.into_imports().flatten() {
                    if matches!(
                        import.ty,
                        wasmparser::TypeRef::Func(_) | wasmparser::TypeRef::FuncExact(_)
                    ) {
                        imported += 1;
                    }
                }
            }
            Payload::CodeSectionEntry(body) => {
                let mut stores = 0;
                let mut reader = body
                    .get_operators_reader()
                    .map_err(|e| format!("its code is unreadable ({e})"))?;
                while !reader.eof() {
                    // A body that does not decode is not read further (a read that fails may
                    // not move on).
                    let op = reader
                        .read()
                        .map_err(|e| format!("its code is unreadable ({e})"))?;
                    if let Operator::I32Store { memarg } = op {
                        stores += usize::from(memarg.offset == u64::from(l.rt_current_stack_frame));
                    }
                }
                if stores > 2 {
                    found.push(imported + defined);
                }
                defined += 1;
            }
            _ => {}
        }
    }
    match found[..] {
        [interpreter] => Ok(interpreter),
        _ => Err(format!(
            "its code does not match quickjs-ng {}'s ({} functions store the current frame as its interpreter loop does)",
            l.engine_version,
            found.len()
        )),
    }
}

impl Runtime for QuickJs {
    fn walks_warning(&self) -> Option<String> {
        self.code
            .counts()
            .warning("the JavaScript interpreter's frames")
    }

    fn walk_memory(&self, memory: &LinearMemory, root: u32, out: &mut [usize]) -> usize {
        self.code.walk(memory, root, out)
    }

    fn root(&self, memory: &LinearMemory) -> Result<u32, String> {
        let hint = self.last_runtime.load(Ordering::Relaxed);
        let found = locate::find_runtime(self.code.layout(), memory, memory.size(), hint);
        let rt = found.ok_or_else(|| {
            format!(
                "QuickJS: no JSRuntime laid out as quickjs-ng {}'s in the instance's memory",
                self.code.layout().engine_version
            )
        })?;
        self.last_runtime.store(rt, Ordering::Relaxed);
        Ok(rt)
    }

    /// As [`splice_frames`] says, `JS_CallInternal`'s frames being the loop's.
    fn splice(&self, cx: &mut SpliceContext<'_>, words: &[usize], frames: &mut Vec<RawFrame>) {
        let interpreter = Some((cx.module, self.interpreter));
        splice_frames(cx, words, frames, |f| is_function(f, interpreter));
    }

    /// Named as QuickJS's own stack traces name them (the function object's `name`, a
    /// function without one `<anonymous>`), with its file and where it starts
    /// ([`CodeName::function`](super::interpreted::CodeName::function): `fib (app.js:4:1)`).
    fn function(&self, code: u32) -> Option<Function> {
        Some(match self.code.names().get(CodeId(code)) {
            Some(names) => {
                let name = match names.qualname.as_str() {
                    "" => "<anonymous>".to_string(),
                    name => name.to_string(),
                };
                names.function(name)
            }
            None => Function {
                name: "<javascript>".to_string(),
                system_name: String::new(),
                file: String::new(),
                start_line: 0,
            },
        })
    }

    fn without_dwarf(&self) -> Option<&'static str> {
        // Said after "is" (`NoDwarf`).
        Some("QuickJS's engine, without DWARF: its JavaScript frames come from the engine's state, its own functions are unnamed")
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A module with a `.dep-v0` section naming rquickjs-sys `version`, and `stores` functions
    /// storing the current frame three times each, after one storing it twice whose body ends
    /// with `tail`.
    fn module(version: &str, stores: usize, tail: &[u8]) -> Vec<u8> {
        let l = QuickJsLayout::of_crate("0.13.0").unwrap();
        let json = format!(
            r#"{{"packages":[{{"name":"rquickjs-sys","version":"{version}","source":"crates.io"}}]}}"#
        );
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zlib.write_all(json.as_bytes()).unwrap();
        let mut wasm = wasm_encoder::Module::new();
        let mut types = wasm_encoder::TypeSection::new();
        types.ty().function([], []);
        wasm.section(&types);
        let mut functions = wasm_encoder::FunctionSection::new();
        let mut memories = wasm_encoder::MemorySection::new();
        memories.memory(wasm_encoder::MemoryType {
            minimum: 1,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        let mut code = wasm_encoder::CodeSection::new();
        for _ in 0..stores + 1 {
            functions.function(0);
        }
        wasm.section(&functions);
        wasm.section(&memories);
        let store = wasm_encoder::Instruction::I32Store(wasm_encoder::MemArg {
            offset: u64::from(l.rt_current_stack_frame),
            align: 2,
            memory_index: 0,
        });
        for i in 0..stores + 1 {
            let mut body = wasm_encoder::Function::new([]);
            // The first function stores twice only, as a native call's does.
            for _ in 0..if i == 0 { 2 } else { 3 } {
                body.instruction(&wasm_encoder::Instruction::I32Const(0))
                    .instruction(&wasm_encoder::Instruction::I32Const(0))
                    .instruction(&store);
            }
            if i == 0 {
                body.raw(tail.iter().copied());
            }
            body.instruction(&wasm_encoder::Instruction::End);
            code.function(&body);
        }
        wasm.section(&code);
        wasm.section(&wasm_encoder::CustomSection {
            name: DEPENDENCIES_SECTION.into(),
            data: zlib.finish().unwrap().into(),
        });
        wasm.finish()
    }

    /// The runtime detected, and the warnings' sentences (all of them `RuntimeUnreadable`).
    fn detected(wasm: &[u8]) -> (Option<Arc<dyn Runtime>>, Vec<String>) {
        let mut warnings = Vec::new();
        let facts = ModuleFacts {
            custom_sections: &[DEPENDENCIES_SECTION],
            debug_str: &[],
            defines: &|_| false,
            names_functions: false,
        };
        let runtime = detect("engine.wasm", wasm, &facts, &mut warnings);
        assert!(warnings
            .iter()
            .all(|w| matches!(w.kind, WarningKind::RuntimeUnreadable { .. })));
        (runtime, warnings.iter().map(Warning::to_string).collect())
    }

    #[test]
    fn a_build_of_a_known_release_with_its_interpreter_loop_is_read() {
        let (runtime, warnings) = detected(&module("0.13.0", 1, &[]));
        assert!(runtime.is_some(), "{warnings:?}");
        assert_eq!(warnings, Vec::<String>::new());
    }

    /// An unknown release, or code that does not match the release's, gets one warning and
    /// no JavaScript frames.
    #[test]
    fn other_builds_are_not_read_and_say_why() {
        let (runtime, warnings) = detected(&module("0.99.0", 1, &[]));
        assert!(runtime.is_none());
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("rquickjs-sys 0.99.0") && warnings[0].contains("no layout"),
            "{warnings:?}"
        );
        // A body that does not decode (`0xfc` with no such sub-opcode): said, not spun on.
        let (runtime, warnings) = detected(&module("0.13.0", 1, &[0xfc, 0xff, 0xff, 0xff, 0x0f]));
        assert!(runtime.is_none());
        assert!(
            warnings[0].contains("its code is unreadable"),
            "{warnings:?}"
        );
        for stores in [0, 2] {
            let (runtime, warnings) = detected(&module("0.13.0", stores, &[]));
            assert!(runtime.is_none());
            assert!(warnings[0].contains("does not match"), "{warnings:?}");
        }
    }
}
