//! A `wasi:http` component linked as `wasmtime serve` links it: a `wasi:http/incoming-handler`
//! (WASI 0.2) or, unless `-S p3=n`, a `wasi:http/handler` (WASI 0.3), pre-instantiated once for
//! the instances Wasmtime's [`ProxyHandler`](wasmtime_wasi_http::handler::ProxyHandler) makes
//! and reuses. Without `-S cli` the guest gets the proxy world's interfaces only; with it, all
//! of WASI's, as `wasmtime serve -S cli` has it; and the proposals `-S` turns on.

use anyhow::{anyhow, Result};
use std::sync::Arc;
use wasmtime::component::{Component, Linker};
use wasmtime::Store;
use wasmtime_wasi_http::handler::{self, ProxyPre};

use super::host::new_served_store;
use super::{link, Host, ServedInstance, WasiConfig};

/// A `wasi:http` component linked and pre-instantiated, ready to make the instances that
/// handle requests.
pub struct Proxy {
    pre: ProxyPre<Host>,
    wasi: Arc<WasiConfig>,
    /// Whether each instance's stdout and stderr lines are prefixed with its number.
    log_prefix: bool,
}

impl Proxy {
    /// Links `component`, with what `define` adds to the linker, and checks that it exports a
    /// handler; each instance gets `wasi`, its stdout and stderr lines prefixed with its
    /// number if `log_prefix`.
    pub fn new(
        component: &Component,
        wasi: WasiConfig,
        log_prefix: bool,
        define: impl FnOnce(&mut Linker<Host>) -> wasmtime::Result<()>,
    ) -> Result<Self> {
        link::check_options(&wasi, true)?;
        let mut linker = Linker::new(component.engine());
        define(&mut linker)?;
        let p3 = link::wasip3_on(&wasi.wasi);
        if link::cli(&wasi.wasi)? == Some(true) {
            link::add_wasi(&mut linker, &wasi.wasi)?;
            wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
            if p3 {
                wasmtime_wasi_http::p3::add_to_linker(&mut linker)?;
            }
        } else {
            wasmtime_wasi_http::p2::add_to_linker_async(&mut linker)?;
            if p3 {
                wasmtime_wasi_http::p3::add_to_linker(&mut linker)?;
                wasmtime_wasi::p3::clocks::add_to_linker(&mut linker)?;
                wasmtime_wasi::p3::random::add_to_linker(&mut linker)?;
                wasmtime_wasi::p3::cli::add_to_linker(&mut linker)?;
            }
        }
        link::add_proposals(&mut linker, &wasi.wasi)?;
        link::define_unknown(&mut linker, component, &wasi)?;
        let pre = linker
            .instantiate_pre(component)
            .map_err(|e| anyhow!("{e:#}"))?;
        // As `wasmtime serve`: a WASI 0.3 handler if the component exports one.
        let p3_pre = if p3 {
            wasmtime_wasi_http::p3::bindings::ServicePre::new(pre.clone()).ok()
        } else {
            None
        };
        let pre = match p3_pre {
            Some(pre) => ProxyPre::P3(pre),
            None => ProxyPre::P2(
                wasmtime_wasi_http::p2::bindings::ProxyPre::new(pre).map_err(|e| {
                    anyhow!(
                        "the component is not a wasi:http/proxy: it exports no \
                         wasi:http/incoming-handler{}: {e:#}",
                        if p3 { " nor wasi:http/handler" } else { "" }
                    )
                })?,
            ),
        };
        Ok(Proxy {
            pre,
            wasi: Arc::new(wasi),
            log_prefix,
        })
    }

    /// Whether the component is a WASI 0.3 handler, which an instance may run several
    /// requests of at once.
    pub fn is_p3(&self) -> bool {
        matches!(self.pre, ProxyPre::P3(_))
    }

    /// A store for an instance, with the guest's environment and directories, the `id`th made.
    pub fn new_store(&self, id: u64) -> Result<Store<Host>> {
        let served = ServedInstance {
            id,
            log_prefix: self.log_prefix,
        };
        new_served_store(self.engine(), &self.wasi, served)
    }

    /// Instantiates the component in `store`.
    pub async fn instantiate(&self, store: &mut Store<Host>) -> wasmtime::Result<handler::Proxy> {
        self.pre.instantiate_async(store).await
    }

    fn engine(&self) -> &wasmtime::Engine {
        match &self.pre {
            ProxyPre::P2(pre) => pre.engine(),
            ProxyPre::P3(pre) => pre.engine(),
        }
    }
}
