//! What a component's profile needs from its binary: the core modules inside it, in the order
//! Wasmtime numbers them (where each is, what its `name` section calls it), and the WIT
//! function behind each core function a module imports, found by following the component's
//! instantiations back to `canon lower`. A host call is then named as the component calls it
//! (`wasi:io/streams@0.2.0#[method]output-stream.blocking-write-and-flush`), whatever name
//! the core module gave its import.
//!
//! Functions lowered with the guest's own memory or allocator cannot be made before the
//! module that owns them is instantiated, so `wit-component` imports them through a shim:
//! a module of `i32.const SLOT; call_indirect` stubs over a table that a fixup module fills
//! with the lowered functions once they exist. Such calls are followed too: through the
//! fixup's element segments, to the stub's call site.

use std::collections::HashMap;
use std::ops::Range;

use anyhow::{Context, Result};
use wasmparser::{
    CanonicalFunction, Chunk, ComponentAlias, ComponentExternalKind, ComponentOuterAliasKind,
    ComponentTypeRef, ExternalKind, Instance, Name, Parser, Payload, TypeRef,
};

/// The name of the modules wasmspy adds to a component to show it a runtime's instances
/// ([`crate::runtime_probe`]), which carry no debug info.
pub const PROBE_MODULE: &str = "wasmspy:runtime-probe";

/// The payloads of a component's own sections, up to its `End`: a nested module or component
/// is one payload (`ModuleSection`, `ComponentSection`), not entered. `component` is the
/// binary of a component found at `offset` of a larger one (0 for the whole), whose ranges
/// the payloads give. A section that claims to reach past the end is an error.
pub fn own_sections(component: &[u8], offset: usize) -> OwnSections<'_> {
    OwnSections {
        parser: Parser::new(offset as u64),
        bytes: component,
        base: offset,
        at: 0,
        done: false,
    }
}

/// See [`own_sections`].
pub struct OwnSections<'a> {
    parser: Parser,
    bytes: &'a [u8],
    base: usize,
    at: usize,
    done: bool,
}

impl<'a> Iterator for OwnSections<'a> {
    type Item = Result<Payload<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let payload = (|| {
            let rest = self.bytes.get(self.at..).context("truncated component")?;
            let Chunk::Parsed { consumed, payload } = self
                .parser
                .parse(rest, true)
                .context("malformed WebAssembly component")?
            else {
                anyhow::bail!("truncated component");
            };
            self.at += consumed;
            match &payload {
                Payload::ModuleSection {
                    unchecked_range, ..
                }
                | Payload::ComponentSection {
                    unchecked_range, ..
                } => {
                    let end = unchecked_range.end.checked_sub(self.base);
                    self.at = end
                        .filter(|&end| end <= self.bytes.len())
                        .context("a nested module or component beyond the component's end")?;
                }
                Payload::End(_) => self.done = true,
                _ => {}
            }
            Ok(payload)
        })();
        self.done |= payload.is_err();
        Some(payload)
    }
}

/// Copies a section of `component` into `out` as it is (a nested module or component whole).
pub fn copy_section(
    out: &mut wasm_encoder::Component,
    component: &[u8],
    payload: Payload<'_>,
) -> Result<()> {
    let (id, range) = payload
        .as_section()
        .context("unexpected content in the component")?;
    out.section(&wasm_encoder::RawSection {
        id,
        data: &component[range],
    });
    Ok(())
}

/// A core module of a component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreModule {
    /// Where its binary is in the component's.
    pub range: Range<usize>,
    /// The module name its `name` section gives (`wit-component:adapter:wasi_snapshot_preview1`).
    pub name: Option<String>,
    /// The WIT function each function import lowers, by import index; `None` where it is not
    /// a lowered function or the component's instantiations could not be followed (a module
    /// of a nested component).
    pub lowered_imports: Vec<Option<String>>,
    /// The WIT function each `call_indirect` of a shim reaches, by the call's offset in the
    /// module's binary.
    pub lowered_indirect_calls: HashMap<u32, String>,
    /// Names for a shim's stubs, by function index, as `wit-component` names them where it
    /// writes a `name` section: `indirect-INTERFACE-FUNCTION`.
    pub stub_names: HashMap<u32, String>,
    /// The top-level core instance made from it, when the top-level component instantiates it
    /// once.
    pub instance: Option<u32>,
    /// Its exports that the component's canonical options name as `realloc` or `post-return`:
    /// functions the host calls, to place values it passes in or after it has read a result,
    /// while the component may not call out.
    pub host_called: Vec<String>,
}

