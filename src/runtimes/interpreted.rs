//! What the interpreted runtimes (CPython, QuickJS) share: the words a walk writes for its
//! frames ([`Frame`]), the names of the code they run ([`CodeNames`]), and how a sample's
//! native frames take them in ([`splice_frames`]).
//!
//! Names are not decoded on the signal path. A code's names (strings of the guest) are
//! copied, raw and bounded, into [`CodeNames`] the first time a walk meets the code, and
//! decoded when a profile is built: the guest may have freed them by then, or be running on
//! and changing its memory. An entry is keyed by the code's address with its name, file and
//! first line (pointers or values), so a code freed and another made at its address gets an
//! entry of its own.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicU8, Ordering};

use wasmtime::WasmBacktrace;

use super::{InstanceView, SpliceContext};
use crate::profile::Function;
use crate::shared::MAX_STACK_DEPTH;
use crate::shared::{LinearMemory, Memory};
use crate::shared::{ModuleId, RawFrame};

/// An interpreted frame in a walk's output: its code's entry in [`CodeNames`] and its line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    Code {
        id: CodeId,
        line: u32,
    },
    /// Between the frames of two activations of the interpreter loop (the outer one
    /// follows): a native call into the interpreter.
    Activation,
}

/// An entry of [`CodeNames`]; [`CodeId::UNKNOWN`] for a code whose names did not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeId(pub u32);

impl CodeId {
    pub const UNKNOWN: CodeId = CodeId(u32::MAX - 1);
}

const ACTIVATION: usize = usize::MAX;

impl Frame {
    /// As the output of a walk holds it, one word.
    pub fn pack(self) -> usize {
        match self {
            Frame::Code { id, line } => (id.0 as usize) << 32 | line as usize,
            Frame::Activation => ACTIVATION,
        }
    }

    pub fn unpack(word: usize) -> Self {
        if word == ACTIVATION {
            return Frame::Activation;
        }
        Frame::Code {
            id: CodeId((word >> 32) as u32),
            line: word as u32,
        }
    }
}

/// Puts an interpreter's frames (`words`, [`Frame`]s innermost first, each activation ended
/// by its [`Frame::Activation`]) into a sample's resolved native `frames` (leaf first). By
/// default in place of the Wasm frames (the frames above the innermost Wasm stay: a host call
/// and the host's frames in it, the runtime itself), as py-spy shows Python frames alone; with `--native`, each activation's
/// frames in place of the frame of the interpreter loop that runs it (`is_loop`).
pub fn splice_frames(
    cx: &SpliceContext<'_>,
    words: &[usize],
    frames: &mut Vec<RawFrame>,
    is_loop: impl Fn(&RawFrame) -> bool,
) {
    let module = cx.module;
    let frame_of = |word: &usize| match Frame::unpack(*word) {
        Frame::Code { id, line } => Some(RawFrame::Interpreted {
            module,
            code: id.0,
            line,
        }),
        Frame::Activation => None,
    };
    if !cx.native {
        // The leaf's host call and the host's frames in it stay.
        let keep = frames
            .iter()
            .take_while(|f| !matches!(f, RawFrame::Wasm { .. }))
            .count();
        frames.truncate(keep);
        frames.extend(words.iter().filter_map(frame_of));
        return;
    }
    // Innermost first; the walk ends each with its entry's marker.
    let mut activations: Vec<&[usize]> = words
        .split(|&word| Frame::unpack(word) == Frame::Activation)
        .collect();
    if activations.last().is_some_and(|a| a.is_empty()) {
        activations.pop();
    }
    // Paired from the outermost: an activation being entered or left has its loop's frame
    // on the Wasm stack but is not in the interpreter's chain.
    let loops = frames.iter().filter(|f| is_loop(f)).count();
    let unpaired = activations.len().saturating_sub(loops);
    let mut pending = activations.into_iter();
    // Activations no loop frame runs (none found): above the native frames.
    let mut inner: Vec<RawFrame> = pending
        .by_ref()
        .take(unpaired)
        .flatten()
        .filter_map(frame_of)
        .collect();
    let mut merged = Vec::with_capacity(frames.len() + inner.len());
    let mut unmatched = loops.saturating_sub(pending.len());
    for f in frames.drain(..) {
        if !is_loop(&f) {
            merged.push(f);
            continue;
        }
        if unmatched > 0 {
            unmatched -= 1;
            merged.push(f);
            continue;
        }
        merged.append(&mut inner);
        merged.extend(pending.next().into_iter().flatten().filter_map(frame_of));
    }
    merged.append(&mut inner);
    *frames = merged;
}

