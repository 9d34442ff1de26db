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
//! A component nested in the top-level one, which instantiates it once, has its modules
//! rewritten too (componentize-qjs's QuickJS engine is in one), and a gate of its own, for its
//! own modules: it imports the hook and the gate module, which the top level imports and
//! defines after all of its own modules and passes in where it instantiates it
//! (`wasm/nested.rs`); a gate module defined inside it would move the index of every
//! module after it.
//!
//! The gate passes each report on to the host, and nests allocators across modules. A
//! function the host calls (a `realloc` or `post-return`, during which the canonical ABI traps
//! any call out of the component) may allocate in another module (componentize-py's
//! `cabi_realloc` calls `libc.so`'s `malloc`); so may the allocators of a module that does not
//! define `malloc` (`libpython3.14.so`'s `PyObject_Malloc`). Their wrappers tell the gate they
//! enter and leave ([`Allocator::HostCalled`]), and the gate raises and lowers every module's
//! [`NESTING_DEPTH`] meanwhile, so that no other allocator of the component counts or reports,
//! as none of their own module does: a block is reported once, by the outermost allocator.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use wasm_encoder::{
    Alias, BlockType, CanonicalFunctionSection, CodeSection, ComponentAliasSection,
    ComponentImportSection, ComponentSectionId, ComponentTypeRef, ComponentTypeSection,
    ComponentValType, ConstExpr, CoreTypeSection, ElementSection, Elements, EntityType, ExportKind,
    Function, FunctionSection, GlobalType, ImportSection, InstanceSection, ModuleArg,
    ModuleSection, ModuleType, PrimitiveValType, RawSection, RefType, TableType, TypeSection,
    ValType,
};
use wasmparser::types::TypesRef;
use wasmparser::Payload;

use super::rewrite::{
    add_hook_type, rewrite_as, Allocator, Rewritten, HOOK_TABLE, NESTING_DEPTH, TOLD_BY_ALLOCATOR,
    TOLD_ENTERING,
};
use crate::wasm::appended::{append_sections, validated};
use crate::wasm::component::{copy_section, core_modules, own_sections, CoreModule};
use crate::wasm::nested::{self_contained, thread_import, NestedComponents, Rethreaded};

/// The function a rewritten component imports, through which its allocators report:
/// `func(allocator: s32, size: s32, freed: s32, allocated: s32, countdown: s64) -> s64`, as
/// the hook of [`HOOK_TABLE`].
pub const ALLOCATOR_HOOK: &str = "wasmspy-allocator-hook";

/// The name under which a nested component imports its gate module, which its parent defines
/// (see `wasm/nested.rs`).
pub const GATE_IMPORT: &str = "wasmspy-allocator-gate";

/// A component whose core modules' allocators report to the host.
pub struct RewrittenComponent {
    /// The rewritten component's bytes, which import [`ALLOCATOR_HOOK`].
    pub wasm: Vec<u8>,
    /// The rewrite of each core module, by Wasmtime's static index; `None`: left as it was.
    pub modules: Vec<Option<Arc<Rewritten>>>,
}

/// Rewrites the allocators of `component`'s core modules (those of the top-level component,
/// instantiated once, and those of the components nested in it that it instantiates once);
/// `None` when none has one.
pub fn rewrite_component(component: &[u8]) -> Result<Option<RewrittenComponent>, crate::Error> {
    rewrite_component_noting(component, &mut Vec::new())
}

/// As [`rewrite_component`], adding to `warnings` why a core module's allocators were not
/// recognised where its functions have no names (`NAME: WHY`, NAME its `name` section's
/// module name or `moduleN`): such a module is left as it is.
pub fn rewrite_component_noting(
    component: &[u8],
    warnings: &mut Vec<String>,
) -> Result<Option<RewrittenComponent>, crate::Error> {
    rewrite_cores(component, warnings).map_err(crate::Error::Malformed)
}

/// A component's core modules instantiated once at its top level, rewritten.
struct Cores {
    /// By the index of each among all the component's core modules.
    modules: Vec<Option<Arc<Rewritten>>>,
    /// (instance, whether its allocators' wrappers tell the gate) of each rewritten module.
    hooked: Vec<(u32, bool)>,
}

