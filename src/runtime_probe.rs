//! The runtime probe: language runtimes inside components shown to the host. Wasmtime shows the host no core instance of a
//! component (neither its memory nor its `VMContext`), so the component is made to show the
//! memory of each instance of a runtime's module itself: appended to it (as the memory
//! profile's fixups are, so that no index of the original moves) are an import of the host's
//! probe function ([`PROBE`]), lowered once per such instance with the instance's memory as
//! its canonical `memory` option, and a module per instance whose start function calls it
//! with the index of the instance's module. Lifting the call's argument gives the host the
//! definition of the memory the options name ([`ProbedMemory`]), which a walk reads through
//! ([`RuntimeInstance::in_component`](crate::runtimes::RuntimeInstance::in_component)), before the component's exports can run.

use std::sync::Arc;

use std::collections::HashMap;
use std::ops::Range;

use anyhow::{bail, Context, Result};
use wasm_encoder::reencode::{Reencode, ReencodeComponent};
use wasm_encoder::{
    Alias, CanonicalFunctionSection, CanonicalOption, CodeSection, ComponentAliasSection,
    ComponentImportSection, ComponentTypeRef, ComponentTypeSection, ComponentValType, EntityType,
    ExportKind, Function, FunctionSection, ImportSection, InstanceSection, Instruction, ModuleArg,
    ModuleSection, PrimitiveValType, StartSection, TypeSection, ValType,
};
use wasm_encoder::{
    ComponentExportKind, ComponentSectionId, CoreTypeSection, ModuleType, RawSection,
};
use wasmparser::types::TypesRef;
use wasmparser::{Instance, Parser, Payload, Validator, WasmFeatures};
use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext};
use wasmtime::component::{ComponentType, Lift};
use wasmtime_environ::component::{CanonicalOptionsDataModel, LinearMemoryOptions};

use crate::resolve::symbolize::ModuleSymbolizer;
use crate::wasm::component::{
    append_sections, copy_section, core_modules, own_sections, validated, PROBE_MODULE,
};
use crate::wasm::module_bytes::ModuleBytes;

/// The function a probed component imports: `func(module: u32)`, called once per instance
/// of a runtime's module, with the index of the module among the component's, lowered with
/// the instance's memory.
pub const PROBE: &str = "wasmspy-runtime-probe";

/// `component` with a probe for each instance of a module of a runtime wasmspy reads whose walk
/// reads its memory alone: each top-level core instance of such a module that exports the
/// memory it defines, and each instance of one in a component nested in it (instantiated
/// once, as componentize-qjs's engine is), whatever memory it reads; `None` when it has none.
pub fn probe_runtimes(component: &[u8]) -> Result<Option<Vec<u8>>, crate::Error> {
    probed(component).map_err(crate::Error::Malformed)
}

/// [`probe_runtimes`], its failures a malformed component's.
fn probed(component: &[u8]) -> Result<Option<Vec<u8>>> {
    let cores = core_modules(component)?;
    let shared: Arc<[u8]> = component.into();
    let mut top = Vec::new();
    let mut nested = Vec::new();
    for (index, core) in cores.iter().enumerate() {
        let bytes = ModuleBytes::within(shared.clone(), core.range.clone())
            .context("a core module beyond the component's end")?;
        // A runtime whose walk reads globals cannot be shown by its memory alone.
        let symbolizer = ModuleSymbolizer::new("", bytes, false)?;
        if !symbolizer.runtime().is_some_and(|r| r.globals().is_empty()) {
            continue;
        }
        match core.instance {
            Some(instance) => {
                if let Some(memory) = exported_memory(&component[core.range.clone()])? {
                    top.push((index as u32, MemorySource::Export(instance, memory)));
                }
            }
            None => nested.push((index as u32, core.range.clone())),
        }
    }
    // What cannot be probed is left alone: its samples keep their Wasm frames.
    let threaded = match nested.is_empty() {
        true => None,
        false => thread_probe(component, &nested)?,
    };
    let (mut wasm, probe) = match threaded {
        Some((wasm, probe)) => (wasm, Some(probe)),
        None if top.is_empty() => return Ok(None),
        None => (component.to_vec(), None),
    };
    if !top.is_empty() {
        let types = validated(&wasm)?;
        let mut out = wasm_encoder::Component::new();
        let probe = match probe {
            Some(probe) => probe,
            None => import_probe(&mut out, types.as_ref()),
        };
        append_probes(&mut out, types.as_ref(), probe, &top, Callers::Defined);
        wasm = append_sections(wasm, out)?;
    }
    Ok(Some(wasm))
}

/// Where a probe's memory is, in the component that lowers it.
enum MemorySource {
    /// Exported under this name by this core instance.
    Export(u32, String),
    /// This core memory.
    Index(u32),
}

