//! The instances whose language's own stacks the signal handler reads: Go's goroutine stacks
//! ([`crate::capture::go_stack`]) and CPython's Python stacks
//! ([`crate::capture::python_stack`]).
//!
//! Per Go module, a [`GoCode`]: its native code's functions with their Go `PC_F`, by which the
//! handler names the innermost Wasm frames, and each function's frame size. Per instance, its
//! `VMContext` and where its memory (and Go's registers) are in it, with its module's
//! [`GoCode`] or [`PythonCode`].
//!
//! Invariants the handler relies on:
//! - a published [`GoCode`] stays allocated until no thread is attached ([`clear`]);
//! - an instance is published only while its store lives: the [`Publication`] the store owns
//!   withdraws it and waits for running handlers before the store's memory is freed, and keeps
//!   its module's code allocated until then;
//! - [`go_instance_for`] and [`python_instance_for`] are async-signal-safe: atomic loads over
//!   fixed tables, bounded by their sizes; a slot's fields are written before its `vmctx`.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Result};

use super::store_contexts;
use crate::capture::go_stack::GoCode;
use crate::capture::python_stack::PythonCode;
use crate::capture::vmctx::{context_of_instance, GoInstance, MemoryOf};
use crate::capture::StackReader;
use crate::sync::lock;

/// Go modules whose code the handler knows.
pub const MAX_GO_CODES: usize = 64;
/// Instances published at once: one per store, as many stores as can be attached.
pub const MAX_INSTANCES: usize = super::store_contexts::SLOTS;

static CODES: [AtomicPtr<GoCode>; MAX_GO_CODES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_GO_CODES];
/// What keeps the published codes allocated.
static OWNED: Mutex<Vec<Arc<GoCode>>> = Mutex::new(Vec::new());

/// Shows the handler a Go module's code; false when [`MAX_GO_CODES`] are known already.
pub fn add_code(code: Arc<GoCode>) -> bool {
    let mut owned = lock(&OWNED);
    if owned.iter().any(|c| c.text() == code.text()) {
        return true;
    }
    let Some(slot) = CODES.iter().find(|c| c.load(Ordering::SeqCst).is_null()) else {
        return false;
    };
    slot.store(Arc::as_ptr(&code) as *mut GoCode, Ordering::SeqCst);
    owned.push(code);
    true
}

/// Forgets the codes; only while no thread is attached (see [`super::handler::clear_code`]).
pub fn clear() {
    let mut owned = lock(&OWNED);
    for slot in &CODES {
        slot.store(std::ptr::null_mut(), Ordering::SeqCst);
    }
    owned.clear();
}

/// The Go code holding `pc`, if any. Async-signal-safe.
pub fn code_at(pc: usize) -> Option<&'static GoCode> {
    // Slots fill from the first and are cleared all at once: the first empty one ends them
    // (a program without Go costs the handler one load).
    CODES
        .iter()
        .map_while(|slot| {
            // SAFETY: a published code stays allocated until `clear`, called only while no
            // thread is attached, when no handler samples.
            unsafe { slot.load(Ordering::Acquire).as_ref() }
        })
        .find(|code| code.text().contains(&pc))
}

const GO: u8 = 1;
const PYTHON: u8 = 2;

struct Slot {
    taken: AtomicBool,
    key: AtomicU64,
    /// [`GO`] or [`PYTHON`], as `code` is a [`GoCode`] or a [`PythonCode`].
    kind: AtomicU8,
    code: AtomicPtr<()>,
    /// Where the memory's definition pointer (and Go's SP and `g`) are, from `vmctx`.
    offsets: AtomicU64,
    vmctx: AtomicUsize,
}

static INSTANCES: [Slot; MAX_INSTANCES] = [const {
    Slot {
        taken: AtomicBool::new(false),
        key: AtomicU64::new(0),
        kind: AtomicU8::new(0),
        code: AtomicPtr::new(std::ptr::null_mut()),
        offsets: AtomicU64::new(0),
        vmctx: AtomicUsize::new(0),
    }
}; MAX_INSTANCES];
static USED: AtomicUsize = AtomicUsize::new(0);

