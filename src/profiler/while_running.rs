//! What a handle does while the guest runs: reads the code listing, the profile so far (or
//! since a mark), the running guests' stacks, the heap profile, the warnings and the counts;
//! has the guests yield to their executor, or stops them.

use std::sync::atomic::Ordering;

use rustc_hash::FxHashMap;

use super::{ProfilerHandle, Result};
use crate::capture::{NativeKind, StoreKey};
use crate::dump::{GuestState, RunningGuest, StackDump};
use crate::error::Error;
use crate::profile::Profile;
use crate::record::{KindCounts, Mark};
use crate::resolve::ListedFunction;
use crate::sync::lock;
use crate::warning::Warning;

#[cfg(doc)]
use super::{Interrupted, Profiler, ProfilerOptions};

impl ProfilerHandle {
    /// The registered modules' compiled functions, named, with their source lines: what Linux
    /// perf is told of JIT code (`record --perfmap`, `--jitdump`).
    pub fn code_listing(&self) -> Vec<ListedFunction> {
        self.resolver().code_listing()
    }

    /// From now on, at each epoch check, the guests of the attached stores yield to their
    /// executor, as Wasmtime's `epoch_deadline_async_yield_and_update` has them (the profiler
    /// owns a store's epoch callback): a server's timers then run while a guest computes, so
    /// that it can time a request out. For asynchronous calls only (`call_async`): a
    /// synchronous call fails at its next epoch check.
    pub fn yield_at_epochs(&self) {
        self.yields.store(true, Ordering::Relaxed);
    }

    /// Makes the guest's current call return [`Interrupted`] at its next epoch check, on an
    /// engine with epoch interruption (the epoch sampler's). False where the engine has none:
    /// then nothing stops the guest's code (the signal sampler does without epochs, so that the
    /// guest runs at full speed), and the caller must end the run another way, e.g. by writing
    /// the [`snapshot`](Self::snapshot) and exiting, as `wasmspy record` does on Ctrl-C.
    pub fn interrupt(&self) -> bool {
        if !self.engine.get_epoch_interruption() {
            return false;
        }
        self.interrupt.store(true, Ordering::Relaxed);
        self.engine.increment_epoch();
        true
    }

    /// The profile recorded so far.
    pub fn snapshot(&self) -> Profile {
        self.pipeline.profile()
    }

    /// Where the recording stands now: [`profile_since`](Self::profile_since) is the profile
    /// of what comes after (e.g. the next 30 seconds, as `/debug/pprof/profile` serves).
    pub fn mark(&self) -> Mark {
        self.pipeline.recorder().mark()
    }

    /// The profile of the samples taken since `mark`, one per stack.
    pub fn profile_since(&self, mark: &Mark) -> Profile {
        self.pipeline.profile_since(mark)
    }

    /// The stack of every guest running now, in its code or in a host call it made: one
    /// taken of each sampled thread on demand, waiting up to `wait` for them (a thread
    /// answers when it next runs); none before [`start`](Profiler::start) or after the
    /// profile is stopped. Only with the signal sampler: an epoch or the instructions clock
    /// stops a guest only where its code checks for them.
    pub fn dump_stacks(&self, wait: std::time::Duration) -> Result<StackDump> {
        let Some(dumper) = lock(&self.sampler).dumper() else {
            return Err(Error::Unavailable("stacks are dumped by the signal sampler (the default on Linux x86_64 and aarch64; not with --sampler epoch or --clock instructions)".into()));
        };
        let dumps = dumper.dump(wait);
        let profile = self.pipeline.dumped_profile(&dumps.stacks);
        let mut attached: FxHashMap<StoreKey, u64> = FxHashMap::default();
        self.stores.for_each(|s| {
            attached.insert(s.key, s.attached_ns);
        });
        let mut guests: Vec<RunningGuest> = dumps
            .stacks
            .iter()
            .filter_map(|stack| {
                let taken = stack.taken;
                let sample = profile
                    .samples
                    .iter()
                    .find(|s| s.thread == Some(taken.thread))?;
                let labeled = self.pipeline.labels_since(taken.labels);
                let since = match &labeled {
                    Some((_, registered)) => Some(*registered),
                    None => stack.store.and_then(|s| attached.get(&s).copied()),
                };
                Some(RunningGuest {
                    store: stack.store.map(|s| s.0),
                    thread: taken.thread,
                    state: match stack.kind {
                        NativeKind::Host => GuestState::HostCall,
                        _ => GuestState::Running,
                    },
                    running_ns: since.map(|t| taken.time_ns.saturating_sub(t)),
                    labels: labeled.map(|(l, _)| l).unwrap_or_default(),
                    stack: sample.stack,
                })
            })
            .collect();
        guests.sort_by_key(|g| std::cmp::Reverse(g.running_ns));
        Ok(StackDump {
            profile,
            guests,
            idle: dumps.idle,
            unanswered: dumps.unanswered,
        })
    }

    /// Whether memory is profiled ([`ProfilerOptions::mem_rate`]).
    pub fn profiles_memory(&self) -> bool {
        self.pipeline.recorder().profiles_memory()
    }

    /// The heap profile so far, when memory is profiled ([`ProfilerOptions::mem_rate`]).
    pub fn heap_profile(&self) -> Option<Profile> {
        self.pipeline.heap_profile()
    }

    /// Says `warning` once, with the warnings [`take_warnings`](Self::take_warnings) gives.
    pub(super) fn warn_once(&self, warning: Warning) {
        let mut warnings = lock(&self.warnings);
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }

    /// Warnings not taken yet: a module without debug info or with damaged names or DWARF, a
    /// language runtime whose frames cannot be shown (the profile then shows less of them, but
    /// the run goes on). Building a profile can add some, and so can reading the modules of a
    /// component registered by `wasmspy record`, which it leaves to the profiler's thread.
    pub fn take_warnings(&self) -> Vec<Warning> {
        let mut warnings = std::mem::take(&mut *lock(&self.warnings));
        // Components not read yet are left so: `record` asks before its guest runs.
        warnings.extend(self.registry().take_warnings());
        warnings
    }

    /// Samples by where they landed, and how many were lost (a full buffer).
    pub fn counts(&self) -> KindCounts {
        self.pipeline.counts()
    }
}
