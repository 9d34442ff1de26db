//! A host function threaded into nested components: how wasmspy instruments a component nested
//! in the one it runs (componentize-qjs's engine is in one, which the top-level component
//! instantiates once), where the host reaches only the top level. The top-level component
//! imports the function, and defines the core modules each nested component is to
//! instantiate with it, after all of its own modules (a module defined inside the nested
//! component would move the index of every module after it, by which Wasmtime numbers the code
//! wasmspy maps); the nested component, rewritten by the caller to import both, gets them as
//! arguments where the top level instantiates it. Used by the runtime probe
//! (`crate::runtime_probe`) and the memory profile's allocator hook
//! (`crate::memory::component`).

use std::collections::BTreeMap;
use std::ops::Range;

use anyhow::{bail, Context, Result};
use wasm_encoder::reencode::{Reencode, ReencodeComponent};
use wasm_encoder::{
    ComponentExportKind, ComponentImportSection, ComponentSectionId, ComponentTypeRef,
    ComponentTypeSection, ModuleSection, RawSection,
};
use wasmparser::{Parser, Payload, Validator, WasmFeatures};

use super::appended::validated;
use super::component::{copy_section, own_sections};

/// The components a component nests at its top level.
pub struct NestedComponents {
    /// Where each is in the component's binary, by its index among them.
    pub ranges: Vec<Range<usize>>,
    /// Where the contents of each section of component instances start, with each component
    /// it instantiates.
    instantiations: Vec<(usize, u32)>,
}