/// Keeps an instance published while it lives in the store.
pub struct Publication {
    slot: usize,
    _code: Arc<dyn Any + Send + Sync>,
}

impl Drop for Publication {
    fn drop(&mut self) {
        INSTANCES[self.slot].vmctx.store(0, Ordering::SeqCst);
        super::handler::wait_for_running_handlers();
        INSTANCES[self.slot].taken.store(false, Ordering::SeqCst);
    }
}

/// Publishes the instance `reader` reads for the handler, as the instance of its store (as
/// attached: [`super::store_contexts`]). The publication lasts as long as the value returned,
/// which the store must own or outlive.
pub fn publish(reader: &StackReader) -> Result<Publication> {
    match reader {
        StackReader::Go(instance, code) => {
            publish_code(instance.vmctx(), GO, instance.pack(), code.clone())
        }
        StackReader::Python(instance, code) => {
            publish_code(instance.vmctx(), PYTHON, instance.pack(), code.clone())
        }
    }
}

fn publish_code<C: Any + Send + Sync>(
    vmctx: usize,
    kind: u8,
    offsets: u64,
    code: Arc<C>,
) -> Result<Publication> {
    // The instance of a store not attached is never walked: no sample names its store.
    let key = store_contexts::key_of(context_of_instance(vmctx));
    let Some(slot) = INSTANCES.iter().position(|slot| {
        slot.taken
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }) else {
        bail!("more than {MAX_INSTANCES} Go or Python instances at once");
    };
    let s = &INSTANCES[slot];
    s.key.store(key.map_or(0, |k| k.0), Ordering::Relaxed);
    s.kind.store(kind, Ordering::Relaxed);
    s.code
        .store(Arc::as_ptr(&code) as *mut (), Ordering::Relaxed);
    s.offsets.store(offsets, Ordering::Relaxed);
    s.vmctx.store(vmctx, Ordering::Release);
    USED.fetch_max(slot + 1, Ordering::SeqCst);
    Ok(Publication { slot, _code: code })
}

/// The instance of kind `kind` in the store whose key is `store`, the store whose Wasm the
/// sampled thread runs: its memory cannot move under the handler, as another thread's could
/// (a dynamic memory grows by moving). None for an unknown store. Async-signal-safe.
fn instance_for(kind: u8, store: u64, code: Option<*mut ()>) -> Option<(usize, u64, *mut ())> {
    if store == 0 {
        return None;
    }
    INSTANCES[..USED.load(Ordering::Acquire).min(MAX_INSTANCES)]
        .iter()
        .find_map(|slot| {
            let vmctx = slot.vmctx.load(Ordering::Acquire);
            let published = slot.code.load(Ordering::Relaxed);
            let ours = vmctx != 0
                && slot.kind.load(Ordering::Relaxed) == kind
                && code.is_none_or(|code| code == published)
                && slot.key.load(Ordering::Relaxed) == store;
            ours.then(|| (vmctx, slot.offsets.load(Ordering::Relaxed), published))
        })
}

/// The instance of Go module `code` in store `store` (see [`instance_for`]).
pub fn go_instance_for(code: &GoCode, store: u64) -> Option<GoInstance> {
    let code = code as *const GoCode as *mut ();
    instance_for(GO, store, Some(code))
        .map(|(vmctx, offsets, _)| GoInstance::unpack(vmctx, offsets))
}

/// The CPython instance in store `store` (see [`instance_for`]), with its module's code.
pub fn python_instance_for(store: u64) -> Option<(MemoryOf, &'static PythonCode)> {
    let (vmctx, offsets, code) = instance_for(PYTHON, store, None)?;
    // SAFETY: a PYTHON slot's code is a `PythonCode` its publication keeps allocated, and the
    // slot is withdrawn (and running handlers waited for) before the publication drops it;
    // the reference does not outlive the handler that loaded it.
    let code = unsafe { &*(code as *const PythonCode) };
    Some((MemoryOf::unpack(vmctx, offsets), code))
}
