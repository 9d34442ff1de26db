//! Language runtimes inside components. Wasmtime shows the host no core instance of a
//! component (neither its memory nor its `VMContext`), so the component is made to show the
//! memory of each instance of a runtime's module itself: appended to it (as the memory
//! profile's fixups are, so that no index of the original moves) are an import of the host's
//! probe function ([`PROBE`]), lowered once per such instance with the instance's memory as
//! its canonical `memory` option, and a module per instance whose start function calls it
//! with the index of the instance's module. Lifting the call's argument gives the host the
//! definition of the memory the options name ([`ProbedMemory`]), which a walk reads through
//! ([`super::RuntimeInstance::in_component`]), before the component's exports can run.

use std::sync::Arc;

use anyhow::{Context, Result};
use wasm_encoder::{
    Alias, CanonicalFunctionSection, CanonicalOption, CodeSection, ComponentAliasSection,
    ComponentImportSection, ComponentTypeRef, ComponentTypeSection, ComponentValType, EntityType,
    ExportKind, Function, FunctionSection, ImportSection, InstanceSection, Instruction, ModuleArg,
    ModuleSection, PrimitiveValType, StartSection, TypeSection, ValType,
};
use wasmparser::{Parser, Payload};
use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext};
use wasmtime::component::{ComponentType, Lift};
use wasmtime_environ::component::{CanonicalOptionsDataModel, LinearMemoryOptions};

use crate::resolve::symbolize::{ModuleBytes, ModuleSymbolizer};
use crate::wasm::component::{append_sections, core_modules, validated};

/// The function a probed component imports: `func(module: u32)`, called once per instance
/// of a runtime's module, with the index of the module among the component's, lowered with
/// the instance's memory.
pub const PROBE: &str = "wasmspy-runtime-probe";

/// `component` with a probe for each instance of a module of a runtime wasmspy reads (each
/// top-level core instance whose module is detected as one, and exports the memory it
/// defines, which is all its walk reads); `None` when it has none.
pub fn probe_runtimes(component: &[u8]) -> Result<Option<Vec<u8>>> {
    let cores = core_modules(component)?;
    let shared: Arc<[u8]> = component.into();
    let mut probed = Vec::new();
    for (index, core) in cores.iter().enumerate() {
        let Some(instance) = core.instance else {
            continue;
        };
        let Some(memory) = exported_memory(&component[core.range.clone()])? else {
            continue;
        };
        let bytes = ModuleBytes::within(shared.clone(), core.range.clone())
            .context("a core module beyond the component's end")?;
        // A runtime whose walk reads globals cannot be shown by its memory alone.
        let symbolizer = ModuleSymbolizer::new("", bytes, false)?;
        if symbolizer.runtime().is_some_and(|r| r.globals().is_empty()) {
            probed.push((index as u32, instance, memory));
        }
    }
    if probed.is_empty() {
        return Ok(None);
    }
    let types = validated(component)?;
    let counts = types.as_ref();
    let mut out = wasm_encoder::Component::new();
    let mut ty = ComponentTypeSection::new();
    ty.function()
        .params([("module", ComponentValType::Primitive(PrimitiveValType::U32))])
        .result(None);
    out.section(&ty);
    let mut import = ComponentImportSection::new();
    import.import(PROBE, ComponentTypeRef::Func(counts.component_type_count()));
    out.section(&import);
    let probe = counts.component_function_count();
    let (memories, functions) = (counts.memory_count(), counts.function_count());
    let (modules, instances) = (counts.module_count(), counts.core_instance_count());
    for (j, (module, instance, memory)) in probed.iter().enumerate() {
        let j = j as u32;
        let mut alias = ComponentAliasSection::new();
        alias.alias(Alias::CoreInstanceExport {
            instance: *instance,
            kind: ExportKind::Memory,
            name: memory,
        });
        out.section(&alias);
        let mut lower = CanonicalFunctionSection::new();
        lower.lower(probe, [CanonicalOption::Memory(memories + j)]);
        out.section(&lower);
        out.section(&ModuleSection(&caller(*module)));
        let mut instantiate = InstanceSection::new();
        instantiate.export_items([("probe", ExportKind::Func, functions + j)]);
        instantiate.instantiate(modules + j, [("", ModuleArg::Instance(instances + 2 * j))]);
        out.section(&instantiate);
    }
    append_sections(component.to_vec(), out).map(Some)
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

/// `(module (import "" "probe" (func (param i32))) (func i32.const MODULE call 0) (start 1))`.
fn caller(module: u32) -> wasm_encoder::Module {
    let mut wasm = wasm_encoder::Module::new();
    let mut types = TypeSection::new();
    types.ty().function([ValType::I32], []);
    types.ty().function([], []);
    wasm.section(&types);
    let mut imports = ImportSection::new();
    imports.import("", "probe", EntityType::Function(0));
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