impl NestedComponents {
    pub fn read(component: &[u8]) -> Result<Self> {
        let mut top = NestedComponents {
            ranges: Vec::new(),
            instantiations: Vec::new(),
        };
        for payload in own_sections(component, 0) {
            match payload? {
                Payload::ComponentSection {
                    unchecked_range, ..
                } => top.ranges.push(unchecked_range),
                Payload::ComponentInstanceSection(reader) => {
                    let start = reader.range().start;
                    for instance in reader {
                        if let wasmparser::ComponentInstance::Instantiate {
                            component_index, ..
                        } = instance?
                        {
                            top.instantiations.push((start, component_index));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(top)
    }

    /// Whether the top level instantiates nested component `c` exactly once, the only
    /// nesting wasmspy rewrites (each of its core instances is then one).
    pub fn instantiated_once(&self, c: u32) -> bool {
        self.instantiations.iter().filter(|(_, i)| *i == c).count() == 1
    }
}

/// Whether `component` (a nested one's binary) validates alone, aliasing nothing of its
/// parent's, as wasmspy rewrites it (its functions' bodies, which alias nothing, are
/// Wasmtime's to validate).
pub fn self_contained(component: &[u8]) -> bool {
    validated(component).is_ok()
}

/// A nested component rewritten to import the threaded function and modules of its parent's.
pub struct Rethreaded {
    /// Its new binary.
    pub wasm: Vec<u8>,
    /// The modules it imports, defined by its parent: the import's name and the module.
    pub modules: Vec<(String, wasm_encoder::Module)>,
}

/// `component` with a function import `name` (of the function type `ty` writes) passed, under
/// the same name, to each nested component of `nested` (by index among the top-level
/// components: its new binary, and the modules its parent passes it): the import, its type
/// and the modules are put before the first instantiation of one (after every module of the
/// component's), and every later reference to a component type or function moved past them.
/// The new component and the function's index in it; `None` where the nesting is not one
/// wasmspy rewrites (a module after that instantiation, or a component it could alias).
pub fn thread_import(
    component: &[u8],
    name: &str,
    ty: impl Fn(&mut ComponentTypeSection),
    nested: &BTreeMap<u32, Rethreaded>,
) -> Result<Option<(Vec<u8>, u32)>> {
    let top = NestedComponents::read(component)?;
    // Before the first section that instantiates one.
    let Some(at) = top
        .instantiations
        .iter()
        .find(|(_, c)| nested.contains_key(c))
        .map(|(at, _)| *at)
    else {
        return Ok(None);
    };
    let (types, functions, modules) = counts_before(component, at)?;
    // Each nested component's modules, defined after every module of the parent.
    let mut first_module = BTreeMap::new();
    let mut defined = 0;
    for (c, rethreaded) in nested {
        first_module.insert(*c, modules + defined);
        defined += rethreaded.modules.len() as u32;
    }
    let mut shift = Shift {
        depth: 0,
        types,
        functions,
    };
    let reencoded = |e| anyhow::anyhow!("the component cannot be re-encoded: {e:?}");
    let mut out = wasm_encoder::Component::new();
    let mut component_index = 0;
    for payload in own_sections(component, 0) {
        let payload = payload?;
        let start = payload.as_section().map(|(_, range)| range.start);
        let before = start.is_none_or(|start| start < at);
        if start == Some(at) {
            let mut types = ComponentTypeSection::new();
            ty(&mut types);
            out.section(&types);
            let mut import = ComponentImportSection::new();
            import.import(name, ComponentTypeRef::Func(shift.types));
            out.section(&import);
            for rethreaded in nested.values() {
                for (_, module) in &rethreaded.modules {
                    out.section(&ModuleSection(module));
                }
            }
        }
        match payload {
            Payload::Version { .. } => {}
            Payload::End(_) => break,
            // The modules defined would move its index.
            Payload::ModuleSection { .. } if !before => return Ok(None),
            Payload::ModuleSection {
                unchecked_range, ..
            } => {
                out.section(&RawSection {
                    id: ComponentSectionId::CoreModule as u8,
                    data: &component[unchecked_range],
                });
            }
            Payload::ComponentSection {
                unchecked_range, ..
            } => {
                let data = match nested.get(&component_index) {
                    Some(rethreaded) => &rethreaded.wasm[..],
                    // A component after the import could alias the types it moved.
                    None if !before => return Ok(None),
                    None => &component[unchecked_range.clone()],
                };
                out.section(&RawSection {
                    id: ComponentSectionId::Component as u8,
                    data,
                });
                component_index += 1;
            }
            Payload::ComponentInstanceSection(reader) if !before => {
                let mut instances = wasm_encoder::ComponentInstanceSection::new();
                for instance in reader {
                    match instance? {
                        wasmparser::ComponentInstance::Instantiate {
                            component_index,
                            args,
                        } if nested.contains_key(&component_index) => {
                            let mut with: Vec<(&str, ComponentExportKind, u32)> = args
                                .iter()
                                .map(|a| {
                                    let index = shift.component_external_index(a.kind, a.index);
                                    (a.name, a.kind.into(), index)
                                })
                                .collect();
                            with.push((name, ComponentExportKind::Func, functions));
                            let first = first_module[&component_index];
                            for (j, (import, _)) in (0..).zip(&nested[&component_index].modules) {
                                with.push((import, ComponentExportKind::Module, first + j));
                            }
                            instances.instantiate(component_index, with);
                        }
                        other => shift
                            .parse_component_instance(&mut instances, other)
                            .map_err(reencoded)?,
                    }
                }
                out.section(&instances);
            }
            Payload::CustomSection(_) | Payload::UnknownSection { .. } => {
                copy_section(&mut out, component, payload)?
            }
            payload if before => copy_section(&mut out, component, payload)?,
            payload => shift
                .parse_component_payload(&mut out, payload, component)
                .map_err(reencoded)?,
        }
    }
    Ok(Some((out.finish(), functions)))
}

/// The component types, component functions and core modules `component` defines before its
/// top-level section whose contents start at `at`.
fn counts_before(component: &[u8], at: usize) -> Result<(u32, u32, u32)> {
    let mut validator = Validator::new_with_features(WasmFeatures::all());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(component) {
        let payload = payload?;
        if depth == 0 && payload.as_section().is_some_and(|(_, r)| r.start == at) {
            let types = validator.types(0).context("no component being validated")?;
            return Ok((
                types.component_type_count(),
                types.component_function_count(),
                types.module_count(),
            ));
        }
        match &payload {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            _ => {}
        }
        validator.payload(&payload)?;
    }
    bail!("no section at {at}")
}

/// Moves references to the component types and functions from `types` and `functions` on
/// (at the top level: in types nested deeper, through their outer aliases) one further.
struct Shift {
    depth: u32,
    types: u32,
    functions: u32,
}

impl Reencode for Shift {
    type Error = std::convert::Infallible;
}

impl ReencodeComponent for Shift {
    fn component_type_index(&mut self, ty: u32) -> u32 {
        ty + u32::from(self.depth == 0 && ty >= self.types)
    }

    fn component_func_index(&mut self, f: u32) -> u32 {
        f + u32::from(self.depth == 0 && f >= self.functions)
    }

    fn outer_component_type_index(&mut self, count: u32, ty: u32) -> u32 {
        ty + u32::from(self.depth == count && ty >= self.types)
    }

    fn push_depth(&mut self) {
        self.depth += 1;
    }

    fn pop_depth(&mut self) {
        self.depth -= 1;
    }
}