/// Appends to `out` the type and import of [`PROBE`] after a component whose index spaces
/// are `counts`: its function index.
fn import_probe(out: &mut wasm_encoder::Component, counts: TypesRef<'_>) -> u32 {
    import_probe_typed(out, counts.component_type_count());
    counts.component_function_count()
}

/// Appends to `out` [`PROBE`]'s type, which is to be component type `ty`, and its import.
fn import_probe_typed(out: &mut wasm_encoder::Component, ty: u32) {
    let mut types = ComponentTypeSection::new();
    types
        .function()
        .params([("module", ComponentValType::Primitive(PrimitiveValType::U32))])
        .result(None);
    out.section(&types);
    let mut import = ComponentImportSection::new();
    import.import(PROBE, ComponentTypeRef::Func(ty));
    out.section(&import);
}

/// Where the modules that call a probe are.
enum Callers {
    /// Defined as each probe is, by [`caller`].
    Defined,
    /// Imported, as [`caller_import`] names them, from this module index on.
    Imported(u32),
}

/// Appends to `out`, after a component whose index spaces are `counts` (with `probe`, its
/// [`PROBE`], imported or not since), for each `(module, memory)`: the probe lowered with that
/// memory, and an instance of a module whose start function calls it with `module`.
fn append_probes(
    out: &mut wasm_encoder::Component,
    counts: TypesRef<'_>,
    probe: u32,
    probed: &[(u32, MemorySource)],
    callers: Callers,
) {
    let (mut memories, functions) = (counts.memory_count(), counts.function_count());
    let (mut modules, instances) = (counts.module_count(), counts.core_instance_count());
    for (j, (module, memory)) in (0..).zip(probed) {
        let memory = match memory {
            MemorySource::Index(memory) => *memory,
            MemorySource::Export(instance, name) => {
                let mut alias = ComponentAliasSection::new();
                alias.alias(Alias::CoreInstanceExport {
                    instance: *instance,
                    kind: ExportKind::Memory,
                    name,
                });
                out.section(&alias);
                memories += 1;
                memories - 1
            }
        };
        let mut lower = CanonicalFunctionSection::new();
        lower.lower(probe, [CanonicalOption::Memory(memory)]);
        out.section(&lower);
        let caller = match callers {
            Callers::Defined => {
                out.section(&ModuleSection(&caller(*module)));
                modules += 1;
                modules - 1
            }
            Callers::Imported(first) => first + j,
        };
        let mut instantiate = InstanceSection::new();
        instantiate.export_items([(PROBE, ExportKind::Func, functions + j)]);
        let arg = ModuleArg::Instance(instances + 2 * j);
        instantiate.instantiate(caller, [(CALLER_IMPORTS, arg)]);
        out.section(&instantiate);
    }
}

/// The name under which a nested component imports the `j`th module calling its probes.
fn caller_import(j: usize) -> String {
    format!("{PROBE}-caller{j}")
}

