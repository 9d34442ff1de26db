//! What `record` and `serve` give the guest, as `wasmtime run` and `wasmtime serve` spell it.

use anyhow::{anyhow, bail, Result};
use clap::Args;
use wasmtime_cli_flags::CommonOptions;

use crate::wasi_host::{DirMount, UnknownImports, WasiConfig};

/// The heading of the options that are `wasmtime run`'s (and, but `--invoke`, `--preload`
/// and `--argv0`, `wasmtime serve`'s).
pub(super) const WASMTIME: &str = "Wasmtime's options";
/// The heading of wasmspy's own options that say what the guest is given.
pub(super) const WASMSPY: &str = "wasmspy's options for the guest";

/// What the guest is given, as `wasmtime run` and `wasmtime serve` spell it: their options,
/// `-O`/`-C`/`-D`/`-W`/`-S` parsed and applied by Wasmtime's own crate for them.
#[derive(Args)]
pub struct GuestArgs {
    #[command(flatten, next_help_heading = WASMTIME)]
    pub wasmtime: CommonOptions,

    /// Grant access of a host directory to a guest.
    ///
    /// If specified as just `HOST_DIR` then the same directory name on the
    /// host is made available within the guest. If specified as `HOST::GUEST`
    /// then the `HOST` directory is opened and made available as the name
    /// `GUEST` in the guest.
    #[arg(long = "dir", value_name = "HOST_DIR[::GUEST_DIR]", help_heading = WASMTIME)]
    pub dirs: Vec<DirMount>,

    /// Pass an environment variable to the program.
    ///
    /// The `--env FOO=BAR` form will set the environment variable named `FOO`
    /// to the value `BAR` for the guest program using WASI. The `--env FOO`
    /// form will set the environment variable named `FOO` to the same value it
    /// has in the calling process for the guest, or in other words it will
    /// cause the environment variable `FOO` to be inherited.
    #[arg(long = "env", number_of_values = 1, value_name = "NAME[=VAL]", help_heading = WASMTIME)]
    pub env: Vec<String>,

    /// Profiling strategy: wasmspy takes `perfmap` and `jitdump` (as `--perfmap` and
    /// `--jitdump`); `guest`, `vtune` and `pulley` are refused (wasmspy is the profiler).
    #[arg(long, value_name = "STRATEGY", help_heading = WASMTIME)]
    pub profile: Option<String>,

    /// Allow executing precompiled WebAssembly modules as `*.cwasm` files: refused, as
    /// wasmspy names functions from the WebAssembly a program was compiled from.
    #[arg(long, help_heading = WASMTIME)]
    pub allow_precompiled: bool,

    /// Give the guest all of the host's environment variables (as `-S inherit-env`).
    #[arg(long, help_heading = WASMSPY)]
    pub inherit_env: bool,

    /// Define imports nothing provides as functions that return zeros (e.g. Sightglass's
    /// `bench.start`/`bench.end`), for components too; `-W unknown-imports-default` means
    /// the same here.
    #[arg(long, conflicts_with = "trap_unknown_imports", help_heading = WASMSPY)]
    pub default_values_unknown_imports: bool,

    /// Define imports nothing provides as functions that fail when called (for a component,
    /// WASI's left to WASI); `-W unknown-imports-trap` means the same here.
    #[arg(long, help_heading = WASMSPY)]
    pub trap_unknown_imports: bool,
}

impl GuestArgs {
    /// Whether `--target` is Pulley's: the interpreter runs the guest, not compiled code.
    pub fn on_pulley(&self) -> bool {
        self.wasmtime
            .target
            .as_deref()
            .is_some_and(|t| t.starts_with("pulley"))
    }

    /// Reads `--config` and the option groups: Wasmtime's own step before it uses them (and
    /// where `-D logging` starts its log). Once, before anything reads them.
    pub fn configure(&mut self) -> Result<()> {
        self.wasmtime.init_logging().map_err(anyhow::Error::from)?;
        if self.wasmtime.debug.debugger.is_some() {
            bail!("-D debugger: wasmspy runs no debugger component; debug the program under `wasmtime run`");
        }
        if self.allow_precompiled {
            bail!("--allow-precompiled: wasmspy names functions from the WebAssembly, so profile the `.wasm` the program was compiled from");
        }
        Ok(())
    }

    fn unknown_imports(&self) -> UnknownImports {
        if self.default_values_unknown_imports {
            UnknownImports::DefaultValues
        } else if self.trap_unknown_imports {
            UnknownImports::Trap
        } else {
            UnknownImports::Reject
        }
    }

    /// `--profile` as wasmspy takes it: (`--perfmap`, `--jitdump`).
    pub fn perf_profile(&self) -> Result<(bool, bool)> {
        match self.profile.as_deref() {
            None => Ok((false, false)),
            Some("perfmap") => Ok((true, false)),
            Some("jitdump") => Ok((false, true)),
            Some(other) if other.starts_with("guest") => bail!(
                "--profile={other}: wasmspy is the guest profiler; its profile goes where -o says"
            ),
            Some(other) => bail!(
                "--profile={other}: wasmspy takes --profile=perfmap or --profile=jitdump (it is the profiler itself)"
            ),
        }
    }

    /// The guest's environment: the host's with `--inherit-env` (or `-S inherit-env`), then
    /// each `--env`.
    pub fn guest_env(&self) -> Result<Vec<(String, String)>> {
        let inherit = self.inherit_env || self.wasmtime.wasi.inherit_env == Some(true);
        let mut env: Vec<(String, String)> = Vec::new();
        if inherit {
            for (name, value) in std::env::vars_os() {
                let name = name
                    .into_string()
                    .map_err(|n| anyhow!("environment variable name {n:?} not valid utf-8"))?;
                let value = value.into_string().map_err(|v| {
                    anyhow!("environment variable {name:?} value {v:?} not valid utf-8")
                })?;
                env.push((name, value));
            }
        }
        for spec in &self.env {
            let (name, value) = match spec.split_once('=') {
                Some((name, value)) => (name.to_string(), Some(value.to_string())),
                None => (spec.clone(), std::env::var(spec).ok()),
            };
            env.retain(|(n, _)| *n != name);
            if let Some(value) = value {
                env.push((name, value));
            }
        }
        Ok(env)
    }

    /// What the guest is given, `argv` as its command line.
    pub fn wasi_config(&self, argv: Vec<String>) -> Result<WasiConfig> {
        Ok(WasiConfig {
            argv,
            env: self.guest_env()?,
            dirs: self.dirs.clone(),
            unknown_imports: self.unknown_imports(),
            wasi: self.wasmtime.wasi.clone(),
            wasm: self.wasmtime.wasm.clone(),
            coredump: self.wasmtime.debug.coredump.clone(),
            ..WasiConfig::default()
        })
    }
}
