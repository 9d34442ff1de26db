//! The SIGPROF handler: all of wasmspy's code that runs inside a signal handler is here.
//!
//! Invariants, which every change must keep:
//! - **Async-signal-safe**: no allocation, no locks, no panics; only atomics, `clock_gettime`
//!   (async-signal-safe per POSIX), `gettid`, `getpid`, `timer_settime`, `timer_gettime` and `getrusage` (system calls:
//!   telling the sampled thread, arming the timer for the next sample, telling a wait from a
//!   preemption; see [`super::timer`]) and reads of memory proven mapped (below). `errno` is
//!   saved and restored.
//! - **Bounded**: at most [`MAX_FRAMES`] frame records followed, at most
//!   [`store_contexts::SLOTS`] store contexts read; a language runtime's walk as bounded as its
//!   folder of [`crate::runtimes`] states (each states its bound on frames followed and words
//!   read, and never writes past the sample's [`MAX_FRAMES`]).
//! - **Reads only mapped memory**: stack reads stay in `[sp, top)` of the stack `sp` is on
//!   (live frames; the sampled thread is the one the handler runs on): the guest thread's own
//!   stack, or a fiber stack that [`fiber_stacks`] publishes while it is mapped (guests called
//!   with `call_async`), or a fiber stack of Wasmtime's own (the pooling allocator's) between the
//!   guard page and the Wasm entry that a store running on it records (see
//!   [`ThreadState::running_fiber_at`]). They are skipped entirely when `sp` is on none of these
//!   (e.g. on Wasmtime's alternate signal stack). The one exception, a guest's fiber suspended in a host call while
//!   the thread runs its own stack, is read within that fiber's published mapping. Code reads
//!   (instruction bytes at the PC) happen only for a PC inside a registered module's text.
//!   Store contexts are read only while [`store_contexts`] publishes them (their stores alive);
//!   a runtime instance's `VMContext` and linear memory only while [`runtime_instances`]
//!   publishes it, its memory within the length Wasmtime records for it at that instant. A
//!   Pulley interpreter's state and stack, and the native words where its dispatch loop keeps
//!   its PC, as [`pulley_stack`] states.
//! - **Lifetime**: the handler reaches a thread's state only through [`THREADS`], after
//!   counting itself in [`RUNNING`]; [`detach`] clears the state's slot and waits for `RUNNING`
//!   to drop to zero before the state may be freed. The code ranges ([`CODE`]) only grow while
//!   any state is attached; they are cleared only when none is.
//! - **One producer per ring**: only a signal of one of a thread's own timers (`si_code`
//!   `SI_TIMER` with its cookie), on that thread, takes a sample into that thread's ring and
//!   arms its next timer; a stack dump's signal (`SI_QUEUE` from this process with the dump
//!   cookie, see [`super::timer::send_dump_signal`]) or any of the thread's own signals answers
//!   a dump asked of it, into its one dump slot; any other SIGPROF (`kill`, another library's
//!   timer, a signal to another thread) is ignored, so each ring and slot has one producer,
//!   its thread.
//!
//! Frame walking: Cranelift keeps a frame record (saved frame pointer, return address) in every
//! Wasm function and trampoline. From a PC in Wasm code the handler follows the chain, keeping
//! each return address while it points into known code. The first instructions of a function
//! (before its frame record is set up) and its final `ret` (after the record is popped) leave
//! the frame pointer naming the caller's frame; there the caller's return address is read from
//! the stack (x86_64) or the link register (aarch64), so the caller is neither lost nor misplaced.
//!
//! Outside Wasm code (a host function, a libcall, Wasmtime itself), whose frames need not keep
//! frame records, the guest frames under the PC come from Wasmtime's record of the last exit
//! from Wasm of the store running on the thread (see [`store_contexts`]).

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use super::fiber_stacks;
use super::pulley_stack::{self, Interrupted, PC_CANDIDATES};
use super::ring::Ring;
use super::runtime_instances;
use super::store_contexts::{self, Offsets};
use super::timer::SignalTimer;
use crate::clock::clock_ns;

pub const MAX_FRAMES: usize = crate::capture::MAX_STACK_DEPTH;
/// Which of a thread's timers sent a signal.
#[derive(Clone, Copy)]
enum Tick {
    Wall,
    Cpu,
    /// A stack dump asked for ([`super::timer::send_dump_signal`]).
    Dump,
}

