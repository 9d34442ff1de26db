//! Go's goroutine stacks, read from linear memory as Go's own traceback reads them
//! (`runtime/traceback.go`; see docs/go.md).
//!
//! Go compiled to Wasm keeps its call stack in linear memory: global 0 is its stack pointer
//! (SP), global 2 the running goroutine (`g`). A call stores the return PC (`PC_F << 16 |
//! PC_B`, an 8-byte word) below the callee's frame; a function of frame size `F` past its
//! prologue has its return PC at `SP + F`, and its caller's SP is `SP + F + 8`. Whenever a
//! goroutine is switched or its stack grows, the Wasm stack is unwound to `wasm_pc_f_loop`,
//! which resumes callers one by one from those return PCs: the Wasm stack holds only the
//! frames entered since, the stack in memory all of them.
//!
//! A walk is async-signal-safe: no allocation, every read of linear memory bounds-checked by
//! the [`Memory`] given, at most as many steps as the output has room for.

use std::ops::Range;

use wasmtime::WasmBacktrace;

use super::module::{GoModule, Role, FIRST_PC_F};
use crate::runtimes::walk_counts::WalkCounts;
use crate::shared::Memory;
use crate::shared::MAX_STACK_DEPTH;

/// `g` fields: `stack.lo`, `stack.hi`, `m`, `sched.sp`, `sched.pc` (the same in Go 1.21 to
/// 1.27); `m.g0`.
const G_STACK_LO: u64 = 0;
const G_STACK_HI: u64 = 8;
const G_M: u64 = 48;
const G_SCHED_SP: u64 = 56;
const G_SCHED_PC: u64 = 64;
const M_G0: u64 = 0;

/// What a walk needs of a Go module: each function's frame size and role, by `PC_F`.
pub struct GoFrames {
    /// `None` for a function Go's table does not describe.
    frames: Box<[Option<(u32, Role)>]>,
    /// `m.curg`: 144 before Go 1.25 (which dropped `gobuf.ret`), 136 since.
    m_curg: u64,
}

impl GoFrames {
    pub fn of(module: &GoModule) -> Self {
        let frames = module
            .defined_functions()
            .map(|f| f.map(|f| (f.frame_size, f.role)))
            .collect();
        let m_curg = if module.before_go_1_25() { 144 } else { 136 };
        GoFrames { frames, m_curg }
    }

    /// The frame size and role of the function of Go PC `pc`.
    fn frame(&self, pc: u64) -> Option<(u32, Role)> {
        let defined = (pc >> 16).checked_sub(u64::from(FIRST_PC_F))?;
        *self.frames.get(usize::try_from(defined).ok()?)?
    }

    /// The role of the function whose `PC_F` is `pc_f`.
    pub fn role(&self, pc_f: u32) -> Option<Role> {
        self.frame(u64::from(pc_f) << 16).map(|(_, role)| role)
    }
}

/// A Go module's compiled code, as the handler sees it.
pub struct GoCode {
    text: Range<usize>,
    /// Each function's native code and `PC_F` (0: not a Go function, e.g. an allocator's
    /// wrapper that the allocator rewrite added), by start.
    functions: Box<[(usize, usize, u32)]>,
    /// Each function's `PC_F` (0: none), by its index in the compiled module.
    by_index: Box<[u32]>,
    pub frames: GoFrames,
}

impl GoCode {
    /// `pc_f_of(func_index)`: the `PC_F` of a function of the compiled module, if Go's.
    pub fn new(
        module: &wasmtime::Module,
        frames: GoFrames,
        pc_f_of: impl Fn(u32) -> Option<u32>,
    ) -> Self {
        let text = module.text().as_ptr_range();
        let base = text.start as usize;
        let mut functions = Vec::new();
        let mut by_index = Vec::new();
        for f in module.functions() {
            let (start, index) = (base + f.offset, f.index.as_u32() as usize);
            let pc_f = pc_f_of(index as u32).unwrap_or(0);
            functions.push((start, start + f.len, pc_f));
            if by_index.len() <= index {
                by_index.resize(index + 1, 0);
            }
            by_index[index] = pc_f;
        }
        functions.sort_unstable();
        GoCode {
            text: base..text.end as usize,
            functions: functions.into(),
            by_index: by_index.into(),
            frames,
        }
    }

    /// The native code of the module.
    pub fn text(&self) -> &Range<usize> {
        &self.text
    }

