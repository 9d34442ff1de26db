//! Serves a `wasi:http/proxy` component the way `wasmtime serve` does: a new store per
//! request, the component pre-instantiated once, each request's `wasi:http/incoming-handler`
//! call on a task of the multi-threaded runtime (its fiber resumed by whichever worker polls
//! it). Without `-S cli` the guest gets the proxy world's interfaces only; with it, all of
//! WASI's, as `wasmtime serve -S cli` has it; and the proposals `-S` turns on.

use std::future::Future;
use std::pin::Pin;

use anyhow::{anyhow, Result};
use wasmtime::component::{Component, Linker};
use wasmtime::Store;
use wasmtime_wasi_http::p2::bindings::http::types::Scheme;
use wasmtime_wasi_http::p2::bindings::ProxyPre;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;
use wasmtime_wasi_http::WasiHttpView;

use super::{link, new_store, Host, ServedInstance, WasiConfig};

/// The guest's handling of one request, for the caller to run as a task.
pub type GuestCall = Pin<Box<dyn Future<Output = wasmtime::Result<()>> + Send>>;

pub struct Proxy {
    pre: ProxyPre<Host>,
    wasi: WasiConfig,
    /// Whether each instance's stdout and stderr lines are prefixed with its number.
    log_prefix: bool,
}

impl Proxy {
    /// Links `component`, with what `define` adds to the linker, and checks that it is a
    /// `wasi:http/proxy`; each instance gets `wasi`, its stdout and stderr lines prefixed with
    /// its number if `log_prefix`.
    pub fn new(
        component: &Component,
        wasi: WasiConfig,
        log_prefix: bool,
        define: impl FnOnce(&mut Linker<Host>) -> wasmtime::Result<()>,
    ) -> Result<Self> {
        let mut linker = Linker::new(component.engine());
        define(&mut linker)?;
        if link::cli(&wasi.wasi)? == Some(true) {
            link::add_wasi(&mut linker, &wasi.wasi)?;
            wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        } else {
            wasmtime_wasi_http::p2::add_to_linker_async(&mut linker)?;
        }
        link::add_proposals(&mut linker, &wasi.wasi)?;
        link::define_unknown(&mut linker, component, &wasi)?;
        let pre = linker
            .instantiate_pre(component)
            .map_err(|e| anyhow!("{e:#}"))?;
        let pre = ProxyPre::new(pre).map_err(|e| {
            anyhow!("the component is not a wasi:http/proxy (it must export wasi:http/incoming-handler): {e:#}")
        })?;
        Ok(Proxy {
            pre,
            wasi,
            log_prefix,
        })
    }

    /// A store for one request, with the guest's environment and directories, whose instance
    /// is the `id`th made.
    pub fn new_store(&self, id: u64) -> Result<Store<Host>> {
        let wasi = WasiConfig {
            served: Some(ServedInstance {
                id,
                log_prefix: self.log_prefix,
            }),
            ..self.wasi.clone()
        };
        new_store(self.pre.engine(), &wasi)
    }

    /// Hands `request` to a new instance in `store`. The guest's call is given to `spawn`,
    /// which runs it as a task (it may go on writing the body after the response's head is
    /// sent); the response is returned once the guest sets it.
    pub async fn handle(
        &self,
        mut store: Store<Host>,
        request: hyper::Request<hyper::body::Incoming>,
        spawn: impl FnOnce(GuestCall) -> tokio::task::JoinHandle<wasmtime::Result<()>>,
    ) -> Result<hyper::Response<HyperOutgoingBody>> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let (req, out) = {
            let mut http = store.data_mut().http();
            let req = http
                .new_incoming_request(Scheme::Http, request)
                .map_err(anyhow::Error::from)?;
            let out = http
                .new_response_outparam(sender)
                .map_err(anyhow::Error::from)?;
            (req, out)
        };
        let pre = self.pre.clone();
        let task = spawn(Box::pin(async move {
            let proxy = pre.instantiate_async(&mut store).await?;
            proxy
                .wasi_http_incoming_handler()
                .call_handle(&mut store, req, out)
                .await
        }));
        match receiver.await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(code)) => Err(anyhow!("the guest answered with an error: {code:?}")),
            // The store, and with it the sender, was dropped without a response.
            Err(_) => Err(match task.await {
                Ok(Ok(())) => anyhow!("the guest returned without setting a response"),
                Ok(Err(e)) => anyhow::Error::from(e),
                Err(e) => anyhow!("the guest's task failed: {e}"),
            }),
        }
    }
}
