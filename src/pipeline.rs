//! Connects the stages: what [`crate::capture`] hands its [`Sink`] is resolved
//! ([`crate::resolve`]) and recorded ([`crate::record`]); profiles are built from the record,
//! symbolized by the resolver. Each stage has its own lock, always taken in that order
//! (resolver, then recorder). Nothing on the guest thread takes them: the signal handler
//! writes to its ring, which a drain thread empties into [`Sink::native`]; what the guest
//! thread hands over (epoch samples, sampled allocations and frees) goes through a bounded
//! queue that the pipeline's own thread empties, so a profile being built holds the guest up
//! only when it allocates faster than the pipeline records (allocations are never dropped).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::capture::{DumpedStack, LabelsKey, NativeSample, SampleValues, Sink, StoreKey, Taken};
use crate::clock::{monotonic_ns, Clock};
use crate::profile::{Labels, Profile, PULLEY_NEXT_LABEL, PULLEY_OP_LABEL, PULLEY_PREV_LABEL};
use crate::record::heap::Block;
use crate::record::label_registry::{LabelRegistry, LabelSet, Unheld};
use crate::record::packed_labels::PackedLabels;
use crate::record::{KindCounts, Mark, Recorder};
use crate::resolve::pulley_ops::OpcodeAt;
use crate::resolve::LeafCode;
use crate::resolve::Resolver;
use crate::shared::{GuestStack, RawFrame};
use crate::sync::{lock, BoundedQueue, Passes};

/// Events from the guest thread waiting to be resolved: at 1 kHz, 16 seconds of samples.
const QUEUE_EVENTS: usize = 16 * 1024;
/// How long the pipeline's thread waits for an event before it looks whether to stop.
const POLL: Duration = Duration::from_millis(10);
/// How long labels no store has any more are kept for their samples still on their way (in a
/// ring until the next drain, 10 ms; in the queue) where no pass of the drain thread says
/// sooner that they have all been recorded (see [`Unheld`]).
const RETIRED_LABELS: Duration = Duration::from_secs(2);

/// What the guest thread handed over.
enum Event {
    Sample {
        stack: GuestStack,
        taken: Taken,
        values: SampleValues,
    },
    Allocation {
        stack: GuestStack,
        store: Option<StoreKey>,
        labels: Option<LabelsKey>,
        address: u32,
        size: u64,
        collected: bool,
    },
    Free {
        store: Option<StoreKey>,
        address: u32,
    },
    StoreDropped {
        store: StoreKey,
    },
}

pub struct Pipeline {
    resolver: Mutex<Resolver>,
    recorder: Mutex<Recorder>,
    /// The frames of the sample being resolved, kept for the next one.
    frames: Mutex<Vec<RawFrame>>,
    events: BoundedQueue<Event>,
    /// Events the full queue turned away.
    dropped: AtomicU64,
    /// The registered sets of labels, forgotten once no store has them and their last
    /// samples must have been recorded: after a pass of the signal sampler's drain thread
    /// (which records the samples of its rings) and a drain of the queue (the other samplers'
    /// samples, the allocations) have each begun and ended since the pipeline's thread found a
    /// set let go (it looks every 10 ms). A server's sets, two a request, go some 30 ms after
    /// their request; kept for [`RETIRED_LABELS`], 2 s, they were 28,000 at 7,000 requests a
    /// second, freed long out of the cache. Without the signal sampler, no pass: the sets are
    /// kept for [`RETIRED_LABELS`].
    labels: LabelRegistry,
    /// The signal sampler's drain passes ([`Sink::drained`]).
    drain_passes: Passes,
    thread: Mutex<Option<(mpsc::Sender<()>, JoinHandle<()>)>>,
}

impl Pipeline {
    pub fn new(resolver: Resolver, recorder: Recorder) -> Self {
        Pipeline {
            resolver: Mutex::new(resolver),
            recorder: Mutex::new(recorder),
            frames: Mutex::new(Vec::new()),
            events: BoundedQueue::new(QUEUE_EVENTS),
            dropped: AtomicU64::new(0),
            labels: LabelRegistry::default(),
            drain_passes: Passes::default(),
            thread: Mutex::new(None),
        }
    }

