//! Clocks: each sample is charged the guest thread's CPU time (and, in wall-clock mode, the
//! wall time) since the previous one.

/// Reads `clock` in nanoseconds; 0 if it cannot be read. Async-signal-safe (`clock_gettime` is).
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time consumed so far by the calling thread.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Monotonic wall time; the timestamps of samples.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The time between samples at `rate_hz` samples per second.
pub fn sampling_period(rate_hz: u32) -> std::time::Duration {
    std::time::Duration::from_nanos(1_000_000_000 / u64::from(rate_hz.max(1)))
}

/// What drives sampling, and what a sample's time is measured in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Clock {
    /// Samples follow the guest thread's CPU time: a blocked guest is not sampled.
    #[default]
    Cpu,
    /// Samples follow wall time: a guest blocked in a host call (sleeping, reading) is sampled
    /// there, and samples also carry wall time.
    Wall,
}

impl std::str::FromStr for Clock {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Clock::Cpu),
            "wall" => Ok(Clock::Wall),
            _ => Err(format!("expected cpu or wall, got `{s}`")),
        }
    }
}

impl std::fmt::Display for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Clock::Cpu => "cpu",
            Clock::Wall => "wall",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_advances_with_work_on_this_thread() {
        let before = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - before < 5_000_000 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        assert!(thread_cpu_ns() - before >= 5_000_000);
        assert!(monotonic_ns() > 0);
    }
}
