//! The instances of language runtimes ([`crate::runtimes`]) whose own stacks the signal
//! handler reads: per instance, its store's key, its runtime and where the walk reads it
//! ([`InstanceView`]).
//!
//! Invariants the handler relies on:
//! - an instance is published only while its store lives: the publication, owned by the store
//!   ([`StoreKeeper`]), withdraws it and waits for running handlers before the store's
//!   memory is freed, and keeps the runtime (and the view's anchor, where it is a cell)
//!   allocated until then;
//! - [`walk`] is async-signal-safe: atomic loads over a fixed table, bounded by its size (see
//!   [`super::slot_table`]), then the runtime's walk, itself async-signal-safe.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};

use super::slot_table::{self, Payload, SlotTable};
use super::store_contexts;
use crate::capture::{StoreKeeper, StoreKey};
use crate::runtimes::{id_of, InstanceView, Runtime, RuntimeInstance};

/// Instances published at once: one per store, as many stores as can be attached.
pub const MAX_INSTANCES: usize = store_contexts::SLOTS;

/// An instance's slot: its `VMContext` is the live word.
struct Published {
    key: AtomicU64,
    /// The address of the `Arc<dyn Runtime>` the publication keeps.
    runtime: AtomicUsize,
    /// The view's memory offset and global offsets, packed (see [`InstanceView::pack`]).
    offsets: AtomicU64,
    /// Where its runtime's state is ([`InstanceView::root`]).
    root: AtomicU32,
}

impl Payload for Published {
    const EMPTY: Self = Published {
        key: AtomicU64::new(0),
        runtime: AtomicUsize::new(0),
        offsets: AtomicU64::new(0),
        root: AtomicU32::new(0),
    };
}

static TABLE: SlotTable<Published, MAX_INSTANCES> = SlotTable::new();

/// Keeps an instance published, and its runtime allocated, while its store lives.
struct Publication {
    _slot: slot_table::Publication,
    _instance: Box<RuntimeInstance>,
}

/// Publishes `instance` for the handler, until `store` is dropped.
///
/// # Safety
/// `instance` must be of an instance in `store`, and `key` the store's.
pub unsafe fn publish<T: 'static>(
    keeper: &StoreKeeper,
    store: impl wasmtime::AsContextMut<Data = T>,
    key: StoreKey,
    instance: RuntimeInstance,
) -> Result<()> {
    let instance = Box::new(instance);
    let view = *instance.view();
    let slot = TABLE
        .publish(view.anchor(), |slot| {
            slot.key.store(key.0, Ordering::Relaxed);
            slot.runtime.store(
                instance.runtime() as *const Arc<dyn Runtime> as usize,
                Ordering::Relaxed,
            );
            slot.offsets.store(view.pack(), Ordering::Relaxed);
            slot.root.store(view.root(), Ordering::Relaxed);
        })
        .with_context(|| format!("more than {MAX_INSTANCES} runtime instances at once"))?;
    keeper.keep(
        store,
        Publication {
            _slot: slot,
            _instance: instance,
        },
    );
    Ok(())
}

/// Walks the runtime stack of the instance in the store whose key is `store`, the store whose
/// Wasm the sampled thread runs (its memory cannot move under the handler, as another
/// thread's could: a dynamic memory grows by moving), as [`Runtime::walk`] does: the first
/// runtime instance of the store whose walk reads a stack. Where its words start, and the
/// runtime's id ([`id_of`]). Async-signal-safe.
pub fn walk(
    store: u64,
    pcs: &mut [usize],
    depth: &mut usize,
    leaf_at: Option<usize>,
) -> Option<(usize, usize)> {
    if store == 0 {
        return None;
    }
    TABLE.find_map(|anchor, slot| {
        if slot.key.load(Ordering::Relaxed) != store {
            return None;
        }
        let runtime = slot.runtime.load(Ordering::Relaxed) as *const Arc<dyn Runtime>;
        // SAFETY: set, before the slot was published, to the runtime its publication keeps
        // allocated until it is withdrawn and the running handlers waited for; the reference
        // does not outlive this handler.
        let runtime = unsafe { &*runtime };
        let view = InstanceView::unpack(
            anchor,
            slot.offsets.load(Ordering::Relaxed),
            slot.root.load(Ordering::Relaxed),
        );
        // SAFETY: published: an instance of the runtime's module, alive.
        let at = unsafe { runtime.walk(&view, pcs, depth, leaf_at) }?;
        Some((at, id_of(runtime)))
    })
}
