//! `--default-values-unknown-imports` for components. Wasmtime has it for modules only; the
//! Sightglass components import `bench.start`/`bench.end` as modules do, so wasmspy defines a
//! component's unknown functions too, each returning its results' zero values.

use wasmtime::component::types::{ComponentFunc, ComponentItem, Type};
use wasmtime::component::{Component, Linker, LinkerInstance, Val};

/// Defines every function `component` imports that `linker` does not define yet (top-level
/// or in an imported instance) as one that returns zero values: 0, false, "", empty lists,
/// `none`, `ok`, the first case. Calling one whose results include a resource fails.
///
/// WASI's interfaces (`wasi:` names) are left to the WASI linker, which matches them by
/// compatible version (a component's `wasi:io/error@0.2.6` is Wasmtime's 0.2.12): an instance
/// defined here under the component's exact name would hide that one.
pub fn define_as_default_values<T: 'static>(
    linker: &mut Linker<T>,
    component: &Component,
) -> wasmtime::Result<()> {
    let engine = component.engine().clone();
    for (name, item) in component.component_type().imports(&engine) {
        if name.starts_with("wasi:") {
            continue;
        }
        match item.ty {
            ComponentItem::ComponentFunc(func) => define(&mut linker.root(), name, func),
            ComponentItem::ComponentInstance(instance) => {
                let mut defined = linker.instance(name)?;
                for (export, item) in instance.exports(&engine) {
                    if let ComponentItem::ComponentFunc(func) = item.ty {
                        define(&mut defined, export, func);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Defines `name` unless it is defined already (the linker refuses to shadow a definition).
fn define<T: 'static>(instance: &mut LinkerInstance<'_, T>, name: &str, func: ComponentFunc) {
    let results: Vec<Type> = func.results().collect();
    let name_owned = name.to_string();
    let _already_defined = instance.func_new(name, move |_, _, _, out| {
        for (slot, ty) in out.iter_mut().zip(&results) {
            *slot = zero(ty).ok_or_else(|| {
                wasmtime::format_err!(
                    "`{name_owned}` (an unknown import given default values) returns a type without one"
                )
            })?;
        }
        Ok(())
    });
}

/// The zero value of `ty`, if it has one.
fn zero(ty: &Type) -> Option<Val> {
    Some(match ty {
        Type::Bool => Val::Bool(false),
        Type::S8 => Val::S8(0),
        Type::U8 => Val::U8(0),
        Type::S16 => Val::S16(0),
        Type::U16 => Val::U16(0),
        Type::S32 => Val::S32(0),
        Type::U32 => Val::U32(0),
        Type::S64 => Val::S64(0),
        Type::U64 => Val::U64(0),
        Type::Float32 => Val::Float32(0.0),
        Type::Float64 => Val::Float64(0.0),
        Type::Char => Val::Char('\0'),
        Type::String => Val::String(String::new()),
        Type::List(_) => Val::List(Vec::new()),
        Type::Map(_) => Val::Map(Vec::new()),
        Type::Flags(_) => Val::Flags(Vec::new()),
        Type::Option(_) => Val::Option(None),
        Type::Record(record) => Val::Record(
            record
                .fields()
                .map(|f| Some((f.name.to_string(), zero(&f.ty)?)))
                .collect::<Option<_>>()?,
        ),
        Type::Tuple(tuple) => Val::Tuple(tuple.types().map(|t| zero(&t)).collect::<Option<_>>()?),
        Type::Enum(e) => Val::Enum(e.names().next()?.to_string()),
        Type::Variant(variant) => {
            let case = variant.cases().next()?;
            let payload = match &case.ty {
                Some(ty) => Some(Box::new(zero(ty)?)),
                None => None,
            };
            Val::Variant(case.name.to_string(), payload)
        }
        Type::Result(result) => Val::Result(Ok(match result.ok() {
            Some(ty) => Some(Box::new(zero(&ty)?)),
            None => None,
        })),
        _ => return None,
    })
}