/// `component` with [`PROBE`] passed to each nested component holding runtime modules
/// (`nested`: their indices among the component's and where they are), which probes them:
/// the probe's import, and the modules calling it, are put before the first instantiation of
/// one (after every module of the component's, so that none moves), and every later
/// reference to a component type or function moved past them. The new component and the
/// probe's function index in it; `None` where the nesting is not one wasmspy rewrites (a
/// component instantiated more or less than once, or whose runtime's memory is not found).
fn thread_probe(
    component: &[u8],
    nested: &[(u32, Range<usize>)],
) -> Result<Option<(Vec<u8>, u32)>> {
    let top = TopLevel::read(component)?;
    let mut rewritten = HashMap::new();
    for (c, range) in (0..).zip(&top.components) {
        let inside: Vec<(u32, Range<usize>)> = nested
            .iter()
            .filter(|(_, r)| r.start >= range.start && r.end <= range.end)
            .cloned()
            .collect();
        if inside.is_empty() || top.instantiations.iter().filter(|(_, i)| *i == c).count() != 1 {
            continue;
        }
        if let Some(probed) = probe_nested(component, range.clone(), &inside)? {
            rewritten.insert(c, probed);
        }
    }
    // Before the first section that instantiates one.
    let Some(at) = top
        .instantiations
        .iter()
        .find(|(_, c)| rewritten.contains_key(c))
        .map(|(at, _)| *at)
    else {
        return Ok(None);
    };
    let (types, functions, modules) = counts_before(component, at)?;
    // Each nested component's callers, defined after every module of the parent.
    let mut first_caller = HashMap::new();
    let mut callers = Vec::new();
    let mut order: Vec<&u32> = rewritten.keys().collect();
    order.sort();
    for c in order {
        first_caller.insert(*c, modules + callers.len() as u32);
        callers.extend(rewritten[c].1.iter().map(|&module| caller(module)));
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
            import_probe_typed(&mut out, types);
            for caller in &callers {
                out.section(&ModuleSection(caller));
            }
        }
        match payload {
            Payload::Version { .. } => {}
            Payload::End(_) => break,
            // The callers would move its index.
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
                let data = match rewritten.get(&component_index) {
                    Some((rewritten, _)) => &rewritten[..],
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
                        } if rewritten.contains_key(&component_index) => {
                            let mut with: Vec<(&str, ComponentExportKind, u32)> = args
                                .iter()
                                .map(|a| {
                                    let index = shift.component_external_index(a.kind, a.index);
                                    (a.name, a.kind.into(), index)
                                })
                                .collect();
                            with.push((PROBE, ComponentExportKind::Func, functions));
                            let names: Vec<String> = (0..rewritten[&component_index].1.len())
                                .map(caller_import)
                                .collect();
                            let first = first_caller[&component_index];
                            for (j, name) in (0..).zip(&names) {
                                with.push((name, ComponentExportKind::Module, first + j));
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

/// What [`thread_probe`] needs of a component's top level.
struct TopLevel {
    /// Where each nested component is.
    components: Vec<Range<usize>>,
    /// Where the contents of each section of component instances start, with each component
    /// it instantiates.
    instantiations: Vec<(usize, u32)>,
}

impl TopLevel {
    fn read(component: &[u8]) -> Result<Self> {
        let mut top = TopLevel {
            components: Vec::new(),
            instantiations: Vec::new(),
        };
        for payload in own_sections(component, 0) {
            match payload? {
                Payload::ComponentSection {
                    unchecked_range, ..
                } => top.components.push(unchecked_range),
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

/// The nested component at `range` of `component` probing the instances of its runtime
/// modules (`inside`: their indices among `component`'s and where they are) with an import of
/// [`PROBE`] and of a module calling it for each (see [`caller_import`]), and the indices of
/// the modules those call it with, in order; `None` where none of their memories is found.
fn probe_nested(
    component: &[u8],
    range: Range<usize>,
    inside: &[(u32, Range<usize>)],
) -> Result<Option<(Vec<u8>, Vec<u32>)>> {
    let nested = &component[range.clone()];
    // Self-contained (no alias of its parent's), as wasmspy rewrites it.
    let Ok(types) = Validator::new_with_features(WasmFeatures::all()).validate_all(nested) else {
        return Ok(None);
    };
    let mut modules = Vec::new();
    let mut instances = Vec::new();
    for payload in own_sections(nested, range.start) {
        match payload? {
            Payload::ModuleSection {
                unchecked_range, ..
            } => modules.push(unchecked_range),
            Payload::InstanceSection(reader) => {
                for instance in reader {
                    instances.push(instance?);
                }
            }
            _ => {}
        }
    }
    let mut probed = Vec::new();
    for (index, module_range) in inside {
        let Some(module) = modules.iter().position(|r| r == module_range) else {
            continue;
        };
        let mut of_module = instances.iter().enumerate().filter(|(_, i)| {
            matches!(i, Instance::Instantiate { module_index, .. } if *module_index as usize == module)
        });
        let (Some((instance, Instance::Instantiate { args, .. })), None) =
            (of_module.next(), of_module.next())
        else {
            continue;
        };
        let wasm = &component[module_range.clone()];
        let memory = match imported_memory(wasm)? {
            Some((from, name)) => {
                let Some(arg) = args.iter().find(|a| a.name == from) else {
                    continue;
                };
                match &instances[arg.index as usize] {
                    Instance::FromExports(exports) => {
                        let Some(export) = exports
                            .iter()
                            .find(|e| e.name == name && e.kind == wasmparser::ExternalKind::Memory)
                        else {
                            continue;
                        };
                        MemorySource::Index(export.index)
                    }
                    Instance::Instantiate { .. } => MemorySource::Export(arg.index, name),
                }
            }
            None => match exported_memory(wasm)? {
                Some(name) => MemorySource::Export(instance as u32, name),
                None => continue,
            },
        };
        probed.push((*index, memory));
    }
    if probed.is_empty() {
        return Ok(None);
    }
    let counts = types.as_ref();
    let mut out = wasm_encoder::Component::new();
    let probe = import_probe(&mut out, counts);
    // The modules calling the probes come from the parent, which defines them after all of
    // its own (see `thread_probe`): defined here, they would move the index of every module
    // after them, by which Wasmtime numbers the code wasmspy maps.
    let mut core_types = CoreTypeSection::new();
    let mut caller_type = ModuleType::new();
    caller_type.ty().function([ValType::I32], []);
    caller_type.import(CALLER_IMPORTS, PROBE, EntityType::Function(0));
    core_types.ty().module(&caller_type);
    out.section(&core_types);
    let mut imports = ComponentImportSection::new();
    for j in 0..probed.len() {
        imports.import(
            caller_import(j),
            ComponentTypeRef::Module(counts.core_type_count_in_component()),
        );
    }
    out.section(&imports);
    let first = counts.module_count();
    append_probes(&mut out, counts, probe, &probed, Callers::Imported(first));
    let modules = probed.iter().map(|(module, _)| *module).collect();
    append_sections(nested.to_vec(), out).map(|wasm| Some((wasm, modules)))
}

/// The module and name of the memory a module imports, if it imports one.
fn imported_memory(wasm: &[u8]) -> Result<Option<(String, String)>> {
    for payload in Parser::new(0).parse_all(wasm) {
        match payload? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import?;
                    if matches!(import.ty, wasmparser::TypeRef::Memory(_)) {
                        return Ok(Some((import.module.to_string(), import.name.to_string())));
                    }
                }
            }
            Payload::CodeSectionStart { .. } => break,
            _ => {}
        }
    }
    Ok(None)
}

/// The name under which a module exports the memory it defines, its memory 0, if it does.
fn exported_memory(wasm: &[u8]) -> Result<Option<String>> {
    let mut defines = false;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload? {
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    if matches!(import?.ty, wasmparser::TypeRef::Memory(_)) {
                        return Ok(None);
                    }
                }
            }
            Payload::MemorySection(reader) => defines = reader.count() > 0,
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export?;
                    if defines
                        && export.kind == wasmparser::ExternalKind::Memory
                        && export.index == 0
                    {
                        return Ok(Some(export.name.to_string()));
                    }
                }
                return Ok(None);
            }
            _ => {}
        }
    }
    Ok(None)
}

