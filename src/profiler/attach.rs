//! Attaching stores and threads: what the profiler keeps of each store it samples (its key,
//! its labels, its runtime instance once shown), the hooks it sets in it (the epoch callback,
//! the instructions clock's call hook), and the threads bound to the sampler until they end.
//! What a store must keep alive while it is sampled, it owns
//! ([`StoreKeeper`](crate::capture::StoreKeeper)), and what the profiler keeps of it is taken
//! out as it drops ([`StoreAttached`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use wasmtime::{AsContextMut, CallHook, Store, StoreContextMut, UpdateDeadline};

use super::attached_stores::AttachedStores;
use super::signal_sampler::Publication;
use super::{Interrupted, Profiler, ProfilerHandle, Result, SharedSampler};
use crate::capture::allocations::{Allocations, StoreData};
use crate::capture::epoch;
use crate::capture::instructions::FuelSampling;
use crate::capture::{LabelsNow, SampleValues, StoreKey, Taken};
use crate::clock::{monotonic_ns, thread_cpu_ns};
use crate::error::Error;
use crate::pipeline::Pipeline;
use crate::runtimes::RuntimeInstance;
use crate::store_labels::{SampleLabels, StoreLabels};
use crate::sync::lock;

thread_local! {
    /// The profiler that last began sampling this thread.
    static SAMPLED_BY: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// The samplers sampling this thread, told when it ends.
    static THREAD_END: ThreadEnd = const { ThreadEnd(std::cell::RefCell::new(Vec::new())) };
}

/// Releases the thread from its samplers when it ends (its slot in the signal handler's table
/// freed, its timer deleted), so that threads that come and go do not use them up.
struct ThreadEnd(std::cell::RefCell<Vec<std::sync::Weak<SharedSampler>>>);

impl Drop for ThreadEnd {
    fn drop(&mut self) {
        let thread = epoch::current_thread();
        for sampler in self.0.take() {
            if let Some(sampler) = sampler.upgrade() {
                lock(&sampler).unbind_thread(thread);
            }
        }
    }
}

/// What the profiler keeps of an attached store.
pub(super) struct AttachedStore {
    pub(super) key: StoreKey,
    /// When it was attached (`CLOCK_MONOTONIC`).
    pub(super) attached_ns: u64,
    /// The runtime instance whose stack its samplers read, once shown.
    pub(super) runtime: Arc<ReaderSlot>,
    /// On the instructions clock: its intervals, and its labels, which its call hook uses.
    fuel: Option<(Arc<FuelSampling>, Arc<LabelsNow>)>,
}

/// A store's runtime instance, once shown to the profiler.
type ReaderSlot = OnceLock<RuntimeInstance>;

/// What an attached store keeps while it lives, and drops with it: its entry in the profiler's
/// map, its context shown to the signal handler, its labels, its blocks' record.
pub(crate) struct Attachment {
    _kept: (
        StoreAttached,
        Option<Publication>,
        StoreLabels,
        Option<MemoryOfStore>,
    ),
}

/// Store data that keeps its store's [`Attachment`] (see
/// [`ProfilerHandle::attach_kept_by_data`]).
///
/// # Safety
/// What [`attachment`](Self::attachment) holds stays there until the data is dropped with its
/// store: never taken or moved out, the data never taken from its store
/// (`Store::into_data`). The signal handler reads the store's context (inside the store) for
/// as long as the attachment lives, and Wasmtime drops a store's data before the rest of it.
#[cfg(feature = "wasi")]
pub(crate) unsafe trait KeepsAttachment {
    /// Where the attachment is kept: `None` until the store is attached.
    fn attachment(&mut self) -> &mut Option<Attachment>;
}

/// Takes a store out of the profiler's map of attached stores as it drops. Holds the map (not
/// a weak reference, whose upgrade and drop are two more atomic writes a store to a count
/// every worker shares): it outlives the profiler while stores do.
struct StoreAttached {
    data: StoreData,
    stores: Arc<AttachedStores>,
}

impl Drop for StoreAttached {
    fn drop(&mut self) {
        self.stores.remove(self.data);
    }
}

/// A store's blocks, forgotten when the store (which owns this) is dropped.
struct MemoryOfStore {
    data: StoreData,
    allocations: Weak<Mutex<Allocations>>,
    pipeline: Weak<Pipeline>,
}

impl Drop for MemoryOfStore {
    fn drop(&mut self) {
        if let (Some(allocations), Some(pipeline)) =
            (self.allocations.upgrade(), self.pipeline.upgrade())
        {
            lock(&allocations).store_dropped(self.data, pipeline.as_ref());
        }
    }
}

impl Profiler {
    /// Installs the profiler in `store`: see [`ProfilerHandle::attach`].
    pub fn attach<T: 'static>(&mut self, store: &mut Store<T>) -> Result<()> {
        self.handle.attach(store)
    }
}