/// The native frames a sample keeps under an interpreter's stack, at most.
pub const MAX_NATIVE_UNDER_INTERPRETED: usize = MAX_STACK_DEPTH / 4;

/// [`Runtime::walk`](super::Runtime::walk) of an interpreter whose `walk` writes its frames
/// (read from `instance`'s memory, from its [root](InstanceView::root)) into the slice it is
/// given and says how many: they follow at most [`MAX_NATIVE_UNDER_INTERPRETED`] of the
/// sample's own (the innermost). Async-signal-safe.
///
/// # Safety
/// As [`Runtime::walk`](super::Runtime::walk)'s.
pub unsafe fn after_native(
    instance: &InstanceView,
    pcs: &mut [usize],
    depth: &mut usize,
    walk: impl FnOnce(&LinearMemory, u32, &mut [usize]) -> usize,
) -> Option<usize> {
    // SAFETY: the caller's contract.
    let memory = unsafe { instance.memory() };
    let at = (*depth).min(MAX_NATIVE_UNDER_INTERPRETED);
    let written = walk(&memory, instance.root(), pcs.get_mut(at..)?);
    (written > 0).then(|| {
        *depth = at + written;
        at
    })
}

/// [`Runtime::at_guest_thread`](super::Runtime::at_guest_thread) of such an interpreter:
/// every Wasm frame of `backtrace` kept, its frames after them.
///
/// # Safety
/// As [`Runtime::at_guest_thread`](super::Runtime::at_guest_thread)'s.
pub unsafe fn on_guest_thread(
    instance: &InstanceView,
    backtrace: &WasmBacktrace,
    walk: impl FnOnce(&LinearMemory, u32, &mut [usize]) -> usize,
) -> Option<(usize, Vec<usize>)> {
    // SAFETY: the caller's contract.
    let memory = unsafe { instance.memory() };
    let mut frames = vec![0; MAX_STACK_DEPTH];
    let written = walk(&memory, instance.root(), &mut frames);
    frames.truncate(written);
    (written > 0).then(|| (backtrace.frames().len(), frames))
}

/// Whether `frame` is function `function` (module, index) of the runtime's code.
pub fn is_function(frame: &RawFrame, function: Option<(ModuleId, u32)>) -> bool {
    matches!(frame, RawFrame::Wasm { module: Some(m), func_index, .. }
        if Some((*m, *func_index)) == function)
}

/// Bytes of linear memory read in chunks, as an iterator; ends early where memory does.
pub struct Bytes<'a, M> {
    memory: &'a M,
    start: u64,
    next: u64,
    left: u32,
    buffer: [u8; 64],
    at: usize,
    filled: usize,
}

impl<'a, M: Memory> Bytes<'a, M> {
    /// The `len` bytes at `address`.
    pub fn new(memory: &'a M, address: u64, len: u32) -> Self {
        Bytes {
            memory,
            start: address,
            next: address,
            left: len,
            buffer: [0; 64],
            at: 0,
            filled: 0,
        }
    }

    /// Bytes read from memory so far (whole chunks).
    fn fetched(&self) -> u32 {
        u32::try_from(self.next - self.start).unwrap_or(u32::MAX)
    }
}