/// The module name under which a caller of [`PROBE`] imports it (a sample in the probe shows
/// it, as a host call, `wasmspy::wasmspy-runtime-probe`).
const CALLER_IMPORTS: &str = "wasmspy";

/// `(module (import "wasmspy" PROBE (func (param i32))) (func i32.const MODULE call 0) (start 1))`,
/// named [`PROBE_MODULE`].
fn caller(module: u32) -> wasm_encoder::Module {
    let mut wasm = wasm_encoder::Module::new();
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32], []);
    types.ty().function([], []);
    wasm.section(&types);
    let mut imports = ImportSection::new();
    imports.import(CALLER_IMPORTS, PROBE, EntityType::Function(0));
    wasm.section(&imports);
    let mut functions = FunctionSection::new();
    functions.function(1);
    wasm.section(&functions);
    wasm.section(&StartSection { function_index: 1 });
    let mut code = CodeSection::new();
    let mut body = Function::new([]);
    body.instruction(&Instruction::I32Const(module as i32))
        .instruction(&Instruction::Call(0))
        .instruction(&Instruction::End);
    code.function(&body);
    wasm.section(&code);
    let mut names = wasm_encoder::NameSection::new();
    names.module(PROBE_MODULE);
    let mut functions = wasm_encoder::NameMap::new();
    functions.append(0, PROBE);
    functions.append(1, "show-runtime");
    names.functions(&functions);
    wasm.section(&names);
    wasm
}

/// The probe's argument: the index of a module among the component's, and the address of
/// the definition (Wasmtime's `VMMemoryDefinition`) of the memory the call's canonical
/// options name, alive as long as the store.
///
/// Lifting it reads the options, which only Wasmtime's own lifting context holds: this uses
/// what its derive macros use (`wasmtime::component::__internal`), of the exact Wasmtime
/// version wasmspy is built with.
pub(crate) struct ProbedMemory {
    pub(crate) module: u32,
    pub(crate) definition: usize,
}

// SAFETY: lowered and lifted as the `u32` it is in the component's type.
unsafe impl ComponentType for ProbedMemory {
    type Lower = <u32 as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <u32 as ComponentType>::ABI;
    const MAY_REQUIRE_REALLOC: bool = false;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <u32 as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: as the `u32` it is, its memory found in the lifting context.
unsafe impl Lift for ProbedMemory {
    fn linear_lift_from_flat(
        cx: &mut LiftContext<'_>,
        ty: InterfaceType,
        src: &Self::Lower,
    ) -> wasmtime::Result<Self> {
        let module = u32::linear_lift_from_flat(cx, ty, src)?;
        let CanonicalOptionsDataModel::LinearMemory(LinearMemoryOptions {
            memory: Some(memory),
            ..
        }) = cx.options().data_model
        else {
            wasmtime::bail!("{PROBE} lowered without a memory");
        };
        let definition = cx.instance_mut().runtime_memory(memory);
        Ok(ProbedMemory {
            module,
            definition: definition.as_ptr() as usize,
        })
    }

    fn linear_lift_from_memory(
        _: &mut LiftContext<'_>,
        _: InterfaceType,
        _: &[u8],
    ) -> wasmtime::Result<Self> {
        wasmtime::bail!("{PROBE}'s argument is passed in registers")
    }
}
