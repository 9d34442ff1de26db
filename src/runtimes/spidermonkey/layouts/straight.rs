//! A second reading of a function's code, for the rules that need what [`super::code`]'s
//! reading leaves out: 64-bit arithmetic (a NaN-boxed `Value`'s tag is `value & 0xFFFFFFFF <<
//! 32` compared or or'ed with a constant), shifts, subtractions, and the like.
//!
//! It reads straight-line code only, and every value as an expression: an operator and its
//! operands, down to parameters, constants, globals, calls' results and loads. Values are known
//! within a run of code that no path joins: a `block`, an `if`'s then-branch and a `br_if`'s
//! fall-through continue the run; an `else`, an `end`, a `loop` and an unconditional branch start
//! a new one, where every local the function writes anywhere becomes [`Expr::Local`] of that run
//! (a parameter it never writes stays itself), and the operand stack is forgotten (a pop below
//! what the run pushed is [`Expr::Unknown`]). Memory is not followed, as in [`super::code`].
//! Sums and differences are compared as linear combinations ([`linear`]), so that how the
//! compiler ordered an address's additions does not matter.

use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;

use anyhow::Result;
use wasmparser::{ContType, FrameKind, FuncType, ModuleArity, Operator, RefType, SubType};

use super::code::{memory_op, Engine};

/// A value, as far as a straight reading tells.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Expr {
    Unknown,
    /// The function's parameter `n` (one it never writes).
    Param(u32),
    /// Local `n`'s value at the start of run `run` (see the module's documentation).
    Local(u32, u32),
    Const(i64),
    /// `global.get n`'s value (global 0 is the stack pointer in these builds).
    Global(u32),
    /// The result of the `site`th call of the function (in code order), to function `func`.
    Call {
        func: u32,
        site: usize,
    },
    /// What a load (its operator's name) read from `base + offset`.
    Load(&'static str, Rc<Expr>, i64),
    /// An operator (its name in the text format, as `i64.or`) applied to its operands.
    Op(&'static str, Rc<[Expr]>),
}

impl Expr {
    fn op(name: &'static str, operands: Vec<Expr>) -> Expr {
        Expr::Op(name, operands.into())
    }

    /// The value as `base + offset`, for a load's or store's address.
    fn split(&self) -> (Expr, i64) {
        match self {
            Expr::Op("i32.add", o) => match &o[..] {
                [base, Expr::Const(c)] => (base.clone(), *c),
                _ => (self.clone(), 0),
            },
            Expr::Const(c) => (Expr::Const(0), *c),
            _ => (self.clone(), 0),
        }
    }

    /// `self + c` (i32), folded.
    fn plus(&self, c: i64) -> Expr {
        match self {
            Expr::Const(k) => Expr::Const(k.wrapping_add(c)),
            Expr::Unknown => Expr::Unknown,
            _ => {
                let (base, o) = self.split();
                if o + c == 0 {
                    base
                } else {
                    Expr::op("i32.add", vec![base, Expr::Const(o + c)])
                }
            }
        }
    }
}

/// A value as a sum of terms times coefficients, plus a constant: the i32 additions and
/// subtractions of `e` taken apart (an address `base + offset` is the term `base` plus
/// `offset`; a load is a term of its own).
pub fn linear(e: &Expr) -> (BTreeMap<Expr, i64>, i64) {
    fn walk(e: &Expr, sign: i64, terms: &mut BTreeMap<Expr, i64>, constant: &mut i64) {
        match e {
            Expr::Const(c) => *constant += sign * c,
            Expr::Op("i32.add", o) if o.len() == 2 => {
                walk(&o[0], sign, terms, constant);
                walk(&o[1], sign, terms, constant);
            }
            Expr::Op("i32.sub", o) if o.len() == 2 => {
                walk(&o[0], sign, terms, constant);
                walk(&o[1], -sign, terms, constant);
            }
            _ => *terms.entry(e.clone()).or_default() += sign,
        }
    }
    let (mut terms, mut constant) = (BTreeMap::new(), 0);
    walk(e, 1, &mut terms, &mut constant);
    terms.retain(|_, c| *c != 0);
    (terms, constant)
}

/// A load or store, in code order.
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    pub op: &'static str,
    pub base: Expr,
    pub offset: i64,
    /// The value stored; `None` for a load.
    pub value: Option<Expr>,
}

