//! `--default-values-unknown-imports` and `--trap-unknown-imports` for components. Wasmtime
//! has the first for modules only, and its second, for components, also replaces the WASI
//! interfaces a component imports at an older compatible version (`wasi:filesystem/
//! preopens@0.2.6` under Wasmtime's 0.2.12, so that the Sightglass components fail at their
//! first file access): wasmspy defines a component's unknown functions itself, WASI's left to
//! the WASI linker.

use wasmtime::component::types::{ComponentFunc, ComponentItem, Type};
use wasmtime::component::{Component, Linker, LinkerInstance, Val};

/// What an import nothing provides does when called.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stub {
    /// Returns its results' zero values: 0, false, "", empty lists, `none`, `ok`, the first
    /// case (fails where a result is a resource).
    ZeroValues,
    /// Fails, as Wasmtime's stubs do: ``unknown import: `NAME` has not been defined``.
    Trap,
}

/// Defines every function `component` imports that `linker` does not define yet (top-level
/// or in an imported instance) as `stub` says.
///
/// WASI's interfaces (`wasi:` names) are left to the WASI linker, which matches them by
/// compatible version (a component's `wasi:io/error@0.2.6` is Wasmtime's 0.2.12): an instance
/// defined here under the component's exact name would hide that one.
pub fn define_unknown<T: 'static>(
    linker: &mut Linker<T>,
    component: &Component,
    stub: Stub,
) -> wasmtime::Result<()> {
    let engine = component.engine().clone();
    for (name, item) in component.component_type().imports(&engine) {
        if name.starts_with("wasi:") {
            continue;
        }
        match item.ty {
            ComponentItem::ComponentFunc(func) => {
                define(&mut linker.root(), name.to_string(), func, stub)
            }
            ComponentItem::ComponentInstance(instance) => {
                let mut defined = linker.instance(name)?;
                for (export, item) in instance.exports(&engine) {
                    if let ComponentItem::ComponentFunc(func) = item.ty {
                        define(&mut defined, format!("{name}#{export}"), func, stub);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Defines the function `qualified` names (`INSTANCE#FUNCTION`, or a top-level name) in
/// `instance`, unless it is defined already (the linker refuses to shadow a definition).
fn define<T: 'static>(
    instance: &mut LinkerInstance<'_, T>,
    qualified: String,
    func: ComponentFunc,
    stub: Stub,
) {
    let results: Vec<Type> = func.results().collect();
    let name = qualified
        .rsplit('#')
        .next()
        .unwrap_or(&qualified)
        .to_string();
    let _already_defined = instance.func_new(&name, move |_, _, _, out| {
        if stub == Stub::Trap {
            wasmtime::bail!("unknown import: `{qualified}` has not been defined");
        }
        for (slot, ty) in out.iter_mut().zip(&results) {
            *slot = zero(ty).ok_or_else(|| {
                wasmtime::format_err!(
                    "`{qualified}` (an unknown import given default values) returns a type without one"
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
