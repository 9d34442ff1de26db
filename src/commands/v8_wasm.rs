//! V8's frames of WebAssembly, named as wasmspy names a module's code. A `.cpuprofile` of
//! Node (`--cpu-prof`) or Chrome names a Wasm function by its `name` section entry or
//! `wasm-function[N]`, with its module's URL (`wasm://wasm/<hash>`) and, as the column, the
//! offset of its body in the module: no file, no line. Given the modules (`convert --wasm`),
//! each such frame gets the function's name, file and line from the module's DWARF or source map (its
//! first instruction's line: V8 says no more of where in the function a sample was).
//!
//! Which module a URL is: the one at whose function bodies all of its frames' offsets
//! start, the most of their names agreeing.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result};
use rustc_hash::FxHashMap;
use wasmparser::{Parser, Payload};

use super::module_files::{self, ModuleFile, Sidecars};
use crate::export::cpuprofile::{CallFrame, CallFrames};
use crate::profile::{Frame, FrameId, Function, Line, Mapping, MappingId, ProfileBuilder};
use crate::warning::Warning;

/// A module whose frames a profile may show.
struct Module {
    file: ModuleFile,
    /// Function body offset (as V8 gives it) → (function index, its first instruction's
    /// offset).
    bodies: FxHashMap<u32, (u32, u32)>,
    mapping: Option<MappingId>,
}

/// Names V8's Wasm frames from the modules given.
pub struct V8WasmFrames {
    modules: Vec<Module>,
    warnings: Vec<String>,
}

impl V8WasmFrames {
    /// The modules at `paths`, opened as [`module_files::open`] opens them.
    pub fn open(paths: &[PathBuf], sidecars: &Sidecars) -> Result<Self> {
        let (files, warnings) = module_files::open(paths, sidecars)?;
        let modules = files
            .into_iter()
            .map(|file| {
                let bodies = bodies(
                    file.symbolizer.wasm(),
                    file.symbolizer.imported_function_count(),
                )
                .with_context(|| format!("`{}` is not a Wasm module", file.file_name))?;
                Ok(Module {
                    file,
                    bodies,
                    mapping: None,
                })
            })
            .collect::<Result<_>>()?;
        Ok(V8WasmFrames { modules, warnings })
    }

    /// What was found wrong, once each.
    pub fn take_warnings(&mut self) -> Vec<String> {
        for module in &mut self.modules {
            self.warnings.extend(
                module
                    .file
                    .symbolizer
                    .take_warnings()
                    .iter()
                    .map(Warning::to_string),
            );
        }
        std::mem::take(&mut self.warnings)
    }

    /// The module a script's frames are of: every offset a body's start, the most names
    /// agreeing.
    fn module_of(&self, calls: &[&CallFrame]) -> Option<usize> {
        let mut best: Option<(usize, usize)> = None;
        for (i, module) in self.modules.iter().enumerate() {
            let mut agreeing = 0;
            let all_bodies = calls.iter().all(|call| {
                let Some(&(index, _)) = u32::try_from(call.column_number)
                    .ok()
                    .and_then(|offset| module.bodies.get(&offset))
                else {
                    return false;
                };
                let name = module.file.symbolizer.function_name(index).system_name;
                let v8_name = call
                    .function_name
                    .strip_prefix('$')
                    .unwrap_or(&call.function_name);
                if v8_name == name || v8_name == format!("wasm-function[{index}]") {
                    agreeing += 1;
                }
                true
            });
            if all_bodies && best.is_none_or(|(_, most)| agreeing > most) {
                best = Some((i, agreeing));
            }
        }
        best.map(|(i, _)| i)
    }

    /// The frame of the function whose body is at `offset` in module `m`.
    fn frame(&mut self, m: usize, offset: u32, builder: &mut ProfileBuilder) -> Option<FrameId> {
        let module = &mut self.modules[m];
        let &(index, first) = module.bodies.get(&offset)?;
        let mapping = *module.mapping.get_or_insert_with(|| {
            builder.add_mapping(Mapping {
                file_name: module.file.file_name.clone(),
                build_id: module.file.build_id.clone(),
                size: module.file.size,
                start: 0,
            })
        });
        let lines = module
            .file
            .symbolizer
            .source_frames(index, first)
            .iter()
            .map(|s| Line {
                function: builder.function(&Function {
                    name: s.function.name.clone(),
                    system_name: s.function.system_name.clone(),
                    file: s.file.clone(),
                    start_line: s.start_line,
                }),
                line: s.line,
                column: s.column,
            })
            .collect();
        Some(builder.frame(&Frame {
            mapping: Some(mapping),
            address: u64::from(first),
            lines,
        }))
    }
}

impl CallFrames for V8WasmFrames {
    fn resolve(
        &mut self,
        calls: &[&CallFrame],
        builder: &mut ProfileBuilder,
    ) -> Vec<Option<FrameId>> {
        let mut scripts: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, call) in calls.iter().enumerate() {
            // Node 20 gives a call of an import (`wasm-to-js:…`) its caller's URL, at
            // column 0.
            if call.url.starts_with("wasm://") && !call.function_name.starts_with("wasm-to-js") {
                scripts.entry(&call.url).or_default().push(i);
            }
        }
        let mut frames = vec![None; calls.len()];
        let mut urls: Vec<&str> = scripts.keys().copied().collect();
        urls.sort_unstable();
        for url in urls {
            let nodes = &scripts[url];
            let of_script: Vec<&CallFrame> = nodes.iter().map(|&i| calls[i]).collect();
            let Some(m) = self.module_of(&of_script) else {
                self.warnings.push(format!("{url}: none of the --wasm modules has function bodies where its frames are: they are kept as V8 named them"));
                continue;
            };
            for &i in nodes {
                let offset = u32::try_from(calls[i].column_number).unwrap_or(u32::MAX);
                frames[i] = self.frame(m, offset, builder);
            }
        }
        frames
    }
}

/// Each function body's offset in the module → its function index and its first
/// instruction's offset.
fn bodies(wasm: &[u8], imported: u32) -> Result<FxHashMap<u32, (u32, u32)>> {
    let mut bodies = FxHashMap::default();
    let mut index = imported;
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::CodeSectionEntry(body) = payload? {
            let first = body.get_operators_reader()?.original_position();
            bodies.insert(body.range().start as u32, (index, first as u32));
            index += 1;
        }
    }
    Ok(bodies)
}
