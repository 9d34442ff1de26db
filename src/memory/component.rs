//! Memory profiles of components. Each core module of the component with allocators wasmspy
//! knows is rewritten as a module is ([`super::rewrite`]), and the component re-encoded around
//! it; its hook table is then filled by the component itself, since the host cannot reach a
//! core instance inside a component: appended to the component are an import of the host's
//! report function ([`ALLOCATOR_HOOK`]), its `canon lower`, and, for each rewritten module, a
//! small fixup module instantiated with that core function and the module's hook table, whose
//! element segment puts the one in the other (the pattern wit-component uses for its own
//! shims). Everything is appended, so no index of the original component moves. Allocations
//! made while the component is still being instantiated, before the fixup runs, are not
//! reported: the wrapper checks that the table is filled.

use std::sync::Arc;

use anyhow::{Context, Result};
use wasm_encoder::{
    Alias, CanonicalFunctionSection, ComponentAliasSection, ComponentImportSection,
    ComponentSectionId, ComponentTypeRef, ComponentTypeSection, ComponentValType, ElementSection,
    Elements, EntityType, ExportKind, ImportSection, InstanceSection, ModuleArg, ModuleSection,
    PrimitiveValType, RawSection, RefType, TableType, TypeSection,
};
use wasmparser::{Chunk, Parser, Payload};

use super::rewrite::{add_hook_type, rewrite_in_component, Rewritten, HOOK_TABLE};
use crate::wasm::component::{append_sections, core_modules, validated};

/// The function a rewritten component imports, through which its allocators report:
/// `func(allocator: s32, size: s32, freed: s32, allocated: s32, countdown: s64) -> s64`, as
/// the hook of [`HOOK_TABLE`].
pub const ALLOCATOR_HOOK: &str = "wasmspy-allocator-hook";

/// A component whose core modules' allocators report to the host.
pub struct RewrittenComponent {
    pub wasm: Vec<u8>,
    /// The rewrite of each core module, by Wasmtime's static index; `None`: left as it was.
    pub modules: Vec<Option<Arc<Rewritten>>>,
}

/// Rewrites the allocators of `component`'s core modules (those of the top-level component,
/// instantiated once); `None` when none has one.
pub fn rewrite_component(component: &[u8]) -> Result<Option<RewrittenComponent>> {
    let cores = core_modules(component)?;
    let mut modules = vec![None; cores.len()];
    let mut hooked = Vec::new();
    for (i, core) in cores.iter().enumerate() {
        let Some(instance) = core.instance else {
            continue;
        };
        let wasm = &component[core.range.clone()];
        if let Some(rewritten) = rewrite_in_component(wasm, &core.host_reallocs)? {
            modules[i] = Some(Arc::new(rewritten));
            hooked.push(instance);
        }
    }
    if hooked.is_empty() {
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

    let fixup = fixup_module();
    let (mut table, mut instance) = (counts.table_count(), counts.core_instance_count());
    for (j, &hooked) in hooked.iter().enumerate() {
        let mut alias = ComponentAliasSection::new();
        alias.alias(Alias::CoreInstanceExport {
            instance: hooked,
            kind: ExportKind::Table,
            name: HOOK_TABLE,
        });
        out.section(&alias);
        out.section(&ModuleSection(&fixup));
        let mut instances = InstanceSection::new();
        instances.export_items([
            ("table", ExportKind::Table, table),
            ("report", ExportKind::Func, report),
        ]);
        instances.instantiate(
            counts.module_count() + j as u32,
            [("", ModuleArg::Instance(instance))],
        );
        out.section(&instances);
        table += 1;
        instance += 2;
    }
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
    let mut parser = Parser::new(0);
    let mut offset = 0;
    loop {
        let Chunk::Parsed { consumed, payload } = parser.parse(&component[offset..], true)? else {
            anyhow::bail!("truncated component");
        };
        offset += consumed;
        match payload {
            Payload::Version { .. } => {}
            Payload::End(_) => return Ok(()),
            Payload::ModuleSection {
                unchecked_range, ..
            } => {
                let rewritten = cores
                    .iter()
                    .position(|c| c.range == unchecked_range)
                    .and_then(|i| modules[i].as_ref());
                let data = match rewritten {
                    Some(r) => &r.wasm[..],
                    None => &component[unchecked_range.clone()],
                };
                out.section(&RawSection {
                    id: ComponentSectionId::CoreModule as u8,
                    data,
                });
                offset = unchecked_range.end;
            }
            Payload::ComponentSection {
                unchecked_range, ..
            } => {
                out.section(&RawSection {
                    id: ComponentSectionId::Component as u8,
                    data: &component[unchecked_range.clone()],
                });
                offset = unchecked_range.end;
            }
            other => {
                let (id, range) = other
                    .as_section()
                    .context("unexpected content in the component")?;
                out.section(&RawSection {
                    id,
                    data: &component[range],
                });
            }
        }
    }
}

/// `(module (import "" "table" (table 1 funcref)) (import "" "report" (func …))
/// (elem (i32.const 0) func 0))`: puts the host's report function in a hook table.
fn fixup_module() -> wasm_encoder::Module {
    let mut module = wasm_encoder::Module::new();
    let mut types = TypeSection::new();
    add_hook_type(&mut types);
    module.section(&types);
    let mut imports = ImportSection::new();
    imports.import(
        "",
        "table",
        EntityType::Table(TableType {
            element_type: RefType::FUNCREF,
            table64: false,
            minimum: 1,
            maximum: Some(1),
            shared: false,
        }),
    );
    imports.import("", "report", EntityType::Function(0));
    module.section(&imports);
    let mut elements = ElementSection::new();
    elements.active(
        Some(0),
        &wasm_encoder::ConstExpr::i32_const(0),
        Elements::Functions([0].as_slice().into()),
    );
    module.section(&elements);
    module
}
