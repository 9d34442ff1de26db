//! Memory profiles of components. Each core module of the component with allocators wasmspy
//! knows is rewritten as a module is ([`super::rewrite`]), and the component re-encoded around
//! it; its hook tables are then filled by the component itself, since the host cannot reach a
//! core instance inside a component: appended to the component are an import of the host's
//! report function ([`ALLOCATOR_HOOK`]), its `canon lower`, and a small gate module
//! instantiated with that core function and every rewritten module's hook table and nesting
//! depth, whose element segments put its gate function in each table (the pattern
//! wit-component uses for its own shims). Everything is appended, so no index of the
//! original component moves. Allocations made while the component is still being
//! instantiated, before the gate's instance is made, are not reported: the wrapper checks
//! that the table is filled.
//!
//! The gate passes each report on to the host, and nests allocators across modules. A
//! function the host calls (a `realloc` or `post-return`, during which the canonical ABI traps
//! any call out of the component) may allocate in another module (componentize-py's
//! `cabi_realloc` calls `libc.so`'s `malloc`); so may the allocators of a module that does not
//! define `malloc` (`libpython3.14.so`'s `PyObject_Malloc`). Their wrappers tell the gate they
//! enter and leave ([`Allocator::HostCalled`]), and the gate raises and lowers every module's
//! [`NESTING_DEPTH`] meanwhile, so that no other allocator of the component counts or reports,
//! as none of their own module does: a block is reported once, by the outermost allocator.

use std::sync::Arc;

use anyhow::Result;
use wasm_encoder::{
    Alias, BlockType, CanonicalFunctionSection, CodeSection, ComponentAliasSection,
    ComponentImportSection, ComponentSectionId, ComponentTypeRef, ComponentTypeSection,
    ComponentValType, ConstExpr, ElementSection, Elements, EntityType, ExportKind, Function,
    FunctionSection, GlobalType, ImportSection, InstanceSection, ModuleArg, ModuleSection,
    PrimitiveValType, RawSection, RefType, TableType, TypeSection, ValType,
};
use wasmparser::Payload;

use super::rewrite::{
    add_hook_type, rewrite_as, Allocator, Rewritten, HOOK_TABLE, NESTING_DEPTH, TOLD_BY_ALLOCATOR,
    TOLD_ENTERING,
};
use crate::wasm::component::{
    append_sections, copy_section, core_modules, own_sections, validated,
};

/// The function a rewritten component imports, through which its allocators report:
/// `func(allocator: s32, size: s32, freed: s32, allocated: s32, countdown: s64) -> s64`, as
/// the hook of [`HOOK_TABLE`].
pub const ALLOCATOR_HOOK: &str = "wasmspy-allocator-hook";

/// A component whose core modules' allocators report to the host.
pub struct RewrittenComponent {
    /// The rewritten component's bytes, which import [`ALLOCATOR_HOOK`].
    pub wasm: Vec<u8>,
    /// The rewrite of each core module, by Wasmtime's static index; `None`: left as it was.
    pub modules: Vec<Option<Arc<Rewritten>>>,
}

/// Rewrites the allocators of `component`'s core modules (those of the top-level component,
/// instantiated once); `None` when none has one.
pub fn rewrite_component(component: &[u8]) -> Result<Option<RewrittenComponent>, crate::Error> {
    rewrite_cores(component).map_err(crate::Error::Malformed)
}

/// [`rewrite_component`], its failures a malformed component's.
fn rewrite_cores(component: &[u8]) -> Result<Option<RewrittenComponent>> {
    let cores = core_modules(component)?;
    let mut modules = vec![None; cores.len()];
    // (instance, whether its allocators' wrappers tell the gate) of each rewritten module.
    let mut hooked = Vec::new();
    for (i, core) in cores.iter().enumerate() {
        let Some(instance) = core.instance else {
            continue;
        };
        let wasm = &component[core.range.clone()];
        if let Some(rewritten) = rewrite_as(wasm, Some(&core.host_called))? {
            hooked.push((instance, rewritten.tells));
            modules[i] = Some(Arc::new(rewritten));
        }
    }
    if !modules.iter().flatten().any(|r| r.reports()) {
        return Ok(None);
    }
    let types = validated(component)?;
    let counts = types.as_ref();
    let mut copy = wasm_encoder::Component::new();
    copy_top_level(component, &cores, &modules, &mut copy)?;
    let mut out = wasm_encoder::Component::new();

    let hook_type = counts.component_type_count();
    let mut ty = ComponentTypeSection::new();
    let s32 = ComponentValType::Primitive(PrimitiveValType::S32);
    ty.function()
        .params([
            ("allocator", s32),
            ("size", s32),
            ("freed", s32),
            ("allocated", s32),
            (
                "countdown",
                ComponentValType::Primitive(PrimitiveValType::S64),
            ),
        ])
        .result(Some(ComponentValType::Primitive(PrimitiveValType::S64)));
    out.section(&ty);
    let mut import = ComponentImportSection::new();
    import.import(ALLOCATOR_HOOK, ComponentTypeRef::Func(hook_type));
    out.section(&import);
    let mut lower = CanonicalFunctionSection::new();
    lower.lower(counts.component_function_count(), []);
    out.section(&lower);
    let report = counts.function_count();

    let mut aliases = ComponentAliasSection::new();
    for (kind, name) in [
        (ExportKind::Table, HOOK_TABLE),
        (ExportKind::Global, NESTING_DEPTH),
    ] {
        for &(instance, _) in &hooked {
            aliases.alias(Alias::CoreInstanceExport {
                instance,
                kind,
                name,
            });
        }
    }
    out.section(&aliases);
    let tells: Vec<bool> = hooked.iter().map(|&(_, tells)| tells).collect();
    out.section(&ModuleSection(&gate_module(&tells)));
    let names: Vec<[String; 2]> = (0..hooked.len())
        .map(|j| [format!("table{j}"), format!("depth{j}")])
        .collect();
    let (tables, globals) = (counts.table_count(), counts.global_count());
    let mut items = vec![("report", ExportKind::Func, report)];
    for (j, [table, depth]) in (0..).zip(&names) {
        items.push((table, ExportKind::Table, tables + j));
        items.push((depth, ExportKind::Global, globals + j));
    }
    let mut instances = InstanceSection::new();
    instances.export_items(items);
    instances.instantiate(
        counts.module_count(),
        [("", ModuleArg::Instance(counts.core_instance_count()))],
    );
    out.section(&instances);
    let wasm = append_sections(copy.finish(), out)?;
    Ok(Some(RewrittenComponent { wasm, modules }))
}

