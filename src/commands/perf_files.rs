//! `--jitdump` and `--perfmap`: the files Linux perf reads to name the guest's compiled code
//! (see [`crate::perf`]), written once the program is compiled, before it runs.

use crate::ProfilerHandle;
use anyhow::Result;

use super::guest_args::GuestArgs;
use super::profiling_args::ProfilingArgs;

/// What must stay alive while the guest runs: the jitdump file, mapped.
pub struct PerfFiles {
    #[cfg(target_os = "linux")]
    _jitdump: Option<crate::perf::jitdump::JitDump>,
}

/// Writes the files `args` (or `--profile`) asks for, of the code registered with `profiler`.
pub fn write(
    args: &ProfilingArgs,
    guest: &GuestArgs,
    profiler: &ProfilerHandle,
) -> Result<PerfFiles> {
    let (perfmap, jitdump) = guest.perf_profile()?;
    let (perfmap, jitdump) = (args.perfmap || perfmap, args.jitdump || jitdump);
    if !jitdump && !perfmap {
        return Ok(PerfFiles {
            #[cfg(target_os = "linux")]
            _jitdump: None,
        });
    }
    if guest.on_pulley() {
        anyhow::bail!(
            "--jitdump and --perfmap describe compiled code; under Pulley perf sees only the interpreter"
        );
    }
    let listing = profiler.code_listing();
    if perfmap {
        let path = crate::perf::perfmap::write(&listing)?;
        eprintln!(
            "wasmspy: wrote {} ({} functions)",
            path.display(),
            listing.len()
        );
    }
    #[cfg(target_os = "linux")]
    let jitdump = match jitdump {
        true => {
            let dump = crate::perf::jitdump::write(&listing)?;
            let lines: usize = listing.iter().map(|f| f.lines.len()).sum();
            eprintln!(
                "wasmspy: wrote {} ({} functions, {lines} source lines)",
                dump.path.display(),
                listing.len()
            );
            Some(dump)
        }
        false => None,
    };
    #[cfg(not(target_os = "linux"))]
    if jitdump {
        anyhow::bail!("--jitdump is for Linux perf: not available on this system");
    }
    Ok(PerfFiles {
        #[cfg(target_os = "linux")]
        _jitdump: jitdump,
    })
}
