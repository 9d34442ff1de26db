//! Signal-driven sampling: the kernel sends SIGPROF to each guest thread (every thread that
//! attached a store) at the sampling rate of its CPU time or of wall time ([`timer`], one per
//! thread). The handler ([`handler`]) records raw PCs into that thread's ring; a drain thread
//! hands them to the sink. Guests called with `call_async` run on fiber stacks that
//! [`fiber_stacks`] allocates, so the handler can walk them too. Unlike epoch sampling, a
//! sample lands wherever the guest is: in loop-free code, in a host call, in Wasmtime itself.

pub mod fiber_stacks;
pub mod handler;
mod pulley_layout;
mod pulley_stack;
#[cfg(feature = "cli")]
pub use pulley_stack::interpreter as pulley_interpreter;
mod ring;
pub mod runtime_instances;
mod slot_table;
pub mod store_contexts;
mod timer;

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::{
    DumpedStack, Dumper, LabelsKey, NativeKind, NativeSample, SampleValues, Sampler, Sink,
    StoreKey, Taken, ThreadDumps,
};
use crate::clock::{clock_ns, current_thread_cpu_clock, sampling_period};
use crate::profile::ThreadId;
use crate::sync::lock;
use handler::{Kind, RawSample, ThreadState};
use ring::Ring;
use timer::SignalTimer;

/// How often the drain thread empties the rings.
const DRAIN_PERIOD: Duration = Duration::from_millis(10);
/// The shortest period of CPU time sampled on the thread's CPU clock alone (see [`timer`]):
/// every kernel's scheduler ticks at 100 Hz at least (`CONFIG_HZ`).
const CPU_TICKS_FROM: Duration = Duration::from_millis(10);
/// Ring slots per thread: at 100 kHz, ten drain periods' worth.
const RING_SLOTS: usize = 1024;

/// Whether a signal sampler is running in this process: one at a time.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// A thread that attached a store.
struct GuestThread {
    tid: libc::pid_t,
    cpu_clock: libc::clockid_t,
    stack: Range<usize>,
}

struct Running {
    /// Every sampled thread's state, which the drain thread empties.
    states: Arc<Mutex<Vec<Arc<ThreadState>>>>,
    stop_drain: Sender<()>,
    drain: JoinHandle<()>,
}

pub struct SignalSampler {
    period: Duration,
    /// Sampling by wall time, not the guest thread's CPU time.
    wall: bool,
    /// Whether samples outside Wasm code take the host's frames.
    host_frames: bool,
    sink: Arc<dyn Sink>,
    guests: Vec<GuestThread>,
    running: Option<Running>,
}

impl SignalSampler {
    /// At `rate_hz` of the guest thread's CPU time, or of wall time if `wall`; samples outside
    /// Wasm code with the host's frames if `host_frames`.
    pub fn new(rate_hz: u32, wall: bool, host_frames: bool, sink: Arc<dyn Sink>) -> Self {
        if host_frames {
            handler::prepare_host_frames();
        }
        SignalSampler {
            period: sampling_period(rate_hz),
            wall,
            host_frames,
            sink,
            guests: Vec::new(),
            running: None,
        }
    }

    /// Starts sampling `guest`'s thread.
    fn sample(&self, running: &mut Running, guest: &GuestThread) -> Result<()> {
        let cpu_period_ns = match self.wall {
            false => self.period.as_nanos() as u64,
            true => 0,
        };
        let timer = |clock| {
            SignalTimer::create(clock, guest.tid).context("cannot create the sampling timer")
        };
        let timers = (
            timer(libc::CLOCK_MONOTONIC)?,
            match self.wall {
                false => Some(timer(guest.cpu_clock)?),
                true => None,
            },
        );
        let state = Arc::new(ThreadState::new(
            Ring::zeroed(RING_SLOTS),
            guest.stack.clone(),
            cpu_period_ns,
            timers,
            (self.period, !self.wall && self.period >= CPU_TICKS_FROM),
            self.host_frames,
        ));
        state.reset_clocks(guest.cpu_clock);
        if !handler::attach(&state) {
            return Err(crate::Error::Unavailable(format!(
                "more than {} threads are sampled at once",
                handler::MAX_THREADS
            ))
            .into());
        }
        // The sampled thread's CPU clock: this may run on another thread.
        if let Err(e) = state.arm_tick(crate::clock::monotonic_ns(), clock_ns(guest.cpu_clock)) {
            handler::detach(&state);
            return Err(e).context("cannot arm the sampling timer");
        }
        lock(&running.states).push(state);
        Ok(())
    }
}

