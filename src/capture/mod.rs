//! The capture stage: samplers take the guest's call stack on a timer and hand each sample to
//! a [`Sink`], the stages after this one as capture sees them (it knows nothing else of them).
//! One file per strategy, behind [`Sampler`] (and [`allocations`], for memory profiles):
//! - [`signal`]: a POSIX timer sends SIGPROF to the guest thread, whose handler walks the stack
//!   wherever the guest is (the default on Linux x86_64 and aarch64);
//! - [`epoch`]: Wasmtime's epoch interruption, where compiled code checks for it (everywhere);
//! - `instructions`: every so many executed Wasm instructions, counted by Wasmtime's fuel
//!   (deterministic: the same run gives the same samples).

pub mod allocations;
pub mod epoch;
// Crate-private: a `FuelSampling` reads the address of its store's fuel counter, which a
// caller holding it past the store could make a read of freed memory.
pub(crate) mod instructions;
pub(crate) mod intervals;
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub mod signal;

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;

use crate::profile::ThreadId;
use crate::shared::GuestStack;

/// Whether the signal sampler can sample Pulley's interpreter in this process, or why not (it
/// finds the interpreter's code by this executable's symbols).
#[cfg(feature = "cli")]
pub fn signals_sample_pulley() -> Result<()> {
    #[cfg(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    ))]
    return signal::pulley_interpreter().map(|_| ());
    #[cfg(not(all(
        target_os = "linux",
        any(target_arch = "x86_64", target_arch = "aarch64")
    )))]
    anyhow::bail!("signals are not available here")
}

/// The values a sample of Pulley keeps that may be its PC: the interpreter holds its PC where
/// codegen put it at that instant (see `signal::pulley_stack`), and the resolver picks it.
pub const PULLEY_PC_CANDIDATES: usize = 4;

/// A sample as a native-code sampler took it: program counters, leaf first.
#[derive(Clone, Copy)]
pub enum NativeSample<'a> {
    /// The interrupted PC is in a module's code; the rest are return addresses.
    Guest(Pcs<'a>),
    /// The interrupted PC is outside Wasm code (a host function, a libcall, Wasmtime); the
    /// rest, if any, are return addresses, the first into the Wasm code that left for the host.
    Host(Pcs<'a>),
    /// Pulley ran bytecode: [`PULLEY_PC_CANDIDATES`] candidates for its PC (zeros after the
    /// last), its link register (the caller's return address in a function's first or last
    /// instruction, stale elsewhere), then the return addresses of the frame records.
    Pulley(Pcs<'a>),
}

/// Which of [`NativeSample`]'s kinds a sample is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NativeKind {
    Guest,
    Host,
    Pulley,
}

impl<'a> NativeSample<'a> {
    /// A sample of `kind` of `pcs`, leaf first, the first `host` of them host frames (see
    /// [`Pcs::host`]), a language runtime's words from `splice`'s index on (with the
    /// runtime's id), where one was read.
    pub fn of(
        kind: NativeKind,
        pcs: &'a [usize],
        host: usize,
        splice: Option<(usize, usize)>,
    ) -> Self {
        let pcs = match splice {
            Some((at, runtime)) => {
                let (native, words) = pcs.split_at(at.min(pcs.len()));
                Pcs {
                    native,
                    host,
                    splice: Some(Splice { runtime, words }),
                }
            }
            None => Pcs {
                native: pcs,
                host,
                splice: None,
            },
        };
        match kind {
            NativeKind::Guest => NativeSample::Guest(pcs),
            NativeKind::Host => NativeSample::Host(pcs),
            NativeKind::Pulley => NativeSample::Pulley(pcs),
        }
    }
}

/// A thread's stack taken on demand (a stack dump), as a sample of native PCs.
pub struct DumpedStack {
    pub kind: NativeKind,
    pub pcs: Vec<usize>,
    /// How many of `pcs`, from the first, are host frames (see [`Pcs::host`]).
    pub host_depth: usize,
    /// Where a language runtime's words start in `pcs`, and the runtime's id.
    pub splice: Option<(usize, usize)>,
    /// The store whose guest runs on the thread, where the sampler could tell.
    pub store: Option<StoreKey>,
    pub taken: Taken,
}

impl DumpedStack {
    pub fn native(&self) -> NativeSample<'_> {
        NativeSample::of(self.kind, &self.pcs, self.host_depth, self.splice)
    }

    /// Whether the thread was running a guest: in its code, or in a host call it made.
    pub fn runs_guest(&self) -> bool {
        self.store.is_some() || self.kind != NativeKind::Host
    }
}