/// What a module declares about its functions and tables, for following instantiations.
#[derive(Default)]
struct Declared {
    /// `(module, field)` of each function import, in import order.
    func_imports: Vec<(String, String)>,
    /// `(module, field)` of each table import.
    table_imports: Vec<(String, String)>,
    /// Exported tables, by export name.
    table_exports: HashMap<String, u32>,
    /// Active element segments with constant offsets: `(table, offset, function indices)`.
    elements: Vec<(u32, u32, Vec<u32>)>,
}

/// An exported table of an instance of static module `.0`, by export name.
type TableId = (usize, String);

/// The core modules of `component`, in the order Wasmtime numbers them (`StaticModuleIndex`):
/// as they appear in the binary, nested components' included.
pub fn core_modules(component: &[u8]) -> Result<Vec<CoreModule>> {
    let mut modules: Vec<CoreModule> = Vec::new();
    let mut declared: Vec<Declared> = Vec::new();
    // What is being parsed: the top-level component (depth 0), a nested one, or a module.
    let mut nesting: Vec<Option<usize>> = Vec::new();
    let mut top = TopLevel::default();
    for payload in Parser::new(0).parse_all(component) {
        let payload = payload.context("malformed WebAssembly component")?;
        let in_module = nesting.last().copied().flatten();
        let at_top = nesting.is_empty();
        match payload {
            Payload::ModuleSection {
                unchecked_range, ..
            } => {
                if at_top {
                    top.modules.push(Some(modules.len()));
                }
                nesting.push(Some(modules.len()));
                modules.push(CoreModule {
                    range: unchecked_range,
                    name: None,
                    lowered_imports: Vec::new(),
                    lowered_indirect_calls: HashMap::new(),
                    stub_names: HashMap::new(),
                    instance: None,
                    host_called: Vec::new(),
                });
                declared.push(Declared::default());
            }
            Payload::ComponentSection { .. } => {
                nesting.push(None);
            }
            Payload::End(_) => {
                nesting.pop();
            }
            Payload::ImportSection(reader) => {
                if let Some(m) = in_module {
                    for import in reader.into_imports() {
                        let import = import.context("malformed import section")?;
                        let name = (import.module.to_string(), import.name.to_string());
                        match import.ty {
                            TypeRef::Func(_) | TypeRef::FuncExact(_) => {
                                declared[m].func_imports.push(name)
                            }
                            TypeRef::Table(_) => declared[m].table_imports.push(name),
                            _ => {}
                        }
                    }
                }
            }
            Payload::ExportSection(reader) => {
                if let Some(m) = in_module {
                    for export in reader {
                        let export = export.context("malformed export section")?;
                        if export.kind == ExternalKind::Table {
                            declared[m]
                                .table_exports
                                .insert(export.name.to_string(), export.index);
                        }
                    }
                }
            }
            Payload::ElementSection(reader) => {
                if let Some(m) = in_module {
                    for element in reader {
                        let element = element.context("malformed element section")?;
                        if let Some(segment) = active_functions(element) {
                            declared[m].elements.push(segment);
                        }
                    }
                }
            }
            Payload::CustomSection(reader) => {
                if let (Some(m), wasmparser::KnownCustom::Name(names)) =
                    (in_module, reader.as_known())
                {
                    // A damaged name section is the symbolizer's to warn about.
                    for name in names.into_iter().flatten() {
                        if let Name::Module { name, .. } = name {
                            modules[m].name = Some(name.to_string());
                        }
                    }
                }
            }
            payload if at_top => top.read(payload, &declared, &mut modules)?,
            _ => {}
        }
    }
    for (module, declared) in modules.iter_mut().zip(&declared) {
        module
            .lowered_imports
            .resize(declared.func_imports.len(), None);
    }
    for (&m, &count) in &top.instantiations {
        if count > 1 {
            modules[m].instance = None;
        }
    }
    for ((m, export), slots) in &top.table_slots {
        let Some(&table) = declared[*m].table_exports.get(export) else {
            continue;
        };
        let module = &mut modules[*m];
        let first = declared[*m].func_imports.len() as u32;
        for (func, offset, slot) in indirect_calls(component, module.range.clone(), table)? {
            if let Some(name) = slots.get(&slot) {
                module.lowered_indirect_calls.insert(offset, name.clone());
                let stub = format!("indirect-{}", name.replacen('#', "-", 1));
                module.stub_names.insert(first + func, stub);
            }
        }
        module
            .name
            .get_or_insert_with(|| "wit-component:shim".into());
    }
    Ok(modules)
}

