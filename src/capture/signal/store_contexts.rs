//! The stores whose record of the guest's last exit from Wasm the signal handler reads.
//!
//! Every trampoline by which Wasm code leaves for the host (a call to an import, a component's
//! lowered function, a libcall such as `memory.grow` or a GC allocation) stores in its store's
//! `VMStoreContext` its own frame pointer and the return address into the Wasm code it was
//! called from; the trampoline that enters Wasm stores its frame pointer there too (zero while
//! no Wasm of the store is on the stack). From a PC in host code, the handler reads them to
//! find the guest frames under it. This replaces a call hook, which Wasmtime would run at every
//! one of these transitions: guests that make tens of millions of them (components crossing
//! between their sub-components, Wasm GC allocation) ran a third slower with one set.
//!
//! Wasmtime has no public accessor for the record. Its layout is `wasmtime-environ`'s, the
//! crate from which Wasmtime's compiler takes the same offsets (the exact version Wasmtime
//! depends on). The store's context is found through a probe instance made in the store (the
//! `VMFuncRef` of an exported function, `Func::to_raw`, names its instance's `VMContext`, which
//! holds the store context's address), in the first store of each type of data only: the
//! next ones' are found from where their data is ([`ContextFinder`]).
//!
//! Invariants the handler relies on:
//! - a context is published only while its store's memory is alive: the [`Publication`], which
//!   [`StoreContexts::publish`] returns for the store to own
//!   ([`StoreKeeper`](crate::capture::StoreKeeper)), withdraws it and waits for
//!   running handlers to finish;
//! - [`for_each`] is async-signal-safe: atomic loads over a fixed table, bounded by [`SLOTS`];
//!   a slot's key and thread are written before its context, so a context read comes with
//!   them.
//!
//! A store is not tied to a thread: an asynchronous store's fiber is resumed by whichever
//! thread polls it (a multi-threaded tokio runtime moves tasks between its workers). The
//! handler tells the stores running on its own stack by where their records point.

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{Context as _, Result};
use wasmtime::{Engine, Store};
use wasmtime_environ::{HostPtr, PtrSize};

use super::pulley_layout::{find_executor, ExecutorAt, VmLayout};
use super::pulley_stack;
use super::slot_table::{self, Payload, SlotTable};
use crate::capture::{LabelsNow, StoreKey};
use crate::shared::vmctx::ContextFinder;
use crate::sync::lock;

/// How many stores can be watched at once: as many instances as Wasmtime's pooling allocator
/// keeps by default (1,000), so that a server (`wasmspy serve`, a store per request) profiles
/// every request it can take at once. A sample scans only up to the highest slot in use.
pub const SLOTS: usize = 1024;

/// A store's slot: its context is the live word.
struct StoreSlot {
    /// The thread that attached the store.
    tid: AtomicI32,
    /// The store's [`StoreKey`].
    key: AtomicU64,
    /// The address of the word of the store's [`LabelsNow`], which its [`Publication`] keeps.
    labels: AtomicUsize,
    /// On Pulley: the address of the store's word that points to its interpreter's current
    /// state, and where in that state its `Vm` is (see [`super::pulley_layout`]); zero for
    /// compiled code.
    pulley_executor: AtomicUsize,
    vm_in_state: AtomicUsize,
}

impl Payload for StoreSlot {
    const EMPTY: Self = StoreSlot {
        tid: AtomicI32::new(0),
        key: AtomicU64::new(0),
        labels: AtomicUsize::new(0),
        pulley_executor: AtomicUsize::new(0),
        vm_in_state: AtomicUsize::new(0),
    };
}

static TABLE: SlotTable<StoreSlot, SLOTS> = SlotTable::new();

thread_local! {
    /// This thread's id, asked of the kernel once: a server publishes a store per request.
    // SAFETY: gettid has no preconditions.
    static TID: libc::pid_t = unsafe { libc::gettid() };
}

/// Calls `f` with the address of each published store context, the store's key and the thread
/// that attached it. Async-signal-safe.
pub fn for_each(mut f: impl FnMut(usize, u64, libc::pid_t)) {
    TABLE.for_each(|context, slot| {
        f(
            context,
            slot.key.load(Ordering::Relaxed),
            slot.tid.load(Ordering::Relaxed),
        )
    });
}

/// Calls `f` with the context, the key, the executor word and the offset of the `Vm` in the
/// state it points to of each published store that runs on Pulley. Async-signal-safe.
pub fn for_each_pulley(mut f: impl FnMut(usize, u64, usize, usize)) {
    TABLE.for_each(|context, slot| {
        let executor = slot.pulley_executor.load(Ordering::Relaxed);
        if executor != 0 {
            f(
                context,
                slot.key.load(Ordering::Relaxed),
                executor,
                slot.vm_in_state.load(Ordering::Relaxed),
            );
        }
    });
}

