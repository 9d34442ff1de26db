//! Where Go's PCs are in a Go function's Wasm body. Go's assembler (`cmd/internal/obj/wasm`)
//! gives each function the shape
//!
//! ```text
//! block (unwind) loop (dispatch) block × (R+1)  local.get 0  br_table T  end
//!   segment 0 (entry) end  segment 1 end  …  segment R  end end
//! ```
//!
//! where local 0 is the PC to resume at (`PC_B`) and `T[pc]` the segment that starts it: a
//! segment starts at every resume point (after each call, at each basic block). Before each
//! call the caller stores its return PC (`PC_F << 16 | PC_B`) on Go's stack with an
//! `i64.const`. So a call instruction's offset tells its return PC exactly, and any other
//! offset its segment's first PC; in the dispatch header the PC is only in local 0.

use std::ops::Range;

use wasmparser::{FunctionBody, Operator};

/// The PCs of one function's body; offsets are in the module's bytes.
pub struct BodyMap {
    body: Range<u32>,
    /// Where the dispatch header ends and segment 0 starts; `None`: a function without
    /// resume points (all of it is PC 0's segment).
    dispatch_end: Option<u32>,
    /// Where each segment starts, and its first PC.
    segments: Vec<(u32, Option<u32>)>,
    /// `T`: the segment of each PC.
    table: Vec<u32>,
    /// (offset of a call, the PC it returns to), by offset.
    calls: Vec<(u32, u32)>,
}

impl BodyMap {
    /// The map of `body`, the function whose `PC_F` is `pc_f`; `None` if unreadable.
    pub fn of(body: &FunctionBody<'_>, pc_f: u32) -> Option<Self> {
        let range = body.range();
        let mut map = BodyMap {
            body: range.start as u32..range.end as u32,
            dispatch_end: None,
            segments: Vec::new(),
            table: Vec::new(),
            calls: Vec::new(),
        };
        let mut reader = body.get_operators_reader().ok()?;
        let mut depth = 0usize;
        // The depth inside the header's blocks, once its `br_table` is read.
        let mut header: Option<usize> = None;
        let mut header_shape = true;
        let mut return_pc = None;
        while !reader.eof() {
            let (op, offset) = reader.read_with_offset().ok()?;
            let offset = offset as u32;
            let header_op = matches!(
                op,
                Operator::Block { .. }
                    | Operator::Loop { .. }
                    | Operator::LocalGet { local_index: 0 }
            );
            if header.is_none() && !matches!(op, Operator::BrTable { .. }) {
                header_shape &= header_op;
            }
            match op {
                Operator::Block { .. } | Operator::Loop { .. } | Operator::If { .. } => depth += 1,
                Operator::BrTable { ref targets }
                    if header_shape && header.is_none() && depth > 2 =>
                {
                    map.table = targets.targets().collect::<Result<_, _>>().ok()?;
                    header = Some(depth);
                }
                Operator::End => {
                    depth = depth.saturating_sub(1);
                    if let Some(base) = header {
                        // The header's blocks end innermost first: segment r starts after the
                        // end of the block that `T`'s label r names.
                        let started = map.segments.len();
                        if started < base - 2 && depth + 1 + started == base {
                            let next = reader.original_position() as u32;
                            map.segments.push((next, None));
                            map.dispatch_end.get_or_insert(next);
                        }
                    }
                }
                Operator::I64Const { value } if (value >> 16) as u64 == u64::from(pc_f) => {
                    return_pc = Some(value as u32 & 0xffff);
                }
                Operator::Call { .. } | Operator::CallIndirect { .. } => {
                    if let Some(pc) = return_pc.take() {
                        map.calls.push((offset, pc));
                    }
                }
                _ => {}
            }
        }
        for (pc, &segment) in map.table.iter().enumerate() {
            if let Some((_, first)) = map.segments.get_mut(segment as usize) {
                first.get_or_insert(pc as u32);
            }
        }
        Some(map)
    }

    /// The PC of the code at `offset`: for a call, the call's own (one before the PC it
    /// returns to, as Go's tables are read for a caller); else the first of its segment; 0 in
    /// the dispatch header, where the PC is not in the code.
    pub fn pc_at(&self, offset: u32) -> u32 {
        if let Ok(i) = self.calls.binary_search_by_key(&offset, |&(at, _)| at) {
            return self.calls[i].1.saturating_sub(1);
        }
        if self.dispatch_end.is_none_or(|end| offset < end) {
            return 0;
        }
        let i = self.segments.partition_point(|&(start, _)| start <= offset);
        i.checked_sub(1)
            .and_then(|i| self.segments[i].1)
            .unwrap_or(0)
    }

    /// Where Go's PC `pc` is in the body: the call that returns to it, else the start of the
    /// segment it resumes, else the body's start.
    pub fn offset_of(&self, pc: u32) -> u32 {
        if let Some(&(at, _)) = self.calls.iter().find(|&&(_, to)| to == pc) {
            return at;
        }
        self.table
            .get(pc as usize)
            .and_then(|&segment| self.segments.get(segment as usize))
            .map_or(self.body.start, |&(start, _)| start)
    }
}
