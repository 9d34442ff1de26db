//! `--jitdump` and `--perfmap`: the files Linux perf reads to name the guest's compiled code
//! (see [`wasmspy::perf`]), written once the program is compiled, before it runs.

use anyhow::Result;
use wasmspy::ProfilerHandle;

use crate::cli::ProfilingArgs;

/// What must stay alive while the guest runs: the jitdump file, mapped.
pub struct PerfFiles {
    #[cfg(target_os = "linux")]
    _jitdump: Option<wasmspy::perf::jitdump::JitDump>,
}

/// Writes the files `args` asks for, of the code registered with `profiler`.
pub fn write(args: &ProfilingArgs, profiler: &ProfilerHandle) -> Result<PerfFiles> {
    if !args.jitdump && !args.perfmap {
        return Ok(PerfFiles {
            #[cfg(target_os = "linux")]
            _jitdump: None,
        });
    }
    if args.on_pulley() {
        anyhow::bail!(
            "--jitdump and --perfmap describe compiled code; under Pulley perf sees only the interpreter"
        );
    }
    let listing = profiler.code_listing();
    if args.perfmap {
        let path = wasmspy::perf::perfmap::write(&listing)?;
        eprintln!(
            "wasmspy: wrote {} ({} functions)",
            path.display(),
            listing.len()
        );
    }
    #[cfg(target_os = "linux")]
    let jitdump = match args.jitdump {
        true => {
            let dump = wasmspy::perf::jitdump::write(&listing)?;
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
    if args.jitdump {
        anyhow::bail!("--jitdump is for Linux perf: not available on this system");
    }
    Ok(PerfFiles {
        #[cfg(target_os = "linux")]
        _jitdump: jitdump,
    })
}