/// A direct call and its arguments.
#[derive(Clone, Debug)]
pub struct Call {
    pub func: u32,
    pub args: Vec<Expr>,
}

/// What a straight reading found.
#[derive(Debug, Default)]
pub struct Straight {
    pub accesses: Vec<Access>,
    pub calls: Vec<Call>,
    /// Every comparison (`i32.eq`, `i64.ne`, `i32.lt_u`, ...): its operator and operands.
    pub compares: Vec<(&'static str, Expr, Expr)>,
}

/// The operators read as an [`Expr::Op`] of their operands: (name, operands).
fn pure_op(op: &Operator<'_>) -> Option<(&'static str, usize)> {
    use Operator as O;
    Some(match op {
        O::I32Add => ("i32.add", 2),
        O::I32Sub => ("i32.sub", 2),
        O::I32Mul => ("i32.mul", 2),
        O::I32And => ("i32.and", 2),
        O::I32Or => ("i32.or", 2),
        O::I32Xor => ("i32.xor", 2),
        O::I32Shl => ("i32.shl", 2),
        O::I32ShrU => ("i32.shr_u", 2),
        O::I32ShrS => ("i32.shr_s", 2),
        O::I64Add => ("i64.add", 2),
        O::I64Sub => ("i64.sub", 2),
        O::I64And => ("i64.and", 2),
        O::I64Or => ("i64.or", 2),
        O::I64Xor => ("i64.xor", 2),
        O::I64Shl => ("i64.shl", 2),
        O::I64ShrU => ("i64.shr_u", 2),
        O::I64ShrS => ("i64.shr_s", 2),
        O::I32Eqz => ("i32.eqz", 1),
        O::I64Eqz => ("i64.eqz", 1),
        O::I32WrapI64 => ("i32.wrap_i64", 1),
        O::I64ExtendI32U => ("i64.extend_i32_u", 1),
        O::I64ExtendI32S => ("i64.extend_i32_s", 1),
        _ => return None,
    })
}

/// The comparisons.
fn compare_op(op: &Operator<'_>) -> Option<&'static str> {
    use Operator as O;
    Some(match op {
        O::I32Eq => "i32.eq",
        O::I32Ne => "i32.ne",
        O::I32LtU => "i32.lt_u",
        O::I32LtS => "i32.lt_s",
        O::I32GtU => "i32.gt_u",
        O::I32GtS => "i32.gt_s",
        O::I32LeU => "i32.le_u",
        O::I32LeS => "i32.le_s",
        O::I32GeU => "i32.ge_u",
        O::I32GeS => "i32.ge_s",
        O::I64Eq => "i64.eq",
        O::I64Ne => "i64.ne",
        _ => return None,
    })
}

/// The arity of the operators read as neither: no types are known here, so an operator whose
/// arity needs them (`call_indirect`, ...) has none, and the stack is forgotten after it.
struct NoTypes;

impl ModuleArity for NoTypes {
    fn sub_type_at(&self, _: u32) -> Option<&SubType> {
        None
    }
    fn tag_type_arity(&self, _: u32) -> Option<(u32, u32)> {
        None
    }
    fn type_index_of_function(&self, _: u32) -> Option<u32> {
        None
    }
    fn func_type_of_cont_type(&self, _: &ContType) -> Option<&FuncType> {
        None
    }
    fn sub_type_of_ref_type(&self, _: &RefType) -> Option<&SubType> {
        None
    }
    fn control_stack_height(&self) -> u32 {
        1
    }
    fn label_block(&self, _: u32) -> Option<(wasmparser::BlockType, FrameKind)> {
        None
    }
}

/// Function `func` of `engine`, read straight (see the module's documentation).
pub fn read(engine: &Engine<'_>, func: u32) -> Result<Straight> {
    let ops = engine.operators(func)?;
    let params = engine.signature(func).0.len() as u32;
    let written: HashSet<u32> = ops
        .iter()
        .filter_map(|op| match op {
            Operator::LocalSet { local_index } | Operator::LocalTee { local_index } => {
                Some(*local_index)
            }
            _ => None,
        })
        .collect();
    let unwritten = |n: u32| {
        if n < params {
            Expr::Param(n)
        } else {
            Expr::Const(0)
        }
    };
    let mut run = 0;
    let mut locals: BTreeMap<u32, Expr> = BTreeMap::new();
    let mut stack: Vec<Expr> = Vec::new();
    let mut out = Straight::default();
    let pop = |stack: &mut Vec<Expr>| stack.pop().unwrap_or(Expr::Unknown);
    for op in &ops {
        use Operator as O;
        if let Some((name, arg, store)) = memory_op(op) {
            let value = store.then(|| pop(&mut stack));
            let (base, offset) = pop(&mut stack).split();
            let offset = offset + arg.offset as i64;
            if !store {
                stack.push(Expr::Load(name, Rc::new(base.clone()), offset));
            }
            out.accesses.push(Access {
                op: name,
                base,
                offset,
                value,
            });
            continue;
        }
        if let Some((name, arity)) = pure_op(op) {
            let mut operands: Vec<Expr> = (0..arity).map(|_| pop(&mut stack)).collect();
            operands.reverse();
            let v = match (name, &operands[..]) {
                (_, o) if o.contains(&Expr::Unknown) => Expr::Unknown,
                ("i32.add", [a, Expr::Const(c)]) | ("i32.add", [Expr::Const(c), a]) => a.plus(*c),
                ("i32.sub", [a, Expr::Const(c)]) => a.plus(-*c),
                _ => Expr::op(name, operands),
            };
            stack.push(v);
            continue;
        }
        if let Some(name) = compare_op(op) {
            let b = pop(&mut stack);
            let a = pop(&mut stack);
            if a != Expr::Unknown && b != Expr::Unknown {
                out.compares.push((name, a.clone(), b.clone()));
            }
            stack.push(Expr::op(name, vec![a, b]));
            continue;
        }
        let mut new_run = || {
            run += 1;
            for n in &written {
                locals.insert(*n, Expr::Local(*n, run));
            }
        };
        match op {
            O::LocalGet { local_index } => {
                let n = *local_index;
                stack.push(locals.get(&n).cloned().unwrap_or_else(|| unwritten(n)));
            }
            O::LocalSet { local_index } | O::LocalTee { local_index } => {
                let v = pop(&mut stack);
                if matches!(op, O::LocalTee { .. }) {
                    stack.push(v.clone());
                }
                locals.insert(*local_index, v);
            }
            O::GlobalGet { global_index } => stack.push(Expr::Global(*global_index)),
            O::I32Const { value } => stack.push(Expr::Const(i64::from(*value))),
            O::I64Const { value } => stack.push(Expr::Const(*value)),
            O::Drop => {
                pop(&mut stack);
            }
            O::Select | O::TypedSelect { .. } => {
                let cond = pop(&mut stack);
                let if_clear = pop(&mut stack);
                let if_set = pop(&mut stack);
                stack.push(Expr::op("select", vec![if_set, if_clear, cond]));
            }
            O::Call { function_index } => {
                let (params, results) = engine.signature(*function_index);
                let mut args: Vec<Expr> = params.iter().map(|_| pop(&mut stack)).collect();
                args.reverse();
                let site = out.calls.len();
                out.calls.push(Call {
                    func: *function_index,
                    args,
                });
                match results.len() {
                    1 => stack.push(Expr::Call {
                        func: *function_index,
                        site,
                    }),
                    n => stack.extend((0..n).map(|_| Expr::Unknown)),
                }
            }
            // The run goes on into a block, an `if`'s then-branch, past a `br_if`.
            O::Block { .. } => stack.clear(),
            O::If { .. } => stack.clear(),
            O::BrIf { .. } => {
                pop(&mut stack);
            }
            // Paths join, or the code after is reached from elsewhere.
            O::Loop { .. }
            | O::Else
            | O::End
            | O::Br { .. }
            | O::BrTable { .. }
            | O::Return
            | O::Unreachable => {
                stack.clear();
                new_run();
            }
            _ => match op.operator_arity(&NoTypes) {
                Some((pops, pushes)) => {
                    for _ in 0..pops {
                        pop(&mut stack);
                    }
                    stack.extend((0..pushes).map(|_| Expr::Unknown));
                }
                None => stack.clear(),
            },
        }
    }
    Ok(out)
}