    /// The `PC_F` of the Go function whose native code holds `pc`. Async-signal-safe.
    pub fn pc_f_at(&self, pc: usize) -> Option<u32> {
        if !self.text.contains(&pc) {
            return None;
        }
        let i = self.functions.partition_point(|&(start, _, _)| start <= pc);
        let (_, end, pc_f) = self.functions[i.checked_sub(1)?];
        (pc < end && pc_f != 0).then_some(pc_f)
    }
}

/// Go's registers at the sample: global 0 (SP) and global 2 (`g`).
#[derive(Clone, Copy, Debug)]
pub struct Registers {
    pub sp: u64,
    pub g: u64,
}

/// The Wasm frames of Go functions that the sample's native stack shows, innermost first:
/// each function's `PC_F` and the native return address into it (0 for the innermost).
/// Most are on Go's stack too; those of functions called as plain Wasm ([`Role::Plain`], such
/// as write barriers) are only here.
pub type WasmFrames<'a> = &'a [(u32, usize)];

/// A PC of the output that is a native return address (into a function called a
/// [`Role::Plain`] function), not a Go PC: the resolver maps it as a native sample's.
pub const NATIVE_RETURN: usize = 1 << 63;

/// Where the walk starts.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    /// In the Go function `wasm[0]`, the innermost Wasm frame, whose Wasm caller is `wasm[1]`
    /// unless that is `wasm_pc_f_loop`. Its own PC is in a Wasm local, out of reach: the walk
    /// finds whether its frame is set up (SP moved by its frame size, past the prologue) or
    /// not (at its entry) by which of the two gives a stack that checks out.
    Leaf,
    /// Between functions: the PC that runs next is just below SP, popped by the function that
    /// returned (the Wasm stack is at `wasm_pc_f_loop`, or in a wrapper the allocator rewrite
    /// added around a Go function that has just returned).
    Resume,
}

/// The PCs of the goroutine's stack into `out`, innermost first: for [`Start::Leaf`] its
/// callers, for [`Start::Resume`] the PC resumed and its callers. On the scheduler's stack
/// (`g0`), the goroutine it runs for continues the stack, as in Go's tracebacks. The number
/// of PCs written, or `None` if the stack does not check out: a PC that is not a function's,
/// a frame outside the goroutine's stack, or an end that is not one of Go's outermost frames.
/// A stack deeper than `out` is cut to its innermost frames.
pub fn walk(
    frames: &GoFrames,
    memory: &impl Memory,
    registers: Registers,
    wasm: WasmFrames<'_>,
    start: Start,
    out: &mut [usize],
) -> Option<usize> {
    // SP and `g` start at 0: Go's runtime has not started.
    if registers.sp == 0 || registers.g == 0 {
        return None;
    }
    let walker = Walker {
        frames,
        memory,
        g: registers.g,
        wasm,
    };
    match start {
        Start::Leaf => {
            let &(pc_f, _) = wasm.first()?;
            let caller_pc_f = wasm
                .get(1)
                .map(|&(caller, _)| caller)
                .filter(|&caller| frames.role(caller) != Some(Role::ResumeLoop));
            let (size, _) = frames.frame(u64::from(pc_f) << 16)?;
            // Past the prologue first (where most of a function's time is spent), then at its
            // entry, then returned (its return PC popped, as after its last instruction that
            // moves SP); first with the caller the Wasm stack shows, then with any (a function
            // reached by a jump from another, as `sync/atomic`'s are, returns to the caller's).
            let entry = u64::from(pc_f) << 16;
            [true, false].iter().find_map(|&check_caller| {
                let checked = |return_pc: u64| {
                    !check_caller
                        || caller_pc_f.is_none_or(|caller| return_pc >> 16 == u64::from(caller))
                };
                let set_up = (size > 0)
                    .then(|| {
                        let sp = registers.sp;
                        let return_pc = memory.u64_at(sp.checked_add(u64::from(size))?)?;
                        checked(return_pc).then_some(())?;
                        walker.stack(Frame { pc: entry | 1, sp }, out)
                    })
                    .flatten();
                set_up
                    .or_else(|| {
                        checked(memory.u64_at(registers.sp)?).then_some(())?;
                        walker.stack(
                            Frame {
                                pc: entry,
                                sp: registers.sp,
                            },
                            out,
                        )
                    })
                    .or_else(|| {
                        checked(memory.u64_at(registers.sp.checked_sub(8)?)?).then_some(())?;
                        walker.resume(registers.sp, out)
                    })
            })
        }
        Start::Resume => walker.resume(registers.sp, out),
    }
}

