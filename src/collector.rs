//! Turns raw samples into the [`profile`](crate::profile) model. Each distinct code address is
//! symbolized once; stacks and functions are interned.

use std::collections::HashMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use sha2::{Digest, Sha256};
use wasmtime::Module;

use crate::profile::{
    Frame, FrameId, Function, Line, Mapping, MappingId, Profile, ProfileBuilder, ProfileHeader,
    ValueType,
};
use crate::sampler::RawFrame;
use crate::symbolize::{FunctionName, ModuleSymbols};

/// Value indices of a CPU sample.
pub const SAMPLES: usize = 0;
pub const CPU: usize = 1;

struct RegisteredModule {
    module: Module,
    symbols: ModuleSymbols,
    mapping: MappingId,
}

pub struct Collector {
    modules: Vec<RegisteredModule>,
    builder: ProfileBuilder,
    frame_ids: HashMap<RawFrame, FrameId>,
    stack: Vec<FrameId>,
    rate_hz: u32,
    sampler: &'static str,
    started: Instant,
    started_unix_ns: i64,
    stopped: Option<Instant>,
}

impl Collector {
    pub fn new(rate_hz: u32, sampler: &'static str) -> Self {
        let started_unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        Collector {
            modules: Vec::new(),
            builder: ProfileBuilder::default(),
            frame_ids: HashMap::new(),
            stack: Vec::new(),
            rate_hz,
            sampler,
            started: Instant::now(),
            started_unix_ns,
            stopped: None,
        }
    }

    /// Registers a module whose frames samples may contain. Returns a warning when the
    /// module's names could not all be read.
    pub fn add_module(
        &mut self,
        file_name: &str,
        module: &Module,
        wasm: &[u8],
    ) -> Result<Option<String>> {
        let symbols = ModuleSymbols::parse(wasm)?;
        let warning = symbols.warning.clone();
        let mapping = self.builder.add_mapping(Mapping {
            file_name: file_name.to_string(),
            build_id: hex(&Sha256::digest(wasm)),
            size: wasm.len() as u64,
        });
        self.modules.push(RegisteredModule {
            module: module.clone(),
            symbols,
            mapping,
        });
        Ok(warning)
    }

    pub fn module_index(&self, module: &Module) -> Option<u32> {
        self.modules
            .iter()
            .position(|m| Module::same(&m.module, module))
            .map(|i| i as u32)
    }

    /// Adds a sample of `frames` (leaf first) charged `cpu_ns`.
    pub fn add_sample(&mut self, frames: &[RawFrame], cpu_ns: u64, at: Instant) {
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        stack.extend(frames.iter().map(|raw| self.frame_id(raw)));
        let stack_id = self.builder.stack(&stack);
        self.stack = stack;
        let time_ns = at.saturating_duration_since(self.started).as_nanos() as u64;
        self.builder.sample(
            stack_id,
            time_ns,
            vec![1, cpu_ns.min(i64::MAX as u64) as i64],
        );
    }

    fn frame_id(&mut self, raw: &RawFrame) -> FrameId {
        if let Some(&id) = self.frame_ids.get(raw) {
            return id;
        }
        let registered = raw.module.and_then(|m| self.modules.get(m as usize));
        let name = match registered {
            Some(m) => m.symbols.function_name(raw.func_index),
            None => FunctionName {
                name: format!("wasm-function[{}]", raw.func_index),
                system_name: format!("wasm-function[{}]", raw.func_index),
            },
        };
        let function = self.builder.function(&Function {
            name: name.name,
            system_name: name.system_name,
            file: String::new(),
            start_line: 0,
        });
        let id = self.builder.frame(&Frame {
            mapping: registered.map(|m| m.mapping),
            address: u64::from(raw.offset),
            lines: vec![Line {
                function,
                line: 0,
                column: 0,
            }],
        });
        self.frame_ids.insert(*raw, id);
        id
    }

    pub fn sample_count(&self) -> usize {
        self.builder.sample_count()
    }

    /// Marks the end of the recording: the profile's duration stops here.
    pub fn stop(&mut self) {
        self.stopped.get_or_insert_with(Instant::now);
    }

    /// The profile so far (complete once [`stop`](Self::stop) was called).
    pub fn profile(&self) -> Profile {
        let end = self.stopped.unwrap_or_else(Instant::now);
        let cpu = ValueType::new("cpu", "nanoseconds");
        self.builder.build(ProfileHeader {
            sample_types: vec![ValueType::new("samples", "count"), cpu.clone()],
            default_sample_type: CPU,
            period_type: cpu,
            period: 1_000_000_000 / i64::from(self.rate_hz.max(1)),
            start_unix_ns: self.started_unix_ns,
            duration_ns: end.saturating_duration_since(self.started).as_nanos() as i64,
            comments: vec![format!(
                "wasmspy {}: {} sampler at {} Hz",
                env!("CARGO_PKG_VERSION"),
                self.sampler,
                self.rate_hz
            )],
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