/// What a stack dump found.
pub struct ThreadDumps {
    /// The stacks of the threads running a guest.
    pub stacks: Vec<DumpedStack>,
    /// Threads sampled that ran no guest (a server's idle worker).
    pub idle: usize,
    /// Threads that did not answer in time.
    pub unanswered: usize,
}

/// Takes one stack of each thread running a guest, now.
pub trait Dumper: Send + Sync {
    /// Asks every sampled thread for its stack and waits up to `wait` for the answers.
    fn dump(&self, wait: std::time::Duration) -> ThreadDumps;
}

/// A sample's program counters, leaf first.
#[derive(Clone, Copy)]
pub struct Pcs<'a> {
    /// Native code addresses.
    pub native: &'a [usize],
    /// Of a [`NativeSample::Host`]: how many of `native`, from the first (the interrupted
    /// PC), are the host's own frames, the rest return addresses into the Wasm under them;
    /// 0 where the sampler took none (the PC alone is then in `native[0]`).
    pub host: usize,
    /// The stack of the language runtime the innermost Wasm frames run (see
    /// [`crate::runtimes`]), after the native frames, where one was read.
    pub splice: Option<Splice<'a>>,
}

/// A language runtime's stack in a sample: words of its own meaning, innermost first, that it
/// splices into the sample's native frames when the sample is resolved.
#[derive(Clone, Copy, Debug)]
pub struct Splice<'a> {
    /// The runtime that read them ([`crate::runtimes::id_of`]).
    pub runtime: usize,
    pub words: &'a [usize],
}

/// A store attached to the profiler, as samples name the store they were taken in (the
/// runtime instance read is the store's; a sampled block is in the store's memory).
/// Never zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StoreKey(pub u64);

/// A set of labels samples carry, registered with the stages after capture. Never zero; a
/// thread's keys increase in the order it makes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabelsKey(pub u64);