impl Cores {
    /// `component`'s, `cores` its core modules; the index of the first among the whole
    /// component's is `first` (a nested component's are numbered after those before it).
    fn rewrite(
        component: &[u8],
        cores: &[CoreModule],
        first: usize,
        warnings: &mut Vec<String>,
    ) -> Result<Self> {
        let mut modules = vec![None; cores.len()];
        let mut hooked = Vec::new();
        for (i, core) in cores.iter().enumerate() {
            let Some(instance) = core.instance else {
                continue;
            };
            let wasm = &component[core.range.clone()];
            let (rewritten, unrecognised) = rewrite_as(wasm, Some(&core.host_called))?;
            if let Some(why) = unrecognised {
                let name = core.name.clone();
                let name = name.unwrap_or_else(|| format!("module{}", first + i));
                warnings.push(format!("{name}: {why}"));
            }
            if let Some(rewritten) = rewritten {
                hooked.push((instance, rewritten.tells));
                modules[i] = Some(Arc::new(rewritten));
            }
        }
        Ok(Cores { modules, hooked })
    }

    fn report(&self) -> bool {
        self.modules.iter().flatten().any(|r| r.reports())
    }
}

/// [`rewrite_component`], its failures a malformed component's.
fn rewrite_cores(
    component: &[u8],
    warnings: &mut Vec<String>,
) -> Result<Option<RewrittenComponent>> {
    let cores = core_modules(component)?;
    let top = Cores::rewrite(component, &cores, 0, warnings)?;
    let mut modules = top.modules.clone();
    // The nested components instantiated once, rewritten to import the hook and their gate.
    let nested = NestedComponents::read(component)?;
    let mut rethreaded = BTreeMap::new();
    let mut inside = BTreeMap::new();
    for (c, range) in (0..).zip(&nested.ranges) {
        // Their modules' indices among the whole component's.
        let indices: Vec<usize> = (0..cores.len())
            .filter(|&i| cores[i].range.start >= range.start && cores[i].range.end <= range.end)
            .collect();
        let bytes = &component[range.clone()];
        if indices.is_empty() || !nested.instantiated_once(c) || !self_contained(bytes) {
            continue;
        }
        let Some(first) = indices.first().copied() else {
            continue;
        };
        if let Some((wasm, rewritten)) = rewrite_nested(bytes, first, warnings)? {
            let gate = gate_module(&rewritten.hooked.iter().map(|h| h.1).collect::<Vec<_>>());
            let modules = vec![(GATE_IMPORT.to_string(), gate)];
            rethreaded.insert(c, Rethreaded { wasm, modules });
            inside.insert(c, (indices, rewritten.modules));
        }
    }
    let mut wasm = match top.hooked.is_empty() {
        true => component.to_vec(),
        false => copy_top_level(component, &cores, &top.modules)?,
    };
    let mut hook = None;
    if !rethreaded.is_empty() {
        if let Some((threaded, function)) =
            thread_import(&wasm, ALLOCATOR_HOOK, hook_type, &rethreaded)?
        {
            (wasm, hook) = (threaded, Some(function));
            for (indices, rewritten) in inside.into_values() {
                for (i, r) in indices.into_iter().zip(rewritten) {
                    modules[i] = r;
                }
            }
        }
    }
    if !modules.iter().flatten().any(|r| r.reports()) {
        return Ok(None);
    }
    if !top.hooked.is_empty() {
        let types = validated(&wasm)?;
        let mut out = wasm_encoder::Component::new();
        append_gate(&mut out, types.as_ref(), hook, Gate::Defined, &top.hooked);
        wasm = append_sections(wasm, out);
    }
    Ok(Some(RewrittenComponent { wasm, modules }))
}

/// Nested component `component`'s core modules rewritten (the first's index among the whole
/// component's is `first`), and the component rewritten around them to import the hook and
/// its gate module, which it instantiates with its modules' tables and depths; `None` when
/// none of its modules reports.
fn rewrite_nested(
    component: &[u8],
    first: usize,
    warnings: &mut Vec<String>,
) -> Result<Option<(Vec<u8>, Cores)>> {
    let cores = core_modules(component)?;
    let rewritten = Cores::rewrite(component, &cores, first, warnings)?;
    if !rewritten.report() {
        return Ok(None);
    }
    let copy = copy_top_level(component, &cores, &rewritten.modules)?;
    let types = validated(&copy)?;
    let mut out = wasm_encoder::Component::new();
    append_gate(
        &mut out,
        types.as_ref(),
        None,
        Gate::Imported,
        &rewritten.hooked,
    );
    Ok(Some((append_sections(copy, out), rewritten)))
}

/// Where a component's gate module comes from.
enum Gate {
    /// Defined by the component.
    Defined,
    /// Imported as [`GATE_IMPORT`], from its parent.
    Imported,
}

/// Adds the hook's function type to `types`.
fn hook_type(types: &mut ComponentTypeSection) {
    let s32 = ComponentValType::Primitive(PrimitiveValType::S32);
    types
        .function()
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
}