impl Sampler for SignalSampler {
    fn name(&self) -> &'static str {
        "signal"
    }

    fn bind_to_current_thread(&mut self) -> Result<()> {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        if self.guests.iter().any(|g| g.tid == tid) {
            return Ok(());
        }
        let guest = GuestThread {
            tid,
            cpu_clock: current_thread_cpu_clock()?,
            stack: current_thread_stack()?,
        };
        if let Some(mut running) = self.running.take() {
            let sampled = self.sample(&mut running, &guest);
            self.running = Some(running);
            sampled?;
        }
        self.guests.push(guest);
        Ok(())
    }

    fn start(&mut self, code: &[Range<usize>]) -> Result<()> {
        if self.running.is_some() {
            return Ok(());
        }
        handler::install().context("cannot install the SIGPROF handler")?;
        if ACTIVE
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err(crate::Error::Unavailable(
                "another signal sampler is running in this process; use the epoch sampler".into(),
            )
            .into());
        }
        handler::clear_code();
        add_code(code);
        let states = Arc::new(Mutex::new(Vec::new()));
        let (stop_drain, stopped) = mpsc::channel::<()>();
        let drain = {
            let states = states.clone();
            let sink = self.sink.clone();
            std::thread::Builder::new()
                .name("wasmspy-drain".into())
                .spawn(move || loop {
                    let stopping = !matches!(
                        stopped.recv_timeout(DRAIN_PERIOD),
                        Err(RecvTimeoutError::Timeout)
                    );
                    drain(&states, sink.as_ref());
                    if stopping {
                        break;
                    }
                })
        };
        let drain = match drain {
            Ok(drain) => drain,
            Err(e) => {
                ACTIVE.store(false, Ordering::SeqCst);
                return Err(e).context("cannot start the drain thread");
            }
        };
        let mut running = Running {
            states,
            stop_drain,
            drain,
        };
        let started = self
            .guests
            .iter()
            .try_for_each(|guest| self.sample(&mut running, guest));
        self.running = Some(running);
        if started.is_err() {
            self.stop();
        }
        started
    }

    fn stop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        // Detached: the handler arms no more timers; they are deleted with the states.
        for state in lock(&running.states).iter() {
            handler::detach(state);
        }
        drop(running.stop_drain);
        let _ = running.drain.join();
        let lost = lock(&running.states)
            .iter()
            .map(|state| state.lost.load(Ordering::Relaxed))
            .sum();
        self.sink.lost(lost);
        handler::clear_code();
        ACTIVE.store(false, Ordering::SeqCst);
    }

    fn unbind_thread(&mut self, thread: ThreadId) {
        let tid = thread.0 as libc::pid_t;
        self.guests.retain(|g| g.tid != tid);
        let Some(running) = &mut self.running else {
            return;
        };
        let Some(state) = lock(&running.states).iter().find(|s| s.tid == tid).cloned() else {
            return;
        };
        // No handler uses the state after this; the drain thread, its ring's one reader,
        // takes its last samples and then lets it go, its timers with it.
        handler::detach(&state);
        state.ended.store(true, Ordering::SeqCst);
    }

    /// Only while running: `start` adds all the code registered before.
    fn add_code(&self, code: &[Range<usize>]) {
        if self.running.is_some() {
            add_code(code);
        }
    }

    /// Before the sampler starts and after it stops, it samples no thread: its dumps are
    /// empty.
    fn dumper(&self) -> Option<Arc<dyn Dumper>> {
        let states = match &self.running {
            Some(running) => running.states.clone(),
            None => Arc::default(),
        };
        Some(Arc::new(SignalDumper { states }))
    }
}