impl<M: Memory> Iterator for Bytes<'_, M> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        if self.at == self.filled {
            let n = (self.left as usize).min(self.buffer.len());
            if n == 0 {
                return None;
            }
            self.memory.read(self.next, &mut self.buffer[..n])?;
            self.next += n as u64;
            self.left -= n as u32;
            (self.at, self.filled) = (0, n);
        }
        self.at += 1;
        Some(self.buffer[self.at - 1])
    }
}

/// Frames one walk follows at most.
pub const MAX_STEPS: usize = 4096;

/// Bytes of line tables one walk decodes at most, over all its frames: the innermost frames'
/// first, the frames past it keep their first line. Each frame's table alone is bounded by
/// its own size field, which the guest writes: a guest whose every frame claimed a 64 KiB table
/// held the signal handler for a second a sample and its own thread almost still (measured
/// with `tests/hostile.rs` before this budget).
pub const LINE_TABLES_PER_WALK: u32 = 1 << 16;

/// What of [`LINE_TABLES_PER_WALK`] a walk has left.
pub struct LineBudget(Cell<u32>);

impl Default for LineBudget {
    fn default() -> Self {
        LineBudget(Cell::new(LINE_TABLES_PER_WALK))
    }
}

impl LineBudget {
    /// `decode` over the `size` bytes at `address` of `memory`, as many as the budget has
    /// left; what it read is spent.
    pub fn decode<'m, M: Memory, T>(
        &self,
        memory: &'m M,
        address: u64,
        size: u32,
        decode: impl FnOnce(&mut Bytes<'m, M>) -> T,
    ) -> T {
        let mut bytes = Bytes::new(memory, address, size.min(self.0.get()));
        let value = decode(&mut bytes);
        self.0.set(self.0.get().saturating_sub(bytes.fetched()));
        value
    }
}

/// Brent's cycle detection over the links of a chain (frames' addresses): a link remembered at
/// each power of two steps, meeting it again is a loop. No real frame chain has one; a guest's
/// memory can, and a walk that went round it would spend its whole step limit.
pub struct LoopCheck {
    remembered: u32,
    power: usize,
    steps: usize,
}

impl Default for LoopCheck {
    fn default() -> Self {
        LoopCheck {
            remembered: 0,
            power: 1,
            steps: 0,
        }
    }
}

impl LoopCheck {
    /// Whether `link` (not 0) was met before: the chain loops.
    pub fn looped(&mut self, link: u32) -> bool {
        if link == self.remembered {
            return true;
        }
        self.steps += 1;
        if self.steps == self.power {
            (self.remembered, self.power, self.steps) = (link, self.power * 2, 0);
        }
        false
    }
}

/// A code as its names' entry is keyed: its address, what its name and file are read from,
/// and where it starts (its first line; its column, 0 where the runtime keeps none).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct CodeKey {
    pub code: u32,
    pub qualname: u32,
    pub filename: u32,
    pub first_line: u32,
    pub first_column: u32,
}

/// Bytes of a string a [`RawStr`] holds at most.
pub const RAW_STR_BYTES: usize = 128;

/// A string's characters as the guest holds them: `kind` bytes each (1: Latin-1, 2: UCS-2,
/// 4: UCS-4), at most [`RAW_STR_BYTES`].
#[derive(Clone, Copy)]
pub struct RawStr {
    kind: u8,
    len: u8,
    truncated: bool,
    bytes: [u8; RAW_STR_BYTES],
}

impl Default for RawStr {
    fn default() -> Self {
        RawStr {
            kind: 0,
            len: 0,
            truncated: false,
            bytes: [0; RAW_STR_BYTES],
        }
    }
}