/// Appends to `out`, after a component whose index spaces are `counts`: the import of the hook
/// (unless it is component function `hook` already), its `canon lower`, the gate module
/// (`gate`) and its instance, made with the report function and the hook tables and nesting
/// depths of the core instances `hooked` ((instance, whether its allocators' wrappers tell the
/// gate)), whose element segments fill the tables.
fn append_gate(
    out: &mut wasm_encoder::Component,
    counts: TypesRef<'_>,
    hook: Option<u32>,
    gate: Gate,
    hooked: &[(u32, bool)],
) {
    let hook = hook.unwrap_or_else(|| {
        let mut ty = ComponentTypeSection::new();
        hook_type(&mut ty);
        out.section(&ty);
        let mut import = ComponentImportSection::new();
        import.import(
            ALLOCATOR_HOOK,
            ComponentTypeRef::Func(counts.component_type_count()),
        );
        out.section(&import);
        counts.component_function_count()
    });
    let mut lower = CanonicalFunctionSection::new();
    lower.lower(hook, []);
    out.section(&lower);
    let report = counts.function_count();

    let mut aliases = ComponentAliasSection::new();
    for (kind, name) in [
        (ExportKind::Table, HOOK_TABLE),
        (ExportKind::Global, NESTING_DEPTH),
    ] {
        for &(instance, _) in hooked {
            aliases.alias(Alias::CoreInstanceExport {
                instance,
                kind,
                name,
            });
        }
    }
    out.section(&aliases);
    match gate {
        Gate::Defined => {
            let tells: Vec<bool> = hooked.iter().map(|&(_, tells)| tells).collect();
            out.section(&ModuleSection(&gate_module(&tells)));
        }
        Gate::Imported => {
            let mut types = CoreTypeSection::new();
            types.ty().module(&gate_type(hooked.len() as u32));
            out.section(&types);
            let mut import = ComponentImportSection::new();
            let ty = counts.core_type_count_in_component();
            import.import(GATE_IMPORT, ComponentTypeRef::Module(ty));
            out.section(&import);
        }
    }
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
}

/// The top-level sections of `component`, each core module replaced by its rewrite where it
/// has one; nested modules and components copied whole.
fn copy_top_level(
    component: &[u8],
    cores: &[CoreModule],
    modules: &[Option<Arc<Rewritten>>],
) -> Result<Vec<u8>> {
    let mut out = wasm_encoder::Component::new();
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
            other => copy_section(&mut out, component, other)?,
        }
    }
    Ok(out.finish())
}

/// The gate module's imports, for `modules` modules: its report function (function type 0),
/// and each module's hook table and nesting depth.
fn gate_imports(modules: u32) -> Vec<(String, EntityType)> {
    let mut imports = vec![("report".to_string(), EntityType::Function(0))];
    for j in 0..modules {
        let table = EntityType::Table(TableType {
            element_type: RefType::FUNCREF,
            table64: false,
            minimum: 1,
            maximum: Some(1),
            shared: false,
        });
        imports.push((format!("table{j}"), table));
        let depth = EntityType::Global(GlobalType {
            val_type: ValType::I32,
            mutable: true,
            shared: false,
        });
        imports.push((format!("depth{j}"), depth));
    }
    imports
}

