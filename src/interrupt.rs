//! Ctrl-C during `record`: stop the guest, keep the profile, exit 130; after the guest has
//! ended (the live server kept up), exit with the guest's code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};
use signal_hook::consts::SIGINT;
use signal_hook::iterator::Signals;
use wasmspy::profile::Profile;
use wasmspy::ProfilerHandle;

/// How long the guest has to reach an epoch check after Ctrl-C, on an engine with epochs (the
/// epoch sampler's). A guest blocked in a host call (reading stdin, sleeping) never gets there,
/// so after this the profile recorded so far is saved from here.
const GRACE: Duration = Duration::from_secs(1);

pub const EXIT_CODE: i32 = 130;

/// How far the guest's run has come, for Ctrl-C: whether its run has returned (the main
/// thread then writes the profile and exits), and once the profile is written and the live
/// server still up, the code to exit with.
#[derive(Clone, Default)]
pub struct GuestEnded(Arc<(AtomicBool, OnceLock<i32>)>);

impl GuestEnded {
    /// The guest's run has returned.
    pub fn returned(&self) {
        self.0 .0.store(true, Ordering::SeqCst);
    }

    /// Its profile is written: Ctrl-C now exits with `code`.
    pub fn set(&self, code: i32) {
        let _ = self.0 .1.set(code);
    }
}

/// On SIGINT, calls `save` with the profile so far and exits, the guest still running: with
/// the signal sampler the engine has no epochs, so nothing could stop the guest's code, and
/// the process ends as `wasmtime run` does on Ctrl-C, with the profile written first. On an
/// engine with epochs the guest is interrupted first and given [`GRACE`] to stop, its run then
/// ending as any other (the main thread writes the profile). Once the guest has ended, exits
/// at once with its code.
pub fn stop_guest_on_ctrl_c(
    profiler: ProfilerHandle,
    ended: GuestEnded,
    save: impl FnOnce(&Profile) + Send + 'static,
) -> Result<()> {
    let mut signals = Signals::new([SIGINT]).context("cannot handle SIGINT")?;
    std::thread::Builder::new()
        .name("wasmspy-sigint".into())
        .spawn(move || {
            if signals.forever().next().is_none() {
                return;
            }
            if let Some(&code) = ended.0 .1.get() {
                std::process::exit(code);
            }
            if profiler.interrupt() {
                std::thread::sleep(GRACE);
                if ended.0 .0.load(Ordering::SeqCst) {
                    return; // stopped: the main thread writes the profile and exits
                }
            }
            save(&profiler.snapshot());
            std::process::exit(EXIT_CODE);
        })
        .context("cannot start the SIGINT thread")?;
    Ok(())
}
