//! The bodies that replace the wrapped functions ([`Added::wrapper`] for an allocator,
//! [`Added::host_called_wrapper`] for a function the host calls): each calls the original,
//! moved to a new function, with the nesting depth raised, and decides in Wasm whether the hook
//! hears of the call, hashing addresses as [`block_slot`] does and unpacking the answer as
//! [`report`] packs it.

use wasm_encoder::{BlockType, Function, MemArg, ValType};

use super::allocators::Allocator;
use super::hook::{SLOT_MULTIPLIER, TOLD_BY_ALLOCATOR, TOLD_ENTERING};
use super::sections::Added;
// Named in the documentation only.
#[cfg(doc)]
use super::{block_slot, report};

impl Added {
    /// The body that replaces `allocator` (a function of `params` parameters): calls the
    /// original (now function `original`), then, unless called from inside another wrapper,
    /// counts the allocation down and calls the hook when it is sampled or frees a block that
    /// may have been.
    pub(super) fn wrapper(&self, allocator: Allocator, params: u32, original: u32) -> Function {
        let returns = allocator.allocates();
        let result = params;
        let size = params + u32::from(returns);
        let (freed, allocated, countdown, answer) = (size + 1, size + 2, size + 3, size + 4);
        let told = size + 5;
        let mut f = Function::new([
            (u32::from(returns) + 3, ValType::I32),
            (2, ValType::I64),
            (1, ValType::I32),
        ]);
        let mut code = f.instructions();
        code.global_get(self.depth)
            .i32_const(1)
            .i32_add()
            .global_set(self.depth);
        if self.tell {
            self.tell_entering(&mut code, told, TOLD_BY_ALLOCATOR);
        }
        for p in 0..params {
            code.local_get(p);
        }
        code.call(original);
        if returns {
            code.local_set(result);
        }
        if self.tell {
            self.tell_leaving(&mut code, told, TOLD_BY_ALLOCATOR);
        }
        code.global_get(self.depth)
            .i32_const(1)
            .i32_sub()
            .global_set(self.depth);
        code.global_get(self.depth).i32_eqz();
        if allocator == Allocator::GoMallocgc {
            // Go returns 1 while it unwinds the Wasm stack to switch goroutines; the call
            // completes later, resumed through this wrapper, and is reported then.
            code.local_get(result).i32_eqz().i32_and();
        }
        code.if_(BlockType::Empty);
        match allocator {
            Allocator::Malloc | Allocator::RustAlloc | Allocator::RustAllocZeroed => {
                code.local_get(0).local_set(size);
                code.local_get(result).local_set(allocated);
            }
            Allocator::Calloc => {
                code.local_get(0).local_get(1).i32_mul().local_set(size);
                code.local_get(result).local_set(allocated);
            }
            Allocator::AlignedAlloc => {
                code.local_get(1).local_set(size);
                code.local_get(result).local_set(allocated);
            }
            Allocator::Realloc => {
                code.local_get(1).local_set(size);
                code.local_get(0).local_set(freed);
                code.local_get(result).local_set(allocated);
            }
            Allocator::RustRealloc => {
                code.local_get(3).local_set(size);
                code.local_get(0).local_set(freed);
                code.local_get(result).local_set(allocated);
            }
            Allocator::Free | Allocator::RustDealloc => {
                code.local_get(0).local_set(freed);
            }
            Allocator::PosixMemalign => {
                // On success the block's address is at the pointer given.
                code.local_get(2).local_set(size);
                code.local_get(result).i32_eqz().if_(BlockType::Empty);
                code.local_get(0)
                    .i32_load(memarg(2, 0))
                    .local_set(allocated);
                code.end();
            }
            Allocator::GoMallocgc => {
                // Returned, the callee has popped its return address: the caller's SP points
                // at the arguments, `size` first, the result after the three 8-byte slots of
                // (size, typ, needzero).
                code.global_get(0)
                    .i64_load(memarg(3, 0))
                    .i32_wrap_i64()
                    .local_set(size);
                code.global_get(0)
                    .i64_load(memarg(3, 24))
                    .i32_wrap_i64()
                    .local_set(allocated);
            }
            Allocator::TinyGoAlloc => {
                code.local_get(0).local_set(size);
                code.local_get(result).local_set(allocated);
            }
            // Its wrapper is `host_called_wrapper`.
            Allocator::HostCalled => {}
        }
        if allocator.allocates() {
            // A failed allocation (null) is not counted.
            code.global_get(self.countdown)
                .local_get(size)
                .i64_extend_i32_u()
                .i64_sub()
                .global_get(self.countdown)
                .local_get(allocated)
                .select();
        } else {
            code.global_get(self.countdown);
        }
        code.local_tee(countdown).i64_const(0).i64_lt_s();
        if allocator.frees() {
            code.local_get(freed)
                .i32_const(SLOT_MULTIPLIER as i32)
                .i32_mul()
                .i32_const(16)
                .i32_shr_u()
                .i32_load8_u(MemArg {
                    offset: 0,
                    align: 0,
                    memory_index: self.flags,
                })
                .i32_or();
        }
        code.if_(BlockType::Empty);
        code.i32_const(0)
            .table_get(self.hook_table)
            .ref_is_null()
            .i32_eqz()
            .if_(BlockType::Empty);
        code.i32_const(allocator.code())
            .local_get(size)
            .local_get(freed)
            .local_get(allocated)
            .local_get(countdown)
            .i32_const(0)
            .call_indirect(self.hook_table, self.hook_type)
            .local_tee(answer)
            .i64_const(2)
            .i64_shr_s()
            .local_set(countdown);
        // The flags of the slots of the freed and the allocated block, in that order, as
        // `report` packs them.
        for (address, bit, used) in [
            (freed, 0, allocator.frees()),
            (allocated, 1, allocator.allocates()),
        ] {
            if !used {
                continue;
            }
            code.local_get(address).if_(BlockType::Empty);
            code.local_get(address)
                .i32_const(SLOT_MULTIPLIER as i32)
                .i32_mul()
                .i32_const(16)
                .i32_shr_u()
                .local_get(answer)
                .i64_const(bit)
                .i64_shr_u()
                .i32_wrap_i64()
                .i32_const(1)
                .i32_and()
                .i32_store8(MemArg {
                    offset: 0,
                    align: 0,
                    memory_index: self.flags,
                });
            code.end();
        }
        code.end();
        code.end();
        code.local_get(countdown).global_set(self.countdown);
        code.end();
        if returns {
            code.local_get(result);
        }
        code.end();
        f
    }