    /// The resolver, every component registered read (see [`Resolver::read_pending`]).
    pub fn resolver(&self) -> MutexGuard<'_, Resolver> {
        let mut resolver = lock(&self.resolver);
        resolver.read_pending();
        resolver
    }

    /// The resolver as it is, components registered and not read yet left so: for what
    /// registering code and starting the samplers ask of it, so that the pipeline's thread
    /// reads them (see [`Self::start`]) while the guest runs.
    pub fn registry(&self) -> MutexGuard<'_, Resolver> {
        lock(&self.resolver)
    }

    /// The recorder, with every event queued so far recorded.
    pub fn recorder(&self) -> MutexGuard<'_, Recorder> {
        self.flush();
        lock(&self.recorder)
    }

    /// Registers `labels` for the samples that carry the returned set's key, while it is held
    /// (and until its last samples are recorded); `None` for no labels.
    pub fn register_labels(&self, labels: &[(&str, &str)]) -> Option<Arc<LabelSet>> {
        if labels.is_empty() {
            return None;
        }
        // Interned by the recorder when a sample comes: a store is labeled without waiting
        // for a profile being built.
        Some(self.labels.register(
            LabelsKey::unique(),
            PackedLabels::new(labels),
            monotonic_ns(),
        ))
    }

    /// Forgets the sets of labels whose samples must all have been recorded (see
    /// [`Pipeline::labels`]).
    fn forget_retired(&self) {
        let now = Unheld {
            at_ns: monotonic_ns(),
            passes: self.drain_passes.count(),
            drains: self.events.drains().count(),
        };
        self.labels.forget(now, |set| {
            now.at_ns.saturating_sub(set.at_ns) >= RETIRED_LABELS.as_nanos() as u64
                || (Passes::covered(set.passes, now.passes)
                    && Passes::covered(set.drains, now.drains))
        });
    }

    fn labels_of(&self, key: Option<LabelsKey>) -> Option<Labels> {
        self.labels_since(key).map(|(labels, _)| labels)
    }

    /// A registered set of labels, with when it was registered (`CLOCK_MONOTONIC`): when a
    /// server began the request it names.
    pub fn labels_since(&self, key: Option<LabelsKey>) -> Option<(Labels, u64)> {
        self.labels.get(key?)
    }

    /// A profile of `stacks` (a stack dump's), a sample each, named and symbolized as the
    /// profile's own samples are; the profile being recorded is left as it is.
    pub fn dumped_profile(&self, stacks: &[DumpedStack]) -> Profile {
        let mut resolver = self.resolver();
        let mut recorder = Recorder::new(1, Clock::Wall, "dump");
        let mut frames = Vec::new();
        for stack in stacks {
            resolver.native_frames(stack.native(), &mut frames);
            let labels = self.labels_of(stack.taken.labels);
            recorder.add_sample(
                &resolver,
                &frames,
                labels.as_ref(),
                &stack.taken,
                None,
                SampleValues::default(),
            );
        }
        recorder.profile(&mut resolver)
    }

    /// Starts the thread that empties the queue.
    pub fn start(self: &Arc<Self>) -> Result<()> {
        let mut thread = lock(&self.thread);
        if thread.is_some() {
            return Ok(());
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let pipeline = Arc::downgrade(self);
        let handle = std::thread::Builder::new()
            .name("wasmspy-pipeline".into())
            .spawn(move || {
                // The components registered and not read yet, first.
                if let Some(pipeline) = pipeline.upgrade() {
                    drop(pipeline.resolver());
                }
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(POLL) {
                    match pipeline.upgrade() {
                        Some(pipeline) => pipeline.flush(),
                        None => break,
                    }
                }
            })
            .context("cannot start the pipeline's thread")?;
        *thread = Some((stop, handle));
        Ok(())
    }

    /// Stops the pipeline's thread; what it left in the queue is recorded at the next read.
    pub fn stop(&self) {
        if let Some((stop, handle)) = lock(&self.thread).take() {
            drop(stop);
            let _ = handle.join();
        }
    }

    /// Resolves and records every event queued so far.
    fn flush(&self) {
        let dropped = self.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            lock(&self.recorder).add_lost(dropped);
        }
        self.events.drain(|event| self.record(event));
        // After: the queued samples of labels dropped long ago keep them.
        self.forget_retired();
    }

    fn record(&self, event: Event) {
        let mut resolver = self.resolver();
        let mut recorder = lock(&self.recorder);
        match event {
            Event::Sample {
                stack,
                taken,
                values,
            } => {
                let frames = resolver.stack_frames(&stack);
                let labels = self.labels_of(taken.labels);
                recorder.add_sample(&resolver, &frames, labels.as_ref(), &taken, None, values);
            }
            Event::Allocation {
                stack,
                store,
                labels,
                address,
                size,
                collected,
            } => {
                let frames = resolver.stack_frames(&stack);
                let labels = self.labels_of(labels);
                let block = Block { store, address };
                recorder.heap_allocated(
                    &resolver,
                    &frames,
                    labels.as_ref(),
                    block,
                    size,
                    collected,
                );
            }
            Event::Free { store, address } => recorder.heap_freed(Block { store, address }),
            Event::StoreDropped { store } => recorder.heap_store_dropped(store),
        }
    }

    /// A sample the full queue turns away is counted as lost.
    fn enqueue(&self, event: Event) {
        if self.events.try_push(event).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An allocation or a free is never lost (a lost free would show its block as leaked):
    /// when the guest allocates faster than the pipeline's thread records, the thread that
    /// finds the queue full records the backlog and its event itself.
    fn enqueue_kept(&self, event: Event) {
        if let Err(event) = self.events.try_push(event) {
            self.flush();
            self.record(event);
        }
    }

    /// The CPU profile so far.
    pub fn profile(&self) -> Profile {
        self.flush();
        let mut resolver = self.resolver();
        lock(&self.recorder).profile(&mut resolver)
    }

    /// The CPU profile of what came after `mark`.
    pub fn profile_since(&self, mark: &Mark) -> Profile {
        self.flush();
        let mut resolver = self.resolver();
        lock(&self.recorder).profile_since(&mut resolver, mark)
    }

    /// The heap profile so far, when memory is profiled.
    pub fn heap_profile(&self) -> Option<Profile> {
        self.flush();
        let mut resolver = self.resolver();
        lock(&self.recorder).heap_profile(&mut resolver)
    }

    pub fn counts(&self) -> KindCounts {
        self.recorder().counts()
    }
}