/// Texts of modules and components the guest threads may run.
pub const MAX_CODE_RANGES: usize = 1024;
/// Threads sampled at once.
pub const MAX_THREADS: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// The PC is in a module's code; `pcs` is the walked stack.
    Guest = 0,
    /// The PC is outside Wasm code; `pcs[0]` is that PC, then, if Wasm is under it, the return
    /// address into the Wasm code that left for the host and the walked stack above it.
    Host = 1,
    /// Pulley ran bytecode: `pcs[..PC_CANDIDATES]` are candidates for its PC (see
    /// [`pulley_stack`]), then its link register (the caller's return address before the
    /// leaf's frame record is pushed or after it is popped, stale otherwise), then the return
    /// addresses of the frame records.
    Pulley = 2,
}

/// One sample as the handler records it.
#[derive(Clone)]
pub struct RawSample {
    pub kind: Kind,
    /// The key of the store whose Wasm is innermost on the stack; 0 when unknown.
    pub store: u64,
    /// That store's labels when the sample was taken; 0 for none.
    pub labels: u64,
    pub depth: usize,
    pub cpu_delta_ns: u64,
    pub wall_delta_ns: u64,
    pub time_ns: u64,
    /// Leaf first: the interrupted PC, then return addresses; from `splice`'s index on, if
    /// set, the words of a language runtime's stack (see [`crate::runtimes`]).
    pub pcs: [usize; MAX_FRAMES],
    /// Where the runtime's words start in `pcs`, and the runtime's id.
    pub splice: Option<(usize, usize)>,
}

impl RawSample {
    pub fn empty() -> Self {
        RawSample {
            kind: Kind::Guest,
            store: 0,
            labels: 0,
            depth: 0,
            cpu_delta_ns: 0,
            wall_delta_ns: 0,
            time_ns: 0,
            pcs: [0; MAX_FRAMES],
            splice: None,
        }
    }

    pub fn pcs(&self) -> &[usize] {
        &self.pcs[..self.depth]
    }
}

/// Everything the handler reads or writes for one sampled thread. Built, and never changed
/// afterwards except through its atomics, before it is published in [`THREADS`].
pub struct ThreadState {
    pub ring: Ring<RawSample>,
    exit_record: Offsets,
    stack_low: usize,
    stack_top: usize,
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
}

// SAFETY: the timers are kernel handles, usable from any thread; everything else is Sync.
unsafe impl Sync for ThreadState {}
// SAFETY: as for Sync: kernel handles and atomics, owned by no thread.
unsafe impl Send for ThreadState {}

