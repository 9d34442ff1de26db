//! `wasmtime serve`'s log prefixes: every line an instance writes to stdout or stderr begins
//! with `stdout [ID] :: ` or `stderr [ID] :: `, ID the instance's number, so that the output
//! of requests served at once can be told apart.

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};

use wasmtime_wasi::cli::AsyncStdoutStream;

/// How much the guest may write ahead of the host: what Wasmtime's own stdout stream allows.
const BUDGET: usize = 64 * 1024;

/// This process's stdout (or, `stderr`, its stderr), each line of it prefixed with `prefix`.
pub fn stream(prefix: String, stderr: bool) -> AsyncStdoutStream {
    AsyncStdoutStream::new(
        BUDGET,
        PrefixedLines {
            prefix,
            stderr,
            at_line_start: true,
        },
    )
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

impl tokio::io::AsyncWrite for PrefixedLines {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(self.write_all(buf).map(|()| buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
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
