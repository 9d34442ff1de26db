//! A running `wasmspy` child process, as the tests that talk to it while it runs see it.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr};

/// A child process killed when the test ends, however it ends (a guest spinning for minutes
/// would slow every test after a failed one).
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A child's stderr, read line by line up to what a test waits for; every line kept.
pub struct StderrLines {
    reader: BufReader<ChildStderr>,
    lines: Vec<String>,
}

impl StderrLines {
    pub fn of(child: &mut Child) -> Self {
        StderrLines {
            reader: BufReader::new(child.stderr.take().expect("stderr piped")),
            lines: Vec::new(),
        }
    }

    /// The line containing `text`, read already or read up to now.
    pub fn wait_for(&mut self, text: &str) -> String {
        if let Some(line) = self.lines.iter().find(|l| l.contains(text)) {
            return line.trim_end().to_string();
        }
        loop {
            let mut line = String::new();
            let n = self.reader.read_line(&mut line).unwrap();
            assert!(n > 0, "wasmspy ended before `{text}`: {:?}", self.lines);
            self.lines.push(line.clone());
            if line.contains(text) {
                return line.trim_end().to_string();
            }
        }
    }

    /// All of stderr, once the child has ended.
    pub fn all(&mut self) -> String {
        let mut rest = String::new();
        self.reader.read_to_string(&mut rest).unwrap();
        std::mem::take(&mut self.lines).concat() + &rest
    }
}

/// The CPU time process `pid` has used so far, all its threads (user and system, from
/// `/proc`, in the kernel's clock ticks).
pub fn process_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    Stat::of(&stat).and_then(|s| s.cpu_seconds()).unwrap()
}

/// A process's or a thread's `/proc` `stat` line, read.
struct Stat<'a> {
    /// The command name, without its parentheses.
    name: &'a str,
    /// The fields after the name: the state first.
    fields: Vec<&'a str>,
}

impl<'a> Stat<'a> {
    fn of(stat: &'a str) -> Option<Self> {
        // The name may hold spaces and parentheses: it ends at the last ") ".
        let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
        Some(Stat {
            name,
            fields: rest.split(' ').collect(),
        })
    }

    /// User and system CPU time: the 14th and 15th fields of the line.
    fn cpu_seconds(&self) -> Option<f64> {
        let ticks = |i: usize| self.fields.get(i)?.parse::<f64>().ok();
        // SAFETY: sysconf has no preconditions.
        Some((ticks(11)? + ticks(12)?) / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
    }
}

/// What each thread of process `pid` is doing, for a test's failure message: one line each,
/// its name, state (`R` running, `S` asleep…), CPU time used and the kernel function it
/// waits in.
pub fn thread_states(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("process {pid} is gone");
    };
    let mut lines = Vec::new();
    for task in tasks.flatten() {
        let path = task.path();
        let read = |file: &str| std::fs::read_to_string(path.join(file)).unwrap_or_default();
        let stat = read("stat");
        let Some(stat) = Stat::of(&stat) else {
            continue;
        };
        lines.push(format!(
            "{} {} cpu {:.2} s in {}",
            stat.name,
            stat.fields[0],
            stat.cpu_seconds().unwrap_or(0.0),
            read("wchan")
        ));
    }
    lines.sort();
    lines.join("; ")
}

/// The TCP sockets whose local port is `port` (a server's listener and its connections), for a
/// test's failure message: each one's state (`0A` listening, `01` established) and the bytes
/// waiting in its receive queue (a listener's: the connections not accepted yet), from
/// `/proc/net/tcp`.
pub fn sockets_at(port: u16) -> String {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (address, state, queues) = (fields.get(1)?, fields.get(3)?, fields.get(4)?);
            let received = queues.split_once(':')?.1;
            address
                .ends_with(&local)
                .then(|| format!("state {state} receive queue {received}"))
        })
        .collect::<Vec<_>>()
        .join("; ")
}
