//! `wasmtime serve`'s log prefixes: every line an instance writes to stdout or stderr begins
//! with `stdout [ID] :: ` or `stderr [ID] :: `, ID the instance's number, so that the output
//! of requests served at once can be told apart.

use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

use crate::sync::lock;

/// How much the guest may write at once: what Wasmtime's own stdout stream allows.
const BUDGET: usize = 64 * 1024;

/// This process's stdout (or, `stderr`, its stderr), each line of it prefixed with `prefix`,
/// written at once on the guest's thread, as `wasmtime serve` writes them. (Wasmtime's
/// `AsyncStdoutStream` hands each write to a task of its own: two tasks spawned, and dropped,
/// per store, a store per request.)
pub fn stream(prefix: String, stderr: bool) -> PrefixedStream {
    PrefixedStream(Arc::new(Mutex::new(PrefixedLines {
        prefix,
        stderr,
        at_line_start: true,
    })))
}

/// A served instance's stdout or stderr: the guest's streams of it (WASI 0.2's and 0.3's)
/// share where a line stands.
#[derive(Clone)]
pub struct PrefixedStream(Arc<Mutex<PrefixedLines>>);

impl StdoutStream for PrefixedStream {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl IsTerminal for PrefixedStream {
    fn is_terminal(&self) -> bool {
        match lock(&self.0).stderr {
            true => std::io::IsTerminal::is_terminal(&std::io::stderr()),
            false => std::io::IsTerminal::is_terminal(&std::io::stdout()),
        }
    }
}

impl OutputStream for PrefixedStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        lock(&self.0)
            .write_all(&bytes)
            .map_err(|e| StreamError::LastOperationFailed(e.into()))
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(BUDGET)
    }
}

#[async_trait::async_trait]
impl Pollable for PrefixedStream {
    /// Always ready: a write is done when it returns.
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for PrefixedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(lock(&self.0).write_all(buf).map(|()| buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

struct PrefixedLines {
    prefix: String,
    stderr: bool,
    /// Whether the next byte begins a line, which then gets the prefix.
    at_line_start: bool,
}

impl PrefixedLines {
    /// Writes `bytes` with the lock held throughout, so that another instance's lines do not
    /// cut into them.
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self.stderr {
            true => self.write_to(&mut std::io::stderr().lock(), bytes),
            false => self.write_to(&mut std::io::stdout().lock(), bytes),
        }
    }

    fn write_to(&mut self, out: &mut impl Write, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            if self.at_line_start {
                out.write_all(self.prefix.as_bytes())?;
                self.at_line_start = false;
            }
            let line_end = bytes.iter().position(|&b| b == b'\n');
            let (line, rest) = bytes.split_at(line_end.map_or(bytes.len(), |i| i + 1));
            out.write_all(line)?;
            self.at_line_start = line_end.is_some();
            bytes = rest;
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_is_prefixed_however_it_is_written() {
        let mut lines = PrefixedLines {
            prefix: "stdout [3] :: ".into(),
            stderr: false,
            at_line_start: true,
        };
        let mut out = Vec::new();
        for piece in ["one\ntw", "o\n", "", "three\n\nfour"] {
            lines.write_to(&mut out, piece.as_bytes()).unwrap();
        }
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "stdout [3] :: one\nstdout [3] :: two\nstdout [3] :: three\nstdout [3] :: \nstdout [3] :: four"
        );
    }
}