impl ProfilerHandle {
    /// Installs the profiler in `store`, on the thread that will run the guest. Any number of
    /// stores may be attached, on any threads, before or after [`start`](Profiler::start): the
    /// signal sampler samples every thread that attached one. With the signal sampler this adds
    /// to the store a host function (and to the first store of each type of data an empty
    /// instance), by which the signal handler reads, for a sample taken in host code (a host
    /// call, a libcall), Wasmtime's record of where the guest left Wasm, until the store is
    /// dropped; it sets no call hook, so the guest runs as fast as without the profiler. On an
    /// engine with epoch interruption it replaces the store's epoch-deadline callback and
    /// deadline (the epoch sampler samples there, and [`ProfilerHandle::interrupt`] stops the
    /// guest there).
    pub fn attach<T: 'static>(&self, store: &mut Store<T>) -> Result<()> {
        self.attach_with_labels(store, &[]).map(|_| ())
    }

    /// As [`attach`](Self::attach), and every sample taken in `store` carries `labels` (pprof's
    /// string labels: `go tool pprof -tagfocus key=value` keeps them, `-tags` lists them), e.g.
    /// the tenant or the request the store serves, until changed with the [`StoreLabels`]
    /// returned.
    pub fn attach_with_labels<T: 'static>(
        &self,
        store: &mut Store<T>,
        labels: &[(&str, &str)],
    ) -> Result<StoreLabels> {
        let (labels, attachment) = self.new_attachment(store, labels)?;
        self.keeper.keep(store, attachment);
        Ok(labels)
    }

    /// As [`attach_with_labels`](Self::attach_with_labels), what the store must keep kept in
    /// its data rather than by a host function made in it (a server attaches a store per
    /// request: the function, made and dropped, was ~1,900 of the 14,000 instructions a
    /// request cost `wasmspy serve` over `wasmtime serve`).
    #[cfg(feature = "wasi")]
    pub(crate) fn attach_kept_by_data<T: KeepsAttachment + 'static>(
        &self,
        store: &mut Store<T>,
        labels: &[(&str, &str)],
    ) -> Result<StoreLabels> {
        let (labels, attachment) = self.new_attachment(store, labels)?;
        match store.data_mut().attachment() {
            slot @ None => *slot = Some(attachment),
            // Attached again: the first attachment stays where it is.
            Some(_) => self.keeper.keep(store, attachment),
        }
        Ok(labels)
    }

    /// Attaches `store` (see [`attach`](Self::attach)), labeled `labels`: what the store must
    /// keep while it lives, for the caller to give it.
    fn new_attachment<T: 'static>(
        &self,
        store: &mut Store<T>,
        labels: &[(&str, &str)],
    ) -> Result<(StoreLabels, Attachment)> {
        let key = StoreKey::unique();
        let labels = StoreLabels::new(self.labels(labels));
        self.sample_this_thread()?;
        let data = StoreData::of(store.data());
        let runtime = Arc::new(ReaderSlot::new());
        let fuel = match &self.fuel {
            Some((sampler, interval)) => {
                let sampling = Arc::new(sampler.attach(store, *interval)?);
                let clock = self.fuel_clock(sampling.clone(), labels.now(), runtime.clone());
                store.call_hook(clock);
                Some((sampling, labels.now()))
            }
            None => None,
        };
        let attached = AttachedStore {
            key,
            attached_ns: monotonic_ns(),
            runtime: runtime.clone(),
            fuel,
        };
        self.stores.insert(data, attached);
        // Taken out of the map again if attaching fails below.
        let stores = self.stores.clone();
        let attached = StoreAttached { data, stores };
        if self.engine.get_epoch_interruption() {
            let samples_at_epochs = lock(&self.sampler).samples_at_epochs();
            let runtime = samples_at_epochs.then(|| runtime.clone());
            self.attach_epoch_callback(store, labels.now(), runtime);
        }

        let publication = match &self.store_contexts {
            Some(contexts) => Some(contexts.publish(store, key, labels.now())?),
            None => None,
        };
        let memory = self.allocations.as_ref().map(|allocations| {
            lock(allocations).store_attached(data, key, labels.now());
            MemoryOfStore {
                data,
                allocations: Arc::downgrade(allocations),
                pipeline: Arc::downgrade(&self.pipeline),
            }
        });
        let attachment = Attachment {
            _kept: (attached, publication, labels.clone(), memory),
        };
        Ok((labels, attachment))
    }

    /// A set of labels to give stores with [`StoreLabels::set`]: made once (the profile
    /// registers it), given as often as a store switches to the work it names.
    pub fn labels(&self, labels: &[(&str, &str)]) -> SampleLabels {
        SampleLabels::new(self.pipeline.register_labels(labels))
    }

    /// Samples the calling thread from now on, as [`attach`](Self::attach) does the thread
    /// that attaches a store. A guest called asynchronously (`call_async`, on a fiber) runs on
    /// whichever thread polls its future, and a multi-threaded runtime (tokio's) moves tasks
    /// between its workers: call this as each of them starts (`on_thread_start`). The sampler
    /// is asked until it takes the thread: a thread it cannot sample fails every attach, where
    /// samples would be missing (the epoch sampler on the CPU clock takes one thread only).
    pub fn sample_this_thread(&self) -> Result<()> {
        if SAMPLED_BY.get() == self.id {
            return Ok(());
        }
        lock(&self.sampler).bind_to_current_thread()?;
        SAMPLED_BY.set(self.id);
        // Fails only while the thread ends, when it runs no guest any more.
        let _ = THREAD_END.try_with(|end| end.0.borrow_mut().push(Arc::downgrade(&self.sampler)));
        Ok(())
    }

    /// The call hook that samples `store` on the instructions clock: see
    /// [`crate::capture::instructions`].
    fn fuel_clock<T: 'static>(
        &self,
        sampling: Arc<FuelSampling>,
        labels: Arc<LabelsNow>,
        runtime: Arc<ReaderSlot>,
    ) -> impl FnMut(StoreContextMut<'_, T>, CallHook) -> wasmtime::Result<()> + Send + Sync + 'static
    {
        let pipeline = self.pipeline.clone();
        move |mut store: StoreContextMut<'_, T>, hook: CallHook| {
            let ran = sampling.on_call_hook(store.as_context_mut(), hook)?;
            if let Some(ran) = ran {
                let taken = Taken {
                    labels: labels.get(),
                    thread: epoch::current_thread(),
                    time_ns: monotonic_ns(),
                };
                let values = SampleValues {
                    measured: ran,
                    wall_ns: 0,
                };
                epoch::take_sample(&store, runtime.get(), taken, pipeline.as_ref(), values);
            }
            Ok(())
        }
    }

    /// Sets `store`'s call hook (see `Store::call_hook`), which the instructions clock uses
    /// itself: use this in its place on a store attached to a profiler, and both run, the
    /// profiler's first. The store must have been attached.
    pub fn call_hook<T: 'static>(
        &self,
        store: &mut Store<T>,
        mut hook: impl FnMut(StoreContextMut<'_, T>, CallHook) -> wasmtime::Result<()>
            + Send
            + Sync
            + 'static,
    ) -> Result<()> {
        let attached = self.stores.with(StoreData::of(store.data()), |attached| {
            (attached.fuel.clone(), attached.runtime.clone())
        });
        let Some((fuel, runtime)) = attached else {
            return Err(Error::NotAttached);
        };
        match fuel {
            Some((sampling, labels)) => {
                let mut clock = self.fuel_clock(sampling, labels, runtime);
                store.call_hook(move |mut store, kind| {
                    clock(store.as_context_mut(), kind)?;
                    hook(store, kind)
                });
            }
            None => store.call_hook(hook),
        }
        Ok(())
    }

    /// Samples at epoch deadlines where `samples` (the epoch sampler; the store's runtime
    /// instance once shown), and stops the guest there once interrupted.
    fn attach_epoch_callback<T: 'static>(
        &self,
        store: &mut Store<T>,
        labels: Arc<LabelsNow>,
        samples: Option<Arc<ReaderSlot>>,
    ) {
        let pipeline = self.pipeline.clone();
        let interrupt = self.interrupt.clone();
        let yields = self.yields.clone();
        let mut last_thread = epoch::current_thread();
        let mut last_cpu = thread_cpu_ns();
        let mut last_wall = monotonic_ns();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |ctx| {
            if interrupt.load(Ordering::Relaxed) {
                return Err(Interrupted.into());
            }
            if let Some(runtime) = &samples {
                let (thread, cpu, wall) =
                    (epoch::current_thread(), thread_cpu_ns(), monotonic_ns());
                let wall_ns = wall.saturating_sub(last_wall);
                // An asynchronous store moves between threads: another thread's CPU clock
                // says nothing of this store's time, which is then taken as the wall time.
                let cpu_ns = if thread == last_thread {
                    cpu.saturating_sub(last_cpu)
                } else {
                    wall_ns
                };
                let values = SampleValues {
                    measured: cpu_ns,
                    wall_ns,
                };
                (last_thread, last_cpu, last_wall) = (thread, cpu, wall);
                let taken = Taken {
                    labels: labels.get(),
                    thread,
                    time_ns: wall,
                };
                epoch::take_sample(&ctx, runtime.get(), taken, pipeline.as_ref(), values);
            }
            Ok(match yields.load(Ordering::Relaxed) {
                true => UpdateDeadline::Yield(1),
                false => UpdateDeadline::Continue(1),
            })
        });
    }
}
