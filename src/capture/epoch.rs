//! Epoch sampling: a ticker thread advances Wasmtime's epoch at the sampling rate (of the guest
//! thread's CPU time, or of wall time), and the store's epoch-deadline callback, running on the
//! guest thread, captures the guest's stack.
//!
//! Compiled code only checks the epoch at function entries and loop headers, so a sample lands
//! at the next such point after the tick, not where the tick happened; time in host calls is
//! charged to the guest frame that runs next.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
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
    /// The guest thread and its CPU clock, once bound.
    guest: Option<(ThreadId, libc::clockid_t)>,
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
            ticker: None,
        }
    }
}

impl Sampler for EpochSampler {
    fn name(&self) -> &'static str {
        "epoch"
    }

    /// On the CPU clock, one thread only: the ticks follow its CPU time, so a guest on another
    /// thread would be sampled only while that one runs too.
    fn bind_to_current_thread(&mut self) -> Result<()> {
        let thread = current_thread();
        match self.guest {
            Some((bound, _)) if bound == thread => Ok(()),
            Some(_) if !self.wall => Err(crate::Error::Unavailable(
                "the epoch sampler on the CPU clock ticks by one thread's CPU time, and guests \
                 on a second thread would be sampled only while the first runs: use the signal \
                 sampler, or the wall clock"
                    .into(),
            )
            .into()),
            _ => {
                self.guest = Some((thread, current_thread_cpu_clock()?));
                Ok(())
            }
        }
    }

    fn start(&mut self, _code: &[std::ops::Range<usize>]) -> Result<()> {
        if self.ticker.is_some() {
            return Ok(());
        }
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let engine = self.engine.clone();
        let period = self.period;
        // On the CPU clock, tick each time the guest thread has used another period of CPU.
        let cpu_clock = match self.wall {
            false => self.guest.map(|(_, clock)| clock),
            true => None,
        };
        let thread = std::thread::Builder::new()
            .name("wasmspy-epoch".into())
            .spawn(move || {
                // Random intervals of the period's mean, not the period itself: a guest that
                // repeats itself at a multiple of the period would otherwise be sampled at the
                // same points of its cycle (an interpreted script's two functions, timed in
                // alternation, came out 6 to 7 points off their split in some runs).
                let period_ns = period.as_nanos() as u64;
                let mut intervals = RandomIntervals::new(period_ns, monotonic_ns());
                let mut next_cpu = cpu_clock.map_or(0, clock_ns) + intervals.next_uniform();
                loop {
                    let wait = Duration::from_nanos(intervals.next_uniform());
                    if !matches!(stop_rx.recv_timeout(wait), Err(RecvTimeoutError::Timeout)) {
                        break;
                    }
                    if let Some(clock) = cpu_clock {
                        let used = clock_ns(clock);
                        if used < next_cpu {
                            continue;
                        }
                        next_cpu = used + intervals.next_uniform();
                    }
                    engine.increment_epoch();
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
