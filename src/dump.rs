//! Stacks now: the stack of every guest running at this instant, one taken of each on demand
//! ([`ProfilerHandle::dump_stacks`](crate::ProfilerHandle::dump_stacks)), as py-spy's `dump`
//! and Go's `/debug/pprof/goroutine?debug=2` show them: a block per guest, its state, how
//! long it has run (a server's request: since it began) and its labels, then its frames leaf
//! first, each with its file and line.

use std::fmt::Write;

use crate::profile::{FrameKind, Labels, Profile, StackId, ThreadId, ValueType};

/// What a guest was doing when its stack was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GuestState {
    /// Running its own code.
    Running,
    /// In a host call it made (a system call, a sleep, a read).
    HostCall,
}

/// One running guest's stack.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunningGuest {
    /// The store it runs in (its number for the life of the store), where known.
    pub store: Option<u64>,
    /// The thread it runs on.
    pub thread: ThreadId,
    /// Whether it was in its own code or in a host call.
    pub state: GuestState,
    /// How long it has run: since its labels were set (a server's request began), else
    /// since its store was attached; `None` where neither is known.
    pub running_ns: Option<u64>,
    /// Its store's labels (e.g. the request it serves); empty for none.
    pub labels: Labels,
    /// Its stack in [`StackDump::profile`].
    pub stack: StackId,
}

/// The stacks of every guest running when asked.
#[derive(Debug)]
#[non_exhaustive]
pub struct StackDump {
    /// The stacks' frames, named and symbolized as a profile's.
    pub profile: Profile,
    /// Longest running first.
    pub guests: Vec<RunningGuest>,
    /// Threads that were sampled but ran no guest.
    pub idle: usize,
    /// Threads that did not answer in time.
    pub unanswered: usize,
}

impl StackDump {
    /// The dump as text, a block per guest (Go's `goroutine?debug=2` layout).
    pub fn render(&self) -> String {
        let mut out = String::new();
        for guest in &self.guests {
            let store = guest.store.map_or("?".to_string(), |s| s.to_string());
            let state = match guest.state {
                GuestState::Running => "running",
                GuestState::HostCall => "host call",
            };
            let age = guest
                .running_ns
                .map_or(String::new(), |ns| match ns < 1_000_000_000 {
                    true => format!(", {} ms", ns / 1_000_000),
                    false => format!(", {:.1} s", ns as f64 / 1e9),
                });
            let mut labels: String = guest
                .labels
                .iter()
                .map(|(k, v)| format!(" {k}={v}"))
                .collect();
            let _ = write!(labels, " thread={}", guest.thread.0);
            let _ = writeln!(out, "guest {store} [{state}{age}]:{labels}");
            self.write_frames(&mut out, guest.stack);
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "# {} guest{} running, {} thread{} idle{}",
            self.guests.len(),
            if self.guests.len() == 1 { "" } else { "s" },
            self.idle,
            if self.idle == 1 { "" } else { "s" },
            match self.unanswered {
                0 => String::new(),
                n => format!(", {n} that did not answer in time"),
            }
        );
        out
    }

    /// The frames of `stack`, leaf first, each inlined function a frame of its own.
    fn write_frames(&self, out: &mut String, stack: StackId) {
        let p = &self.profile;
        for &frame in &p.stacks[stack] {
            for line in &p.frames[frame].lines {
                let f = &p.functions[line.function];
                // The host's own frames: `host: ` and their file:line, else the object they
                // are in.
                let host = p.is_host_frame(frame);
                let place = match (f.file.as_str(), line.line, p.frame_kind(frame)) {
                    ("", _, FrameKind::HostCall) => "[host]".to_string(),
                    ("", _, FrameKind::Runtime) if !host => "[wasmtime]".to_string(),
                    ("", _, _) => p.frames[frame]
                        .mapping
                        .map_or("?".to_string(), |m| p.mappings[m].file_name.clone()),
                    (file, 0, _) => file.to_string(),
                    (file, n, _) => format!("{file}:{n}"),
                };
                let place = match host {
                    true => format!("host: {place}"),
                    false => place,
                };
                let _ = writeln!(out, "{}\n\t{place}", f.name);
            }
        }
    }

    /// The dump as Go's goroutine profile (`/debug/pprof/goroutine`, `debug=0`): a sample of
    /// `goroutine`/`count` 1 per running guest.
    pub fn as_profile(&self) -> Profile {
        let mut profile = self.profile.clone();
        profile.sample_types = vec![ValueType::new("goroutine", "count")];
        profile.default_sample_type = 0;
        profile.period_type = ValueType::new("goroutine", "count");
        profile.period = 1;
        for sample in &mut profile.samples {
            sample.values = vec![1];
        }
        profile
    }
}