#[derive(Clone, Copy)]
struct Frame {
    pc: u64,
    sp: u64,
}

struct Walker<'a, M> {
    frames: &'a GoFrames,
    memory: &'a M,
    g: u64,
    wasm: WasmFrames<'a>,
}

/// How a goroutine's stack ended.
enum End {
    /// At one of Go's outermost frames, or cut for want of room.
    Done,
    /// On `g0`, at the frame where the goroutine's stack it works for continues.
    Switch,
}

impl<M: Memory> Walker<'_, M> {
    /// The PC just below `sp`, which runs next, and its callers.
    fn resume(&self, sp: u64, out: &mut [usize]) -> Option<usize> {
        let pc = self.memory.u64_at(sp.checked_sub(8)?)?;
        self.frames.frame(pc)?;
        let (first, rest) = out.split_first_mut()?;
        *first = pc as usize;
        Some(self.stack(Frame { pc, sp }, rest)? + 1)
    }

    /// The callers of `frame`, continued on the goroutine `g0` works for.
    fn stack(&self, frame: Frame, out: &mut [usize]) -> Option<usize> {
        let m = self.field(self.g, G_M)?;
        let on_g0 = m != 0 && self.field(m, M_G0)? == self.g;
        let (written, end) = self.callers(self.g, frame, on_g0, out)?;
        let End::Switch = end else {
            return Some(written);
        };
        let curg = self.field(m, self.frames.m_curg)?;
        if curg == 0 || curg == self.g {
            return Some(written);
        }
        // The goroutine's state as it was switched out: the PC it resumes at, and its SP.
        let resumed = Frame {
            pc: self.field(curg, G_SCHED_PC)?,
            sp: self.field(curg, G_SCHED_SP)?,
        };
        self.frames.frame(resumed.pc)?;
        let rest = &mut out[written..];
        let Some((first, rest)) = rest.split_first_mut() else {
            return Some(written);
        };
        *first = resumed.pc as usize;
        let (more, end) = self.callers(curg, resumed, false, rest)?;
        matches!(end, End::Done).then_some(written + 1 + more)
    }

    /// The return PCs above `frame` on goroutine `g`'s stack.
    fn callers(
        &self,
        g: u64,
        mut frame: Frame,
        on_g0: bool,
        out: &mut [usize],
    ) -> Option<(usize, End)> {
        let (low, high) = (self.field(g, G_STACK_LO)?, self.field(g, G_STACK_HI)?);
        // Early in the runtime's start, g0's bounds are not set yet.
        let bounded = high != 0;
        if bounded && !(low..high).contains(&frame.sp) {
            return None;
        }
        let mut written = 0;
        loop {
            let (size, role) = self.frames.frame(frame.pc)?;
            match role {
                Role::TopFrame if on_g0 => return Some((written, End::Switch)),
                Role::TopFrame => return Some((written, End::Done)),
                Role::Morestack if on_g0 => return Some((written, End::Switch)),
                // The goroutine that called `mcall` is parked; Go's traceback ends here.
                Role::Mcall if on_g0 => return Some((written, End::Done)),
                Role::ResumeLoop => return None,
                _ => {}
            }
            if written == out.len() {
                return Some((written, End::Done));
            }
            if role == Role::Plain {
                // Called without a return PC, by the function of the Wasm frame under its
                // own, whose frame is right above: past its prologue, as it made a call.
                let pc_f = (frame.pc >> 16) as u32;
                let at = self.wasm.iter().position(|&(f, _)| f == pc_f)?;
                let &(caller, return_address) = self.wasm.get(at + 1)?;
                out[written] = return_address | NATIVE_RETURN;
                written += 1;
                frame = Frame {
                    pc: u64::from(caller) << 16 | 1,
                    sp: frame.sp.checked_add(u64::from(size))?,
                };
                continue;
            }
            let delta = if frame.pc & 0xffff == 0 { 0 } else { size };
            let fp = frame.sp.checked_add(u64::from(delta) + 8)?;
            if bounded && fp > high {
                return None;
            }
            let pc = self.memory.u64_at(fp - 8)?;
            out[written] = pc as usize;
            written += 1;
            frame = Frame { pc, sp: fp };
        }
    }

    fn field(&self, address: u64, offset: u64) -> Option<u64> {
        self.memory.u64_at(address.checked_add(offset)?)
    }
}

