//! `wasmspy top ADDR` and `record --top`: the live view ([`LiveView`]) in a terminal. On a
//! terminal that takes escape codes the view is drawn in place on the alternate screen, keys
//! `o`/`t` sort by own or total time and `q` quits; on a dumb terminal or a pipe each refresh
//! is printed after the last, without colours or escapes. The terminal is given back as it
//! was however the view ends (`q`, Ctrl-C, the guest's exit).

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use crate::export;
use crate::live_view::{LiveView, SortBy};
use crate::profile::Profile;
use crate::ProfilerHandle;

#[derive(Args, Debug)]
#[command(arg_required_else_help = true)]
pub struct TopArgs {
    /// The live server: `http://127.0.0.1:6060`, `127.0.0.1:6060`, or `:6060` on loopback.
    #[arg(value_name = "ADDR")]
    pub addr: String,

    /// The column the functions are sorted by: `own` (their time as the leaf) or `total`
    /// (anywhere on the stack); keys `o` and `t` switch it.
    #[arg(long, value_name = "COLUMN", default_value = "own")]
    pub sort: SortBy,

    /// Seconds between refreshes: each shows the CPU of the seconds before it.
    #[arg(long, value_name = "SECONDS", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub refresh: u64,
}

/// The terminal's settings before the view changed them, to give back: the fd and its
/// settings. One view at a time.
static SAVED: Mutex<Option<(RawFd, libc::termios)>> = Mutex::new(None);
/// Whether the alternate screen is shown (on the fd named).
static ALTERNATE: Mutex<Option<RawFd>> = Mutex::new(None);
/// Set once the terminal is given back: nothing is drawn after.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Gives the terminal back as it was before the view: its settings, the main screen, the
/// cursor. Safe to call at any time, any number of times (on Ctrl-C before the profile is
/// written, say).
pub fn restore_terminal() {
    CLOSED.store(true, Ordering::SeqCst);
    if let Some((fd, saved)) = SAVED.lock().unwrap_or_else(|e| e.into_inner()).take() {
        // SAFETY: `saved` was read from `fd` by tcgetattr; tcsetattr only reads it.
        unsafe { libc::tcsetattr(fd, libc::TCSANOW, &saved) };
    }
    if let Some(fd) = ALTERNATE.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let leave = b"\x1b[?25h\x1b[?1049l";
        // SAFETY: writes the bytes of a live buffer to an fd the view keeps open.
        unsafe { libc::write(fd, leave.as_ptr().cast(), leave.len()) };
    }
}

/// Where the view is drawn.
struct Screen {
    out: File,
    /// Escape codes understood: drawn in place.
    fancy: bool,
    /// The fd keys are read from, when they are.
    keys: Option<RawFd>,
}

impl Screen {
    /// On `out`, keys read from `keys` (a terminal the guest does not read) when given.
    fn new(out: File, keys: Option<RawFd>) -> Self {
        let dumb = std::env::var("TERM").map_or(true, |t| t == "dumb" || t.is_empty());
        // SAFETY: isatty only looks at the fd.
        let fancy = !dumb && unsafe { libc::isatty(out.as_raw_fd()) } == 1;
        let keys = keys.filter(|_| fancy).filter(|&fd| raw_keys(fd));
        if fancy {
            *ALTERNATE.lock().unwrap_or_else(|e| e.into_inner()) = Some(out.as_raw_fd());
            let mut out = &out;
            let _ = out.write_all(b"\x1b[?1049h\x1b[?25l");
        }
        Screen { out, fancy, keys }
    }

    /// The terminal's size (columns, rows); a plain stream's is taken as wide as needed.
    fn size(&self) -> (usize, usize) {
        if !self.fancy {
            return (usize::MAX, usize::MAX);
        }
        // SAFETY: all zeros is a valid `winsize` (integers).
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ writes a winsize into the struct given.
        let ok = unsafe { libc::ioctl(self.out.as_raw_fd(), libc::TIOCGWINSZ, &mut size) } == 0;
        match ok && size.ws_col > 0 && size.ws_row > 0 {
            true => (size.ws_col as usize, size.ws_row as usize),
            false => (80, 24),
        }
    }

