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

/// The calling thread's CPU clock, which other threads can read too (`clock_ns`).
pub fn current_thread_cpu_clock() -> anyhow::Result<libc::clockid_t> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: a query about the calling thread with a valid out-pointer.
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
    if rc != 0 {
        anyhow::bail!(
            "cannot read the thread's CPU clock: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    Ok(clock)
}

/// Monotonic wall time; the timestamps of samples.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The time between samples at `rate_hz` samples per second.
pub fn sampling_period(rate_hz: u32) -> std::time::Duration {
    std::time::Duration::from_nanos((1_000_000_000 / u64::from(rate_hz.max(1))).max(1))
}

/// What drives sampling, and what a sample's time is measured in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Clock {
    /// Samples follow the guest thread's CPU time: a blocked guest is not sampled.
    #[default]
    Cpu,
    /// Samples follow wall time: a guest blocked in a host call (sleeping, reading) is sampled
    /// there, and samples also carry wall time.
    Wall,
    /// Samples follow the Wasm instructions the guest executes, counted by Wasmtime's fuel
    /// (its cost per operator), every [`crate::ProfilerOptions::instruction_interval`] on average at
    /// intervals from a fixed seed: the same run of the same program gives the same samples,
    /// on any machine. Host calls execute no Wasm instructions: they are not sampled.
    Instructions,
}

impl std::str::FromStr for Clock {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(Clock::Cpu),
            "wall" => Ok(Clock::Wall),
            "instructions" => Ok(Clock::Instructions),
            _ => Err(format!("expected cpu, wall or instructions, got `{s}`")),
        }
    }
}

impl std::fmt::Display for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Clock::Cpu => "cpu",
            Clock::Wall => "wall",
            Clock::Instructions => "instructions",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This thread's CPU clock agrees with the kernel's accounting of the thread
    /// (`getrusage(RUSAGE_THREAD)`, in ticks) and does not count time spent asleep.
    #[test]
    fn thread_cpu_counts_this_threads_work_and_not_its_sleep() {
        let rusage_ns = || {
            // SAFETY: all zeros is a valid `rusage` (integers and timevals).
            let mut u: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: getrusage only writes the struct it is given.
            assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
            let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
            ns(u.ru_utime) + ns(u.ru_stime)
        };
        let (cpu, kernel) = (thread_cpu_ns(), rusage_ns());
        let mut x = 0u64;
        for i in 0..200_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let (worked, kernel_worked) = (thread_cpu_ns() - cpu, rusage_ns() - kernel);
        // The kernel's figure is in scheduler ticks (4 ms at 250 Hz) at each end.
        let tick = 10_000_000;
        assert!(
            worked + tick >= kernel_worked && kernel_worked + tick >= worked,
            "{worked} ns by the clock, {kernel_worked} ns by getrusage"
        );
        assert!(worked > 0);

        let (cpu, wall) = (thread_cpu_ns(), monotonic_ns());
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(monotonic_ns() - wall >= 50_000_000);
        assert!(thread_cpu_ns() - cpu < 5_000_000, "asleep, yet using CPU");
    }
}