/// Item `index` of an index space, if it is one whose name is known.
fn item<T: Clone>(space: &[Option<T>], index: u32) -> Option<T> {
    space.get(index as usize).cloned().flatten()
}

/// An active segment of function references at a constant offset: `(table, offset, functions)`.
fn active_functions(element: wasmparser::Element<'_>) -> Option<(u32, u32, Vec<u32>)> {
    let wasmparser::ElementKind::Active {
        table_index,
        offset_expr,
    } = element.kind
    else {
        return None;
    };
    let Ok(wasmparser::Operator::I32Const { value }) = offset_expr.get_operators_reader().read()
    else {
        return None;
    };
    let functions: Option<Vec<u32>> = match element.items {
        wasmparser::ElementItems::Functions(functions) => {
            functions.into_iter().map(Result::ok).collect()
        }
        wasmparser::ElementItems::Expressions(_, expressions) => expressions
            .into_iter()
            .map(|e| match e.ok()?.get_operators_reader().read().ok()? {
                wasmparser::Operator::RefFunc { function_index } => Some(function_index),
                _ => None,
            })
            .collect(),
    };
    Some((table_index.unwrap_or(0), value as u32, functions?))
}

/// The `i32.const SLOT; call_indirect` sites on `table` in the module at `range`:
/// `(defined function number, offset of the call in the module, SLOT)`.
fn indirect_calls(
    component: &[u8],
    range: Range<usize>,
    table: u32,
) -> Result<Vec<(u32, u32, u32)>> {
    use wasmparser::Operator;
    let mut sites = Vec::new();
    let mut func = 0;
    for payload in Parser::new(0).parse_all(&component[range]) {
        let Payload::CodeSectionEntry(body) = payload.context("malformed core module")? else {
            continue;
        };
        func += 1;
        let mut reader = body.get_operators_reader()?;
        let mut slot = None;
        while !reader.eof() {
            let (op, offset) = reader.read_with_offset()?;
            match op {
                Operator::CallIndirect { table_index, .. }
                | Operator::ReturnCallIndirect { table_index, .. }
                    if table_index == table =>
                {
                    if let Some(slot) = slot {
                        sites.push((func - 1, offset as u32, slot));
                    }
                }
                _ => {}
            }
            slot = match op {
                Operator::I32Const { value } => Some(value as u32),
                _ => None,
            };
        }
    }
    Ok(sites)
}

/// A core instance of the top-level component, as far as naming imports needs.
enum CoreInstance {
    /// Made of exports: the WIT function behind each exported core function, if lowered,
    /// and the tables it exports.
    FromExports {
        funcs: HashMap<String, Option<String>>,
        tables: HashMap<String, Option<TableId>>,
    },
    /// An instance of static module `.0`.
    Instantiated(Option<usize>),
}

/// A core function of the top-level component, as far as naming imports needs.
#[derive(Clone, Default)]
struct CoreFunc {
    /// The WIT function a `canon lower` made it from.
    lowered: Option<String>,
    /// The core instance export it is an alias of.
    export: Option<(u32, String)>,
}

/// The index spaces of the top-level component, each item with the WIT name it stands for.
#[derive(Default)]
struct TopLevel {
    /// Component functions: `interface#function` for an imported instance's function.
    funcs: Vec<Option<String>>,
    /// Component instances: the import name of an imported one.
    instances: Vec<Option<String>>,
    core_funcs: Vec<CoreFunc>,
    /// Core tables: the exported table of a module instance each is.
    core_tables: Vec<Option<TableId>>,
    core_instances: Vec<CoreInstance>,
    /// How many times each static module is instantiated.
    instantiations: HashMap<usize, u32>,
    /// The WIT function an instance's element segments put in each slot of a table.
    table_slots: HashMap<TableId, HashMap<u32, String>>,
    /// Core modules: their static index.
    modules: Vec<Option<usize>>,
}

