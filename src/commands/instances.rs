//! The instances `wasmspy serve` answers requests with, made, reused and dropped by Wasmtime's
//! own [`ProxyHandler`] as `wasmtime serve` has them (a WASI 0.2 instance for one request by
//! default, a WASI 0.3 one for up to 128, 16 at once), each profiled: its store attached,
//! labeled `instance`, then relabeled with each request it starts (`request`, `method`,
//! `path`, `instance`). Requests run at once in one instance are tasks of the component model's
//! async ABI; a call hook gives the store the labels of the request whose task enters Wasm.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::sync::lock;
use crate::wasi_host::proxy::Proxy;
use crate::wasi_host::Host;
use crate::{ProfilerHandle, SampleLabels, StoreLabels};
use rustc_hash::FxHashMap;
use tokio_util::task::task_tracker::TaskTrackerToken;
use wasmtime::component::GuestTaskId;
use wasmtime::{CallHook, Store, StoreContextMut};
use wasmtime_wasi_http::handler::{
    HandlerState, Instance, ShouldAccept, WorkerExpiration, WorkerState, WorkerStatus,
};

/// `wasmtime serve`'s defaults for `--max-instance-reuse-count`.
const P3_REUSE: usize = 128;
const P2_REUSE: usize = 1;
/// `wasmtime serve`'s default for `--max-instance-concurrent-reuse-count` (WASI 0.3 only).
const P3_CONCURRENT_REUSE: usize = 16;

/// How instances are reused, from `wasmtime serve`'s options.
pub struct Reuse {
    /// Requests an instance answers before it is dropped.
    pub requests: usize,
    /// Requests it answers at once.
    pub concurrent: usize,
    /// How long an idle instance is kept for another request.
    pub idle: Duration,
}

impl Reuse {
    /// The options' values, or `wasmtime serve`'s defaults for a handler of `proxy`'s kind.
    pub fn new(
        proxy: &Proxy,
        requests: Option<usize>,
        concurrent: Option<usize>,
        idle: Duration,
    ) -> Self {
        let p3 = proxy.is_p3();
        Reuse {
            requests: requests.unwrap_or(if p3 { P3_REUSE } else { P2_REUSE }),
            // A WASI 0.2 handler cannot be called concurrently.
            concurrent: if p3 {
                concurrent.unwrap_or(P3_CONCURRENT_REUSE)
            } else {
                1
            },
            idle,
        }
    }
}

/// A request, as its labels name it: its method and path shared with the request's own, not
/// copied (two allocations a request fewer).
pub struct RequestLabels {
    /// From 1, in arrival order.
    pub number: u64,
    pub method: hyper::Method,
    pub uri: hyper::Uri,
}

/// What every instance is made from.
pub struct Instances {
    pub proxy: Proxy,
    /// Shared with every instance's [`Worker`]: one reference count, where a handle has one
    /// for each of its parts.
    pub profiler: Arc<ProfilerHandle>,
    pub reuse: Reuse,
    /// `-W timeout`: how long a request may take; `Duration::MAX` for no limit.
    pub request_timeout: Duration,
    next_instance: AtomicU64,
    /// Whether an instance could not be profiled (said once).
    unprofiled: AtomicBool,
    /// With `--shutdown-addr`, taken by every instance: what a shutdown waits for.
    tracker: Option<tokio_util::task::TaskTracker>,
}

impl Instances {
    pub fn new(
        proxy: Proxy,
        profiler: ProfilerHandle,
        reuse: Reuse,
        request_timeout: Duration,
        tracker: Option<tokio_util::task::TaskTracker>,
    ) -> Self {
        Instances {
            proxy,
            profiler: Arc::new(profiler),
            reuse,
            request_timeout,
            next_instance: AtomicU64::new(0),
            unprofiled: AtomicBool::new(false),
            tracker,
        }
    }

    /// Attaches the profiler to an instance's store, labeled with its number; with requests
    /// answered at once, their tasks' labels given to the store as each enters Wasm. `None`
    /// (said once) where it cannot: the instance is served all the same, as `wasmtime serve`
    /// would.
    fn profile(&self, store: &mut Store<Host>, id: u64) -> Option<Labeling> {
        let mut id_label = itoa::Buffer::new();
        let labels = match self
            .profiler
            .attach_kept_by_data(store, &[("instance", id_label.format(id))])
        {
            Ok(labels) => labels,
            Err(e) => {
                if !self.unprofiled.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "wasmspy: warning: instance {id} and others like it not profiled: {e:#}"
                    );
                }
                return None;
            }
        };
        let tasks = (self.reuse.concurrent > 1).then(|| {
            let tasks = Arc::new(TaskLabels::default());
            label_tasks(&self.profiler, store, labels.clone(), Arc::clone(&tasks));
            tasks
        });
        Some(Labeling {
            store: labels,
            tasks,
        })
    }
}

/// The labels of the request each task runs, by the task the handler's call created: the root
/// of the component model's async call stack of whatever runs.
#[derive(Default)]
struct TaskLabels {
    by_task: Mutex<FxHashMap<GuestTaskId, SampleLabels>>,
    /// Counts the insertions: a task's id is reused once it has ended, for another request.
    inserted: AtomicU64,
}

impl TaskLabels {
    fn insert(&self, task: GuestTaskId, labels: SampleLabels) {
        lock(&self.by_task).insert(task, labels);
        self.inserted.fetch_add(1, Ordering::Release);
    }
}

