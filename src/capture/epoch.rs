//! Epoch sampling: a ticker thread advances Wasmtime's epoch at the sampling rate (of the guest
//! thread's CPU time, or of wall time), and the store's epoch-deadline callback, running on the
//! guest thread, captures the guest's stack.
//!
//! Compiled code only checks the epoch at function entries and loop headers, so a sample lands
//! at the next such point after the tick, not where the tick happened; time in host calls is
//! charged to the guest frame that runs next.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use wasmtime::{AsContext, Engine, WasmBacktrace};

use super::intervals::RandomIntervals;
use super::{SampleValues, Sampler, Sink, Taken};
use crate::clock::{clock_ns, current_thread_cpu_clock, monotonic_ns, sampling_period};
use crate::profile::ThreadId;
use crate::runtimes::{GuestPoint, RuntimeInstance};
use crate::shared::GuestStack;

pub struct EpochSampler {
    engine: Engine,
    period: Duration,
    /// Ticking by wall time, not the guest thread's CPU time.
    wall: bool,
    /// On the CPU clock, the guest thread, while one is bound.
    guest: Option<ThreadId>,
    /// Its CPU clock ([`UNBOUND`]: none), which the ticker reads at each tick: a thread bound
    /// after [`Sampler::start`], or in place of one that ended, is followed too.
    guest_clock: Arc<AtomicI64>,
    ticker: Option<(Sender<()>, JoinHandle<()>)>,
}

impl EpochSampler {
    /// At `rate_hz` of the guest thread's CPU time, or of wall time if `wall`.
    pub fn new(engine: &Engine, rate_hz: u32, wall: bool) -> Self {
        EpochSampler {
            engine: engine.clone(),
            period: sampling_period(rate_hz),
            wall,
            guest: None,
            guest_clock: Arc::new(AtomicI64::new(UNBOUND)),
            ticker: None,
        }
    }
}

impl Sampler for EpochSampler {
    fn name(&self) -> &'static str {
        "epoch"
    }

    /// On the CPU clock, one thread at a time: the ticks follow its CPU time, so a guest on
    /// another thread would be sampled only while that one runs too. The wall clock's ticks
    /// follow no thread.
    fn bind_to_current_thread(&mut self) -> Result<()> {
        if self.wall {
            return Ok(());
        }
        let thread = current_thread();
        match self.guest {
            Some(bound) if bound == thread => Ok(()),
            Some(_) => Err(crate::Error::Unavailable(
                "the epoch sampler on the CPU clock ticks by one thread's CPU time, and guests \
                 on a second thread would be sampled only while the first runs: use the signal \
                 sampler, or the wall clock"
                    .into(),
            )
            .into()),
            None => {
                let clock = current_thread_cpu_clock()?;
                self.guest = Some(thread);
                self.guest_clock.store(clock.into(), Ordering::Relaxed);
                Ok(())
            }
        }
    }

    fn unbind_thread(&mut self, thread: ThreadId) {
        if self.guest == Some(thread) {
            self.guest = None;
            self.guest_clock.store(UNBOUND, Ordering::Relaxed);
        }
    }

    fn start(&mut self, _code: &[std::ops::Range<usize>]) -> Result<()> {
        if self.ticker.is_some() {
            return Ok(());
        }
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let engine = self.engine.clone();
        let period = self.period;
        let guest_clock = self.guest_clock.clone();
        let thread = std::thread::Builder::new()
            .name("wasmspy-epoch".into())
            .spawn(move || {
                // Random intervals of the period's mean, not the period itself: a guest that
                // repeats itself at a multiple of the period would otherwise be sampled at the
                // same points of its cycle (an interpreted script's two functions, timed in
                // alternation, came out 6 to 7 points off their split in some runs).
                let period_ns = period.as_nanos() as u64;
                let mut intervals = RandomIntervals::new(period_ns, monotonic_ns());
                let mut ticks = CpuTicks::default();
                loop {
                    let wait = Duration::from_nanos(intervals.next_uniform());
                    if !matches!(stop_rx.recv_timeout(wait), Err(RecvTimeoutError::Timeout)) {
                        break;
                    }
                    if ticks.due(guest_clock.load(Ordering::Relaxed), &mut intervals) {
                        engine.increment_epoch();
                    }
                }
            })
            .context("cannot start the sampling thread")?;
        self.ticker = Some((stop_tx, thread));
        Ok(())
    }

    fn stop(&mut self) {
        if let Some((stop, thread)) = self.ticker.take() {
            drop(stop);
            let _ = thread.join();
        }
    }

    fn samples_at_epochs(&self) -> bool {
        true
    }
}

