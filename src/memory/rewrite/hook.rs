//! The hook protocol, what the host and the rewritten module's wrappers share: the exports the
//! host reaches (the hook's table, the countdown, the nesting depth), the hook's function type,
//! what a wrapper tells the hook, where a countdown starts, how the host's answer is packed
//! ([`report`]) and the slot an address hashes to ([`block_slot`]). The wrappers' Wasm
//! (`wrappers.rs`) unpacks the answer and hashes addresses as these functions do: the two
//! change together.

use wasm_encoder::{TypeSection, ValType};

// Named in the documentation only.
#[cfg(doc)]
use super::{Allocator, Rewritten};

/// The export holding the table whose element 0 the host sets to its report function, of type
/// `(allocator: i32, size: i32, freed: i32, allocated: i32, countdown: i64) -> i64`: called
/// when `countdown` (the bytes left before the next sample, less this allocation's) went below
/// zero, or when `freed` hashes to a flagged slot; it returns [`report`]. Until element 0 is
/// set, nothing is reported.
pub const HOOK_TABLE: &str = "wasmspy:allocator-hook";

/// The export of the `i64` global counting the bytes left before the next sampled allocation
/// (it starts at [`UNSEEDED`]).
pub const SAMPLE_COUNTDOWN: &str = "wasmspy:sample-countdown";

/// The export of the mutable `i32` global counting the wrappers running: while it is not zero,
/// the module's allocators neither count nor report. A component's gate raises every module's
/// while a function the host called runs ([`Allocator::HostCalled`]).
pub const NESTING_DEPTH: &str = "wasmspy:nesting-depth";

/// What a wrapper tells the hook, as the size of a call with [`Allocator::HostCalled`]'s code:
/// this bit set on entry, clear on exit.
pub const TOLD_ENTERING: i32 = 1;

/// Set by an allocator's wrapper (in a module without `malloc`), clear by a function the host
/// called: the allocator's callees are other modules' `malloc` and the like, so only the
/// modules whose wrappers do not tell ([`Rewritten::tells`]) need nesting in it, where
/// anything of the component may run in a function the host called.
pub const TOLD_BY_ALLOCATOR: i32 = 2;

/// Where every instance's countdown starts: far below zero, so that the first allocator call
/// reaches the host, which draws that instance's first interval then ([`bytes_unseeded`]).
/// A start drawn once and compiled in would sample the same allocation of every instance (a
/// server's store per request).
pub const UNSEEDED: i64 = i64::MIN / 2;

/// The bytes allocated since a countdown that the hook heard started at [`UNSEEDED`]; `None`
/// for a countdown the host had drawn (never more than one allocation's size below zero).
pub fn bytes_unseeded(countdown: i64) -> Option<u64> {
    (countdown < UNSEEDED / 2).then(|| countdown.abs_diff(UNSEEDED))
}

/// The hook's answer: the new countdown, and whether a live sampled block now hashes to the
/// slot of the freed address and to that of the allocated one.
pub fn report(countdown: i64, freed_slot_live: bool, allocated_slot_live: bool) -> i64 {
    countdown << 2 | i64::from(allocated_slot_live) << 1 | i64::from(freed_slot_live)
}

/// Fibonacci hashing: aligned addresses differ in their low bits, which this spreads over the
/// top 16 bits.
pub(super) const SLOT_MULTIPLIER: u32 = 0x9E37_79B1;

/// The flag (a byte of the rewriter's memory of flags) that stands for the block at `address`.
pub fn block_slot(address: u32) -> usize {
    (address.wrapping_mul(SLOT_MULTIPLIER) >> 16) as usize
}

/// Adds the function type of the hook of [`HOOK_TABLE`] to `types`.
pub fn add_hook_type(types: &mut TypeSection) {
    types.ty().function(
        [
            ValType::I32,
            ValType::I32,
            ValType::I32,
            ValType::I32,
            ValType::I64,
        ],
        [ValType::I64],
    );
}
