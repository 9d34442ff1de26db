//! What the handler records of one stack: a [`RawSample`] of a [`Kind`], its frames pushed
//! leaf first.
//!
//! Invariants kept here (see [`super`]): **async-signal-safe**, a sample is a value of fixed
//! size, written in place (a ring's slot, the dump slot), never allocated; **bounded**, it
//! holds at most [`MAX_FRAMES`] frames, and [`push`] drops a frame past them rather than write
//! beyond `pcs`.

use super::super::ring::Zeroed;

// Named in the documentation only.
#[cfg(doc)]
use super::pulley_stack;

pub const MAX_FRAMES: usize = crate::shared::MAX_STACK_DEPTH;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// The PC is in a module's code; `pcs` is the walked stack.
    Guest = 0,
    /// The PC is outside Wasm code; `pcs[0]` is that PC, then the host frames' return
    /// addresses (`host_depth` frames in all, where taken), then, if Wasm is under it, the
    /// return address into the Wasm code that left for the host and the walked stack above it.
    Host = 1,
    /// Pulley ran bytecode: `pcs[..PC_CANDIDATES]` are candidates for its PC (see
    /// [`pulley_stack`]), then its link register (the caller's return address before the
    /// leaf's frame record is pushed or after it is popped, stale otherwise), then the return
    /// addresses of the frame records.
    Pulley = 2,
}

/// One sample as the handler records it.
#[derive(Clone)]
pub struct RawSample {
    pub kind: Kind,
    /// The key of the store whose Wasm is innermost on the stack; 0 when unknown.
    pub store: u64,
    /// That store's labels when the sample was taken; 0 for none.
    pub labels: u64,
    pub depth: usize,
    pub cpu_delta_ns: u64,
    pub wall_delta_ns: u64,
    pub time_ns: u64,
    /// Leaf first: the interrupted PC, then return addresses; from the [`splice`](Self::splice)'s
    /// index on, if set, the words of a language runtime's stack (see [`crate::runtimes`]).
    pub pcs: [usize; MAX_FRAMES],
    /// Of a [`Kind::Host`] sample: how many of `pcs`, from the first, are host frames (see
    /// [`super::host_frames`]); 0 where they were not taken, the PC alone then in `pcs[0]`.
    pub host_depth: usize,
    /// Whether `pcs` ends with a runtime's words, where they start and the runtime's id: three
    /// fields rather than an `Option`, whose all-zero bytes are not promised to be `None`.
    spliced: bool,
    splice_at: usize,
    splice_runtime: usize,
}

// SAFETY: every field is an integer, a `bool` or a `Kind` (`repr(u32)`, `Guest` is 0), all
// valid as zero bytes.
unsafe impl Zeroed for RawSample {}

impl RawSample {
    pub fn empty() -> Self {
        RawSample {
            kind: Kind::Guest,
            store: 0,
            labels: 0,
            depth: 0,
            cpu_delta_ns: 0,
            wall_delta_ns: 0,
            time_ns: 0,
            pcs: [0; MAX_FRAMES],
            host_depth: 0,
            spliced: false,
            splice_at: 0,
            splice_runtime: 0,
        }
    }

    /// Where the runtime's words start in `pcs`, and the runtime's id.
    pub fn splice(&self) -> Option<(usize, usize)> {
        self.spliced
            .then_some((self.splice_at, self.splice_runtime))
    }

    pub fn set_splice(&mut self, splice: Option<(usize, usize)>) {
        self.spliced = splice.is_some();
        (self.splice_at, self.splice_runtime) = splice.unwrap_or_default();
    }

    pub fn pcs(&self) -> &[usize] {
        &self.pcs[..self.depth]
    }
}

pub(super) fn push(s: &mut RawSample, pc: usize) {
    if s.depth < MAX_FRAMES {
        s.pcs[s.depth] = pc;
        s.depth += 1;
    }
}