impl RawStr {
    /// The string of `units` characters of `kind` bytes each (1: Latin-1, 2: UCS-2, 4:
    /// UCS-4) at `data` in `memory`, as much of it as a `RawStr` holds; `None` where it is
    /// not all in memory, or is no name: it holds a control character (NUL among them),
    /// which no function or file name has, or, `ascii`, a byte over 127.
    pub fn read(
        memory: &impl Memory,
        data: u64,
        units: u32,
        kind: u32,
        ascii: bool,
    ) -> Option<RawStr> {
        let mut raw = RawStr::default();
        if !matches!(kind, 1 | 2 | 4) {
            return None;
        }
        let bytes = units.saturating_mul(kind);
        let fits = RAW_STR_BYTES as u32 / kind * kind;
        let len = bytes.min(fits);
        memory.read(data, &mut raw.bytes[..len as usize])?;
        (raw.kind, raw.len, raw.truncated) = (kind as u8, len as u8, bytes > fits);
        let ceiling = if ascii { 0x80 } else { u32::MAX };
        let named = raw.units().all(|u| u >= 0x20 && u != 0x7f && u < ceiling);
        named.then_some(raw)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its characters' code units.
    fn units(&self) -> impl Iterator<Item = u32> + '_ {
        let kind = usize::from(self.kind.max(1));
        self.bytes[..usize::from(self.len)]
            .chunks_exact(kind)
            .map(|c| c.iter().rev().fold(0, |u, &b| u << 8 | u32::from(b)))
    }

    fn decode(&self) -> String {
        let mut text: String = self
            .units()
            .map(|u| char::from_u32(u).unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect();
        if self.truncated {
            text.push('…');
        }
        text
    }
}

/// A code's strings, raw.
#[derive(Clone, Copy, Default)]
pub struct Text {
    pub qualname: RawStr,
    pub filename: RawStr,
}

/// A code's names, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeName {
    pub qualname: String,
    pub filename: String,
    pub first_line: u32,
    pub first_column: u32,
}

impl CodeName {
    /// The function of the profile: `name` (the code's name as the runtime's own tracebacks
    /// write it) with its file's base name and where it starts, `fib (app.js:4:1)`,
    /// `<lambda> (app.py:12)`. pprof's views merge functions by name alone, and one file may
    /// hold two functions of one name (two `<lambda>`s, two anonymous callbacks, two classes'
    /// `get size`s): where each starts keeps them two, as the browsers' profilers do.
    pub fn function(self, name: String) -> Function {
        let base = self.filename.rsplit('/').next().unwrap_or_default();
        let column = match self.first_column {
            0 => String::new(),
            column => format!(":{column}"),
        };
        Function {
            name: format!("{name} ({base}:{}{column})", self.first_line),
            system_name: name,
            file: self.filename,
            start_line: self.first_line,
        }
    }
}

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

struct Slot {
    state: AtomicU8,
    key: UnsafeCell<CodeKey>,
    text: UnsafeCell<Text>,
}

/// Entries of [`CodeNames`]: codes a profile names at most.
pub const CODE_SLOTS: usize = 1 << CODE_SLOT_BITS;
const CODE_SLOT_BITS: u32 = 13;
/// Entries looked at for one code.
const PROBES: usize = 64;

/// The names of the codes walks met, filled by the walks (the signal handler's among
/// them), read when a profile is built. An entry is written once, by the walk that claimed
/// it (`EMPTY` → `WRITING`), and published (`READY`, release) with everything in it; it never
/// changes after.
pub struct CodeNames {
    slots: Box<[Slot]>,
}

// SAFETY: a slot's cells are written only by the one thread that claimed it, before it is
// READY, and read only once it is (acquire), never written again.
unsafe impl Sync for CodeNames {}

impl Default for CodeNames {
    fn default() -> Self {
        Self::new()
    }
}

impl CodeNames {
    pub fn new() -> Self {
        CodeNames {
            slots: (0..CODE_SLOTS)
                .map(|_| Slot {
                    state: AtomicU8::new(EMPTY),
                    key: UnsafeCell::new(CodeKey::default()),
                    text: UnsafeCell::new(Text::default()),
                })
                .collect(),
        }
    }