    fn draw(&mut self, text: &str) {
        if self.fancy && CLOSED.load(Ordering::SeqCst) {
            return;
        }
        let frame = match self.fancy {
            true => format!("\x1b[H\x1b[2J{}", text.replace('\n', "\r\n")),
            false => format!("{text}\n"),
        };
        let _ = self.out.write_all(frame.as_bytes());
        let _ = self.out.flush();
    }

    /// A key pressed within `wait`, if any (and keys are read).
    fn key(&self, wait: Duration) -> Option<u8> {
        let Some(fd) = self.keys else {
            std::thread::sleep(wait);
            return None;
        };
        let mut poll = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, as many as said.
        if unsafe { libc::poll(&mut poll, 1, wait.as_millis() as i32) } <= 0 {
            return None;
        }
        let mut key = 0u8;
        // SAFETY: reads at most one byte into `key`.
        match unsafe { libc::read(fd, (&mut key as *mut u8).cast(), 1) } {
            1 => Some(key),
            _ => None,
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Keys from `fd` one at a time, unechoed (Ctrl-C still a signal); the settings before kept
/// to give back. False where `fd` is no terminal.
fn raw_keys(fd: RawFd) -> bool {
    // SAFETY: all zeros is a valid `termios` (integers and arrays of them).
    let mut settings: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: tcgetattr writes the fd's settings into the struct given.
    if unsafe { libc::tcgetattr(fd, &mut settings) } != 0 {
        return false;
    }
    let saved = settings;
    settings.c_lflag &= !(libc::ICANON | libc::ECHO);
    settings.c_cc[libc::VMIN] = 0;
    settings.c_cc[libc::VTIME] = 0;
    // SAFETY: settings read from the same fd, changed in flags only.
    if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &settings) } != 0 {
        return false;
    }
    *SAVED.lock().unwrap_or_else(|e| e.into_inner()) = Some((fd, saved));
    true
}

/// What ended the view.
enum Ended {
    /// `q` or the stop flag.
    Quit,
    /// No more windows: the guest exited (or the server went away).
    Source,
}

/// Shows each window `windows` gives until it gives no more, `q` is pressed or `stop` is set.
fn show(
    screen: &mut Screen,
    title: &str,
    mut sort: SortBy,
    windows: Receiver<Profile>,
    stop: &AtomicBool,
) -> Ended {
    let mut view = LiveView::default();
    let help = match screen.keys {
        Some(_) => " (o: own, t: total, q: quit)",
        None => "",
    };
    let mut drawn = false;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ended::Quit;
        }
        let mut redraw = false;
        match windows.recv_timeout(Duration::from_millis(50)) {
            Ok(window) => {
                view.update(&window);
                redraw = true;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ended::Source,
        }
        match screen.key(Duration::ZERO) {
            Some(b'q') => return Ended::Quit,
            Some(b'o') => (sort, redraw) = (SortBy::Own, drawn),
            Some(b't') => (sort, redraw) = (SortBy::Total, drawn),
            _ => {}
        }
        if redraw {
            let (width, rows) = screen.size();
            screen.draw(&view.render(title, help, sort, rows, width));
            drawn = true;
        }
    }
}

/// `wasmspy top ADDR`: the view of a live server's guest, until it exits, `q` or Ctrl-C.
pub fn top(args: TopArgs) -> Result<i32> {
    let base = base_url(&args.addr);
    // The first window answers whether anything is there.
    let first = fetch_window(&base, args.refresh).with_context(|| {
        format!("no live profile server at {base} (start one with record --pprof-addr)")
    })?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone())
            .context("cannot handle SIGINT and SIGTERM")?;
    }
    let (send, windows) = mpsc::channel();
    let _ = send.send(first);
    let fetching = base.clone();
    let refresh = args.refresh;
    std::thread::Builder::new()
        .name("wasmspy-top".into())
        .spawn(move || {
            while let Ok(window) = fetch_window(&fetching, refresh) {
                // A window cut short: the guest exited in it.
                let last = window.duration_ns < (refresh * 1_000_000_000 / 2) as i64;
                if send.send(window).is_err() || last {
                    return;
                }
            }
        })
        .context("cannot start the view's thread")?;
    let stdin = std::io::stdin().as_raw_fd();
    let mut screen = Screen::new(stdout_file()?, Some(stdin));
    let ended = show(
        &mut screen,
        &format!("wasmspy top {base}"),
        args.sort,
        windows,
        &stop,
    );
    drop(screen);
    if let Ended::Source = ended {
        eprintln!("wasmspy: {base} stopped answering: the guest has exited");
    }
    Ok(0)
}

