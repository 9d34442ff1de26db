//! Ctrl-C (SIGINT), SIGTERM and SIGHUP during `record`: keep the profile, then exit with the
//! status a shell reports for that signal (130, 143, 129); a second one while the profile is
//! being written exits at once. After the guest has ended (the live server kept up), exit with
//! the guest's code.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::profile::Profile;
use crate::ProfilerHandle;
use anyhow::{Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// How long the guest has to reach an epoch check after Ctrl-C, on an engine with epochs (the
/// epoch sampler's). A guest blocked in a host call (reading stdin, sleeping) never gets there,
/// so after this the profile recorded so far is saved from here.
const GRACE: Duration = Duration::from_secs(1);

/// The signal that ended the run (SIGINT until one arrives).
static SIGNAL: AtomicI32 = AtomicI32::new(SIGINT);

/// The status a shell reports for a process ended by the signal that ended the run.
pub fn exit_code() -> i32 {
    128 + SIGNAL.load(Ordering::SeqCst)
}

/// How the run ended, for stderr.
pub fn ended_by() -> &'static str {
    match SIGNAL.load(Ordering::SeqCst) {
        SIGTERM => "terminated (SIGTERM)",
        SIGHUP => "hung up (SIGHUP)",
        _ => "interrupted",
    }
}

/// How far the guest's run has come, for Ctrl-C: whether its run has returned (the main
/// thread then writes the profile and exits), and once the profile is written and the live
/// server still up, the code to exit with.
#[derive(Clone, Default)]
pub struct GuestEnded(Arc<RunState>);

#[derive(Default)]
struct RunState {
    returned: AtomicBool,
    exit_code: OnceLock<i32>,
}

impl GuestEnded {
    /// The guest's run has returned.
    pub fn returned(&self) {
        self.0.returned.store(true, Ordering::SeqCst);
    }

    /// Its profile is written: a signal now exits with `code`.
    pub fn set(&self, code: i32) {
        let _ = self.0.exit_code.set(code);
    }
}

/// On SIGINT, SIGTERM or SIGHUP, calls `save` with the profile so far and exits, the guest
/// still running: with the signal sampler the engine has no epochs, so nothing could stop the
/// guest's code, and the process ends as `wasmtime run` does on such a signal, with the
/// profile written first. On an engine with epochs the guest is interrupted first and given
/// [`GRACE`] to stop, its run then ending as any other (the main thread writes the profile).
/// Once the guest has ended, exits at once with its code. A second signal exits at once.
pub fn stop_guest_on_signals(
    profiler: ProfilerHandle,
    ended: GuestEnded,
    save: impl FnOnce(&Profile) + Send + 'static,
) -> Result<()> {
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGHUP]).context("cannot handle SIGINT and SIGTERM")?;
    std::thread::Builder::new()
        .name("wasmspy-signals".into())
        .spawn(move || {
            let mut received = signals.forever();
            let Some(signal) = received.next() else {
                return;
            };
            // The live view (`--top`) ends here: what follows is said on the terminal.
            crate::commands::top::restore_terminal();
            if let Some(&code) = ended.0.exit_code.get() {
                std::process::exit(code);
            }
            SIGNAL.store(signal, Ordering::SeqCst);
            let saving = std::thread::spawn(move || {
                if profiler.interrupt() {
                    std::thread::sleep(GRACE);
                    if ended.0.returned.load(Ordering::SeqCst) {
                        return; // stopped: the main thread writes the profile and exits
                    }
                }
                // Exits even if saving panics: printing to a stderr gone (the terminal closed,
                // SIGHUP) panics in `eprintln!`, and the guest would run on with nobody to stop it.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    save(&profiler.snapshot())
                }));
                std::process::exit(exit_code());
            });
            if let Some(again) = received.next() {
                say!("wasmspy: a second signal: exiting without waiting for the profile");
                std::process::exit(128 + again);
            }
            let _ = saving.join();
        })
        .context("cannot start the signal thread")?;
    Ok(())
}
