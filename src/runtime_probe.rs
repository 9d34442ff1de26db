//! The runtime probe: language runtimes inside components shown to the host. Wasmtime shows the host no core instance of a
//! component (neither its memory nor its `VMContext`), so the component is made to show the
//! memory of each instance of a runtime's module itself: appended to it (as the memory
//! profile's fixups are, so that no index of the original moves) are an import of the host's
//! probe function ([`PROBE`]), lowered once per such instance with the instance's memory as
//! its canonical `memory` option, and a module per instance whose start function calls it
//! with the index of the instance's module. Lifting the call's argument gives the host the
//! definition of the memory the options name ([`ProbedMemory`]), which a walk reads through
//! ([`RuntimeInstance::in_component`](crate::runtimes::RuntimeInstance::in_component)), before the component's exports can run.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use anyhow::{Context, Result};
use wasm_encoder::{
    Alias, CanonicalFunctionSection, CanonicalOption, CodeSection, ComponentAliasSection,
    ComponentImportSection, ComponentTypeRef, ComponentTypeSection, ComponentValType, EntityType,
    ExportKind, Function, FunctionSection, ImportSection, InstanceSection, Instruction, ModuleArg,
    ModuleSection, PrimitiveValType, StartSection, TypeSection, ValType,
};
use wasm_encoder::{CoreTypeSection, ModuleType};
use wasmparser::types::TypesRef;
use wasmparser::{Instance, Parser, Payload, Validator, WasmFeatures};
use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext};
use wasmtime::component::{ComponentType, Lift};
use wasmtime_environ::component::{CanonicalOptionsDataModel, LinearMemoryOptions};

use crate::resolve::symbolize::ModuleSymbolizer;
use crate::wasm::appended::{append_sections, appended_to, validated};
use crate::wasm::component::{core_modules, own_sections, PROBE_MODULE};
use crate::wasm::nested::{thread_import, NestedComponents, Rethreaded};

/// The function a probed component imports: `func(module: u32)`, called once per instance
/// of a runtime's module, with the index of the module among the component's, lowered with
/// the instance's memory.
pub const PROBE: &str = "wasmspy-runtime-probe";

/// `component` with a probe for each instance of a module of a runtime wasmspy reads whose walk
/// reads its memory alone: each top-level core instance of such a module that exports the
/// memory it defines, and each instance of one in a component nested in it (instantiated
/// once, as componentize-qjs's engine is), whatever memory it reads; `None` when it has none.
pub fn probe_runtimes(component: &[u8]) -> Result<Option<Arc<[u8]>>, crate::Error> {
    probed(component).map_err(crate::Error::Malformed)
}

/// [`probe_runtimes`], its failures a malformed component's.
fn probed(component: &[u8]) -> Result<Option<Arc<[u8]>>> {
    let cores = core_modules(component)?;
    let mut top = Vec::new();
    let mut nested = Vec::new();
    for (index, core) in cores.iter().enumerate() {
        let bytes = component
            .get(core.range.clone())
            .context("a core module beyond the component's end")?;
        // A runtime whose walk reads globals cannot be shown by its memory alone.
        let runtime = ModuleSymbolizer::runtime_of(bytes)?;
        if !runtime.is_some_and(|r| r.globals().is_empty()) {
            continue;
        }
        match core.instance {
            Some(instance) => {
                if let Some(memory) = exported_memory(bytes)? {
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
    if top.is_empty() {
        return Ok(threaded.map(|(wasm, _)| wasm.into()));
    }
    let (base, probe) = match &threaded {
        Some((wasm, probe)) => (&wasm[..], Some(*probe)),
        None => (component, None),
    };
    let types = validated(base)?;
    let mut out = wasm_encoder::Component::new();
    let probe = match probe {
        Some(probe) => probe,
        None => import_probe(&mut out, types.as_ref()),
    };
    append_probes(&mut out, types.as_ref(), probe, &top, Callers::Defined);
    Ok(Some(appended_to(base, out)))
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
    probe_type(&mut types);
    out.section(&types);
    let mut import = ComponentImportSection::new();
    import.import(PROBE, ComponentTypeRef::Func(ty));
    out.section(&import);
}

/// Adds [`PROBE`]'s function type to `types`.
fn probe_type(types: &mut ComponentTypeSection) {
    types
        .function()
        .params([("module", ComponentValType::Primitive(PrimitiveValType::U32))])
        .result(None);
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
/// (`nested`: their indices among the component's and where they are), which probes them
/// (see [`thread_import`]), with the modules calling it. The new component and the probe's
/// function index in it; `None` where the nesting is not one wasmspy rewrites (a component
/// instantiated more or less than once, or whose runtime's memory is not found).
fn thread_probe(
    component: &[u8],
    nested: &[(u32, Range<usize>)],
) -> Result<Option<(Vec<u8>, u32)>> {
    let top = NestedComponents::read(component)?;
    let mut rethreaded = BTreeMap::new();
    for (c, range) in (0..).zip(&top.ranges) {
        let inside: Vec<(u32, Range<usize>)> = nested
            .iter()
            .filter(|(_, r)| r.start >= range.start && r.end <= range.end)
            .cloned()
            .collect();
        if inside.is_empty() || !top.instantiated_once(c) {
            continue;
        }
        if let Some((wasm, probed)) = probe_nested(component, range.clone(), &inside)? {
            let modules = (0..)
                .zip(probed)
                .map(|(j, module)| (caller_import(j), caller(module)))
                .collect();
            rethreaded.insert(c, Rethreaded { wasm, modules });
        }
    }
    thread_import(component, PROBE, probe_type, &rethreaded)
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
    Ok(Some((append_sections(nested.to_vec(), out), modules)))
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