/// Off the signal path, in an epoch callback: the goroutine's stack under the Wasm frames of
/// `backtrace`, in the instance (`registers`, `memory`) of the module whose code is `code`:
/// how many of the backtrace's frames stay, and Go's PCs; `None` where it shows no Go frame or
/// the stack does not check out.
pub fn at_epoch(
    backtrace: &WasmBacktrace,
    code: &GoCode,
    counts: &WalkCounts,
    registers: Registers,
    memory: &impl Memory,
) -> Option<(usize, Vec<usize>)> {
    let text = code.text.start;
    let mut wasm = Vec::new();
    let mut first = None;
    for (i, f) in backtrace.frames().iter().enumerate() {
        let ours = f.module().text().as_ptr() as usize == text;
        let pc_f = code.by_index.get(f.func_index() as usize).copied();
        let Some(pc_f) = pc_f.filter(|&pc_f| ours && pc_f != 0) else {
            continue;
        };
        // As in the handler: a function called as plain Wasm, innermost, has no Go frame.
        if wasm.is_empty() && code.frames.role(pc_f) == Some(Role::Plain) {
            continue;
        }
        first.get_or_insert(i);
        // No native return address: a plain call further in cuts the walk short.
        wasm.push((pc_f, 0));
    }
    let start = match wasm.first().and_then(|&(leaf, _)| code.frames.role(leaf)) {
        Some(Role::ResumeLoop) => Start::Resume,
        _ => Start::Leaf,
    };
    let at = first?;
    let walked = walked(code, registers, memory, &wasm, start);
    Some((at + 1, counts.count(walked)?))
}

/// Off the signal path, in the allocator hook, which the wrapper of a Go allocator calls once
/// the allocator returned: the allocator's frame (the backtrace's first), then the goroutine's
/// stack from its caller, whose PC the allocator just popped.
pub fn at_allocator(
    code: &GoCode,
    counts: &WalkCounts,
    registers: Registers,
    memory: &impl Memory,
) -> Option<(usize, Vec<usize>)> {
    let walked = walked(code, registers, memory, &[], Start::Resume);
    Some((1, counts.count(walked)?))
}