/// Gives the store the labels of the request whose task enters Wasm (a call, or a return from
/// the host to a task that was waiting). A call hook: it runs at every crossing between Wasm
/// and the host, so it is set only where requests share an instance, and looks the task up
/// only when another one runs than last time, or a request has started since. Set through the
/// profiler, whose instructions clock has a call hook of its own.
fn label_tasks(
    profiler: &ProfilerHandle,
    store: &mut Store<Host>,
    labels: StoreLabels,
    tasks: Arc<TaskLabels>,
) {
    let mut labeled = None;
    let hooked = profiler.call_hook(store, move |mut store: StoreContextMut<'_, Host>, hook| {
        if matches!(hook, CallHook::CallingWasm | CallHook::ReturningFromHost) {
            if let Some(task) = store.async_call_stack().ok().and_then(|s| s.last()) {
                // A task not yet known (its request not started) is looked up again next time.
                let now = (task, tasks.inserted.load(Ordering::Acquire));
                if labeled != Some(now) {
                    if let Some(request) = lock(&tasks.by_task).get(&task) {
                        labels.set(request);
                        labeled = Some(now);
                    }
                }
            }
        }
        Ok(())
    });
    if let Err(e) = hooked {
        eprintln!("wasmspy: warning: the requests of an instance are not labeled: {e:#}");
    }
}

/// An instance's labels.
struct Labeling {
    store: StoreLabels,
    /// With requests answered at once: each one's labels, by its task.
    tasks: Option<Arc<TaskLabels>>,
}

impl HandlerState for Instances {
    type StoreData = Host;
    type WorkerExpiration = Expiration;
    type WorkerState = Worker;

    async fn instantiate(&self) -> wasmtime::Result<Instance<Host, Expiration, Worker>> {
        let id = self.next_instance.fetch_add(1, Ordering::Relaxed);
        let mut store = self
            .proxy
            .new_store(id)
            .map_err(wasmtime::Error::from_anyhow)?;
        let labeling = self.profile(&mut store, id);
        let proxy = self.proxy.instantiate(&mut store).await?;
        Ok(Instance {
            store,
            proxy,
            view: wasmtime_wasi_http::WasiHttpView::http,
            expiration: Expiration {
                idle: self.reuse.idle,
                request: self.request_timeout,
                sleep: Box::pin(tokio::time::sleep(Duration::MAX)),
            },
            state: Worker {
                id,
                profiler: self.profiler.clone(),
                labeling,
                requests: self.reuse.requests,
                concurrent: self.reuse.concurrent,
                request_timeout: self.request_timeout,
                _alive: self.tracker.as_ref().map(|tracker| tracker.token()),
            },
        })
    }
}

/// When an instance is dropped: idle past `--idle-instance-timeout`, or a request (or the
/// work after its response) past `-W timeout`, as `wasmtime serve` decides.
pub struct Expiration {
    idle: Duration,
    request: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl WorkerExpiration for Expiration {
    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        status: WorkerStatus,
        start: Instant,
    ) -> Poll<()> {
        let timeout = match status {
            WorkerStatus::Idle => self.idle,
            WorkerStatus::Requests | WorkerStatus::PostReturn => self.request,
        };
        match start.checked_add(timeout) {
            Some(deadline) => {
                let deadline = tokio::time::Instant::from_std(deadline);
                if self.sleep.deadline() != deadline {
                    self.sleep.as_mut().reset(deadline);
                }
                self.sleep.as_mut().poll(cx)
            }
            None => Poll::Pending,
        }
    }
}

/// An instance's state.
pub struct Worker {
    id: u64,
    profiler: Arc<ProfilerHandle>,
    labeling: Option<Labeling>,
    requests: usize,
    concurrent: usize,
    request_timeout: Duration,
    /// Held while the instance lives.
    _alive: Option<TaskTrackerToken>,
}

impl WorkerState for Worker {
    type StoreData = Host;
    type RequestData = RequestLabels;

    fn should_accept_request(&self, concurrent: usize, total: usize) -> ShouldAccept {
        if total >= self.requests {
            ShouldAccept::Never
        } else if concurrent >= self.concurrent {
            ShouldAccept::No
        } else {
            ShouldAccept::Yes
        }
    }

    fn on_request_start(
        &self,
        _: StoreContextMut<'_, Host>,
        request: RequestLabels,
        task: GuestTaskId,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
        if let Some(labeling) = &self.labeling {
            let (mut number, mut instance) = (itoa::Buffer::new(), itoa::Buffer::new());
            let labels = self.profiler.labels(&[
                ("request", number.format(request.number)),
                ("method", request.method.as_str()),
                ("path", request.uri.path()),
                ("instance", instance.format(self.id)),
            ]);
            match &labeling.tasks {
                // Given to the store by the call hook, as the task enters Wasm (the hook alone
                // sets the store's labels, so that it knows which task's they are). Kept while
                // the instance lives (at most `--max-instance-reuse-count` requests): a task
                // goes on after its response, writing the body.
                Some(tasks) => tasks.insert(task, labels),
                None => labeling.store.set(&labels),
            }
        }
        Box::pin(tokio::time::sleep(self.request_timeout))
    }

    fn drop(&self, store: Store<Host>, result: wasmtime::Result<()>) {
        if let Err(e) = result {
            eprintln!("wasmspy: error: instance {} failed: {e:?}", self.id);
        }
        drop(store);
    }
}