impl TopLevel {
    fn read(
        &mut self,
        payload: Payload<'_>,
        declared: &[Declared],
        modules: &mut [CoreModule],
    ) -> Result<()> {
        match payload {
            Payload::ComponentImportSection(reader) => {
                for import in reader {
                    let import = import.context("malformed component import section")?;
                    let name = import.name.name.to_string();
                    match import.ty {
                        ComponentTypeRef::Func(_) => self.funcs.push(Some(name)),
                        ComponentTypeRef::Instance(_) => self.instances.push(Some(name)),
                        ComponentTypeRef::Module(_) => self.modules.push(None),
                        _ => {}
                    }
                }
            }
            Payload::ComponentAliasSection(reader) => {
                for alias in reader {
                    match alias.context("malformed component alias section")? {
                        ComponentAlias::InstanceExport {
                            kind,
                            instance_index,
                            name,
                        } => {
                            let interface = item(&self.instances, instance_index);
                            let qualified = interface.map(|i| format!("{i}#{name}"));
                            self.add_component_item(kind, qualified);
                        }
                        ComponentAlias::CoreInstanceExport {
                            kind,
                            instance_index,
                            name,
                        } => {
                            let instance = self.core_instances.get(instance_index as usize);
                            match kind {
                                ExternalKind::Func | ExternalKind::FuncExact => {
                                    let lowered = match instance {
                                        Some(CoreInstance::FromExports { funcs, .. }) => {
                                            funcs.get(name).cloned().flatten()
                                        }
                                        _ => None,
                                    };
                                    self.core_funcs.push(CoreFunc {
                                        lowered,
                                        export: Some((instance_index, name.to_string())),
                                    });
                                }
                                ExternalKind::Table => {
                                    let table = match instance {
                                        Some(CoreInstance::Instantiated(Some(m))) => {
                                            Some((*m, name.to_string()))
                                        }
                                        Some(CoreInstance::FromExports { tables, .. }) => {
                                            tables.get(name).cloned().flatten()
                                        }
                                        _ => None,
                                    };
                                    self.core_tables.push(table);
                                }
                                _ => {}
                            }
                        }
                        ComponentAlias::Outer {
                            kind: ComponentOuterAliasKind::CoreModule,
                            ..
                        } => self.modules.push(None),
                        ComponentAlias::Outer { .. } => {}
                    }
                }
            }
            Payload::ComponentCanonicalSection(reader) => {
                for canonical in reader {
                    match canonical.context("malformed component canonical section")? {
                        CanonicalFunction::Lift { options, .. } => {
                            self.note_host_called(&options, modules);
                            self.funcs.push(None)
                        }
                        CanonicalFunction::Lower {
                            func_index,
                            options,
                        } => {
                            self.note_host_called(&options, modules);
                            self.core_funcs.push(CoreFunc {
                                lowered: item(&self.funcs, func_index),
                                export: None,
                            });
                        }
                        // Every other canonical built-in (resource.drop, task.return, ...) is
                        // a core function of its own.
                        _ => self.core_funcs.push(CoreFunc::default()),
                    }
                }
            }
            Payload::InstanceSection(reader) => {
                for instance in reader {
                    let instance = instance.context("malformed core instance section")?;
                    let made = match instance {
                        Instance::Instantiate { module_index, args } => {
                            let module = item(&self.modules, module_index);
                            if let Some(m) = module {
                                *self.instantiations.entry(m).or_default() += 1;
                                modules[m].instance = Some(self.core_instances.len() as u32);
                                let lowered = self.lowered(&declared[m].func_imports, &args);
                                self.fill_tables(&declared[m], &lowered, &args);
                                modules[m].lowered_imports = lowered;
                            }
                            CoreInstance::Instantiated(module)
                        }
                        Instance::FromExports(exports) => {
                            let mut funcs = HashMap::new();
                            let mut tables = HashMap::new();
                            for e in exports.iter() {
                                let name = e.name.to_string();
                                match e.kind {
                                    ExternalKind::Func | ExternalKind::FuncExact => {
                                        let func = self.core_funcs.get(e.index as usize);
                                        funcs.insert(name, func.and_then(|f| f.lowered.clone()));
                                    }
                                    ExternalKind::Table => {
                                        tables.insert(name, item(&self.core_tables, e.index));
                                    }
                                    _ => {}
                                }
                            }
                            CoreInstance::FromExports { funcs, tables }
                        }
                    };
                    self.core_instances.push(made);
                }
            }
            Payload::ComponentInstanceSection(reader) => {
                for instance in reader {
                    instance.context("malformed component instance section")?;
                    self.instances.push(None);
                }
            }
            // An export is a new item in its index space too.
            Payload::ComponentExportSection(reader) => {
                for export in reader {
                    let export = export.context("malformed component export section")?;
                    let item = match export.kind {
                        ComponentExternalKind::Func => item(&self.funcs, export.index),
                        _ => None,
                    };
                    self.add_component_item(export.kind, item);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Notes the module exports that canonical `options` name as `realloc` or `post-return`.
    fn note_host_called(
        &self,
        options: &[wasmparser::CanonicalOption],
        modules: &mut [CoreModule],
    ) {
        for option in options {
            let (wasmparser::CanonicalOption::Realloc(func)
            | wasmparser::CanonicalOption::PostReturn(func)) = option
            else {
                continue;
            };
            let export = self.core_funcs.get(*func as usize).map(|f| &f.export);
            let Some(Some((instance, name))) = export else {
                continue;
            };
            if let Some(CoreInstance::Instantiated(Some(m))) =
                self.core_instances.get(*instance as usize)
            {
                if !modules[*m].host_called.contains(name) {
                    modules[*m].host_called.push(name.clone());
                }
            }
        }
    }

    fn add_component_item(&mut self, kind: ComponentExternalKind, name: Option<String>) {
        match kind {
            ComponentExternalKind::Func => self.funcs.push(name),
            ComponentExternalKind::Instance => self.instances.push(None),
            ComponentExternalKind::Module => self.modules.push(None),
            _ => {}
        }
    }

    /// The WIT function behind each of a module's function imports, given the arguments it is
    /// instantiated with.
    fn lowered(
        &self,
        imports: &[(String, String)],
        args: &[wasmparser::InstantiationArg<'_>],
    ) -> Vec<Option<String>> {
        imports
            .iter()
            .map(|(module, field)| match self.argument(args, module)? {
                CoreInstance::FromExports { funcs, .. } => funcs.get(field).cloned().flatten(),
                CoreInstance::Instantiated(_) => None,
            })
            .collect()
    }

    fn argument(
        &self,
        args: &[wasmparser::InstantiationArg<'_>],
        module: &str,
    ) -> Option<&CoreInstance> {
        let arg = args.iter().find(|a| a.name == module)?;
        self.core_instances.get(arg.index as usize)
    }

    /// Notes which WIT function a fixup module's element segments put in each slot of the
    /// tables it imports (`lowered`: its function imports' WIT functions).
    fn fill_tables(
        &mut self,
        declared: &Declared,
        lowered: &[Option<String>],
        args: &[wasmparser::InstantiationArg<'_>],
    ) {
        for (table, offset, funcs) in &declared.elements {
            let Some((module, field)) = declared.table_imports.get(*table as usize) else {
                continue;
            };
            let target = match self.argument(args, module) {
                Some(CoreInstance::FromExports { tables, .. }) => tables.get(field).cloned(),
                _ => None,
            };
            let Some(Some(target)) = target else {
                continue;
            };
            let slots = self.table_slots.entry(target).or_default();
            for (i, f) in funcs.iter().enumerate() {
                if let Some(Some(name)) = lowered.get(*f as usize) {
                    slots.insert(offset + i as u32, name.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_modules_and_the_wit_functions_their_imports_lower() {
        let wasm = wat::parse_str(
            r#"(component
                (import "wasi:cli/exit@0.2.0" (instance $exit
                    (export "exit" (func (param "status" (result))))))
                (alias export $exit "exit" (func $exit_f))
                (core module $lib (@name "lib") (func (export "f")))
                (core module $main (@name "main")
                    (import "wasi:cli/exit@0.2.0" "exit" (func (param i32)))
                    (import "lib" "f" (func)))
                (core func $lowered (canon lower (func $exit_f)))
                (core instance $lib_i (instantiate $lib))
                (core instance $wasi (export "exit" (func $lowered)))
                (core instance (instantiate $main
                    (with "wasi:cli/exit@0.2.0" (instance $wasi))
                    (with "lib" (instance $lib_i))))
                (component (core module (@name "nested"))))"#,
        )
        .unwrap();
        let modules = core_modules(&wasm).unwrap();
        let names: Vec<_> = modules.iter().map(|m| m.name.as_deref()).collect();
        assert_eq!(names, [Some("lib"), Some("main"), Some("nested")]);
        assert_eq!(
            modules[1].lowered_imports,
            [Some("wasi:cli/exit@0.2.0#exit".to_string()), None]
        );
        assert!(modules[0].lowered_imports.is_empty());
        for m in &modules {
            assert!(wasmparser::Parser::is_core_wasm(&wasm[m.range.clone()]));
        }
    }
}
