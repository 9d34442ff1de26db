//! Ctrl-C during `record`: stop the guest, keep the profile, exit 130.

use std::time::Duration;

use anyhow::{Context, Result};
use signal_hook::consts::SIGINT;
use signal_hook::iterator::Signals;
use wasmspy::profile::Profile;
use wasmspy::ProfilerHandle;

/// How long the guest has to reach an epoch check after Ctrl-C. A guest blocked in a host
/// call (reading stdin, sleeping) never gets there, so after this the profile recorded so
/// far is saved from here.
const GRACE: Duration = Duration::from_secs(1);

pub const EXIT_CODE: i32 = 130;

/// On SIGINT, interrupts the guest; if the guest has not stopped within [`GRACE`], calls
/// `save` with the profile so far and exits.
pub fn stop_guest_on_ctrl_c(
    profiler: ProfilerHandle,
    save: impl FnOnce(&Profile) + Send + 'static,
) -> Result<()> {
    let mut signals = Signals::new([SIGINT]).context("cannot handle SIGINT")?;
    std::thread::Builder::new()
        .name("wasmspy-sigint".into())
        .spawn(move || {
            if signals.forever().next().is_none() {
                return;
            }
            profiler.interrupt();
            std::thread::sleep(GRACE);
            save(&profiler.snapshot());
            std::process::exit(EXIT_CODE);
        })
        .context("cannot start the SIGINT thread")?;
    Ok(())
}
