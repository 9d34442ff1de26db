//! A sampled thread's state ([`ThreadState`]): built off the signal path, then published in
//! [`super::THREADS`]; its ring, its stack's bounds, its clocks and timers, its dump slot. At
//! each signal of its own ([`ThreadState::tick_of`]) the handler answers a stack dump asked of
//! it, and on a tick takes a sample where the clocks call for one and arms the next tick.
//!
//! Invariants kept here (see [`super`]): **one producer per ring**, only a signal of one of
//! the thread's own timers, on that thread, reaches [`ThreadState::on_tick`] and pushes into
//! its ring, and only that thread's handler writes its dump slot, published to the one
//! dumper with release and acquire; **async-signal-safe**, once published the state changes
//! only through its atomics, and the handler's path makes only the system calls the
//! invariants list (`clock_gettime`, `gettid`, `getpid`, `getrusage`, and `timer_settime`
//! and `timer_gettime` through [`super::timer`]).

use std::sync::atomic::{AtomicU64, Ordering};

use super::host_frames::HostCache;
use super::registers::Registers;
use super::ring::Ring;
use super::store_contexts::Offsets;
use super::timer::SignalTimer;
use super::{RawSample, SigInfo};
use crate::clock::clock_ns;

// Named in the documentation only.
#[cfg(doc)]
use super::THREADS;

/// Which of a thread's timers sent a signal.
#[derive(Clone, Copy)]
pub(super) enum Tick {
    Wall,
    Cpu,
    /// A stack dump asked for ([`super::timer::send_dump_signal`]).
    Dump,
}

/// Everything the handler reads or writes for one sampled thread. Built, and never changed
/// afterwards except through its atomics, before it is published in [`THREADS`].
pub struct ThreadState {
    pub ring: Ring<RawSample>,
    pub(super) exit_record: Offsets,
    pub(super) stack_low: usize,
    pub(super) stack_top: usize,
    last_cpu_ns: AtomicU64,
    last_wall_ns: AtomicU64,
    /// On the CPU clock, the sampling period of CPU time (0 on the wall clock), and the thread
    /// CPU time at which the next tick is recorded.
    cpu_period_ns: u64,
    next_cpu_ns: AtomicU64,
    /// The timers that send the signals (see [`super::timer`]): on wall time, of period
    /// `tick_ns`, its last tick at `last_tick_ns`; on the CPU clock (with CPU-clock sampling),
    /// for a thread that mostly waits. The handler arms one of them at each signal.
    wall_timer: SignalTimer,
    cpu_timer: Option<SignalTimer>,
    /// Ticks on the CPU timer alone, the wall timer never armed (see [`super::timer`]): at
    /// rates a scheduler tick keeps up with.
    cpu_ticks: bool,
    pub tid: libc::pid_t,
    tick_ns: u64,
    last_tick_ns: AtomicU64,
    /// The thread's CPU time, the wall time and (on the CPU clock) its waits so far at the
    /// last signal.
    signal_cpu_ns: AtomicU64,
    signal_wall_ns: AtomicU64,
    signal_waits: AtomicU64,
    pub lost: AtomicU64,
    /// Set once the thread ended and the state is detached: the drain thread empties its ring
    /// one last time and drops it. Not read by the handler.
    pub ended: std::sync::atomic::AtomicBool,
    /// Stack dumps asked of the thread (their generation) and the last one answered; the
    /// answer in `dump`, written by the thread's handler alone while `dump_done` is behind
    /// `dump_wanted`, read by the one dumper once they are equal (see [`Self::dumped`]).
    dump_wanted: AtomicU64,
    dump_done: AtomicU64,
    dump: std::cell::UnsafeCell<RawSample>,
    /// Where the thread's host frames are taken (see [`super::host_frames`]): its unwind cache.
    pub(super) host_cache: Option<HostCache>,
}

// SAFETY: the timers are kernel handles, usable from any thread; everything else is Sync.
unsafe impl Sync for ThreadState {}
// SAFETY: as for Sync: kernel handles and atomics, owned by no thread.
unsafe impl Send for ThreadState {}

impl ThreadState {
    /// `stack` is the sampled thread's stack; `wall_timer` and `cpu_timer` send it its
    /// signals, every `tick` while it runs (the CPU timer alone if `cpu_ticks`);
    /// `host_frames`: whether its samples outside Wasm code take the host's frames.
    pub fn new(
        ring: Ring<RawSample>,
        stack: std::ops::Range<usize>,
        cpu_period_ns: u64,
        (wall_timer, cpu_timer): (SignalTimer, Option<SignalTimer>),
        (tick, cpu_ticks): (std::time::Duration, bool),
        host_frames: bool,
    ) -> Self {
        let now = clock_ns(libc::CLOCK_MONOTONIC);
        ThreadState {
            ring,
            exit_record: Offsets::of_this_build(),
            stack_low: stack.start,
            stack_top: stack.end,
            last_cpu_ns: AtomicU64::new(0),
            last_wall_ns: AtomicU64::new(0),
            cpu_period_ns,
            next_cpu_ns: AtomicU64::new(0),
            tid: wall_timer.tid(),
            cpu_ticks: cpu_ticks && cpu_timer.is_some(),
            wall_timer,
            cpu_timer,
            tick_ns: tick.as_nanos() as u64,
            last_tick_ns: AtomicU64::new(now),
            signal_cpu_ns: AtomicU64::new(0),
            signal_wall_ns: AtomicU64::new(now),
            signal_waits: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            ended: std::sync::atomic::AtomicBool::new(false),
            dump_wanted: AtomicU64::new(0),
            dump_done: AtomicU64::new(0),
            dump: std::cell::UnsafeCell::new(RawSample::empty()),
            host_cache: host_frames.then(HostCache::new),
        }
    }

