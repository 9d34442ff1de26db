//! What a module's or a component's linker is given, by `-S`, as `wasmtime run` links it:
//! WASI preview 0 and 1 for modules; preview 2 and 3 for components, with `wasi:http`,
//! `wasi:config`, `wasi:keyvalue`, `wasi:tls` and `wasi-nn` on request.

use wasmtime::component::{Component, Linker as ComponentLinker};
use wasmtime::{bail, Linker, Module};
use wasmtime_cli_flags::{WasiOptions, WasmOptions};
use wasmtime_wasi::{p0, p1, p2, p3, WasiView};

use super::unknown_imports::{self, Stub};
use super::{Host, UnknownImports, WasiConfig};

/// Whether WASI 0.3 is linked, and its command world run where a component exports it: on
/// unless `-S p3=n`, as in a `wasmtime` built with the component model's async ABI.
pub fn wasip3_on(wasi: &WasiOptions) -> bool {
    wasi.p3.unwrap_or(true)
}

/// `-S cli`, or its deprecated alias `-S common`.
pub fn cli(wasi: &WasiOptions) -> wasmtime::Result<Option<bool>> {
    match (wasi.cli, wasi.common) {
        (Some(_), Some(_)) => {
            bail!("The -Scommon option should not be use with -Scli as it is a deprecated alias")
        }
        (cli, common) => Ok(cli.or(common)),
    }
}

/// Refuses, as `wasmtime run` does, the `-S` options a module (or, `component`, a component)
/// cannot be given.
pub fn check_options(config: &WasiConfig, component: bool) -> wasmtime::Result<()> {
    let wasi = &config.wasi;
    cli(wasi)?;
    if wasi.threads == Some(true) {
        bail!("support for wasi-threads has been removed from Wasmtime");
    }
    if component {
        if config.wasm.unknown_exports_allow.is_some() {
            bail!("--allow-unknown-exports not supported with components");
        }
        if !config.preloads.is_empty() {
            bail!("--preload cannot be used with components");
        }
        return Ok(());
    }
    if wasi.preview2 == Some(false) {
        bail!("the `-Spreview2=n` flag is no longer supported");
    }
    for (on, name) in [
        (wasi.http, "wasi-http"),
        (wasi.config, "wasi-config"),
        (wasi.keyvalue, "wasi-keyvalue"),
        (wasi.tls, "wasi-tls"),
    ] {
        if on == Some(true) {
            bail!("Cannot enable {name} for core wasm modules");
        }
    }
    Ok(())
}

/// A linker for `module` in `store`, as `config` says: WASI preview 0 (unless `-S
/// preview0=n`) and 1 (unless `-S cli=n`), `wasi-nn`'s witx functions with `-S nn`, and the
/// imports nothing provides. Preloaded modules are added by the caller, which instantiates them.
pub fn module_linker(
    store: &mut wasmtime::Store<Host>,
    module: &Module,
    config: &WasiConfig,
) -> wasmtime::Result<Linker<Host>> {
    let wasi = &config.wasi;
    let mut linker = Linker::new(module.engine());
    check_options(config, false)?;
    if let Some(allow) = config.wasm.unknown_exports_allow {
        linker.allow_unknown_exports(allow);
    }
    if cli(wasi)? != Some(false) {
        if wasi.preview0 != Some(false) {
            p0::add_to_linker_async(&mut linker, Host::wasi)?;
        }
        p1::add_to_linker_async(&mut linker, Host::wasi)?;
    }
    if wasi.nn == Some(true) {
        wasmtime_wasi_nn::witx::add_to_linker(&mut linker, |host: &mut Host| {
            host.nn_witx.as_mut().expect("made with -S nn")
        })?;
    }
    match unknown_imports(config) {
        UnknownImports::Reject => {}
        UnknownImports::Trap => linker.define_unknown_imports_as_traps(module)?,
        UnknownImports::DefaultValues => {
            linker.define_unknown_imports_as_default_values(&mut *store, module)?
        }
    }
    Ok(linker)
}

/// The policy for imports nothing provides: wasmspy's flags, or `-W unknown-imports-trap` and
/// `-W unknown-imports-default`.
fn unknown_imports(config: &WasiConfig) -> UnknownImports {
    match (
        config.unknown_imports,
        config.wasm.unknown_imports_trap,
        config.wasm.unknown_imports_default,
    ) {
        (UnknownImports::Reject, Some(true), _) => UnknownImports::Trap,
        (UnknownImports::Reject, _, Some(true)) => UnknownImports::DefaultValues,
        (policy, _, _) => policy,
    }
}