/// No guest thread's CPU clock: the ticks follow wall time (the wall clock's, or on the CPU
/// clock while no thread is bound).
const UNBOUND: i64 = i64::MIN;

/// When the ticker ticks on the CPU clock: each time the bound thread has used another
/// interval of CPU.
#[derive(Default)]
struct CpuTicks {
    /// The clock followed (`None`: wall time), and when it is due.
    followed: Option<(libc::clockid_t, u64)>,
}

impl CpuTicks {
    /// Whether to tick now, the thread's clock being `clock` ([`UNBOUND`]: tick).
    fn due(&mut self, clock: i64, intervals: &mut RandomIntervals) -> bool {
        let Ok(clock) = libc::clockid_t::try_from(clock) else {
            self.followed = None;
            return true;
        };
        let used = clock_ns(clock);
        match self.followed {
            Some((followed, next)) if followed == clock && used < next => false,
            // A clock newly bound starts its first interval now.
            Some((followed, _)) if followed == clock => {
                self.followed = Some((clock, used + intervals.next_uniform()));
                true
            }
            _ => {
                self.followed = Some((clock, used + intervals.next_uniform()));
                false
            }
        }
    }
}

impl Drop for EpochSampler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Takes the store's current guest stack, with the stack of the runtime instance `runtime`
/// in it (a goroutine's, Python's). Runs on the guest thread.
pub fn take_sample(
    store: impl AsContext,
    runtime: Option<&RuntimeInstance>,
    taken: Taken,
    sink: &dyn Sink,
    values: SampleValues,
) {
    let backtrace = WasmBacktrace::capture(store);
    let stack = match runtime {
        Some(runtime) => runtime.stack(backtrace, GuestPoint::Epoch),
        None => GuestStack::wasm(backtrace),
    };
    sink.backtrace(stack, taken, values);
}

/// The calling thread's id.
pub fn current_thread() -> ThreadId {
    // SAFETY: gettid has no preconditions.
    ThreadId(unsafe { libc::gettid() } as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::thread_cpu_ns;

    /// Unbound, the ticker ticks by wall time; bound, each time the thread has used another
    /// interval of CPU (a newly bound clock starting its first interval then), and back to
    /// wall time once the thread is gone.
    #[test]
    fn ticks_follow_the_thread_bound_now() {
        let mut intervals = RandomIntervals::new(1_000_000, 7);
        let mut ticks = CpuTicks::default();
        assert!(ticks.due(UNBOUND, &mut intervals));
        let clock = current_thread_cpu_clock().unwrap();
        assert!(
            !ticks.due(clock.into(), &mut intervals),
            "a new clock's first interval"
        );
        assert!(
            !ticks.due(clock.into(), &mut intervals),
            "no CPU used since"
        );
        // Intervals are at most twice the 1 ms mean.
        let start = thread_cpu_ns();
        while thread_cpu_ns() - start < 3_000_000 {
            std::hint::black_box(0);
        }
        assert!(ticks.due(clock.into(), &mut intervals));
        assert!(
            !ticks.due(clock.into(), &mut intervals),
            "the next interval begun"
        );
        assert!(ticks.due(UNBOUND, &mut intervals));
    }
}