    /// Asks the thread's handler for a stack dump of generation `generation` (higher than
    /// any asked before), answered at the thread's next own signal (send it one with
    /// [`super::timer::send_dump_signal`]).
    pub(in super::super) fn ask_dump(&self, generation: u64) {
        self.dump_wanted.store(generation, Ordering::Release);
    }

    /// The thread's stack at dump `generation`, once its handler answered. Only one dumper
    /// at a time may ask and read (the handler writes the next answer only once the next
    /// generation is asked): the signal module's dumper, under its lock, hence not public.
    pub(in super::super) fn dumped(&self, generation: u64) -> Option<RawSample> {
        if self.dump_done.load(Ordering::Acquire) != generation {
            return None;
        }
        // SAFETY: the handler wrote the answer before publishing `dump_done` (release, seen
        // above with acquire), and writes again only after a later `ask_dump`, which the one
        // dumper makes after this read.
        Some(unsafe { (*self.dump.get()).clone() })
    }

    /// Answers a stack dump asked and not answered yet: the stack as a sample would take it,
    /// whatever the clocks say. Async-signal-safe.
    pub(super) fn answer_dump(&self, regs: &Registers, wall: u64) {
        let wanted = self.dump_wanted.load(Ordering::Acquire);
        if wanted == self.dump_done.load(Ordering::Relaxed) {
            return;
        }
        // SAFETY: only this thread's handler writes the slot (SIGPROF is blocked while it
        // runs), and the dumper reads it only once `dump_done` says this answer is written.
        let s = unsafe { &mut *self.dump.get() };
        s.cpu_delta_ns = 0;
        s.wall_delta_ns = 0;
        s.time_ns = wall;
        self.fill(regs, s);
        self.dump_done.store(wanted, Ordering::Release);
    }