/// A linker for `component`: what `define` adds (the host's own functions, first so that
/// nothing else takes their names), WASI preview 2 and 3 unless `-S cli=n`, the proposals `-S`
/// turns on, and the imports nothing provides as `config` says.
pub fn component_linker(
    component: &Component,
    config: &WasiConfig,
    define: impl FnOnce(&mut ComponentLinker<Host>) -> wasmtime::Result<()>,
) -> wasmtime::Result<ComponentLinker<Host>> {
    check_options(config, true)?;
    let mut linker = ComponentLinker::new(component.engine());
    define(&mut linker)?;
    if cli(&config.wasi)? != Some(false) {
        add_wasi(&mut linker, &config.wasi)?;
    }
    if config.wasi.http == Some(true) {
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        if wasip3_on(&config.wasi) {
            wasmtime_wasi_http::p3::add_to_linker(&mut linker)?;
        }
    }
    add_proposals(&mut linker, &config.wasi)?;
    define_unknown(&mut linker, component, config)?;
    Ok(linker)
}

/// The imports of `component` nothing provides, as `config` says.
pub fn define_unknown(
    linker: &mut ComponentLinker<Host>,
    component: &Component,
    config: &WasiConfig,
) -> wasmtime::Result<()> {
    match unknown_imports(config) {
        UnknownImports::Reject => Ok(()),
        UnknownImports::Trap => unknown_imports::define_unknown(linker, component, Stub::Trap),
        UnknownImports::DefaultValues => {
            unknown_imports::define_unknown(linker, component, Stub::ZeroValues)
        }
    }
}

/// WASI preview 2 (with `-S network-error-code`'s unstable function) and, unless `-S p3=n`,
/// WASI 0.3.
pub fn add_wasi<T: WasiView + 'static>(
    linker: &mut ComponentLinker<T>,
    wasi: &WasiOptions,
) -> wasmtime::Result<()> {
    if wasi.cli_exit_with_code == Some(false) {
        eprintln!("warning: cannot disable `-Scli-exit-with-code` any more");
    }
    let mut options = p2::bindings::LinkOptions::default();
    options.network_error_code(wasi.network_error_code.unwrap_or(false));
    p2::add_to_linker_with_options_async(linker, &options)?;
    if wasip3_on(wasi) {
        let options = p3::bindings::LinkOptions::default();
        p3::add_to_linker_with_options(linker, &options)
            .map_err(|e| e.context("failed to link `wasi:cli@0.3.x`"))?;
    }
    Ok(())
}

/// `-S nn`, `-S config`, `-S keyvalue` and `-S tls`, for a component.
pub fn add_proposals(
    linker: &mut ComponentLinker<Host>,
    wasi: &WasiOptions,
) -> wasmtime::Result<()> {
    if wasi.nn == Some(true) {
        wasmtime_wasi_nn::wit::add_to_linker(linker, |host: &mut Host| {
            let table = host.wasi.ctx().table;
            let nn = host.nn_wit.as_mut().expect("made with -S nn");
            wasmtime_wasi_nn::wit::WasiNnView::new(table, nn)
        })?;
    }
    if wasi.config == Some(true) {
        wasmtime_wasi_config::add_to_linker(linker, |host: &mut Host| {
            wasmtime_wasi_config::WasiConfig::new(
                host.config_vars.as_ref().expect("made with -S config"),
            )
        })?;
    }
    if wasi.keyvalue == Some(true) {
        wasmtime_wasi_keyvalue::add_to_linker(linker, |host: &mut Host| {
            let table = host.wasi.ctx().table;
            let keyvalue = host.keyvalue.as_ref().expect("made with -S keyvalue");
            wasmtime_wasi_keyvalue::WasiKeyValue::new(keyvalue, table)
        })?;
    }
    if wasi.tls == Some(true) {
        let mut options = wasmtime_wasi_tls::p2::LinkOptions::default();
        options.tls(true);
        wasmtime_wasi_tls::p2::add_to_linker(linker, &options)?;
        if wasip3_on(wasi) {
            wasmtime_wasi_tls::p3::add_to_linker(linker)?;
        }
    }
    Ok(())
}

/// Whether `-W concurrency-support` leaves the component model's concurrent calls on.
pub fn concurrent(wasm: &WasmOptions) -> bool {
    wasm.concurrency_support.unwrap_or(true)
}
