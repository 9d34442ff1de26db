//! A function's basic blocks: the runs of instructions that execute together, by where each
//! starts. What `perf annotate` and `wasmtime hot-blocks` rank, here on the Wasm code.

use anyhow::{Context, Result};
use wasmparser::{BinaryReader, FunctionBody, Operator};

/// A function's instructions and basic blocks.
pub struct Shape {
    /// Every instruction's offset in the module, in order.
    pub instructions: Vec<usize>,
    /// Where each basic block starts, in order: the first instruction, a `loop` (a branch's
    /// target), and the instruction after each one that branches, ends a construct (the
    /// target of the branches out of it) or starts a conditional arm.
    pub block_starts: Vec<usize>,
}

/// The shape of the function whose body is at `range` of `wasm`.
pub fn shape(wasm: &[u8], range: std::ops::Range<usize>) -> Result<Shape> {
    let bytes = wasm
        .get(range.clone())
        .context("a function body past the module's end")?;
    let body = FunctionBody::new(BinaryReader::new(bytes, range.start));
    let mut ops = body
        .get_operators_reader()
        .context("malformed function body")?;
    let mut shape = Shape {
        instructions: Vec::new(),
        block_starts: Vec::new(),
    };
    let mut next_starts = true;
    while !ops.eof() {
        let (op, offset) = ops.read_with_offset().context("malformed function body")?;
        shape.instructions.push(offset);
        if next_starts || matches!(op, Operator::Loop { .. }) {
            shape.block_starts.push(offset);
        }
        next_starts = ends_block(&op);
    }
    Ok(shape)
}

/// Whether the instruction after `op` starts a block.
fn ends_block(op: &Operator<'_>) -> bool {
    use Operator::*;
    matches!(
        op,
        Br { .. }
            | BrIf { .. }
            | BrTable { .. }
            | BrOnNull { .. }
            | BrOnNonNull { .. }
            | BrOnCast { .. }
            | BrOnCastFail { .. }
            | Return
            | ReturnCall { .. }
            | ReturnCallIndirect { .. }
            | ReturnCallRef { .. }
            | Unreachable
            | Throw { .. }
            | ThrowRef
            | Rethrow { .. }
            | If { .. }
            | Else
            | End
            | TryTable { .. }
    )
}

/// The block that the instruction at `offset` is in, by its index in `starts`.
pub fn block_of(starts: &[usize], offset: usize) -> usize {
    starts.partition_point(|&s| s <= offset).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::annotate::listing::Bodies;

    #[test]
    fn branches_loops_and_arms_start_blocks() {
        let wasm = wat::parse_str(
            r#"(module (func (param i32) (result i32)
                i32.const 0          ;; block 0
                drop
                loop $l              ;; block 1
                    local.get 0
                    i32.const 1
                    i32.sub
                    local.tee 0
                    br_if $l
                end                  ;; block 2 (after br_if); `end` closes it
                local.get 0          ;; block 3
                if (result i32)
                    i32.const 7      ;; block 4
                else
                    i32.const 8      ;; block 5
                end
                i32.const 1          ;; block 6
                i32.div_u))"#,
        )
        .unwrap();
        let bodies = Bodies::of(&wasm).unwrap();
        let range = bodies.of_function(0).unwrap();
        let shape = shape(&wasm, range.clone()).unwrap();
        assert_eq!(shape.instructions.len(), 18);
        let starts = shape.block_starts;
        assert_eq!(starts.len(), 7, "{starts:?}");
        // The loop starts the second block, and nothing before it does.
        assert_eq!(block_of(&starts, starts[1]), 1);
        assert_eq!(block_of(&starts, starts[1] - 1), 0);
        assert_eq!(block_of(&starts, range.end - 1), 6);
    }
}