/// The top-level sections of `component`, each core module replaced by its rewrite where it
/// has one; nested modules and components copied whole.
fn copy_top_level(
    component: &[u8],
    cores: &[crate::wasm::component::CoreModule],
    modules: &[Option<Arc<Rewritten>>],
    out: &mut wasm_encoder::Component,
) -> Result<()> {
    for payload in own_sections(component, 0) {
        match payload? {
            Payload::ModuleSection {
                unchecked_range, ..
            } => {
                let rewritten = cores
                    .iter()
                    .position(|c| c.range == unchecked_range)
                    .and_then(|i| modules[i].as_ref());
                let data = match rewritten {
                    Some(r) => &r.wasm[..],
                    None => &component[unchecked_range],
                };
                out.section(&RawSection {
                    id: ComponentSectionId::CoreModule as u8,
                    data,
                });
            }
            Payload::Version { .. } | Payload::End(_) => {}
            other => copy_section(out, component, other)?,
        }
    }
    Ok(())
}

/// `(module (import "" "report" (func $report …)) (import "" "tableJ" (table 1 funcref))
/// (import "" "depthJ" (global (mut i32)))… (func $gate …) (elem (table J) (i32.const 0) func
/// $gate)…)`, for rewritten modules whose allocators' wrappers tell the gate or not (`tells`).
/// On a call of [`Allocator::HostCalled`]'s code `$gate` adds 1 to the nesting depth of every
/// module (of those that do not tell, when [`TOLD_BY_ALLOCATOR`]) if [`TOLD_ENTERING`], else
/// takes 1; it passes every other call on to `$report`.
fn gate_module(tells: &[bool]) -> wasm_encoder::Module {
    let modules = tells.len() as u32;
    let mut module = wasm_encoder::Module::new();
    let mut types = TypeSection::new();
    add_hook_type(&mut types);
    module.section(&types);
    let mut imports = ImportSection::new();
    imports.import("", "report", EntityType::Function(0));
    for j in 0..modules {
        imports.import(
            "",
            &format!("table{j}"),
            EntityType::Table(TableType {
                element_type: RefType::FUNCREF,
                table64: false,
                minimum: 1,
                maximum: Some(1),
                shared: false,
            }),
        );
        imports.import(
            "",
            &format!("depth{j}"),
            EntityType::Global(GlobalType {
                val_type: ValType::I32,
                mutable: true,
                shared: false,
            }),
        );
    }
    module.section(&imports);
    let mut functions = FunctionSection::new();
    functions.function(0);
    module.section(&functions);
    let mut elements = ElementSection::new();
    for j in 0..modules {
        elements.active(
            Some(j),
            &ConstExpr::i32_const(0),
            Elements::Functions([1].as_slice().into()),
        );
    }
    module.section(&elements);
    let (allocator, told, delta) = (0, 1, 5);
    let mut gate = Function::new([(1, ValType::I32)]);
    let mut code = gate.instructions();
    code.local_get(allocator)
        .i32_const(Allocator::HostCalled.code())
        .i32_eq()
        .if_(BlockType::Empty);
    code.i32_const(1)
        .i32_const(-1)
        .local_get(told)
        .i32_const(TOLD_ENTERING)
        .i32_and()
        .select()
        .local_set(delta);
    let nest = |code: &mut wasm_encoder::InstructionSink<'_>, depth: u32| {
        code.global_get(depth)
            .local_get(delta)
            .i32_add()
            .global_set(depth);
    };
    for depth in (0..modules).filter(|&j| !tells[j as usize]) {
        nest(&mut code, depth);
    }
    code.local_get(told)
        .i32_const(TOLD_BY_ALLOCATOR)
        .i32_and()
        .i32_eqz()
        .if_(BlockType::Empty);
    for depth in (0..modules).filter(|&j| tells[j as usize]) {
        nest(&mut code, depth);
    }
    code.end();
    code.i64_const(0).return_().end();
    for param in 0..5 {
        code.local_get(param);
    }
    code.call(0).end();
    let mut section = CodeSection::new();
    section.function(&gate);
    module.section(&section);
    module
}