impl LabelsKey {
    /// A key no other set of labels of this process has.
    pub fn unique() -> Self {
        static LAST: AtomicU64 = AtomicU64::new(0);
        LabelsKey(LAST.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// The labels a store's samples carry now: a store serving one request after another, or
/// several at once (a task each), is labeled anew as it switches. Read by the samplers (the
/// signal handler included: one atomic load) as they take a sample.
#[derive(Debug, Default)]
pub struct LabelsNow(AtomicU64);

impl LabelsNow {
    pub fn get(&self) -> Option<LabelsKey> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            key => Some(LabelsKey(key)),
        }
    }

    pub fn set(&self, labels: Option<LabelsKey>) {
        self.0.store(labels.map_or(0, |k| k.0), Ordering::Relaxed);
    }

    /// The word the signal handler reads.
    pub fn word(&self) -> &AtomicU64 {
        &self.0
    }
}

impl StoreKey {
    /// A key no other store of this process has.
    pub fn unique() -> Self {
        static LAST: AtomicU64 = AtomicU64::new(0);
        StoreKey(LAST.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

/// Ties values' lives to stores': each is dropped as its store is, before the store's memory
/// is freed (it is the data of a host function made in the store, never called).
#[derive(Clone)]
pub struct StoreKeeper {
    /// `func()`, registered once: `Func::wrap` registers its type at each call, which cost
    /// a server some 3 µs per request.
    ty: wasmtime::FuncType,
}

impl StoreKeeper {
    /// A keeper for the stores of `engine` (and, more slowly, of any other).
    pub fn new(engine: &wasmtime::Engine) -> Self {
        StoreKeeper {
            ty: wasmtime::FuncType::new(engine, [], []),
        }
    }

    /// Ties `value`'s life to `store`'s.
    pub fn keep<T: 'static>(
        &self,
        store: impl wasmtime::AsContextMut<Data = T>,
        value: impl Send + Sync + 'static,
    ) {
        let ty = if wasmtime::Engine::same(self.ty.engine(), store.as_context().engine()) {
            self.ty.clone()
        } else {
            wasmtime::FuncType::new(store.as_context().engine(), [], [])
        };
        wasmtime::Func::new(store, ty, move |_, _, _| {
            let _ = &value;
            Ok(())
        });
    }
}

/// Where and when a sample was taken.
#[derive(Clone, Copy, Debug)]
pub struct Taken {
    /// The labels of the store whose guest ran, when the sampler could tell and it had some.
    pub labels: Option<LabelsKey>,
    pub thread: ThreadId,
    /// `CLOCK_MONOTONIC`.
    pub time_ns: u64,
}

/// Where captured samples go. The methods called on the guest thread must not wait for the
/// stages after capture.
pub trait Sink: Send + Sync {
    /// A sample of native program counters (the signal sampler's, from its drain thread).
    fn native(&self, sample: NativeSample<'_>, taken: Taken, values: SampleValues);
    /// A sample of the stack on the guest thread (the epoch sampler's).
    fn backtrace(&self, stack: GuestStack, taken: Taken, values: SampleValues);
    /// Samples that never reached the sink (a full ring).
    fn lost(&self, samples: u64);
    /// A sampled allocation of `size` bytes at `address` of `store`'s memory (`None`: a
    /// store not attached), made by the guest stack `stack` while the store had `labels`;
    /// `collected` if a garbage collector frees it. On the guest thread.
    fn allocation(
        &self,
        stack: GuestStack,
        store: Option<StoreKey>,
        labels: Option<LabelsKey>,
        address: u32,
        size: u64,
        collected: bool,
    );
    /// The sampled block at `address` of `store`'s memory was freed. On the guest thread.
    fn free(&self, store: Option<StoreKey>, address: u32);
    /// `store` was dropped with sampled blocks live: its memory, and they, are gone.
    fn store_dropped(&self, store: StoreKey);
    /// The drain thread has handed over every sample its rings held as its latest pass over
    /// them began (a pass of the signal sampler's drain thread ended).
    fn drained(&self) {}
}

/// Whether this build can sample with signals.
pub const SIGNALS_AVAILABLE: bool = cfg!(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
));

/// What a sample measured since the previous one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleValues {
    /// What the profile's clock counts ([`crate::clock::Clock`]): the guest thread's CPU
    /// nanoseconds, or the Wasm instructions it executed.
    pub measured: u64,
    pub wall_ns: u64,
}

/// Which sampler to use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SamplerKind {
    /// Signals where available, else epochs.
    #[default]
    Auto,
    /// A timer's SIGPROF interrupts the guest's thread wherever it is, and the handler walks
    /// its stack (Linux on x86-64 and aarch64 only).
    Signal,
    /// Wasmtime's epoch interruption: the store's epoch-deadline callback takes the sample at
    /// the next function entry or loop header after each tick (the engine needs epochs on).
    Epoch,
}

impl SamplerKind {
    /// The sampler this choice means on this platform: `Signal` or `Epoch`.
    pub fn resolve(self) -> SamplerKind {
        match self {
            SamplerKind::Auto if SIGNALS_AVAILABLE => SamplerKind::Signal,
            SamplerKind::Auto => SamplerKind::Epoch,
            chosen => chosen,
        }
    }
}

impl std::str::FromStr for SamplerKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(SamplerKind::Auto),
            "signal" => Ok(SamplerKind::Signal),
            "epoch" => Ok(SamplerKind::Epoch),
            _ => Err(format!("expected auto, signal or epoch, got `{s}`")),
        }
    }
}

/// A sampling strategy.
pub trait Sampler: Send {
    /// Short name recorded in the profile, e.g. `signal`.
    fn name(&self) -> &'static str;
    /// Samples the calling thread too, which will run a guest (from now on if running).
    fn bind_to_current_thread(&mut self) -> Result<()>;
    /// Stops sampling a thread that is ending (its samples so far kept).
    fn unbind_thread(&mut self, _thread: ThreadId) {}
    /// `code`: the executable text of every module the guest may run.
    fn start(&mut self, code: &[std::ops::Range<usize>]) -> Result<()>;
    /// After `stop` returns no more samples arrive.
    fn stop(&mut self);
    /// Adds the text of modules registered after `start`.
    fn add_code(&self, _code: &[std::ops::Range<usize>]) {}
    /// True when samples are taken in the store's epoch-deadline callback.
    fn samples_at_epochs(&self) -> bool {
        false
    }
    /// What takes a stack of each thread running a guest on demand, where this sampler can.
    fn dumper(&self) -> Option<std::sync::Arc<dyn Dumper>> {
        None
    }
}
