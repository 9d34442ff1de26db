//! Signal-driven sampling: the kernel sends SIGPROF to the guest thread at the sampling rate of
//! its CPU time or of wall time ([`timer`]). The handler ([`handler`]) records raw PCs into a
//! ring; a drain thread hands them to the sink. Guests called with
//! `call_async` run on fiber stacks that [`fiber_stacks`] allocates, so the handler can walk
//! them too. Unlike epoch sampling, a sample lands wherever the guest is: in loop-free code,
//! in a host call, in Wasmtime itself.

pub mod fiber_stacks;
pub mod handler;
mod ring;
pub mod store_contexts;
mod timer;

use std::ops::Range;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::{NativeSample, SampleValues, Sampler, Sink};
use crate::clock::{sampling_period, Clock};
use handler::{HandlerState, Kind, RawSample};
use ring::Ring;
use timer::SignalTimer;

/// How often the drain thread empties the ring.
const DRAIN_PERIOD: Duration = Duration::from_millis(10);
/// Ring slots: at 100 kHz, ten drain periods' worth.
const RING_SLOTS: usize = 1024;

/// The sampled thread.
struct GuestThread {
    tid: libc::pid_t,
    stack: Range<usize>,
}

struct Running {
    state: Arc<HandlerState>,
    timer: SignalTimer,
    stop_drain: Sender<()>,
    drain: JoinHandle<()>,
}

pub struct SignalSampler {
    period: Duration,
    clock: Clock,
    sink: Arc<dyn Sink>,
    guest: Option<GuestThread>,
    running: Option<Running>,
}

impl SignalSampler {
    pub fn new(rate_hz: u32, clock: Clock, sink: Arc<dyn Sink>) -> Self {
        SignalSampler {
            period: sampling_period(rate_hz),
            clock,
            sink,
            guest: None,
            running: None,
        }
    }
}

impl Sampler for SignalSampler {
    fn name(&self) -> &'static str {
        "signal"
    }

    fn bind_to_current_thread(&mut self) -> Result<()> {
        self.guest = Some(GuestThread {
            // SAFETY: gettid has no preconditions.
            tid: unsafe { libc::gettid() },
            stack: current_thread_stack()?,
        });
        Ok(())
    }

    fn start(&mut self, code: &[Range<usize>]) -> Result<()> {
        if self.running.is_some() {
            return Ok(());
        }
        let Some(guest) = &self.guest else {
            bail!("the signal sampler was not bound to the guest thread (Profiler::attach)");
        };
        handler::install().context("cannot install the SIGPROF handler")?;
        let cpu_period_ns = match self.clock {
            Clock::Cpu => self.period.as_nanos() as u64,
            Clock::Wall => 0,
        };
        let timer = SignalTimer::create(guest.tid).context("cannot create the sampling timer")?;
        let state = Arc::new(HandlerState::new(
            Ring::new(RING_SLOTS, RawSample::empty),
            guest.stack.clone(),
            code.iter().cloned(),
            cpu_period_ns,
            &timer,
            self.period,
        ));
        state.reset_clocks();
        if !handler::attach(&state) {
            bail!("another signal sampler is running in this process; use the epoch sampler");
        }
        let (stop_drain, stopped) = mpsc::channel::<()>();
        let drain = {
            let state = state.clone();
            let sink = self.sink.clone();
            std::thread::Builder::new()
                .name("wasmspy-drain".into())
                .spawn(move || loop {
                    let stopping = !matches!(
                        stopped.recv_timeout(DRAIN_PERIOD),
                        Err(RecvTimeoutError::Timeout)
                    );
                    drain(&state, sink.as_ref());
                    if stopping {
                        break;
                    }
                })
        };
        let started = drain
            .context("cannot start the drain thread")
            .and_then(|drain| {
                state
                    .arm_next_tick(crate::clock::monotonic_ns())
                    .context("cannot arm the sampling timer")?;
                Ok(drain)
            });
        // On failure, returning drops `stop_drain`, which ends the drain thread.
        let drain = match started {
            Ok(drain) => drain,
            Err(e) => {
                handler::detach();
                return Err(e);
            }
        };
        self.running = Some(Running {
            state,
            timer,
            stop_drain,
            drain,
        });
        Ok(())
    }

    fn stop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        // Detached first: the handler re-arms the timer until then.
        handler::detach();
        drop(running.timer);
        drop(running.stop_drain);
        let _ = running.drain.join();
        let lost = running
            .state
            .lost
            .load(std::sync::atomic::Ordering::Relaxed);
        self.sink.lost(lost);
    }
}

impl Drop for SignalSampler {
    fn drop(&mut self) {
        self.stop();
    }
}

fn drain(state: &HandlerState, sink: &dyn Sink) {
    while state.ring.pop_with(|s| {
        let values = SampleValues {
            cpu_ns: s.cpu_delta_ns,
            wall_ns: s.wall_delta_ns,
        };
        let sample = match s.kind {
            Kind::Guest => NativeSample::Guest(s.pcs()),
            Kind::Host => NativeSample::Host(s.pcs()),
        };
        sink.native(sample, values, s.time_ns);
    }) {}
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