impl Drop for SignalSampler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Shows the handler `code`, as much of it as its table holds.
fn add_code(code: &[Range<usize>]) {
    for range in code {
        if !handler::add_code(range.clone()) {
            break;
        }
    }
}

fn drain(states: &Mutex<Vec<Arc<ThreadState>>>, sink: &dyn Sink) {
    // Cloned so that attaching a thread never waits for the sink.
    let sampled = lock(states).clone();
    for state in &sampled {
        // Read before draining: a thread that ended before has nothing left after.
        let ended = state.ended.load(Ordering::SeqCst);
        drain_state(state, sink);
        if ended {
            lock(states).retain(|s| !Arc::ptr_eq(s, state));
            sink.lost(state.lost.load(Ordering::Relaxed));
        }
    }
    sink.drained();
}

fn drain_state(state: &ThreadState, sink: &dyn Sink) {
    while state.ring.pop_with(|s| {
        let values = SampleValues {
            measured: s.cpu_delta_ns,
            wall_ns: s.wall_delta_ns,
        };
        let sample = NativeSample::of(kind(s.kind), s.pcs(), s.host_depth, s.splice());
        sink.native(sample, taken(state, s), values);
    }) {}
}

fn kind(kind: Kind) -> NativeKind {
    match kind {
        Kind::Guest => NativeKind::Guest,
        Kind::Host => NativeKind::Host,
        Kind::Pulley => NativeKind::Pulley,
    }
}

/// Where and when `state`'s thread took `s`.
fn taken(state: &ThreadState, s: &RawSample) -> Taken {
    Taken {
        labels: (s.labels != 0).then_some(LabelsKey(s.labels)),
        thread: ThreadId(state.tid as u32),
        time_ns: s.time_ns,
    }
}

/// The dumps asked so far: one dumper at a time asks and reads (see [`ThreadState::dumped`]).
static DUMPS: Mutex<u64> = Mutex::new(0);

/// Takes stack dumps of the sampled threads: each asked, sent a dump's signal, and its
/// handler's answer read.
struct SignalDumper {
    states: Arc<Mutex<Vec<Arc<ThreadState>>>>,
}

impl Dumper for SignalDumper {
    fn dump(&self, wait: Duration) -> ThreadDumps {
        let mut generation = lock(&DUMPS);
        *generation += 1;
        let states: Vec<Arc<ThreadState>> = lock(&self.states)
            .iter()
            .filter(|s| !s.ended.load(Ordering::SeqCst))
            .cloned()
            .collect();
        let mut asked = Vec::new();
        for state in states {
            state.ask_dump(*generation);
            // A thread gone meanwhile (ESRCH) has nothing to dump.
            if timer::send_dump_signal(state.tid).is_ok() {
                asked.push((state, None));
            }
        }
        // A running thread answers when next scheduled, a waiting one at once.
        let until = std::time::Instant::now() + wait;
        loop {
            for (state, answer) in &mut asked {
                if answer.is_none() {
                    *answer = state.dumped(*generation);
                }
            }
            if asked.iter().all(|(_, a)| a.is_some()) || std::time::Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut dumps = ThreadDumps {
            stacks: Vec::new(),
            idle: 0,
            unanswered: 0,
        };
        for (state, answer) in asked {
            let Some(s) = answer else {
                dumps.unanswered += 1;
                continue;
            };
            let stack = DumpedStack {
                kind: kind(s.kind),
                pcs: s.pcs().to_vec(),
                host_depth: s.host_depth,
                splice: s.splice(),
                store: (s.store != 0).then_some(StoreKey(s.store)),
                taken: taken(&state, &s),
            };
            match stack.runs_guest() {
                true => dumps.stacks.push(stack),
                false => dumps.idle += 1,
            }
        }
        dumps
    }
}

/// The calling thread's stack, as [lowest address, top).
fn current_thread_stack() -> Result<Range<usize>> {
    // SAFETY: pthread_getattr_np fills the zeroed attr, which is destroyed after use; the out
    // pointers are valid.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            bail!("cannot find the thread's stack");
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let rc = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        if rc != 0 {
            bail!("cannot find the thread's stack");
        }
        Ok(addr as usize..addr as usize + size)
    }
}