impl ThreadState {
    /// `stack` is the sampled thread's stack; `wall_timer` and `cpu_timer` send it its
    /// signals, every `tick` while it runs.
    pub fn new(
        ring: Ring<RawSample>,
        stack: std::ops::Range<usize>,
        cpu_period_ns: u64,
        (wall_timer, cpu_timer): (SignalTimer, Option<SignalTimer>),
        tick: std::time::Duration,
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
        }
    }

    /// Asks the thread's handler for a stack dump of generation `generation` (higher than
    /// any asked before), answered at the thread's next own signal (send it one with
    /// [`super::timer::send_dump_signal`]).
    pub(super) fn ask_dump(&self, generation: u64) {
        self.dump_wanted.store(generation, Ordering::Release);
    }

    /// The thread's stack at dump `generation`, once its handler answered. Only one dumper
    /// at a time may ask and read (the handler writes the next answer only once the next
    /// generation is asked): the signal module's dumper, under its lock, hence not public.
    pub(super) fn dumped(&self, generation: u64) -> Option<RawSample> {
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
    fn answer_dump(&self, regs: &Registers, wall: u64) {
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
    fn rearm_if_lost(&self, wall: u64) -> std::io::Result<()> {
        let armed = super::timer::armed(self.wall_timer.id())
            || self
                .cpu_timer
                .as_ref()
                .is_some_and(|t| super::timer::armed(t.id()));
        match armed {
            true => Ok(()),
            false => self.arm_next_tick(wall),
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
    fn on_tick(&self, tick: Tick, regs: &Registers, wall: u64, cpu: u64) -> std::io::Result<()> {
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
    pub fn arm_next_tick(&self, now: u64) -> std::io::Result<()> {
        let mut next = self.last_tick_ns.load(Ordering::Relaxed) + self.tick_ns;
        if next <= now {
            next += ((now - next) / self.tick_ns + 1) * self.tick_ns;
        }
        self.last_tick_ns.store(next, Ordering::Relaxed);
        super::timer::arm_at(self.wall_timer.id(), next)
    }

    /// Which of this state's timers sent a signal, if one did, to the guest thread.
    fn tick_of(&self, info: &SigInfo) -> Option<Tick> {
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

    fn in_code(&self, pc: usize) -> bool {
        let len = CODE_LEN.load(Ordering::Acquire).min(MAX_CODE_RANGES);
        CODE[..len].iter().any(|(start, end)| {
            pc >= start.load(Ordering::Relaxed) && pc < end.load(Ordering::Relaxed)
        })
    }

    /// The live part of the stack `sp` is on, if wasmspy knows that stack.
    fn stack_at(&self, sp: usize) -> Option<Stack> {
        if sp >= self.stack_low && sp < self.stack_top {
            return Some(Stack {
                sp,
                top: self.stack_top,
                store: 0,
            });
        }
        fiber_stacks::range_of(sp)
            .map(|r| Stack {
                sp,
                top: r.end,
                store: 0,
            })
            .or_else(|| self.running_fiber_at(sp))
    }

    /// On a fiber stack that Wasmtime allocated itself (the pooling allocator's stacks, for
    /// which no `StackCreator` is asked), the live part up to the frame record of the Wasm
    /// entry of the store running on it. While a store runs on a fiber, its context records
    /// that fiber's guard page, just below the fiber's stack, and its Wasm entry, on that
    /// stack: the stack is one readable mapping from the guard's end up past the entry.
    /// So when `sp` lies between them, `[sp, entry)` is on that stack, whichever store it is
    /// (the stacks of different fibers do not overlap), and the thread runs on it, so it stays
    /// mapped while the handler reads it.
    fn running_fiber_at(&self, sp: usize) -> Option<Stack> {
        let o = self.exit_record;
        let mut found = None;
        store_contexts::for_each(|context, key, _| {
            // SAFETY: a published context is the VMStoreContext of a live store (see
            // store_contexts), whose fields are aligned words.
            let (guard_end, entry_fp) = unsafe {
                (
                    read(context + o.fiber_guard_end),
                    read(context + o.entry_fp),
                )
            };
            if guard_end != 0 && guard_end <= sp && sp < entry_fp {
                // The entry trampoline's frame record: saved frame pointer, return address.
                found = Some(Stack {
                    sp,
                    top: entry_fp + 2 * std::mem::size_of::<usize>(),
                    store: key,
                });
            }
        });
        found
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

    /// Fills `s` with the stack the thread was interrupted in, its store and labels.
    fn fill(&self, regs: &Registers, s: &mut RawSample) {
        s.pcs[0] = regs.pc;
        s.depth = 1;
        s.store = 0;
        s.splice = None;
        let mut leaf_at = None;
        let stack = self.stack_at(regs.sp);
        if self.in_code(regs.pc) {
            s.kind = Kind::Guest;
            if let Some(stack) = stack {
                // Found with a pooled fiber's stack already, else looked for.
                s.store = match stack.store {
                    0 => self.running_store(stack),
                    known => known,
                };
                self.walk(regs, stack, s);
            }
            leaf_at = Some(0);
        } else {
            s.kind = Kind::Host;
            if let Some(exit) = stack.and_then(|st| self.last_exit(regs.sp, st)) {
                s.store = exit.store;
                push(s, exit.pc);
                self.follow_chain(exit.stack, exit.fp, s);
                leaf_at = Some(1);
            } else {
                self.add_pulley_stack(regs, stack, s);
            }
        }
        add_runtime_stack(s, leaf_at);
        s.labels = match s.store {
            0 => 0,
            store => store_contexts::labels_of(store),
        };
    }

    /// Appends the callers of a PC in Wasm code to `s`.
    fn walk(&self, regs: &Registers, stack: Stack, s: &mut RawSample) {
        // SAFETY: regs.pc is inside a registered module's text, which is mapped and readable.
        let state = unsafe { prologue_state(regs.pc) };
        let caller = match state {
            Prologue::Entry => caller_at_entry(regs, stack),
            Prologue::FramePushed => caller_after_push(regs, stack),
            Prologue::Body => None,
        };
        if let Some(ra) = caller {
            if !self.in_code(ra) {
                return;
            }
            push(s, ra);
        }
        self.follow_chain(stack, regs.fp, s);
    }

    /// When the thread runs a store's Pulley code: its stack, as [`Kind::Pulley`] describes
    /// running bytecode, as [`Kind::Host`] a host call from it.
    /// `stack` is the live part of the stack `regs.sp` is on, where wasmspy knows it.
    fn add_pulley_stack(&self, regs: &Registers, stack: Option<Stack>, s: &mut RawSample) {
        // Called only with the PC in the interpreter's code, for the innermost few words.
        let native_word = |i: usize| {
            let addr = regs.sp.wrapping_add(i * WORD);
            match stack {
                // SAFETY: on the live stack (checked).
                Some(stack) => stack.holds(addr).then(|| unsafe { read(addr) }),
                // A stack wasmspy does not know (a fiber of Wasmtime's pooling allocator): the
                // interpreter was called, so its frame and its callers' (Wasmtime's entry into
                // Pulley, the fiber's start) lie above `sp` on it, more than these words.
                // SAFETY: mapped, per the above.
                None => addr.is_multiple_of(WORD).then(|| unsafe { read(addr) }),
            }
            .unwrap_or(0)
        };
        let at = pulley_stack::interrupted(
            regs.pc,
            regs.sp,
            &regs.general,
            native_word,
            self.exit_record,
            |a| self.in_code(a),
        );
        let on = |stack: std::ops::Range<usize>| Stack {
            sp: stack.start,
            top: stack.end,
            store: 0,
        };
        match at {
            Some(Interrupted::Bytecode {
                store,
                pcs,
                lr,
                fp,
                stack,
            }) => {
                s.kind = Kind::Pulley;
                s.store = store;
                s.pcs[..PC_CANDIDATES].copy_from_slice(&pcs);
                s.depth = PC_CANDIDATES;
                push(s, lr);
                self.follow_chain(on(stack), fp, s);
            }
            Some(Interrupted::HostCall {
                store,
                pc,
                fp,
                stack,
            }) => {
                s.store = store;
                push(s, pc);
                self.follow_chain(on(stack), fp, s);
            }
            None => {}
        }
    }

    /// Follows frame records from `fp`, appending return addresses into known code.
    fn follow_chain(&self, stack: Stack, mut fp: usize, s: &mut RawSample) {
        while s.depth < MAX_FRAMES && stack.holds(fp) && stack.holds(fp + WORD) {
            // SAFETY: fp and fp + word are on the live stack (checked above).
            let (next, ra) = unsafe { (read(fp), read(fp + WORD)) };
            if !self.in_code(ra) {
                break;
            }
            push(s, ra);
            if next <= fp {
                break;
            }
            fp = next;
        }
    }

    /// Where the guest left Wasm for the host code that `sp` runs: the return address into Wasm
    /// code, the frame pointer of the frame it returns to, and the stack they are on; `None`
    /// with no Wasm under the host code. The exit is the innermost one on `current` of the
    /// stores with Wasm on that stack (whichever thread attached them: an asynchronous store
    /// runs on the thread that polls it); with none there, while the thread runs its own stack,
    /// the one store attached by this thread whose guest waits suspended on a fiber (its
    /// asynchronous host call pending), whose frames stay in that fiber's mapping.
    fn last_exit(&self, sp: usize, current: Stack) -> Option<Exit> {
        let on_thread_stack = sp >= self.stack_low && sp < self.stack_top;
        let mut innermost: Option<(usize, usize, u64)> = None;
        let mut suspended: Option<(usize, usize, Stack, u64)> = None;
        let mut suspended_count = 0;
        let o = self.exit_record;
        store_contexts::for_each(|context, key, tid| {
            // SAFETY: a published context is the VMStoreContext of a live store (see
            // store_contexts), whose fields are aligned words.
            let (entry_fp, trampoline_fp, pc) = unsafe {
                (
                    read(context + o.entry_fp),
                    read(context + o.exit_trampoline_fp),
                    read(context + o.exit_pc),
                )
            };
            if entry_fp == 0 || trampoline_fp >= entry_fp || !self.in_code(pc) {
                return;
            }
            if current.holds(trampoline_fp) {
                if innermost.is_none_or(|(_, fp, _)| trampoline_fp < fp) {
                    innermost = Some((pc, trampoline_fp, key));
                }
            } else if let Some(fiber) = (tid == self.tid)
                .then(|| fiber_stacks::range_of(trampoline_fp))
                .flatten()
            {
                suspended_count += 1;
                let stack = Stack {
                    sp: fiber.start,
                    top: fiber.end,
                    store: key,
                };
                suspended = Some((pc, trampoline_fp, stack, key));
            }
        });
        let (pc, trampoline_fp, stack, store) = match (innermost, suspended) {
            (Some((pc, fp, key)), _) => (pc, fp, current, key),
            (None, Some(exit)) if on_thread_stack && suspended_count == 1 => exit,
            _ => return None,
        };
        // The trampoline's frame record saves the frame pointer of the Wasm code it left.
        // SAFETY: trampoline_fp is on `stack`, mapped (checked above).
        let fp = unsafe { read(trampoline_fp) };
        stack.holds(fp).then_some(Exit {
            pc,
            fp,
            stack,
            store,
        })
    }

    /// The key of the store whose Wasm, entered on `current`, is innermost; 0 for none known.
    fn running_store(&self, current: Stack) -> u64 {
        let mut innermost: Option<(usize, u64)> = None;
        let entry_fp = self.exit_record.entry_fp;
        store_contexts::for_each(|context, key, _| {
            // SAFETY: a published context is the VMStoreContext of a live store (see
            // store_contexts), whose fields are aligned words.
            let entry = unsafe { read(context + entry_fp) };
            if current.holds(entry) && innermost.is_none_or(|(fp, _)| entry < fp) {
                innermost = Some((entry, key));
            }
        });
        innermost.map_or(0, |(_, key)| key)
    }
}

/// Where the guest left Wasm for host code (see [`ThreadState::last_exit`]).
struct Exit {
    /// The return address into the Wasm code that left.
    pc: usize,
    /// The frame pointer of the frame it returns to.
    fp: usize,
    /// The stack they are on.
    stack: Stack,
    /// The key of the store the exit was from.
    store: u64,
}

const WORD: usize = std::mem::size_of::<usize>();

/// The live part of the stack the interrupted code runs on: `[sp, top)`.
#[derive(Clone, Copy)]
struct Stack {
    sp: usize,
    top: usize,
    /// The key of the store running on it, when finding the stack told it (a pooled fiber's);
    /// 0 otherwise.
    store: u64,
}

impl Stack {
    fn holds(self, addr: usize) -> bool {
        addr >= self.sp && addr < self.top && addr.is_multiple_of(WORD)
    }
}

/// When the sample's store runs a language runtime (Go, CPython): its stack, spliced in
/// after the native frames (see [`crate::runtimes`]). `leaf_at`: the innermost Wasm frame's
/// index, where the sample has one.
fn add_runtime_stack(s: &mut RawSample, leaf_at: Option<usize>) {
    if let Some(splice) = runtime_instances::walk(s.store, &mut s.pcs, &mut s.depth, leaf_at) {
        s.splice = Some(splice);
    }
}

fn push(s: &mut RawSample, pc: usize) {
    if s.depth < MAX_FRAMES {
        s.pcs[s.depth] = pc;
        s.depth += 1;
    }
}

/// # Safety
/// `addr` must be mapped, readable and aligned.
pub(super) unsafe fn read(addr: usize) -> usize {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::read_volatile(addr as *const usize) }
}

/// The interrupted thread's registers that the walk needs.
struct Registers {
    pc: usize,
    fp: usize,
    sp: usize,
    #[cfg(target_arch = "aarch64")]
    lr: usize,
    /// All general-purpose registers: where Pulley's dispatch loop keeps its PC and state.
    general: [usize; GENERAL_REGISTERS],
}

#[cfg(target_arch = "x86_64")]
const GENERAL_REGISTERS: usize = 16;
#[cfg(target_arch = "aarch64")]
const GENERAL_REGISTERS: usize = 31;

impl Registers {
    /// # Safety
    /// `uc` must be the ucontext the kernel passed to a SA_SIGINFO handler.
    unsafe fn from_ucontext(uc: *const libc::ucontext_t) -> Self {
        // SAFETY: the caller's contract; the kernel's ucontext is valid for the handler's run.
        let mc = unsafe { &(*uc).uc_mcontext };
        #[cfg(target_arch = "x86_64")]
        return Registers {
            pc: mc.gregs[libc::REG_RIP as usize] as usize,
            fp: mc.gregs[libc::REG_RBP as usize] as usize,
            sp: mc.gregs[libc::REG_RSP as usize] as usize,
            // r8–r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp: the first 16 of `gregs`.
            general: std::array::from_fn(|i| mc.gregs[i] as usize),
        };
        #[cfg(target_arch = "aarch64")]
        return Registers {
            pc: mc.pc as usize,
            fp: mc.regs[29] as usize,
            sp: mc.sp as usize,
            lr: mc.regs[30] as usize,
            general: std::array::from_fn(|i| mc.regs[i] as usize),
        };
    }
}

/// Where a PC is relative to its function's frame record.
#[derive(Debug, PartialEq, Eq)]
enum Prologue {
    /// No frame record of this function exists: at its first instruction, or at its `ret`.
    Entry,
    /// The saved frame pointer is pushed but the frame pointer not yet set.
    FramePushed,
    /// The frame pointer names this function's frame record.
    Body,
}

/// # Safety
/// `pc` must point at readable code.
#[cfg(target_arch = "x86_64")]
unsafe fn prologue_state(pc: usize) -> Prologue {
    // SAFETY: the caller's contract; instructions are at least as long as the bytes read,
    // except `push %rbp` and `ret`, which are recognized from their first byte.
    let b = |i: usize| unsafe { std::ptr::read_volatile((pc + i) as *const u8) };
    match b(0) {
        0x55 => Prologue::Entry,                                       // push %rbp
        0xc3 | 0xc2 => Prologue::Entry, // ret, ret $imm16 (after pop %rbp)
        0x48 if b(1) == 0x89 && b(2) == 0xe5 => Prologue::FramePushed, // mov %rsp, %rbp
        _ => Prologue::Body,
    }
}

/// # Safety
/// `pc` must point at readable code.
#[cfg(target_arch = "aarch64")]
unsafe fn prologue_state(pc: usize) -> Prologue {
    // SAFETY: the caller's contract; aarch64 instructions are 4 aligned bytes.
    match unsafe { std::ptr::read_volatile(pc as *const u32) } {
        0xa9bf7bfd => Prologue::Entry,       // stp x29, x30, [sp, #-16]!
        0xd65f03c0 => Prologue::Entry,       // ret (after ldp x29, x30, [sp], #16)
        0x910003fd => Prologue::FramePushed, // mov x29, sp
        _ => Prologue::Body,
    }
}

/// The caller's return address when the frame record is not set up yet or already popped.
fn caller_at_entry(regs: &Registers, stack: Stack) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: sp is read only after checking it is on the live stack.
        stack.holds(regs.sp).then(|| unsafe { read(regs.sp) })
    }
    #[cfg(target_arch = "aarch64")]
    {
        let _ = stack;
        Some(regs.lr)
    }
}

/// The caller's return address when only the old frame pointer has been pushed.
fn caller_after_push(regs: &Registers, stack: Stack) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: sp + word is read only after checking it is on the live stack.
        stack
            .holds(regs.sp.wrapping_add(WORD))
            .then(|| unsafe { read(regs.sp + WORD) })
    }
    #[cfg(target_arch = "aarch64")]
    {
        let _ = stack;
        Some(regs.lr)
    }
}

/// The sampled threads' states; null where none is.
static THREADS: [AtomicPtr<ThreadState>; MAX_THREADS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_THREADS];
/// Handlers currently running (and possibly using the state they loaded).
static RUNNING: AtomicUsize = AtomicUsize::new(0);
/// Texts of the registered modules, `[start, end)`: `CODE[..CODE_LEN]`, each written before
/// `CODE_LEN` counts it.
static CODE: [(AtomicUsize, AtomicUsize); MAX_CODE_RANGES] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_CODE_RANGES];
static CODE_LEN: AtomicUsize = AtomicUsize::new(0);