    /// After a dump's signal: SIGPROF does not queue, so a timer's signal that came while the
    /// dump's was pending was lost, and with it the timer's re-arming. With neither timer
    /// armed, the next tick is armed here. Async-signal-safe.
    pub(super) fn rearm_if_lost(&self, wall: u64) -> std::io::Result<()> {
        let armed = super::timer::armed(self.wall_timer.id())
            || self
                .cpu_timer
                .as_ref()
                .is_some_and(|t| super::timer::armed(t.id()));
        match armed {
            true => Ok(()),
            // On the thread itself: its CPU clock is this thread's.
            false => self.arm_tick(wall, clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)),
        }
    }

    /// Arms the next tick (the first, or one after a tick was lost): with CPU ticks, on the
    /// CPU timer at the thread's next period of CPU time after `cpu`, its CPU time now (an
    /// absolute time, so that the rate holds however late a scheduler tick fired the last);
    /// else on the wall timer's grid after `wall`, `CLOCK_MONOTONIC` now. Async-signal-safe.
    pub fn arm_tick(&self, wall: u64, cpu: u64) -> std::io::Result<()> {
        match self.cpu_timer.as_ref().filter(|_| self.cpu_ticks) {
            Some(cpu_timer) => {
                let next = self.next_cpu_ns.load(Ordering::Relaxed).max(cpu + 1);
                super::timer::arm_at(cpu_timer.id(), next)
            }
            None => self.arm_next_tick(wall),
        }
    }

    /// Starts the CPU and wall deltas of the first sample here; `cpu_clock` is the sampled
    /// thread's CPU clock (this may run on another thread).
    pub fn reset_clocks(&self, cpu_clock: libc::clockid_t) {
        let cpu = clock_ns(cpu_clock);
        let wall = clock_ns(libc::CLOCK_MONOTONIC);
        self.last_cpu_ns.store(cpu, Ordering::Relaxed);
        self.signal_cpu_ns.store(cpu, Ordering::Relaxed);
        self.next_cpu_ns
            .store(cpu + self.cpu_period_ns, Ordering::Relaxed);
        self.last_wall_ns.store(wall, Ordering::Relaxed);
        self.signal_wall_ns.store(wall, Ordering::Relaxed);
    }

    /// Takes the sample a tick calls for, if any, and arms the timer for the next (see
    /// [`super::timer`]). `wall` and `cpu` are the clocks now. Async-signal-safe.
    pub(super) fn on_tick(
        &self,
        tick: Tick,
        regs: &Registers,
        wall: u64,
        cpu: u64,
    ) -> std::io::Result<()> {
        if self.cpu_ticks {
            // The thread's CPU clock alone: a sample at each tick.
            self.take_sample(regs, wall, cpu);
            return self.arm_tick(wall, cpu);
        }
        let ran = cpu.saturating_sub(self.signal_cpu_ns.swap(cpu, Ordering::Relaxed));
        let passed = wall.saturating_sub(self.signal_wall_ns.swap(wall, Ordering::Relaxed));
        if let Some(cpu_timer) = &self.cpu_timer {
            let waits = waits_so_far();
            let waited = waits != self.signal_waits.swap(waits, Ordering::Relaxed);
            // Off the CPU most of the time since, and for a wait of its own, not only for
            // other threads (a preempted thread is sampled on, as it runs again). Woken by
            // this tick, perhaps: no sample here; the CPU timer takes the next one where the
            // thread runs.
            if matches!(tick, Tick::Wall) && waited && ran * 2 < passed {
                let next = self.next_cpu_ns.load(Ordering::Relaxed).max(cpu + 1);
                return super::timer::arm_at(cpu_timer.id(), next);
            }
        }
        self.take_sample(regs, wall, cpu);
        // The guest runs for an eighth of a tick at least before the next: a sample that took
        // longer than a tick (a walk of a runtime whose memory the guest made long to read)
        // would otherwise find the next tick due as it returns, and the guest would never run
        // again (seen: a CPython look-alike at 10 kHz, `tests/hostile.rs`). A grid tick is
        // skipped only then; the next sample's CPU time still counts all the guest ran.
        let done = clock_ns(libc::CLOCK_MONOTONIC);
        self.arm_next_tick(wall.max(done + self.tick_ns / 8))
    }

    /// Arms the timer, on the CPU this thread runs on, for the next tick of the grid that is
    /// ahead of `now` (see [`super::timer`]). Async-signal-safe.
    fn arm_next_tick(&self, now: u64) -> std::io::Result<()> {
        let mut next = self.last_tick_ns.load(Ordering::Relaxed) + self.tick_ns;
        if next <= now {
            next += ((now - next) / self.tick_ns + 1) * self.tick_ns;
        }
        self.last_tick_ns.store(next, Ordering::Relaxed);
        super::timer::arm_at(self.wall_timer.id(), next)
    }

    /// Which of this state's timers sent a signal, if one did, to the guest thread.
    pub(super) fn tick_of(&self, info: &SigInfo) -> Option<Tick> {
        let tick = match info.code {
            libc::SI_TIMER if info.value == self.wall_timer.cookie() => Tick::Wall,
            libc::SI_TIMER
                if self.cpu_timer.as_ref().map(SignalTimer::cookie) == Some(info.value) =>
            {
                Tick::Cpu
            }
            libc::SI_QUEUE
                if info.value == super::timer::DUMP_COOKIE
                    // SAFETY: getpid is a system call without preconditions, async-signal-safe.
                    && info.sender == unsafe { libc::getpid() } =>
            {
                Tick::Dump
            }
            _ => return None,
        };
        // SAFETY: gettid is a system call without preconditions, async-signal-safe.
        (unsafe { libc::gettid() } == self.tid).then_some(tick)
    }

    /// `wall` and `cpu` are `CLOCK_MONOTONIC` and the thread's CPU time now.
    fn take_sample(&self, regs: &Registers, wall: u64, cpu: u64) {
        if self.cpu_period_ns > 0 {
            // CPU-clock sampling from wall ticks: a tick is recorded once the thread has used
            // another period of CPU, so samples follow CPU time whatever share of the wall time
            // the thread runs. A burst of CPU between ticks earns at most one period of debt;
            // the sample's value carries all of it.
            let next = self.next_cpu_ns.load(Ordering::Relaxed);
            if cpu < next {
                return;
            }
            let following = (next + self.cpu_period_ns).max(cpu.saturating_sub(self.cpu_period_ns));
            self.next_cpu_ns.store(following, Ordering::Relaxed);
        }
        let cpu_delta = cpu.saturating_sub(self.last_cpu_ns.swap(cpu, Ordering::Relaxed));
        let wall_delta = wall.saturating_sub(self.last_wall_ns.swap(wall, Ordering::Relaxed));
        let pushed = self.ring.push_with(|s| {
            s.cpu_delta_ns = cpu_delta;
            s.wall_delta_ns = wall_delta;
            s.time_ns = wall;
            self.fill(regs, s);
        });
        if !pushed {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The calling thread's voluntary context switches so far: each is a wait (a blocking system
/// call, a futex), which a preemption is not. Async-signal-safe: one system call, made
/// directly (no libc state).
fn waits_so_far() -> u64 {
    // SAFETY: a zeroed rusage is valid; getrusage only writes the struct it is given.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::syscall(libc::SYS_getrusage, libc::RUSAGE_THREAD, &mut usage) != 0 {
            return 0;
        }
        usage.ru_nvcsw as u64
    }
}