/// The view beside a guest `record` runs: drawn on the process's terminal (`/dev/tty`), so
/// that the guest's stdout and stderr stay the guest's; keys read there unless the guest
/// reads its input from it. Stopped by [`RecordTop::stop`].
pub struct RecordTop {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The terminal `record --top` draws on, opened before anything else is done, so that
/// without one the run fails first.
pub struct Terminal(File);

impl Terminal {
    pub fn open() -> Result<Self> {
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .context("--top draws on the terminal, and this process has none (/dev/tty)")?;
        Ok(Terminal(tty))
    }
}

impl RecordTop {
    pub fn start(
        Terminal(tty): Terminal,
        profiler: ProfilerHandle,
        title: String,
        sort: SortBy,
    ) -> Result<Self> {
        // SAFETY: isatty only looks at the fd.
        let stdin_is_tty = unsafe { libc::isatty(0) } == 1;
        let stop = Arc::new(AtomicBool::new(false));
        let (send, windows) = mpsc::sync_channel(1);
        let sampling = stop.clone();
        std::thread::Builder::new()
            .name("wasmspy-top-windows".into())
            .spawn(move || {
                while !sampling.load(Ordering::Relaxed) {
                    let mark = profiler.mark();
                    std::thread::sleep(Duration::from_secs(1));
                    if send.send(profiler.profile_since(&mark)).is_err() {
                        return;
                    }
                }
            })
            .context("cannot start the view's thread")?;
        let showing = stop.clone();
        let thread = std::thread::Builder::new()
            .name("wasmspy-top".into())
            .spawn(move || {
                let keys = (!stdin_is_tty).then(|| tty.as_raw_fd());
                let Ok(out) = tty.try_clone() else {
                    return;
                };
                let mut screen = Screen::new(out, keys);
                show(&mut screen, &title, sort, windows, &showing);
                drop(screen);
                drop(tty);
            })
            .context("cannot start the view's thread")?;
        Ok(RecordTop {
            stop,
            thread: Some(thread),
        })
    }

    /// Closes the view, giving the terminal back.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The process's stdout as a file to draw on.
fn stdout_file() -> Result<File> {
    let out = std::io::stdout().as_fd().try_clone_to_owned()?;
    Ok(File::from(out))
}

/// `http://HOST:PORT` of `addr` (a URL, `HOST:PORT`, `:PORT` or `PORT`, on loopback).
pub(crate) fn base_url(addr: &str) -> String {
    let addr = addr.trim_end_matches('/');
    let addr = addr.strip_suffix("/debug/pprof").unwrap_or(addr);
    if addr.starts_with("http://") {
        return addr.to_string();
    }
    match addr.strip_prefix(':').unwrap_or(addr) {
        port if port.parse::<u16>().is_ok() => format!("http://127.0.0.1:{port}"),
        _ => format!("http://{addr}"),
    }
}

/// The profile of the server's next `seconds`.
fn fetch_window(base: &str, seconds: u64) -> Result<Profile> {
    let url = format!("{base}/debug/wasmspy/window?seconds={seconds}");
    let bytes = get(&url, Duration::from_secs(seconds + 60))?;
    export::read(&bytes).map_err(|e| anyhow!("{url}: the answer {e:#}"))
}

/// The body of a GET of `url`; an answer other than 200 is an error with its text.
pub(crate) fn get(url: &str, timeout: Duration) -> Result<Vec<u8>> {
    let response = match ureq::get(url).timeout(timeout).call() {
        Ok(response) => response,
        Err(ureq::Error::Status(status, response)) => {
            let text = response.into_string().unwrap_or_default();
            bail!("{url}: {status} {}", text.trim());
        }
        Err(e) => return Err(anyhow!("{e}")),
    };
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut response.into_reader(), &mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(base_url(":6060"), "http://127.0.0.1:6060");
        assert_eq!(base_url("6060"), "http://127.0.0.1:6060");
        assert_eq!(base_url("localhost:1"), "http://localhost:1");
        assert_eq!(
            base_url("http://127.0.0.1:5/debug/pprof/"),
            "http://127.0.0.1:5"
        );
    }
}
