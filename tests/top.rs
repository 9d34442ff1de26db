//! The live view: `record --top` on a real terminal (tmux: keys typed, the screen read back,
//! the terminal's settings checked after), and `wasmspy top ADDR` over a pipe (plain text).

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::child::{Killed, StderrLines};
use common::*;

/// A tmux server of this test's own, with one window of `cols`×`rows`.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `command` (a shell line) in a new session; `None` (skipped) without tmux.
    fn start(name: &str, command: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            skip(name, "tmux is missing (apt-get install tmux)");
            return None;
        }
        let tmux = Tmux {
            socket: format!("wasmspy-{name}-{}", std::process::id()),
        };
        let out = tmux
            .cmd()
            .args(["new-session", "-d", "-x", "120", "-y", "40", "-s", "t"])
            .arg(command)
            .env("TERM", "xterm-256color")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        Some(tmux)
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.args(["-L", &self.socket]);
        cmd
    }

    fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .unwrap();
        stdout(&out)
    }

    fn keys(&self, keys: &str) {
        let out = self
            .cmd()
            .args(["send-keys", "-t", "t", keys])
            .output()
            .unwrap();
        assert!(out.status.success());
    }

    /// The screen once `done` says it is what the test waits for. Polled; the bound is there
    /// only so that a broken view fails rather than hangs (nothing is measured by it).
    fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        for _ in 0..1200 {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("the screen never showed {what}:\n{}", self.screen());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

/// The shell line that runs `record --top` on `cprog.wasm spin` (minutes of work) in `dir`:
/// the guest's output to files there, its input not the terminal (so the view reads keys);
/// once it ends, its status in `dir/status`, the terminal's settings in `dir/stty`.
fn record_top(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "{} record --top -o {d}/out.pb.gz -- {} spin 100000 > {d}/guest.out 2> {d}/guest.err < /dev/null; \
         code=$?; stty -a > {d}/stty; echo exit $code > {d}/status; sleep 60",
        env!("CARGO_BIN_EXE_wasmspy"),
        fixture("c/cprog.wasm").display()
    )
}

/// The number of the refresh a screen (or a printed view) shows last.
fn refresh(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split("(refresh ").nth(1))
        .filter_map(|rest| rest.split(':').next()?.parse().ok())
        .next_back()
        .unwrap_or(0)
}

/// The function rows of the last view in `text`: (name, own %).
fn rows(text: &str) -> Vec<(String, f64)> {
    let last = text.rsplit("%Own").next().unwrap();
    last.lines()
        .skip(1)
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let own = words.next()?.strip_suffix('%')?.parse().ok()?;
            let name = words.nth(3)?.to_string();
            Some((name, own))
        })
        .collect()
}

#[test]
fn record_top_shows_the_hot_function_takes_keys_and_gives_the_terminal_back() {
    let dir = tempfile::tempdir().unwrap();
    let Some(tmux) = Tmux::start("record-top", &record_top(dir.path())) else {
        return;
    };
    // Within two refreshes: the CPU is the guest's hot_function's (80 % of it by the
    // program's own split).
    let screen = tmux.wait_for("refresh 2", |s| refresh(s) >= 2);
    let top = rows(&screen);
    assert_eq!(top[0].0, "hot_function", "{screen}");
    assert!(
        screen.contains("hot_function (tests/fixtures/c/cprog.c:25)"),
        "{screen}"
    );
    assert!(
        screen.contains("sorted by own (o: own, t: total, q: quit)"),
        "{screen}"
    );

    tmux.keys("t");
    let screen = tmux.wait_for("the total column", |s| s.contains("sorted by total"));
    // By total, the callers of hot_function come first.
    let top = rows(&screen);
    assert_ne!(top[0].0, "hot_function", "{screen}");

    // q closes the view; the guest runs on; Ctrl-C ends it, its profile written.
    tmux.keys("q");
    tmux.wait_for("the view closed", |s| !s.contains("%Own"));
    tmux.keys("C-c");
    let status = dir.path().join("status");
    tmux.wait_for("the run's end", |_| status.exists());
    assert_eq!(std::fs::read_to_string(&status).unwrap().trim(), "exit 130");
    let err = std::fs::read_to_string(dir.path().join("guest.err")).unwrap();
    assert!(err.contains("wasmspy: wrote"), "{err}");
    let p = Decoded::load(&dir.path().join("out.pb.gz"));
    assert_eq!(p.top_self("cpu")[0].0, "hot_function");
    // The terminal's settings as they were: line editing and echo on.
    let stty = std::fs::read_to_string(dir.path().join("stty")).unwrap();
    let flags: Vec<&str> = stty.split_whitespace().collect();
    assert!(
        flags.contains(&"icanon") && flags.contains(&"echo"),
        "{stty}"
    );
    // Nothing of the view went to the guest's stdout or stderr.
    let out = std::fs::read_to_string(dir.path().join("guest.out")).unwrap();
    assert!(!out.contains("%Own") && !err.contains("%Own"), "{out}{err}");
}