    /// The body that replaces a function the host calls while the component may not call out
    /// ([`Allocator::HostCalled`]), of type `params -> results`: calls the original (now
    /// function `original`) as a wrapper running, so that this module's allocators report
    /// nothing, and tells the hook it enters and leaves, so that the other modules' do not
    /// either. The hook is told only if it was set on entry: it is the component's gate, or
    /// none yet.
    pub(super) fn host_called_wrapper(
        &self,
        params: &[ValType],
        results: &[ValType],
        original: u32,
    ) -> Function {
        let told = params.len() as u32;
        let first_result = told + 1;
        let locals: Vec<_> = std::iter::once((1, ValType::I32))
            .chain(results.iter().map(|&t| (1, t)))
            .collect();
        let mut f = Function::new(locals);
        let mut code = f.instructions();
        code.global_get(self.depth)
            .i32_const(1)
            .i32_add()
            .global_set(self.depth);
        self.tell_entering(&mut code, told, 0);
        for p in 0..told {
            code.local_get(p);
        }
        code.call(original);
        for r in (0..results.len() as u32).rev() {
            code.local_set(first_result + r);
        }
        self.tell_leaving(&mut code, told, 0);
        code.global_get(self.depth)
            .i32_const(1)
            .i32_sub()
            .global_set(self.depth);
        for r in 0..results.len() as u32 {
            code.local_get(first_result + r);
        }
        code.end();
        f
    }

    /// Tells the hook, if it is set, that a wrapper enters (`by`: [`TOLD_BY_ALLOCATOR`] or
    /// 0); local `told` says whether it did.
    fn tell_entering(&self, code: &mut wasm_encoder::InstructionSink<'_>, told: u32, by: i32) {
        code.i32_const(0)
            .table_get(self.hook_table)
            .ref_is_null()
            .i32_eqz()
            .local_tee(told)
            .if_(BlockType::Empty);
        self.tell_hook(code, by | TOLD_ENTERING);
        code.end();
    }

    /// Tells the hook the wrapper leaves, if it told it that it entered.
    fn tell_leaving(&self, code: &mut wasm_encoder::InstructionSink<'_>, told: u32, by: i32) {
        code.local_get(told).if_(BlockType::Empty);
        self.tell_hook(code, by);
        code.end();
    }

    /// Calls the hook with [`Allocator::HostCalled`]'s code and `told` as the size.
    fn tell_hook(&self, code: &mut wasm_encoder::InstructionSink<'_>, told: i32) {
        code.i32_const(Allocator::HostCalled.code())
            .i32_const(told)
            .i32_const(0)
            .i32_const(0)
            .i64_const(0)
            .i32_const(0)
            .call_indirect(self.hook_table, self.hook_type)
            .drop();
    }
}

/// An access to the guest's memory 0.
fn memarg(align: u32, offset: u64) -> MemArg {
    MemArg {
        offset,
        align,
        memory_index: 0,
    }
}