/// Makes the handler sample the thread of `state` into it; `state` must stay alive until
/// [`detach`] returns. False when [`MAX_THREADS`] are sampled already.
pub fn attach(state: &ThreadState) -> bool {
    let state = state as *const _ as *mut _;
    THREADS.iter().any(|slot| {
        slot.compare_exchange(
            std::ptr::null_mut(),
            state,
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_ok()
    })
}

/// Stops the handler from using `state`; on return no handler uses it any more.
pub fn detach(state: &ThreadState) {
    let state = state as *const _ as *mut _;
    for slot in &THREADS {
        let _ = slot.compare_exchange(
            state,
            std::ptr::null_mut(),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
    wait_for_running_handlers();
}

/// Returns once every handler that was running has finished: none uses what was withdrawn
/// from it before the call.
pub fn wait_for_running_handlers() {
    let mut spins = 0u32;
    while RUNNING.load(Ordering::SeqCst) != 0 {
        // A handler takes microseconds, unless its thread was preempted inside it: then the
        // core is better given up than spun on for the rest of a time slice (on a busy
        // server, a store dropped per request waited so, 2 % of the process's CPU).
        if spins < 100 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Adds the text of a module the sampled threads may run; false when [`MAX_CODE_RANGES`] are
/// known already. Called by one thread at a time (the sampler's owner).
pub fn add_code(code: std::ops::Range<usize>) -> bool {
    let len = CODE_LEN.load(Ordering::Acquire);
    let known = CODE[..len.min(MAX_CODE_RANGES)].iter().any(|(start, end)| {
        start.load(Ordering::Relaxed) == code.start && end.load(Ordering::Relaxed) == code.end
    });
    if known {
        return true;
    }
    let Some((start, end)) = CODE.get(len) else {
        return false;
    };
    start.store(code.start, Ordering::Relaxed);
    end.store(code.end, Ordering::Relaxed);
    CODE_LEN.store(len + 1, Ordering::Release);
    true
}

/// Forgets the texts added so far. Only while no thread is attached: handlers that see them
/// may be running otherwise.
pub fn clear_code() {
    if THREADS
        .iter()
        .all(|slot| slot.load(Ordering::SeqCst).is_null())
    {
        CODE_LEN.store(0, Ordering::SeqCst);
    }
}

/// Installs the SIGPROF handler, once per process. It stays installed: a SIGPROF arriving when
/// no sampler is attached is ignored rather than killing the process.
pub fn install() -> std::io::Result<()> {
    static INSTALLED: std::sync::OnceLock<std::io::Result<()>> = std::sync::OnceLock::new();
    let result = INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid; the handler has the SA_SIGINFO signature.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigprof as *const () as usize;
            // SA_RESTART: system calls the guest's host calls make resume after a sample.
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(libc::SIGPROF, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    });
    match result {
        Ok(()) => Ok(()),
        Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
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

/// The start of Linux's `siginfo_t` as a POSIX timer's signal fills it (the union member
/// `_timer`: timer id, overrun count, then the `sigev_value` given at `timer_create`) and as a
/// queued signal does (`_rt`: the sender's pid and uid, then the value queued), on the 64-bit
/// targets this module is built for.
#[repr(C)]
pub(super) struct SigInfo {
    pub signo: libc::c_int,
    pub errno: libc::c_int,
    pub code: libc::c_int,
    pub pad: libc::c_int,
    /// The timer's id, or the pid of the process that queued the signal.
    pub sender: libc::c_int,
    /// The timer's overrun count, or the uid that queued the signal.
    pub overrun_or_uid: libc::c_int,
    pub value: usize,
}

const _: () = assert!(std::mem::size_of::<SigInfo>() <= std::mem::size_of::<libc::siginfo_t>());

extern "C" fn on_sigprof(_signal: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno slot.
    let errno = unsafe { *libc::__errno_location() };
    RUNNING.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the kernel passes a valid siginfo_t to SA_SIGINFO handlers; SigInfo is a
    // prefix of it (checked at compile time above), whose fields any signal may read.
    let info = unsafe { &*(info as *const SigInfo) };
    let own = THREADS.iter().find_map(|slot| {
        let state = slot.load(Ordering::SeqCst);
        // SAFETY: `detach` waits for RUNNING to reach zero before a state can be freed, and we
        // counted ourselves in RUNNING before loading the pointer.
        (!state.is_null())
            .then(|| unsafe { &*state })
            .and_then(|state| Some((state, state.tick_of(info)?)))
    });
    if let Some((state, tick)) = own {
        // SAFETY: the kernel passes a valid ucontext to SA_SIGINFO handlers.
        let regs = unsafe { Registers::from_ucontext(uc as *const libc::ucontext_t) };
        let wall = clock_ns(libc::CLOCK_MONOTONIC);
        // Whatever the signal: a dump's own may have merged into a pending tick's.
        state.answer_dump(&regs, wall);
        // A failure cannot be reported here; it ends this thread's sampling (`--verbose` shows
        // how many samples were taken).
        let _ = match tick {
            Tick::Dump => state.rearm_if_lost(wall),
            tick => state.on_tick(tick, &regs, wall, clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)),
        };
    }
    RUNNING.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}
