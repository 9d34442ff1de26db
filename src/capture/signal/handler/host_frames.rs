//! Host frames: outside Wasm code, the host's own frames from the interrupted PC up to the
//! Wasm that called the host (or to the thread's first frame), unwound by framehop (samply's
//! unwinder) with the unwind tables the host's objects keep mapped
//! ([`crate::shared::loaded_objects`]), by frame pointer where an address has none (Wasmtime's
//! compiled code keeps frame records). Only addresses are taken here; they are named off the
//! sampling path, when the sample is resolved.
//!
//! Invariants kept here (see [`super`]): **async-signal-safe**, the unwinder is built before
//! any thread is sampled ([`prepare`]) and only read here; it unwinds with framehop's
//! `MustNotAllocateDuringUnwind` policy into the thread's own cache, built with its state and
//! used by that thread's handler alone (SIGPROF is blocked while it runs); **reads only mapped
//! memory**, the unwind tables of loaded objects (never unloaded, see `loaded_objects`) and
//! stack words that the live [`Stack`] holds; **bounded**, at most [`MAX_HOST_FRAMES`] frames.

use std::cell::UnsafeCell;
use std::sync::OnceLock;

use framehop::{
    CacheNative, ExplicitModuleSectionInfo, FrameAddress, Module, MustNotAllocateDuringUnwind,
    UnwindRegsNative, Unwinder, UnwinderNative,
};

use super::sample::push;
use super::stacks::{read, Stack};
use super::{RawSample, Registers, MAX_FRAMES};
use crate::shared::loaded_objects::loaded_objects;

/// The most host frames a sample keeps: a server's stack under tokio and hyper is some 40
/// deep; the rest of the sample's frames are left to the guest's.
pub const MAX_HOST_FRAMES: usize = 128;

type HostUnwinder = UnwinderNative<&'static [u8], MustNotAllocateDuringUnwind>;

/// A sampled thread's unwind cache: the rules of the addresses it unwound lately.
pub(super) struct HostCache(UnsafeCell<CacheNative<MustNotAllocateDuringUnwind>>);

impl HostCache {
    pub(super) fn new() -> Self {
        HostCache(UnsafeCell::new(CacheNative::default()))
    }
}

static UNWINDER: OnceLock<HostUnwinder> = OnceLock::new();

/// Builds the unwinder of the host's objects, once per process, before host frames are taken:
/// never in the handler, which only reads it.
pub fn prepare() {
    UNWINDER.get_or_init(|| {
        let mut unwinder = HostUnwinder::new();
        for object in loaded_objects() {
            let Some(tables) = &object.unwind else {
                continue;
            };
            let svma = |at: u64, len: usize| at - object.bias..at - object.bias + len as u64;
            let sections = ExplicitModuleSectionInfo {
                base_svma: 0,
                eh_frame_hdr_svma: Some(svma(tables.eh_frame_hdr_at, tables.eh_frame_hdr.len())),
                eh_frame_hdr: Some(tables.eh_frame_hdr),
                eh_frame_svma: Some(svma(tables.eh_frame_at, tables.eh_frame.len())),
                eh_frame: Some(tables.eh_frame),
                ..Default::default()
            };
            unwinder.add_module(Module::new(
                object.path.clone(),
                object.range.clone(),
                object.bias,
                sections,
            ));
        }
        unwinder
    });
}

/// Appends to `s`, which holds the interrupted PC alone (its leaf), the return addresses of
/// the host frames above it on `stack`, up to the first return address into Wasm code (`in_code`),
/// which is not taken: the caller takes the guest's frames from there. Returns how many host
/// frames `s` holds, the PC's included; 0 where the unwinder is not built.
pub(super) fn unwind(
    regs: &Registers,
    stack: Stack,
    cache: &HostCache,
    in_code: impl Fn(usize) -> bool,
    s: &mut RawSample,
) -> usize {
    let Some(unwinder) = UNWINDER.get() else {
        return 0;
    };
    // SAFETY: this thread's handler alone uses its cache, and SIGPROF is blocked while the
    // handler runs, so there is no other reference to it.
    let cache = unsafe { &mut *cache.0.get() };
    let mut read_stack = |addr: u64| {
        let addr = addr as usize;
        match stack.holds(addr) {
            // SAFETY: a word of the live stack (checked).
            true => Ok(unsafe { read(addr) } as u64),
            false => Err(()),
        }
    };
    #[cfg(target_arch = "x86_64")]
    let start = UnwindRegsNative::new(regs.pc as u64, regs.sp as u64, regs.fp as u64);
    #[cfg(target_arch = "aarch64")]
    let start = UnwindRegsNative::new(regs.lr as u64, regs.sp as u64, regs.fp as u64);
    let mut frames = unwinder.iter_frames(regs.pc as u64, start, cache, &mut read_stack);
    let first = s.depth;
    // The first is the PC itself, in `s` already.
    let _ = frames.next();
    while s.depth < MAX_FRAMES && s.depth - first < MAX_HOST_FRAMES {
        let Ok(Some(FrameAddress::ReturnAddress(ra))) = frames.next() else {
            break;
        };
        let ra = ra.get() as usize;
        if in_code(ra) {
            break;
        }
        push(s, ra);
    }
    s.depth
}