fn walked(
    code: &GoCode,
    registers: Registers,
    memory: &impl Memory,
    wasm: WasmFrames<'_>,
    start: Start,
) -> Option<Vec<usize>> {
    let mut pcs = vec![0; MAX_STACK_DEPTH];
    let written = walk(&code.frames, memory, registers, wasm, start, &mut pcs)?;
    pcs.truncate(written);
    Some(pcs)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Functions by `PC_F`: 0x1000 A (frame 16), 0x1001 B (frame 8), 0x1002 `goexit`,
    /// 0x1003 a write barrier (plain Wasm, frame 32), 0x1004 `mstart`, 0x1005
    /// `wasm_pc_f_loop`, 0x1006 C (frame 0).
    fn frames() -> GoFrames {
        GoFrames {
            frames: vec![
                (16, Role::Go),
                (8, Role::Go),
                (0, Role::TopFrame),
                (32, Role::Plain),
                (0, Role::TopFrame),
                (0, Role::ResumeLoop),
                (0, Role::Go),
            ]
            .into_iter()
            .map(Some)
            .collect(),
            m_curg: 136,
        }
    }

    const A: u64 = 0x1000 << 16;
    const B: u64 = 0x1001 << 16;
    const GOEXIT: u64 = 0x1002 << 16;
    const BARRIER: u64 = 0x1003 << 16;
    const MSTART: u64 = 0x1004 << 16;
    const C: u64 = 0x1006 << 16;

    /// Words of linear memory; the rest reads as absent.
    #[derive(Default)]
    struct Words(HashMap<u64, u64>);

    impl Memory for Words {
        fn read(&self, address: u64, out: &mut [u8]) -> Option<()> {
            let word = self.0.get(&address)?.to_le_bytes();
            out.copy_from_slice(word.get(..out.len())?);
            Some(())
        }
    }

    /// A goroutine at 0x100 (its stack `[0x1000, 0x2000)`), run by an M at 0x200 whose g0
    /// is at 0x300 (stack `[0x3000, 0x4000)`).
    fn memory(words: &[(u64, u64)]) -> Words {
        let mut memory = Words::default();
        for (g, low, high) in [(0x100, 0x1000, 0x2000), (0x300, 0x3000, 0x4000)] {
            memory.0.insert(g + G_STACK_LO, low);
            memory.0.insert(g + G_STACK_HI, high);
            memory.0.insert(g + G_M, 0x200);
        }
        memory.0.insert(0x200 + M_G0, 0x300);
        memory.0.insert(0x200 + 136, 0x100);
        memory.0.extend(words.iter().copied());
        memory
    }

    fn walk_from(
        memory: &Words,
        g: u64,
        sp: u64,
        wasm: WasmFrames<'_>,
        start: Start,
    ) -> Option<Vec<u64>> {
        let mut out = [0usize; 16];
        let registers = Registers { sp, g };
        let n = walk(&frames(), memory, registers, wasm, start, &mut out)?;
        Some(out[..n].iter().map(|&pc| pc as u64).collect())
    }

    /// A running A (past its prologue: its return PC 16 bytes up), called by B, called by
    /// `goexit`. The same stack when A is at its entry (SP at its return PC), and when it has
    /// just returned (its return PC popped, just below SP).
    #[test]
    fn a_leaf_set_up_at_entry_or_returned() {
        let chain = [(0x1000 + 16, B | 3), (0x1000 + 16 + 8 + 8, GOEXIT | 1)];
        let memory = memory(&chain);
        let wasm = [(0x1000, 0), (0x1001, 0x5000)];
        let expected = Some(vec![B | 3, GOEXIT | 1]);
        assert_eq!(
            walk_from(&memory, 0x100, 0x1000, &wasm, Start::Leaf),
            expected
        );
        // At entry: SP 16 bytes higher, at the return PC.
        assert_eq!(
            walk_from(&memory, 0x100, 0x1010, &wasm, Start::Leaf),
            expected
        );
        // Returned: SP just above the return PC, which is B's resume point.
        assert_eq!(
            walk_from(&memory, 0x100, 0x1018, &wasm, Start::Leaf),
            expected
        );
        // A chain that does not end at one of Go's outermost frames does not check out.
        let cut = self::memory(&[(0x1010, B | 3), (0x1020, A | 1)]);
        assert_eq!(walk_from(&cut, 0x100, 0x1000, &wasm, Start::Leaf), None);
        // Nor one whose frames leave the goroutine's stack.
        assert_eq!(walk_from(&memory, 0x100, 0x2000, &wasm, Start::Leaf), None);
    }

    /// On g0, C (frameless) runs under `mstart`; the goroutine it works for continues the
    /// stack from where it was switched out (`sched`): B, under `goexit`.
    #[test]
    fn the_scheduler_stack_continues_on_the_goroutine() {
        let memory = memory(&[
            (0x3f00, MSTART | 1),
            (0x100 + G_SCHED_SP, 0x1800),
            (0x100 + G_SCHED_PC, B | 2),
            (0x1800 + 8, GOEXIT | 1),
        ]);
        let wasm = [(0x1006, 0)];
        assert_eq!(
            walk_from(&memory, 0x300, 0x3f00, &wasm, Start::Leaf),
            Some(vec![MSTART | 1, B | 2, GOEXIT | 1])
        );
    }

    /// A write barrier, called as plain Wasm by B, calls A: above the barrier's frame is B's,
    /// whose PC is in the Wasm frame under the barrier's (its native return address, tagged).
    #[test]
    fn a_function_called_as_plain_wasm_is_bridged_by_its_wasm_caller() {
        let memory = memory(&[
            // A's return PC into the barrier, then the barrier's 32 bytes, then B's 8 and its
            // return PC.
            (0x1000 + 16, BARRIER | 1),
            (0x1018 + 32 + 8, GOEXIT | 1),
        ]);
        let wasm = [(0x1000, 0), (0x1003, 0x7000), (0x1001, 0x7100)];
        assert_eq!(
            walk_from(&memory, 0x100, 0x1000, &wasm, Start::Leaf),
            Some(vec![BARRIER | 1, 0x7100 | NATIVE_RETURN as u64, GOEXIT | 1])
        );
    }

    /// From `wasm_pc_f_loop`: the PC resumed is just below SP.
    #[test]
    fn the_resume_loop_resumes_the_pc_below_sp() {
        let memory = memory(&[(0x1008, C | 4), (0x1010, GOEXIT | 1)]);
        assert_eq!(
            walk_from(&memory, 0x100, 0x1010, &[(0x1005, 0)], Start::Resume),
            Some(vec![C | 4, GOEXIT | 1])
        );
    }
}
