//! What sends SIGPROF to the guest thread at the sampling rate: POSIX timers
//! (`timer_create` with `SIGEV_THREAD_ID`) armed for one expiry at a time by the signal handler
//! itself: while the thread runs, one on `CLOCK_MONOTONIC`, a high-resolution clock, on a fixed
//! grid of ticks so that the handler's own latency does not lower the rate; while it mostly
//! waits, one on its CPU clock (see below and `ThreadState::arm_next`).
//!
//! Why: the kernel keeps a timer on the CPU where it was last armed. Once the guest's thread
//! has moved to another CPU, each expiry reaches it through an inter-processor interrupt,
//! which on the virtual machines here often arrives only after the guest's next system call:
//! samples then pile up just after system calls (measured on a program reading a file with
//! fgets: 7 points of its hottest function moved to the code after `fd_read`). Armed from the
//! handler, on the guest's thread, the next tick fires on the CPU the guest runs on. A periodic
//! timer re-armed only when the handler found the thread on another CPU than the last time
//! (`sched_getcpu`) left most of that error in place (`hash_words` 33–45 % against perf's
//! 49–51 %; armed every tick: 49–54 %).
//!
//! On the CPU clock too: a timer on the thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`) is
//! checked by the kernel only on scheduler ticks, so it cannot fire faster than CONFIG_HZ
//! (250 Hz on the machines here: 95 samples in 0.38 s of CPU at 1 kHz). The kernel's
//! `task-clock` perf event keeps the rate, but signals each overflow through an inter-processor
//! interrupt that cost 25-35 µs of system time per sample on the virtual machines here (3 % at
//! 1 kHz), against 1.5 µs for this timer. So the handler turns wall ticks into CPU sampling:
//! it records a tick only once the thread has used another period of CPU (see
//! `ThreadState::take_sample`).
//!
//! A wall tick also wakes a thread that waits (a server's idle worker in `epoll_wait`): at
//! 1 kHz, two idle tokio workers cost 6 % of a core doing nothing. So a tick that finds the
//! thread ran less than half the time since the last signal, and waited meanwhile (a voluntary
//! context switch: a thread only preempted by others keeps its wall ticks, and its sample
//! count) arms the thread's CPU-clock timer instead, for the CPU time of its next sample: it fires only once the thread has run that
//! long, on a scheduler tick while it runs (an unbiased point, if at a coarser rate), and the
//! handler goes back to wall ticks from there.
//!
//! At a period of 10 ms or more on the CPU clock (a server's default 100 Hz), the CPU-clock
//! timer alone ticks, armed from the handler for the thread's next period of CPU time
//! (absolute, so the rate holds), the wall timer never armed: every kernel's scheduler ticks
//! at 100 Hz at least, so that rate is kept, and each tick then costs the signal alone. A
//! wall tick costs a high-resolution timer's expiry and its arming, each a trap to the
//! hypervisor on these virtual machines, and a timer interrupt: `wasmspy serve` on `/hello`
//! (`benches/serve.rs`, 21 rounds) took 195–207 µs of CPU a request at 100 Hz on wall ticks
//! where it took what it took at 1 Hz on CPU ticks (183.2 against 183.3 µs). The sampled
//! point is where the thread is at a scheduler tick, as for a waiting thread's CPU timer
//! above: unbiased, the ticks keeping their own time.

use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Result;

/// Where the timers' cookies start: a value no pointer a library would pass is likely to have.
const COOKIE_BASE: usize = 0x7773_7079_0000; // "wspy"
/// What a stack dump's signal carries ([`send_dump_signal`]): below every timer's cookie.
pub const DUMP_COOKIE: usize = COOKIE_BASE - 1;

/// Deleted when dropped.
pub struct SignalTimer {
    id: libc::timer_t,
    tid: libc::pid_t,
    cookie: usize,
}

// SAFETY: a timer id is a kernel handle usable from any thread.
unsafe impl Send for SignalTimer {}

impl SignalTimer {
    /// A timer on `clock` that will send SIGPROF to thread `tid`, not armed yet. Its signals
    /// carry a value of their own ([`cookie`](Self::cookie)), so that the handler tells them
    /// from a SIGPROF sent by anything else.
    pub fn create(clock: libc::clockid_t, tid: libc::pid_t) -> Result<Self> {
        static TIMERS: AtomicUsize = AtomicUsize::new(0);
        let cookie = COOKIE_BASE + TIMERS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: a zeroed sigevent is valid before its fields are set; timer_create gets valid
        // pointers.
        unsafe {
            let mut event: libc::sigevent = std::mem::zeroed();
            event.sigev_notify = libc::SIGEV_THREAD_ID;
            event.sigev_signo = libc::SIGPROF;
            event.sigev_notify_thread_id = tid;
            event.sigev_value.sival_ptr = cookie as *mut libc::c_void;
            let mut timer: libc::timer_t = std::ptr::null_mut();
            if libc::timer_create(clock, &mut event, &mut timer) != 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            Ok(SignalTimer {
                id: timer,
                tid,
                cookie,
            })
        }
    }

    pub fn id(&self) -> libc::timer_t {
        self.id
    }

    /// The thread the signals go to.
    pub fn tid(&self) -> libc::pid_t {
        self.tid
    }

    /// The value every signal of this timer carries (`si_value`).
    pub fn cookie(&self) -> usize {
        self.cookie
    }
}

/// Arms `timer` to expire once, at `deadline_ns` on its clock (on `CLOCK_MONOTONIC`, on the
/// CPU this runs on). Async-signal-safe (one system call).
pub fn arm_at(timer: libc::timer_t, deadline_ns: u64) -> std::io::Result<()> {
    let value = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
        },
    };
    // SAFETY: a valid itimerspec; a timer id that is not (or no longer) valid makes the call
    // fail, nothing else.
    let rc =
        unsafe { libc::timer_settime(timer, libc::TIMER_ABSTIME, &value, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `timer` is armed. Async-signal-safe (one system call).
pub fn armed(timer: libc::timer_t) -> bool {
    // SAFETY: a zeroed itimerspec is valid; timer_gettime only writes it (and fails for an
    // id that is not valid, which reads as not armed).
    unsafe {
        let mut value: libc::itimerspec = std::mem::zeroed();
        libc::timer_gettime(timer, &mut value) == 0
            && (value.it_value.tv_sec != 0 || value.it_value.tv_nsec != 0)
    }
}

/// Sends thread `tid` of this process a SIGPROF asking for a stack dump: queued
/// (`rt_tgsigqueueinfo`, `SI_QUEUE`) with this process's pid and [`DUMP_COOKIE`], so that the
/// handler tells it from its timers' signals and from anyone else's SIGPROF.
pub fn send_dump_signal(tid: libc::pid_t) -> std::io::Result<()> {
    // SAFETY: a zeroed siginfo_t is valid; SigInfo is a prefix of it (checked where it is
    // defined), written through a pointer to it; the system call reads the struct.
    let rc = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let fields = &mut info as *mut libc::siginfo_t as *mut super::handler::SigInfo;
        (*fields).signo = libc::SIGPROF;
        (*fields).code = libc::SI_QUEUE;
        (*fields).sender = libc::getpid();
        (*fields).overrun_or_uid = libc::getuid() as libc::c_int;
        (*fields).value = DUMP_COOKIE;
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            tid,
            libc::SIGPROF,
            &info as *const libc::siginfo_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

impl Drop for SignalTimer {
    fn drop(&mut self) {
        // SAFETY: the timer was created by `create` and is deleted once, here.
        unsafe { libc::timer_delete(self.id) };
    }
}
