//! Connects the stages: what [`crate::capture`] hands its [`Sink`] is resolved
//! ([`crate::resolve`]) and recorded ([`crate::record`]); profiles are built from the record,
//! symbolized by the resolver. Each stage has its own lock, always taken in that order
//! (resolver, then recorder); the signal handler takes none.

use std::sync::{Mutex, MutexGuard};

use wasmtime::WasmBacktrace;

use crate::capture::{NativeSample, SampleValues, Sink};
use crate::profile::Profile;
use crate::record::{KindCounts, Mark, Recorder};
use crate::resolve::{Landed, RawFrame, Resolver};

pub struct Pipeline {
    resolver: Mutex<Resolver>,
    recorder: Mutex<Recorder>,
    /// The frames of the sample being resolved, kept for the next one.
    frames: Mutex<Vec<RawFrame>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pipeline {
    pub fn new(resolver: Resolver, recorder: Recorder) -> Self {
        Pipeline {
            resolver: Mutex::new(resolver),
            recorder: Mutex::new(recorder),
            frames: Mutex::new(Vec::new()),
        }
    }

    pub fn resolver(&self) -> MutexGuard<'_, Resolver> {
        lock(&self.resolver)
    }

    pub fn recorder(&self) -> MutexGuard<'_, Recorder> {
        lock(&self.recorder)
    }

    /// The CPU profile so far.
    pub fn profile(&self) -> Profile {
        let mut resolver = self.resolver();
        self.recorder().profile(&mut resolver)
    }

    /// The CPU profile of what came after `mark`.
    pub fn profile_since(&self, mark: &Mark) -> Profile {
        let mut resolver = self.resolver();
        self.recorder().profile_since(&mut resolver, mark)
    }

    /// The heap profile so far, when memory is profiled.
    pub fn heap_profile(&self) -> Option<Profile> {
        let mut resolver = self.resolver();
        self.recorder().heap_profile(&mut resolver)
    }

    pub fn counts(&self) -> KindCounts {
        self.recorder().counts()
    }

    /// A sampled allocation of `size` bytes at `address`, made by the guest stack `backtrace`
    /// captured; `collected` if a garbage collector frees it.
    pub fn heap_allocated(
        &self,
        backtrace: &WasmBacktrace,
        address: u32,
        size: u64,
        collected: bool,
    ) {
        let mut resolver = self.resolver();
        let frames = resolver.backtrace_frames(backtrace);
        self.recorder()
            .heap_allocated(&resolver, &frames, address, size, collected);
    }
}

impl Sink for Pipeline {
    fn native(&self, sample: NativeSample<'_>, values: SampleValues, time_ns: u64) {
        let mut resolver = self.resolver();
        let mut frames = lock(&self.frames);
        let landed = resolver.native_frames(sample, &mut frames);
        self.recorder()
            .add_sample(&resolver, &frames, landed, values, time_ns);
    }

    fn backtrace(&self, backtrace: &WasmBacktrace, values: SampleValues, time_ns: u64) {
        let mut resolver = self.resolver();
        let frames = resolver.backtrace_frames(backtrace);
        self.recorder()
            .add_sample(&resolver, &frames, Landed::Guest, values, time_ns);
    }

    fn lost(&self, samples: u64) {
        self.recorder().add_lost(samples);
    }
}
