//! Epoch sampling: a ticker thread advances Wasmtime's epoch at the sampling rate, and the
//! store's epoch-deadline callback, running on the guest thread, captures the guest's stack.
//!
//! Compiled code only checks the epoch at function entries and loop headers, so a sample lands
//! at the next such point after the tick, not where the tick happened; time in host calls is
//! charged to the guest frame that runs next.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use wasmtime::{AsContext, Engine, WasmBacktrace};

use super::{RawFrame, Sampler};
use crate::collector::Collector;

pub struct EpochSampler {
    engine: Engine,
    period: Duration,
    ticker: Option<(Sender<()>, JoinHandle<()>)>,
}

impl EpochSampler {
    pub fn new(engine: &Engine, rate_hz: u32) -> Self {
        EpochSampler {
            engine: engine.clone(),
            period: Duration::from_nanos(1_000_000_000 / u64::from(rate_hz.max(1))),
            ticker: None,
        }
    }
}

impl Sampler for EpochSampler {
    fn name(&self) -> &'static str {
        "epoch"
    }

    fn start(&mut self) -> Result<()> {
        if self.ticker.is_some() {
            return Ok(());
        }
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let engine = self.engine.clone();
        let period = self.period;
        let thread = std::thread::Builder::new()
            .name("wasmspy-epoch".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stop_rx.recv_timeout(period) {
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
}

impl Drop for EpochSampler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Records the store's current guest stack, charged `cpu_ns`. Runs on the guest thread.
pub fn take_sample(store: impl AsContext, collector: &Mutex<Collector>, cpu_ns: u64) {
    let now = Instant::now();
    let backtrace = WasmBacktrace::capture(store);
    let mut collector = collector.lock().unwrap_or_else(|e| e.into_inner());
    let frames: Vec<RawFrame> = backtrace
        .frames()
        .iter()
        .map(|f| RawFrame {
            module: collector.module_index(f.module()),
            func_index: f.func_index(),
            offset: f.module_offset().unwrap_or(0) as u32,
        })
        .collect();
    collector.add_sample(&frames, cpu_ns, now);
}
