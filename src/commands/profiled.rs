//! What `record` and `serve` set up before the guest runs: an engine configured for the
//! profiler's options, the profiler, and the allocator rewrite when memory is profiled.

use anyhow::{Context, Result};
use wasmspy::capture::SamplerKind;
use wasmspy::Profiler;
use wasmtime::{Config, Engine};

use crate::cli::ProfilingArgs;
use crate::commands::outputs::{Counts, Outputs};
use crate::commands::rewrite::Rewrite;

pub struct Profiled {
    pub engine: Engine,
    pub profiler: Profiler,
    /// What `--verbose` prints.
    pub counts: Option<Counts>,
    pub rewritten: Rewrite,
}

impl Profiled {
    /// Sampling at `--rate` or `default_rate`; `config`, the command's engine settings, is told
    /// whether the allocators are rewritten. `wasm` is the program named `name`.
    pub fn new(
        args: &ProfilingArgs,
        default_rate: u32,
        outputs: &Outputs,
        config: impl FnOnce(bool) -> Config,
        wasm: &[u8],
        name: &str,
    ) -> Result<Self> {
        let timeline = outputs.cpu.iter().any(|o| o.format.shows_time());
        let mut options = args.options(default_rate, timeline);
        if args.on_pulley() && options.sampler == SamplerKind::Auto {
            if let Err(e) = wasmspy::capture::signals_sample_pulley() {
                eprintln!("wasmspy: warning: {e:#}; sampling at epochs instead");
                options.sampler = SamplerKind::Epoch;
            }
        }
        let mut config = config(outputs.memory.is_some());
        if let Some(target) = &args.target {
            config
                .target(target)
                .map_err(anyhow::Error::from)
                .with_context(|| format!("cannot compile for `--target {target}`"))?;
        }
        Profiler::configure(&mut config, &options);
        let engine = Engine::new(&config)?;
        let profiler = Profiler::new(&engine, options.clone())?;
        let counts = args.verbose.then(|| Counts::of(&profiler, &options));
        let rewritten = match &outputs.memory {
            Some(_) => Rewrite::of(wasm, name)?,
            None => Rewrite::None,
        };
        Ok(Profiled {
            engine,
            profiler,
            counts,
            rewritten,
        })
    }
}