/// The type of [`gate_module`] for `modules` modules, as a nested component imports it.
fn gate_type(modules: u32) -> ModuleType {
    let mut ty = ModuleType::new();
    let [i32, i64] = [ValType::I32, ValType::I64];
    ty.ty().function([i32, i32, i32, i32, i64], [i64]);
    for (name, entity) in gate_imports(modules) {
        ty.import("", &name, entity);
    }
    ty
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
    for (name, ty) in gate_imports(modules) {
        imports.import("", &name, ty);
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use wasmtime::component::{Component, Linker};
    use wasmtime::{Engine, Store};

    use super::*;
    use crate::memory::rewrite::report;

    /// A component nesting one that instantiates `module` once and lifts its `run`.
    fn nesting(module: &str) -> Vec<u8> {
        wat::parse_str(format!(
            r#"(component
                (component $inner
                    (core module $m {module})
                    (core instance $i (instantiate $m))
                    (func (export "run") (result u32) (canon lift (core func $i "run"))))
                (instance $x (instantiate $inner))
                (export "run" (func $x "run")))"#
        ))
        .unwrap()
    }

    /// Runs `run` of `component` rewritten, every allocation sampled: what the hook heard,
    /// (allocator, size).
    fn heard(component: &[u8]) -> Vec<(Allocator, i32)> {
        heard_from(component, &["run"])
    }

    /// Runs each of `exports` of `component` rewritten, in order, as [`heard`] does.
    fn heard_from(component: &[u8], exports: &[&str]) -> Vec<(Allocator, i32)> {
        let rewritten = rewrite_component(component).unwrap().expect("rewritten");
        assert!(rewritten.modules.iter().flatten().all(|m| m.reports()));
        let engine = Engine::default();
        let compiled = Component::new(&engine, &rewritten.wasm).unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let mut linker = Linker::<()>::new(&engine);
        let into = heard.clone();
        linker
            .root()
            .func_wrap(
                ALLOCATOR_HOOK,
                move |_, (a, size, _, _, _): (i32, i32, i32, i32, i64)| {
                    into.lock()
                        .unwrap()
                        .push((Allocator::from_code(a).unwrap(), size));
                    Ok((report(-1, false, false),))
                },
            )
            .unwrap();
        let mut store = Store::new(&engine, ());
        let instance = linker.instantiate(&mut store, &compiled).unwrap();
        for export in exports {
            let run = instance
                .get_typed_func::<(), (u32,)>(&mut store, export)
                .unwrap();
            assert_eq!(run.call(&mut store, ()).unwrap(), (7,));
        }
        let heard = heard.lock().unwrap().clone();
        heard
    }

    /// A nested component's module is rewritten, its gate defined by the parent: its
    /// allocations reach the host's hook.
    #[test]
    fn the_modules_of_a_nested_component_report() {
        let named = nesting(
            r#"(memory (export "memory") 1)
            (global $next (mut i32) (i32.const 1024))
            (func $malloc (param i32) (result i32)
                (global.get $next)
                (global.set $next (i32.add (global.get $next) (local.get 0))))
            (func $free (param i32))
            (func (export "run") (result i32) (drop (call $malloc (i32.const 100))) (i32.const 7))"#,
        );
        assert_eq!(heard(&named), [(Allocator::Malloc, 100)]);
    }

    /// A module of the top level and one of a nested component report through the one hook
    /// the top level imports, each through its component's gate.
    #[test]
    fn top_level_and_nested_modules_share_the_hook() {
        let module = |size: u32| {
            format!(
                r#"(memory (export "memory") 1)
                (global $next (mut i32) (i32.const 1024))
                (func $malloc (param i32) (result i32)
                    (global.get $next)
                    (global.set $next (i32.add (global.get $next) (local.get 0))))
                (func (export "run") (result i32)
                    (drop (call $malloc (i32.const {size}))) (i32.const 7))"#
            )
        };
        let (top, inner) = (module(50), module(100));
        let component = wat::parse_str(format!(
            r#"(component
                (core module $t {top})
                (core instance $ti (instantiate $t))
                (component $inner
                    (core module $m {inner})
                    (core instance $i (instantiate $m))
                    (func (export "run") (result u32) (canon lift (core func $i "run"))))
                (instance $x (instantiate $inner))
                (func $top (result u32) (canon lift (core func $ti "run")))
                (export "top" (func $top))
                (export "run" (func $x "run")))"#
        ))
        .unwrap();
        assert_eq!(
            heard_from(&component, &["run", "top"]),
            [(Allocator::Malloc, 100), (Allocator::Malloc, 50)]
        );
    }

    /// In a module without its allocators' names, they are found from its `cabi_realloc`.
    #[test]
    fn unnamed_allocators_are_found_by_their_shape() {
        let unnamed = nesting(
            r#"(memory (export "memory") 1)
            (global $next (mut i32) (i32.const 1024))
            (func $a (param i32) (result i32)
                (global.get $next)
                (global.set $next (i32.add (global.get $next) (local.get 0))))
            (func $b (param i32))
            (func $c (param i32 i32) (result i32) (call $a (local.get 1)))
            (func $d (param i32 i32 i32) (result i32) (drop (call $a (local.get 2))) (i32.const 0))
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
                (if (i32.eqz (local.get 1)) (then (return (call $a (local.get 3)))))
                (drop (call $d (i32.const 0) (local.get 2) (local.get 3)))
                (call $b (local.get 0))
                (call $c (local.get 0) (local.get 3)))
            (func (export "run") (result i32)
                (drop (call $c (call $a (i32.const 100)) (i32.const 300)))
                (i32.const 7))"#,
        );
        // The realloc's own call of the malloc is not reported: nested in it.
        assert_eq!(
            heard(&unnamed),
            [(Allocator::Malloc, 100), (Allocator::Realloc, 300)]
        );
    }
}