#[test]
fn ctrl_c_while_the_view_is_up_writes_the_profile_and_gives_the_terminal_back() {
    let dir = tempfile::tempdir().unwrap();
    let Some(tmux) = Tmux::start("record-top-ctrl-c", &record_top(dir.path())) else {
        return;
    };
    tmux.wait_for("refresh 1", |s| refresh(s) >= 1);
    tmux.keys("C-c");
    let status = dir.path().join("status");
    let screen = tmux.wait_for("the run's end", |_| status.exists());
    assert_eq!(std::fs::read_to_string(&status).unwrap().trim(), "exit 130");
    assert!(
        !screen.contains("%Own"),
        "the main screen is back: {screen}"
    );
    let stty = std::fs::read_to_string(dir.path().join("stty")).unwrap();
    let flags: Vec<&str> = stty.split_whitespace().collect();
    assert!(
        flags.contains(&"icanon") && flags.contains(&"echo"),
        "{stty}"
    );
    let p = Decoded::load(&dir.path().join("out.pb.gz"));
    assert_eq!(p.top_self("cpu")[0].0, "hot_function");
}

#[test]
fn top_over_a_pipe_prints_plain_views_until_the_guest_exits() {
    let mut guest = wasmspy()
        .args(["record", "--pprof-addr", "127.0.0.1:0", "--"])
        .arg(fixture("c/cprog.wasm"))
        .args(["spin", "100000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut guest_err = StderrLines::of(&mut guest);
    let line = guest_err.wait_for("serving profiles at ");
    let url = line.split("serving profiles at ").nth(1).unwrap();

    let mut top = wasmspy()
        .arg("top")
        .arg(url)
        .env("TERM", "xterm")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(top.stdout.take().unwrap());
    let mut text = String::new();
    while refresh(&text) < 3 {
        let n = lines.read_line(&mut text).unwrap();
        assert!(n > 0, "top ended: {text}");
    }
    // The third view has begun: the second is whole.
    let second = text.rsplit_once("wasmspy top").unwrap().0;
    assert_eq!(rows(second)[0].0, "hot_function", "{second}");
    assert!(
        !text.contains('\x1b'),
        "no escape codes on a pipe: {text:?}"
    );

    // The guest's end ends the view.
    sigint(&guest);
    let _ = guest.wait();
    let status = top.wait().unwrap();
    let err = std::io::read_to_string(top.stderr.take().unwrap()).unwrap();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(
        err.contains("stopped answering: the guest has exited"),
        "{err}"
    );
}

#[test]
fn top_without_a_server_or_a_terminal_is_one_line() {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = wasmspy()
        .args(["top", &format!(":{port}")])
        .output()
        .unwrap();
    assert_one_line_error(&out, "no live profile server at http://127.0.0.1:", &"top");

    let dir = tempfile::tempdir().unwrap();
    let out = wasmspy()
        .args(["record", "--top", "--"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hotspots.wasm"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output_without_terminal();
    assert_one_line_error(&out, "--top draws on the terminal", &"--top");
    // Nothing was begun: no profile, no temporary file beside it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// `Command::output`, in a session of its own: no controlling terminal (`/dev/tty` fails).
trait WithoutTerminal {
    fn output_without_terminal(&mut self) -> std::process::Output;
}

impl WithoutTerminal for Command {
    fn output_without_terminal(&mut self) -> std::process::Output {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe, as pre_exec requires.
        unsafe {
            self.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        self.output().unwrap()
    }
}

/// The function rows of the last view in `text`, whole names (a JavaScript function's has
/// spaces: `fib (timed_sm.js:16:13) (timed_sm.js:16)`): (name, own %, total %).
fn named_rows(text: &str) -> Vec<(String, f64, f64)> {
    let last = text.rsplit("%Own").next().unwrap();
    last.lines()
        .skip(1)
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let own = words.next()?.strip_suffix('%')?.parse().ok()?;
            let total = words.next()?.strip_suffix('%')?.parse().ok()?;
            let name = words.skip(2).collect::<Vec<_>>().join(" ");
            Some((name, own, total))
        })
        .collect()
}

/// `wasmspy top` of a StarlingMonkey component (ComponentizeJS's release engine, whose
/// functions have no names): `timed_sm.js` spinning for minutes, its `fib` and `build` in
/// alternation, about half the time each (the script's own measure). The view's rows are the
/// script's JavaScript functions, each named with where it starts, then its first line, as
/// the profile names them: `fib` and `build` hold nearly all the own time, each about half
/// (a second's view, some 900 samples: a share's standard deviation under 2 points),
/// `measure` and `run`, which call them, nearly all the total; no engine function shows.
#[test]
fn top_shows_a_starlingmonkey_components_javascript_functions() {
    let Some(component) = built_component("timed-sm.wasm") else {
        return;
    };
    let mut guest = wasmspy()
        .args(["record", "-S", "http", "--pprof-addr", "127.0.0.1:0", "--"])
        .arg(&component)
        .arg("100000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut guest_err = StderrLines::of(&mut guest);
    let _guest = Killed(guest);
    let line = guest_err.wait_for("serving profiles at ");
    let url = line.split("serving profiles at ").nth(1).unwrap();
    let mut top = Killed(
        wasmspy()
            .arg("top")
            .arg(url)
            .env("TERM", "xterm")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(top.0.stdout.take().unwrap());
    let mut text = String::new();
    while refresh(&text) < 4 {
        let n = lines.read_line(&mut text).unwrap();
        assert!(n > 0, "top ended: {text}");
    }
    // The fourth view has begun: the third is whole, of a second while the guest ran.
    let third = text.rsplit_once("wasmspy top").unwrap().0;
    let third = third.rsplit_once("wasmspy top").unwrap().1;
    assert!(!third.contains("wasm-function["), "{third}");
    let rows = named_rows(third);
    let row = |name: &str| {
        rows.iter()
            .find(|(n, ..)| n == name)
            .unwrap_or_else(|| panic!("no {name}: {third}"))
    };
    let fib = row("fib (timed_sm.js:16:13) (timed_sm.js:16)");
    let build = row("build (timed_sm.js:23:15) (timed_sm.js:23)");
    assert!(fib.1 + build.1 >= 90.0, "{third}");
    for (name, own, _) in [fib, build] {
        assert!((30.0..=70.0).contains(own), "{name}: {third}");
    }
    for caller in [
        "measure (timed_sm.js:31:17) (timed_sm.js:31)",
        "run (timed_sm.js:46:6) (timed_sm.js:46)",
    ] {
        assert!(row(caller).2 >= 90.0, "{caller}: {third}");
    }
    // Both killed as they go out of scope, the view first.
}