/// The labels now of the published store whose key is `key` (see [`LabelsNow`]); 0 for none.
/// Async-signal-safe.
pub fn labels_of(key: u64) -> u64 {
    // Keys are unique: the first match is the store.
    TABLE
        .find_map(|_, slot| {
            (slot.key.load(Ordering::Relaxed) == key).then(|| {
                let word = slot.labels.load(Ordering::Relaxed) as *const AtomicU64;
                // SAFETY: set before the context was published, to a word its Publication
                // owns; withdrawing the publication waits for running handlers before that
                // word goes.
                unsafe { (*word).load(Ordering::Relaxed) }
            })
        })
        .unwrap_or(0)
}

/// Where the exit record's fields are in a `VMStoreContext`.
#[derive(Clone, Copy)]
pub struct Offsets {
    /// The frame pointer of the trampoline Wasm last left by; the word it points to is the
    /// frame pointer of the Wasm function that called it.
    pub exit_trampoline_fp: usize,
    /// The return address into that Wasm function.
    pub exit_pc: usize,
    /// The frame pointer at which Wasm was entered; zero with no Wasm on the stack.
    pub entry_fp: usize,
    /// The end of the guard page of the fiber the store runs on (the start of that fiber's
    /// stack); zero while it runs on no fiber.
    pub fiber_guard_end: usize,
}

impl Offsets {
    pub fn of_this_build() -> Self {
        let context = HostPtr.vm_store_context();
        Offsets {
            exit_trampoline_fp: context.last_wasm_exit_trampoline_fp().into(),
            exit_pc: context.last_wasm_exit_pc().into(),
            entry_fp: context.last_wasm_entry_fp().into(),
            fiber_guard_end: usize::from(context.async_guard_range())
                + std::mem::offset_of!(std::ops::Range<*mut u8>, end),
        }
    }
}

/// Publishes stores' contexts for the signal handler.
pub struct StoreContexts {
    contexts: ContextFinder,
    /// For an engine that compiles to Pulley.
    pulley: Option<PulleyStores>,
}

/// Where Pulley stores keep their interpreters.
struct PulleyStores {
    layout: VmLayout,
    /// Where the first store kept it: where every store of this build does.
    found: std::sync::Mutex<Option<ExecutorAt>>,
}

/// Keeps a store's context published while it lives: for the store to own
/// ([`StoreKeeper`](crate::capture::StoreKeeper)), with whatever else the store
/// keeps (one host function a store).
#[must_use = "the store's context is withdrawn when this drops"]
pub struct Publication {
    _slot: slot_table::Publication,
    /// Read through the slot until the publication is withdrawn (dropped after it).
    _labels: Arc<LabelsNow>,
}

impl StoreContexts {
    pub fn new(engine: &Engine) -> Result<Self> {
        let contexts = ContextFinder::new(engine);
        let pulley = match engine.is_pulley() {
            true => Some(PulleyStores {
                layout: pulley_stack::interpreter()?.layout,
                found: Default::default(),
            }),
            false => None,
        };
        Ok(StoreContexts { contexts, pulley })
    }

    /// Publishes `store`'s context, its `key` and its `labels`, for the handler, until the
    /// [`Publication`] returned is dropped: the store is to own it. May add the probe's instance
    /// to the store.
    pub fn publish<T: 'static>(
        &self,
        store: &mut Store<T>,
        key: StoreKey,
        labels: Arc<LabelsNow>,
    ) -> Result<Publication> {
        let context = self.contexts.find(store)?;
        let pulley = match &self.pulley {
            Some(pulley) => {
                let mut found = lock(&pulley.found);
                let at = find_executor(context, &pulley.layout, *found)?;
                *found = Some(at);
                Some(at)
            }
            None => None,
        };
        let (executor, vm_in_state) = pulley.map_or((0, 0), |at| {
            (context.wrapping_add_signed(at.from_context), at.vm_in_state)
        });
        let slot = TABLE
            .publish(context, |slot| {
                slot.tid.store(TID.with(|tid| *tid), Ordering::Relaxed);
                slot.key.store(key.0, Ordering::Relaxed);
                slot.labels.store(
                    labels.word() as *const AtomicU64 as usize,
                    Ordering::Relaxed,
                );
                slot.pulley_executor.store(executor, Ordering::Relaxed);
                slot.vm_in_state.store(vm_in_state, Ordering::Relaxed);
            })
            .with_context(|| format!("more than {SLOTS} stores are attached at once"))?;
        Ok(Publication {
            _slot: slot,
            _labels: labels,
        })
    }
}

#[cfg(test)]
mod tests {
    use wasmtime::{Func, Instance, Module};

    use super::*;
    use crate::capture::{LabelsKey, StoreKeeper};