/// `labels` and those of a sample of Pulley's `opcode`.
fn with_opcode(labels: Option<Labels>, opcode: OpcodeAt) -> Labels {
    let mut all: Vec<(String, String)> = labels.as_deref().unwrap_or_default().to_vec();
    all.push((PULLEY_OP_LABEL.to_string(), opcode.op.to_string()));
    for (key, op) in [
        (PULLEY_PREV_LABEL, opcode.prev),
        (PULLEY_NEXT_LABEL, opcode.next),
    ] {
        if let Some(op) = op {
            all.push((key.to_string(), op.to_string()));
        }
    }
    all.into()
}

impl Sink for Pipeline {
    fn native(&self, sample: NativeSample<'_>, taken: Taken, values: SampleValues) {
        let mut resolver = self.resolver();
        let mut frames = lock(&self.frames);
        let code = resolver.native_frames(sample, &mut frames);
        let mut recorder = lock(&self.recorder);
        let mut labels = self.labels_of(taken.labels);
        let offset = match code {
            Some(LeafCode::Pulley(opcode)) => {
                labels = Some(with_opcode(labels, opcode));
                None
            }
            Some(LeafCode::Machine(offset)) => Some(offset),
            None => None,
        };
        recorder.add_sample(&resolver, &frames, labels.as_ref(), &taken, offset, values);
    }

    fn backtrace(&self, stack: GuestStack, taken: Taken, values: SampleValues) {
        self.enqueue(Event::Sample {
            stack,
            taken,
            values,
        });
    }

    fn lost(&self, samples: u64) {
        lock(&self.recorder).add_lost(samples);
    }

    fn allocation(
        &self,
        stack: GuestStack,
        store: Option<StoreKey>,
        labels: Option<LabelsKey>,
        address: u32,
        size: u64,
        collected: bool,
    ) {
        self.enqueue_kept(Event::Allocation {
            stack,
            store,
            labels,
            address,
            size,
            collected,
        });
    }

    fn free(&self, store: Option<StoreKey>, address: u32) {
        self.enqueue_kept(Event::Free { store, address });
    }

    fn store_dropped(&self, store: StoreKey) {
        self.enqueue_kept(Event::StoreDropped { store });
    }

    fn drained(&self) {
        self.drain_passes.ended();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    #[test]
    fn dropped_labels_outlive_their_last_samples_then_go() {
        let pipeline = Arc::new(Pipeline::new(
            Resolver::new(false, false),
            Recorder::new(1000, Clock::Cpu, "signal"),
        ));
        let labels: Labels = [("request".to_string(), "1".to_string())].into();
        let registered = pipeline.register_labels(&[("request", "1")]).unwrap();
        let key = Some(registered.key());
        assert_eq!(pipeline.labels_of(key), Some(labels.clone()));
        assert!(pipeline.register_labels(&[]).is_none());
        drop(registered);
        pipeline.flush();
        assert_eq!(
            pipeline.labels_of(key),
            Some(labels),
            "samples still on their way"
        );
        std::thread::sleep(RETIRED_LABELS + Duration::from_millis(50));
        pipeline.flush();
        assert_eq!(pipeline.labels_of(key), None);
    }

    #[test]
    fn dropped_labels_go_once_a_ring_pass_and_a_queue_drain_began_after_the_drop_was_seen() {
        let pipeline = Arc::new(Pipeline::new(
            Resolver::new(false, false),
            Recorder::new(1000, Clock::Cpu, "signal"),
        ));
        // A set registered and dropped at once, the drop seen by the next flush: its key.
        let dropped = |value: &str| {
            let registered = pipeline.register_labels(&[("request", value)]).unwrap();
            let key = Some(registered.key());
            drop(registered);
            pipeline.flush();
            key
        };

        // The rings' passes alone: other samplers' samples may still be queued (a drain of
        // the queue under way at the drop ends with the flush below).
        let key = dropped("1");
        for _ in 0..3 {
            pipeline.drained();
        }
        pipeline.flush();
        let kept = pipeline.labels_of(key).is_some();
        assert!(kept, "before the queue's next drain");
        pipeline.flush();
        let gone = pipeline.labels_of(key).is_none();
        assert!(gone, "long before {RETIRED_LABELS:?}");

        // The queue's drains alone: a sample may still be in a ring.
        let key = dropped("2");
        for _ in 0..3 {
            pipeline.flush();
        }
        pipeline.drained();
        pipeline.flush();
        assert!(
            pipeline.labels_of(key).is_some(),
            "before the rings' next pass"
        );
        pipeline.drained();
        pipeline.flush();
        assert_eq!(pipeline.labels_of(key), None);
    }
}
