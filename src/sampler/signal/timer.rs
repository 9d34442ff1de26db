//! What sends SIGPROF to the guest thread at the sampling rate.
//!
//! On the CPU clock, a POSIX timer on the thread's CPU clock is checked by the kernel only on
//! scheduler ticks, so it cannot fire faster than CONFIG_HZ (often 250 Hz). The kernel's
//! `task-clock` software perf event counts the thread's CPU time with a high-resolution timer
//! and signals each period exactly, like `perf record -e task-clock`; it is used when
//! `perf_event_open` is allowed, else the POSIX CPU timer. On the wall clock, a POSIX timer on
//! `CLOCK_MONOTONIC` (high resolution) is used.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use anyhow::Result;
use perf_event_open_sys as perf;

use crate::clock::Clock;

pub enum SignalTimer {
    /// The perf event stops when its descriptor is closed.
    TaskClock {
        _event: OwnedFd,
    },
    Posix(libc::timer_t),
}

// SAFETY: both are kernel handles usable from any thread.
unsafe impl Send for SignalTimer {}

impl SignalTimer {
    /// Starts sending SIGPROF to thread `tid` every `period` of `clock`; `cpu_clock` is that
    /// thread's CPU clock.
    pub fn start(
        clock: Clock,
        tid: libc::pid_t,
        cpu_clock: libc::clockid_t,
        period: Duration,
    ) -> Result<Self> {
        match clock {
            Clock::Cpu => match task_clock(tid, period) {
                Ok(fd) => Ok(SignalTimer::TaskClock { _event: fd }),
                Err(_) => posix_timer(cpu_clock, tid, period).map(SignalTimer::Posix),
            },
            Clock::Wall => posix_timer(libc::CLOCK_MONOTONIC, tid, period).map(SignalTimer::Posix),
        }
    }

    /// What drives the samples, for the user: `task-clock` or `posix-timer`.
    pub fn source(&self) -> &'static str {
        match self {
            SignalTimer::TaskClock { .. } => "task-clock",
            SignalTimer::Posix(_) => "posix-timer",
        }
    }
}

impl Drop for SignalTimer {
    fn drop(&mut self) {
        match self {
            SignalTimer::TaskClock { .. } => {}
            // SAFETY: the timer was created by `posix_timer` and is deleted once, here.
            SignalTimer::Posix(timer) => unsafe {
                libc::timer_delete(*timer);
            },
        }
    }
}

/// `F_SETOWN_EX`'s argument (`struct f_owner_ex`), which libc does not declare for glibc.
#[repr(C)]
struct OwnerEx {
    kind: libc::c_int,
    pid: libc::pid_t,
}
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;
const F_OWNER_TID: libc::c_int = 0;

fn task_clock(tid: libc::pid_t, period: Duration) -> std::io::Result<OwnedFd> {
    let check = |rc: libc::c_int| {
        if rc < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(rc)
        }
    };
    let mut attr = perf::bindings::perf_event_attr {
        type_: perf::bindings::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<perf::bindings::perf_event_attr>() as u32,
        config: u64::from(perf::bindings::PERF_COUNT_SW_TASK_CLOCK),
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = period.as_nanos().max(1) as u64;
    attr.set_disabled(1);
    // Kernel time is the guest's too (its host calls' system calls), but may not be
    // observable without privileges; user time alone is the fallback.
    // SAFETY: attr is a fully initialized perf_event_attr for a software counter of one thread.
    let fd = unsafe {
        let flags = perf::bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong;
        let fd = perf::perf_event_open(&mut attr, tid, -1, -1, flags);
        if fd >= 0 {
            fd
        } else {
            attr.set_exclude_kernel(1);
            attr.set_exclude_hv(1);
            check(perf::perf_event_open(&mut attr, tid, -1, -1, flags))?
        }
    };
    // SAFETY: fd is a fresh descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let raw = fd.as_raw_fd();
    let owner = OwnerEx {
        kind: F_OWNER_TID,
        pid: tid,
    };
    // SAFETY: fcntl and ioctl on our descriptor with valid arguments: each counter overflow
    // sends SIGPROF (not SIGIO) to thread `tid`.
    unsafe {
        check(libc::fcntl(raw, libc::F_SETFL, libc::O_ASYNC))?;
        check(libc::fcntl(raw, F_SETSIG, libc::SIGPROF))?;
        check(libc::fcntl(raw, F_SETOWN_EX, &owner as *const OwnerEx))?;
        check(perf::ioctls::ENABLE(raw, 0))?;
    }
    Ok(fd)
}

fn posix_timer(
    clock: libc::clockid_t,
    tid: libc::pid_t,
    period: Duration,
) -> Result<libc::timer_t> {
    let spec = libc::timespec {
        tv_sec: period.as_secs() as libc::time_t,
        tv_nsec: period.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a zeroed sigevent is valid before its fields are set; timer_create and
    // timer_settime get valid pointers; the timer is deleted on failure.
    unsafe {
        let mut event: libc::sigevent = std::mem::zeroed();
        event.sigev_notify = libc::SIGEV_THREAD_ID;
        event.sigev_signo = libc::SIGPROF;
        event.sigev_notify_thread_id = tid;
        let mut timer: libc::timer_t = std::ptr::null_mut();
        if libc::timer_create(clock, &mut event, &mut timer) != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        let value = libc::itimerspec {
            it_interval: spec,
            it_value: spec,
        };
        if libc::timer_settime(timer, 0, &value, std::ptr::null_mut()) != 0 {
            let e = std::io::Error::last_os_error();
            libc::timer_delete(timer);
            return Err(e.into());
        }
        Ok(timer)
    }
}