    /// # Safety
    /// `addr` must be valid for reads of a `T`, and aligned for it.
    unsafe fn read<T: Copy>(addr: usize) -> T {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::read(addr as *const T) }
    }

    fn publish<T: 'static>(contexts: &StoreContexts, store: &mut Store<T>) {
        let publication = contexts
            .publish(store, StoreKey::unique(), Arc::default())
            .unwrap();
        StoreKeeper::new(store.engine()).keep(store, publication);
    }

    fn published() -> Vec<usize> {
        let mut contexts = Vec::new();
        for_each(|c, _, _| contexts.push(c));
        contexts
    }

    /// The tests that count published stores, and those that publish one meanwhile, take turns.
    static COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// As many stores as a pooling allocator holds at once are published, all at once.
    #[test]
    fn a_thousand_stores_at_once() {
        let _turn = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
        let engine = Engine::default();
        let contexts = StoreContexts::new(&engine).unwrap();
        let mut stores: Vec<Store<()>> = (0..1000).map(|_| Store::new(&engine, ())).collect();
        for store in &mut stores {
            publish(&contexts, store);
        }
        assert!(published().len() >= 1000);
    }

    #[test]
    fn a_store_is_published_until_it_is_dropped() {
        let _turn = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
        let engine = Engine::default();
        let contexts = StoreContexts::new(&engine).unwrap();
        let before = published();
        let mut store = Store::new(&engine, ());
        publish(&contexts, &mut store);
        let mut other = Store::new(&engine, ());
        publish(&contexts, &mut other);
        let now = published();
        let ours: Vec<usize> = now
            .iter()
            .copied()
            .filter(|c| !before.contains(c))
            .collect();
        assert_eq!(ours.len(), 2);
        let offsets = Offsets::of_this_build();
        for &context in &ours {
            // SAFETY: a published context is a live store's; no Wasm runs on this thread.
            let entry_fp = unsafe { read::<usize>(context + offsets.entry_fp) };
            assert_eq!(entry_fp, 0, "no Wasm is on the stack");
        }
        drop(store);
        drop(other);
        assert!(published().iter().all(|c| !ours.contains(c)));
    }

    /// The handler reads the labels a store has now, until the store is dropped.
    #[test]
    fn a_stores_labels_are_read_as_they_are_now() {
        let _turn = COUNTING.lock().unwrap_or_else(|e| e.into_inner());
        let engine = Engine::default();
        let contexts = StoreContexts::new(&engine).unwrap();
        let mut store = Store::new(&engine, ());
        let (key, labels) = (StoreKey::unique(), Arc::new(LabelsNow::default()));
        let publication = contexts.publish(&mut store, key, labels.clone()).unwrap();
        StoreKeeper::new(&engine).keep(&mut store, publication);
        assert_eq!(labels_of(key.0), 0);
        let (first, second) = (LabelsKey::unique(), LabelsKey::unique());
        labels.set(Some(first));
        assert_eq!(labels_of(key.0), first.0);
        labels.set(Some(second));
        assert_eq!(labels_of(key.0), second.0);
        drop(store);
        assert_eq!(labels_of(key.0), 0);
    }

    #[test]
    fn inside_a_host_call_the_record_names_the_wasm_caller() {
        let engine = Engine::default();
        let contexts = StoreContexts::new(&engine).unwrap();
        let module = Module::new(
            &engine,
            r#"(module
                (import "host" "call" (func $call))
                (func (export "run") call $call))"#,
        )
        .unwrap();
        let text = module.text().as_ptr_range();
        let text = text.start as usize..text.end as usize;
        let mut store = Store::new(&engine, Vec::new());
        publish(&contexts, &mut store);
        let call = Func::wrap(
            &mut store,
            |mut caller: wasmtime::Caller<'_, Vec<usize>>| {
                let offsets = Offsets::of_this_build();
                let mut records = Vec::new();
                for_each(|context, _, _| {
                    // SAFETY: a published context is a live store's.
                    records.push(unsafe {
                        [
                            read::<usize>(context + offsets.entry_fp),
                            read::<usize>(context + offsets.exit_trampoline_fp),
                            read::<usize>(context + offsets.exit_pc),
                        ]
                    })
                });
                caller
                    .data_mut()
                    .extend(records.into_iter().find(|r| r[0] != 0).unwrap_or_default());
            },
        );
        let instance = Instance::new(&mut store, &module, &[call.into()]).unwrap();
        let run = instance
            .get_typed_func::<(), ()>(&mut store, "run")
            .unwrap();
        run.call(&mut store, ()).unwrap();
        let [entry_fp, trampoline_fp, exit_pc] = store.data()[..] else {
            panic!("no store had Wasm on the stack during the host call");
        };
        assert!(
            text.contains(&exit_pc),
            "the return address is in the module's code"
        );
        assert!(
            trampoline_fp < entry_fp,
            "the exit is below the entry on the stack"
        );
    }
}
