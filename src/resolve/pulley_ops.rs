//! Pulley bytecode decoded off the signal path: the instructions of a function, so that a
//! sampled PC (which may point into an instruction's operands, the interpreter having read
//! them) is named by the instruction it is in, with the instructions before and after it
//! (`report --opcodes`'s pairs).

use std::collections::HashMap;
use std::sync::Arc;

use pulley_interpreter::decode::{Decoder, OpVisitor, SafeBytecodeStream};
use pulley_interpreter::op::{ExtendedOp, MaterializeOpsVisitor, Op};

/// A function's instructions: their offsets in its code and their opcodes' names.
pub struct FunctionOps {
    starts: Vec<u32>,
    names: Vec<Arc<str>>,
}

/// The opcode of a sampled instruction and of its neighbours in the bytecode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpcodeAt {
    pub op: Arc<str>,
    pub prev: Option<Arc<str>>,
    pub next: Option<Arc<str>>,
    /// The instruction's offset in its function's code.
    pub offset: u32,
}

impl FunctionOps {
    /// Decodes `code` from its start, as far as it decodes; `names` interns opcode names.
    pub fn decode(code: &[u8], names: &mut HashMap<&'static str, Arc<str>>) -> Self {
        let mut visitor = MaterializeOpsVisitor::new(SafeBytecodeStream::new(code));
        let mut decoder = Decoder::new();
        let (mut starts, mut ops) = (Vec::new(), Vec::new());
        loop {
            let at = visitor.bytecode().position();
            if at >= code.len() {
                break;
            }
            let Ok(op) = decoder.decode_one(&mut visitor) else {
                break;
            };
            let name = opcode_name(&op);
            let name = names.entry(name).or_insert_with(|| name.into()).clone();
            starts.push(at as u32);
            ops.push(name);
        }
        FunctionOps { starts, names: ops }
    }

    /// The instruction that holds `offset` (from the function's start).
    pub fn at(&self, offset: u32) -> Option<OpcodeAt> {
        let i = self
            .starts
            .partition_point(|&s| s <= offset)
            .checked_sub(1)?;
        Some(OpcodeAt {
            op: self.names[i].clone(),
            prev: i.checked_sub(1).map(|p| self.names[p].clone()),
            next: self.names.get(i + 1).cloned(),
            offset: self.starts[i],
        })
    }
}

/// Defines `$fn`, the name Pulley gives each variant of `$op` (`xadd32`, `br_if_xslt32_i8`),
/// from the list of its instructions (`pulley_interpreter::for_each_op!` and
/// `for_each_extended_op!`).
macro_rules! op_names {
    ($fn:ident, $op:ident, $extended:expr, $(
        $( #[$attr:meta] )*
        $snake_name:ident = $name:ident $( { $( $field:ident : $field_ty:ty ),* } )? ;
    )*) => {
        fn $fn(op: &$op) -> &'static str {
            #[allow(unreachable_patterns)]
            match op {
                $( $op::$name(_) => stringify!($snake_name), )*
                _ => $extended(op),
            }
        }
    };
}

macro_rules! define_op_name {
    ($($instructions:tt)*) => {
        op_names!(opcode_name, Op, |op: &Op| match op {
            Op::ExtendedOp(extended) => extended_opcode_name(extended),
            _ => "?",
        }, $($instructions)*);
    };
}

macro_rules! define_extended_op_name {
    ($($instructions:tt)*) => {
        op_names!(extended_opcode_name, ExtendedOp, |_: &ExtendedOp| "?", $($instructions)*);
    };
}

pulley_interpreter::for_each_op!(define_op_name);
pulley_interpreter::for_each_extended_op!(define_extended_op_name);

#[cfg(test)]
mod tests {
    use super::*;
    use pulley_interpreter::encode;
    use pulley_interpreter::regs::{BinaryOperands, XReg};
    use pulley_interpreter::PcRelOffset;

    #[test]
    fn a_pc_in_an_instructions_operands_is_that_instruction() {
        let mut code = Vec::new();
        encode::push_frame(&mut code);
        let add = code.len() as u32;
        encode::xadd32(&mut code, BinaryOperands::new(XReg::x0, XReg::x1, XReg::x2));
        let ret = code.len() as u32;
        encode::pop_frame(&mut code);
        encode::ret(&mut code);
        let ops = FunctionOps::decode(&code, &mut HashMap::new());
        let at = ops.at(add + 1).unwrap();
        assert_eq!(&*at.op, "xadd32");
        assert_eq!(at.offset, add);
        assert_eq!(at.prev.as_deref(), Some("push_frame"));
        assert_eq!(at.next.as_deref(), Some("pop_frame"));
        let last = ops.at(ret + 1).unwrap();
        assert_eq!(&*last.op, "ret");
        assert_eq!(last.next, None);
    }

    #[test]
    fn names_are_pulleys() {
        let mut code = Vec::new();
        encode::xconst8(&mut code, XReg::x3, 7);
        encode::br_if_xslt32_i8(&mut code, XReg::x3, 9, PcRelOffset::from(0));
        let ops = FunctionOps::decode(&code, &mut HashMap::new());
        assert_eq!(&*ops.at(0).unwrap().op, "xconst8");
        assert_eq!(&*ops.at(3).unwrap().op, "br_if_xslt32_i8");
    }
}
