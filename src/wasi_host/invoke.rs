//! `--invoke FUNC ARGS`: a module's export called with its arguments parsed from the command
//! line, or a component's function called with a WAVE-encoded call (`add(1, 2)`); the results
//! printed on stdout as `wasmtime run` prints them.

use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::wasm_wave::untyped::UntypedFuncCall;
use wasmtime::component::wasm_wave::wasm::{DisplayFuncResults, WasmFunc};
use wasmtime::component::{Component, ComponentExportIndex, Instance as ComponentInstance};
use wasmtime::{bail, format_err, Func, Store, Val, ValType};

use super::{link, Host};

/// Calls a module's `func` (the `--invoke`d export, `name`, or the command's `_start`, None)
/// with `args` parsed by its parameter types, and prints its results.
pub async fn call_module_func(
    store: &mut Store<Host>,
    func: Func,
    name: Option<&str>,
    args: &[String],
) -> wasmtime::Result<()> {
    let ty = func.ty(&*store);
    if ty.params().len() > 0 {
        eprintln!(
            "warning: using `--invoke` with a function that takes arguments is experimental and may break in the future"
        );
    }
    let mut args = args.iter();
    let mut params = Vec::new();
    for ty in ty.params() {
        let Some(arg) = args.next() else {
            match name {
                Some(name) => bail!("not enough arguments for `{name}`"),
                None => bail!("not enough arguments for command default"),
            }
        };
        params.push(parse_arg(&ty, arg)?);
    }
    let mut results = vec![Val::null_func_ref(); ty.results().len()];
    func.call_async(&mut *store, &params, &mut results)
        .await
        .map_err(|e| match name {
            Some(name) => e.context(format!("failed to invoke `{name}`")),
            None => e.context("failed to invoke command default"),
        })?;
    if !results.is_empty() {
        eprintln!(
            "warning: using `--invoke` with a function that returns values is experimental and may break in the future"
        );
    }
    for result in results {
        println!("{}", show(&result));
    }
    Ok(())
}

/// A number in the parameter's type: decimal, or hexadecimal after `0x` for integers.
fn parse_arg(ty: &ValType, arg: &str) -> wasmtime::Result<Val> {
    let hex = arg.strip_prefix("0x").or_else(|| arg.strip_prefix("0X"));
    Ok(match ty {
        ValType::I32 => Val::I32(match hex {
            Some(digits) => i32::from_str_radix(digits, 16)?,
            None => arg.parse()?,
        }),
        ValType::I64 => Val::I64(match hex {
            Some(digits) => i64::from_str_radix(digits, 16)?,
            None => arg.parse()?,
        }),
        ValType::F32 => Val::F32(arg.parse::<f32>()?.to_bits()),
        ValType::F64 => Val::F64(arg.parse::<f64>()?.to_bits()),
        t => bail!("unsupported argument type {t:?}"),
    })
}

/// A result as `wasmtime run` prints it.
fn show(value: &Val) -> String {
    match value {
        Val::I32(i) => i.to_string(),
        Val::I64(i) => i.to_string(),
        Val::F32(f) => f32::from_bits(*f).to_string(),
        Val::F64(f) => f64::from_bits(*f).to_string(),
        Val::V128(v) => v.as_u128().to_string(),
        Val::ExternRef(r) => reference("externref", r.is_some()),
        Val::FuncRef(r) => reference("funcref", r.is_some()),
        Val::AnyRef(r) => reference("anyref", r.is_some()),
        Val::ExnRef(r) => reference("exnref", r.is_some()),
        Val::ContRef(r) => reference("contref", r.is_some()),
    }
}

fn reference(kind: &str, some: bool) -> String {
    match some {
        true => format!("<{kind}>"),
        false => format!("<null {kind}>"),
    }
}

/// Calls the component function `call` names (a WAVE call: `name(args)`, the name bare or
/// with its interface) on `instance`, and prints its results in WAVE.
pub async fn call_component_func(
    store: &mut Store<Host>,
    component: &Component,
    instance: &ComponentInstance,
    call: &str,
) -> wasmtime::Result<()> {
    let untyped = UntypedFuncCall::parse(call).map_err(|e| {
        format_err!("Failed to parse invoke '{call}': See https://docs.wasmtime.dev/cli-options.html#run for syntax: {e}")
    })?;
    let (export, ty) = find(store, component, &untyped)?;
    let param_types = WasmFunc::params(&ty).collect::<Vec<_>>();
    let params = untyped
        .to_wasm_params(&param_types)
        .map_err(|e| format_err!("{e}"))
        .map_err(|e| {
            e.context(format!(
                "while interpreting parameters in invoke \"{call}\""
            ))
        })?;
    let func = instance
        .get_func(&mut *store, export)
        .ok_or_else(|| format_err!("the component's export `{call}` is not a function"))?;
    let mut results = vec![wasmtime::component::Val::Bool(false); ty.results().len()];
    if link::concurrent(&store.data().config.wasm) {
        store
            .run_concurrent(async |store| func.call_concurrent(store, &params, &mut results).await)
            .await??;
    } else {
        func.call_async(&mut *store, &params, &mut results).await?;
    }
    println!("{}", DisplayFuncResults(&results));
    Ok(())
}

/// The export `untyped` calls: a function of the component's own, or, for a bare name, the one
/// function of that name among its exported instances.
fn find(
    store: &Store<Host>,
    component: &Component,
    untyped: &UntypedFuncCall<'_>,
) -> wasmtime::Result<(ComponentExportIndex, ComponentFunc)> {
    let name = untyped
        .item_name()
        .map_err(|e| format_err!("parsing `{}` as a wit item name: {e}", untyped.name()))?;
    if let Some((ComponentItem::ComponentFunc(func), index)) = component.get_export(None, &name) {
        return Ok((index, func));
    }
    if name.interface.is_some() || name.package.is_some() {
        bail!("No exported func named `{name}` in component.");
    }
    let engine = store.engine();
    let wanted = name.to_string();
    let mut found = Vec::new();
    for (instance_name, item) in component.component_type().exports(engine) {
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            continue;
        };
        for (func_name, item) in instance.exports(engine) {
            if func_name != wanted {
                continue;
            }
            if let ComponentItem::ComponentFunc(func) = item.ty {
                found.push((instance_name.to_string(), func));
            }
        }
    }
    match found.len() {
        0 => bail!("No exported func named `{wanted}` in component."),
        1 => {
            let (instance_name, func) = found.remove(0);
            let (_, instance) = component
                .get_export(None, instance_name.as_str())
                .ok_or_else(|| format_err!("no export `{instance_name}`"))?;
            let (_, index) = component
                .get_export(Some(&instance), wanted.as_str())
                .ok_or_else(|| format_err!("no export `{wanted}` in `{instance_name}`"))?;
            Ok((index, func))
        }
        _ => {
            let candidates: Vec<String> = found
                .iter()
                .map(|(instance, _)| format!("`{instance}/{wanted}`"))
                .collect();
            bail!(
                "Multiple instances contained funcs named `{wanted}`, retry with a more specific name: {}",
                candidates.join(", ")
            )
        }
    }
}