    /// The entry of `key`, made with `text` if there is none; `None` where there is none and
    /// `text` found no names (a walk that does not check out). Async-signal-safe.
    pub fn id_of(&self, key: CodeKey, text: impl FnOnce() -> Option<Text>) -> Option<CodeId> {
        let (mut text, mut names) = (Some(text), None);
        // Fibonacci hashing: the product's high bits.
        let hash = ((key.code ^ key.qualname.rotate_left(16)).wrapping_mul(0x9e37_79b9)
            >> (32 - CODE_SLOT_BITS)) as usize;
        for probe in 0..PROBES {
            let index = (hash + probe) % CODE_SLOTS;
            let slot = &self.slots[index];
            match slot.state.load(Ordering::Acquire) {
                // SAFETY: a READY slot's key is never written again.
                READY if unsafe { *slot.key.get() } == key => return Some(CodeId(index as u32)),
                EMPTY => {
                    // Read before the slot is claimed, so that names that do not read leave
                    // it empty.
                    if let Some(read) = text.take() {
                        names = Some(read()?);
                    }
                    if slot
                        .state
                        .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed)
                        .is_err()
                    {
                        continue;
                    }
                    // SAFETY: claimed: no one else writes or reads the cells until READY.
                    unsafe {
                        *slot.key.get() = key;
                        *slot.text.get() = names.unwrap_or_default();
                    }
                    slot.state.store(READY, Ordering::Release);
                    return Some(CodeId(index as u32));
                }
                // Taken by another code, or being written (perhaps for this one: a
                // second entry for it is harmless).
                _ => {}
            }
        }
        Some(CodeId::UNKNOWN)
    }

    /// The names of entry `id`, once a walk has written it.
    pub fn get(&self, id: CodeId) -> Option<CodeName> {
        let slot = self.slots.get(id.0 as usize)?;
        if slot.state.load(Ordering::Acquire) != READY {
            return None;
        }
        // SAFETY: READY: the cells are written and never change.
        let (key, text) = unsafe { (*slot.key.get(), *slot.text.get()) };
        Some(CodeName {
            qualname: text.qualname.decode(),
            filename: text.filename.decode(),
            first_line: key.first_line,
            first_column: key.first_column,
        })
    }
}

/// Linear memory for the walks' tests.
#[cfg(any(test, feature = "internals"))]
pub mod image {
    use crate::shared::Memory;

    /// Linear memory: reads beyond its end fail.
    pub struct Image(pub Vec<u8>);

    impl Memory for Image {
        fn read(&self, address: u64, out: &mut [u8]) -> Option<()> {
            let start = usize::try_from(address).ok()?;
            out.copy_from_slice(self.0.get(start..start.checked_add(out.len())?)?);
            Some(())
        }
    }

    impl Image {
        pub fn put(&mut self, address: u32, value: u32) {
            let a = address as usize;
            self.0[a..a + 4].copy_from_slice(&value.to_le_bytes());
        }

        pub fn get(&self, address: u32) -> u32 {
            self.u32_at(u64::from(address)).unwrap_or_default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LoopCheck;

    /// A chain of distinct links never loops, however long; one that comes back to any link
    /// of its own is caught within a few rounds of its cycle.
    #[test]
    fn loops_are_caught_and_only_loops() {
        let mut check = LoopCheck::default();
        assert!((1..=100_000).all(|link| !check.looped(link)));
        for (start, cycle) in [(0u32, 1u32), (3, 2), (10, 7), (1000, 300)] {
            let mut check = LoopCheck::default();
            // Links 1..=start, then round the cycle start+1..=start+cycle for ever.
            let link = |i: u32| {
                if i < start {
                    i + 1
                } else {
                    start + 1 + (i - start) % cycle
                }
            };
            let caught = (0..).find(|&i| check.looped(link(i))).unwrap();
            assert!(caught <= 2 * (start + cycle) + 2, "caught at step {caught}");
        }
    }
}
