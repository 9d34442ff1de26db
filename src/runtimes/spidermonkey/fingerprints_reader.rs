//! A function's loads and stores, in code order, read from its body as recognition
//! ([`super`]) and its generator compare them: each with its operator and offset, constants
//! added to the address folded into the offset, a fixed address as [`FIXED`].
//!
//! One pass over the operators with a stack of what the offsets need (a constant, something
//! plus a constant, unknown), and whether the code is reachable. Unlike the layout's symbolic
//! reading (`layouts/code.rs`), values are not followed through locals: an offset from a
//! local is the one the code spells, not one from the value the local was given (the stack
//! pointer minus 16, say), so the two readings' offsets may differ; their operators, in order,
//! and the fixed addresses of the accesses the fingerprints use are the same (the generator
//! checks).

use std::ops::ControlFlow;

use wasmparser::{
    BlockType, CompositeInnerType, ContType, FrameKind, FuncType, FunctionBody, MemArg,
    ModuleArity, Operator, Parser, Payload, RefType, SubType, TypeRef,
};

use super::{Access, Fingerprint, FIXED};

/// A core module's types, functions and bodies, as far as reading their accesses needs.
pub struct Code<'a> {
    types: Vec<SubType>,
    /// The type of each function, imported ones first.
    func_types: Vec<u32>,
    imported: u32,
    bodies: Vec<FunctionBody<'a>>,
}

/// Buffers reused from body to body.
#[derive(Default)]
pub struct Scratch {
    stack: Vec<V>,
    frames: Vec<Block>,
}

/// A value on the stack, as far as the accesses' offsets need it: a constant, something known
/// plus a constant, or unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V {
    Unknown,
    Const(i64),
    Plus(i64),
}

impl V {
    fn plus(self, c: i64) -> V {
        match self {
            V::Const(k) => V::Const(k.wrapping_add(c)),
            V::Plus(o) => V::Plus(o.wrapping_add(c)),
            V::Unknown => V::Unknown,
        }
    }
}

/// A control frame: the stack's height below it, its results, whether its end is reached
/// (by a branch, or by falling through), and (an `if`'s) whether its entry was reachable.
#[derive(Clone, Copy)]
struct Block {
    kind: FrameKind,
    ty: BlockType,
    height: usize,
    results: u32,
    reached: bool,
    entry: bool,
}

impl<'a> Code<'a> {
    pub fn parse(wasm: &'a [u8]) -> Result<Code<'a>, String> {
        let mut code = Code {
            types: Vec::new(),
            func_types: Vec::new(),
            imported: 0,
            bodies: Vec::new(),
        };
        let unreadable = |e: wasmparser::BinaryReaderError| format!("it is unreadable ({e})");
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.map_err(unreadable)? {
                Payload::TypeSection(types) => {
                    for group in types {
                        code.types.extend(group.map_err(unreadable)?.into_types());
                    }
                }
                Payload::ImportSection(imports) => {
                    for import in imports.into_imports() {
                        if let TypeRef::Func(ty) | TypeRef::FuncExact(ty) =
                            import.map_err(unreadable)?.ty
                        {
                            code.func_types.push(ty);
                            code.imported += 1;
                        }
                    }
                }
                Payload::FunctionSection(funcs) => {
                    for ty in funcs {
                        code.func_types.push(ty.map_err(unreadable)?);
                    }
                }
                Payload::CodeSectionEntry(body) => code.bodies.push(body),
                _ => {}
            }
        }
        Ok(code)
    }

    /// The indices of the functions defined in the module.
    pub fn defined(&self) -> std::ops::Range<u32> {
        self.imported..self.imported + self.bodies.len() as u32
    }

    pub fn body(&self, func: u32) -> Option<&FunctionBody<'a>> {
        self.bodies.get(func.checked_sub(self.imported)? as usize)
    }

    pub fn func_type(&self, func: u32) -> Option<&FuncType> {
        let ty = self
            .types
            .get(*self.func_types.get(func as usize)? as usize)?;
        match &ty.composite_type.inner {
            CompositeInnerType::Func(f) => Some(f),
            _ => None,
        }
    }

    /// Whether function `func` has `print`'s accesses: if so, the address of each access
    /// `print` reads `js::TlsContext` with (`None` where it is no fixed address).
    pub(super) fn matches(
        &self,
        scratch: &mut Scratch,
        func: u32,
        print: &Fingerprint,
    ) -> Option<Vec<Option<u32>>> {
        let mut at = 0;
        let mut addresses = Vec::new();
        let read = self.accesses(scratch, func, |access, address| {
            if print.accesses.get(at) != Some(&access) {
                at = usize::MAX;
                return ControlFlow::Break(());
            }
            if print.reads.contains(&at) {
                addresses.push(address);
            }
            at += 1;
            ControlFlow::Continue(())
        });
        (read.is_ok() && at == print.accesses.len()).then_some(addresses)
    }

    /// Calls `visit` with each load and store of function `func` in code order, and the address
    /// of one to a fixed address, until it breaks. An offset folds in the constants added to the
    /// address (`local.get 0; i32.const 8; i32.add; i32.load offset=4` is at 12); a fixed
    /// address is a constant (`i32.const 2393492; i32.load`, or `i32.const 0; i32.load
    /// offset=2393492`). Accesses in unreachable code (after a branch, up to where paths join)
    /// are not visited: the layout's symbolic reading (`layouts/code.rs`) leaves them out too.
    pub fn accesses(
        &self,
        scratch: &mut Scratch,
        func: u32,
        mut visit: impl FnMut(Access, Option<u32>) -> ControlFlow<()>,
    ) -> Result<(), String> {
        let body = self.body(func).ok_or("no such function")?;
        let ty = self.func_types.get(func as usize).copied().unwrap_or(0);
        let results = self.func_type(func).map_or(0, |t| t.results().len() as u32);
        let mut reader = body.get_operators_reader().map_err(|e| e.to_string())?;
        let mut r = Reader {
            code: self,
            stack: std::mem::take(&mut scratch.stack),
            frames: std::mem::take(&mut scratch.frames),
            reachable: true,
        };
        r.stack.clear();
        r.frames.clear();
        r.frames.push(Block {
            kind: FrameKind::Block,
            ty: BlockType::FuncType(ty),
            height: 0,
            results,
            reached: false,
            entry: false,
        });
        let mut outcome = Ok(());
        while !r.frames.is_empty() && !reader.eof() {
            let op = match reader.read() {
                Ok(op) => op,
                Err(e) => {
                    outcome = Err(e.to_string());
                    break;
                }
            };
            if let Some((name, arg, store)) = memory_op(&op) {
                if store {
                    r.pop();
                }
                // The offset, or (`Err`) the fixed address.
                let offset = match r.pop() {
                    V::Const(c) => Err(c.wrapping_add(arg.offset as i64)),
                    V::Plus(o) => Ok(o.wrapping_add(arg.offset as i64) as u64),
                    V::Unknown => Ok(arg.offset),
                };
                if !store {
                    r.stack.push(V::Plus(0));
                }
                if r.reachable {
                    let access = match offset {
                        Ok(offset) => ((name, offset), None),
                        Err(address) => ((name, FIXED), u32::try_from(address).ok()),
                    };
                    if visit(access.0, access.1).is_break() {
                        break;
                    }
                }
            } else {
                r.step(&op);
            }
        }
        scratch.stack = r.stack;
        scratch.frames = r.frames;
        outcome
    }
}

/// Reads a body's operators, keeping what the accesses' offsets and reachability need.
struct Reader<'c, 'a> {
    code: &'c Code<'a>,
    stack: Vec<V>,
    frames: Vec<Block>,
    reachable: bool,
}

impl ModuleArity for Reader<'_, '_> {
    fn sub_type_at(&self, type_idx: u32) -> Option<&SubType> {
        self.code.types.get(type_idx as usize)
    }
    fn tag_type_arity(&self, _at: u32) -> Option<(u32, u32)> {
        None
    }
    fn type_index_of_function(&self, function_idx: u32) -> Option<u32> {
        self.code.func_types.get(function_idx as usize).copied()
    }
    fn func_type_of_cont_type(&self, _c: &ContType) -> Option<&FuncType> {
        None
    }
    fn sub_type_of_ref_type(&self, _rt: &RefType) -> Option<&SubType> {
        None
    }
    fn control_stack_height(&self) -> u32 {
        self.frames.len() as u32
    }
    fn label_block(&self, depth: u32) -> Option<(BlockType, FrameKind)> {
        let frame = self
            .frames
            .get(self.frames.len().checked_sub(1 + depth as usize)?)?;
        Some((frame.ty, frame.kind))
    }
}

impl Reader<'_, '_> {
    /// The top value (unknown below the innermost frame's floor, which it never pops).
    fn pop(&mut self) -> V {
        let floor = self.frames.last().map_or(0, |f| f.height);
        if self.stack.len() > floor {
            self.stack.pop().unwrap_or(V::Unknown)
        } else {
            V::Unknown
        }
    }

    fn push_unknown(&mut self, n: u32) {
        self.stack.extend((0..n).map(|_| V::Unknown));
    }

    /// A branch `depth` frames out reaches that frame's end (a loop's head is no end).
    fn branch(&mut self, depth: u32) {
        let Some(at) = self.frames.len().checked_sub(1 + depth as usize) else {
            return;
        };
        if self.reachable && self.frames[at].kind != FrameKind::Loop {
            self.frames[at].reached = true;
        }
    }

    fn unreachable(&mut self) {
        let floor = self.frames.last().map_or(0, |f| f.height);
        self.stack.truncate(floor);
        self.reachable = false;
    }

    fn step(&mut self, op: &Operator<'_>) {
        use Operator as O;
        match op {
            O::I32Const { value } => self.stack.push(V::Const(i64::from(*value))),
            O::I64Const { value } => self.stack.push(V::Const(*value)),
            O::LocalGet { .. } | O::GlobalGet { .. } => self.stack.push(V::Plus(0)),
            O::LocalSet { .. } | O::GlobalSet { .. } | O::Drop => {
                self.pop();
            }
            O::LocalTee { .. } => {}
            O::I32Add | O::I32Sub => {
                let b = self.pop();
                let a = self.pop();
                let v = match (a, b, op) {
                    (_, V::Const(c), O::I32Add) => a.plus(c),
                    (V::Const(c), _, O::I32Add) => b.plus(c),
                    (_, V::Const(c), _) => a.plus(c.wrapping_neg()),
                    (V::Plus(i), V::Plus(j), O::I32Add) => V::Plus(i.wrapping_add(j)),
                    _ => V::Unknown,
                };
                self.stack.push(v);
            }
            O::I32And => {
                let b = self.pop();
                let a = self.pop();
                let masked = matches!((a, b), (V::Const(_), V::Const(_) | V::Plus(_)))
                    || matches!((a, b), (V::Plus(_), V::Const(_)));
                self.stack
                    .push(if masked { V::Plus(0) } else { V::Unknown });
            }
            O::Select | O::TypedSelect { .. } => {
                self.pop();
                let b = self.pop();
                let a = self.pop();
                self.stack.push(match (a, b) {
                    _ if a == b => a,
                    (V::Unknown, _) | (_, V::Unknown) => V::Unknown,
                    _ => V::Plus(0),
                });
            }
            O::Call { function_index } => {
                let (params, results) = self
                    .code
                    .func_type(*function_index)
                    .map_or((0, 0), |t| (t.params().len(), t.results().len()));
                for _ in 0..params {
                    self.pop();
                }
                match results {
                    1 => self.stack.push(V::Plus(0)),
                    n => self.push_unknown(n as u32),
                }
            }
            O::Block { blockty } | O::Loop { blockty } | O::If { blockty } => {
                if matches!(op, O::If { .. }) {
                    self.pop();
                }
                let (params, results) = self.block_type_arity(*blockty).unwrap_or((0, 0));
                let kind = match op {
                    O::Loop { .. } => FrameKind::Loop,
                    O::If { .. } => FrameKind::If,
                    _ => FrameKind::Block,
                };
                self.frames.push(Block {
                    kind,
                    ty: *blockty,
                    height: self.stack.len().saturating_sub(params as usize),
                    results,
                    reached: false,
                    entry: self.reachable,
                });
            }
            O::Else => {
                self.branch(0);
                let reachable = match self.frames.last_mut() {
                    Some(frame) => {
                        frame.kind = FrameKind::Else;
                        frame.entry
                    }
                    None => false,
                };
                if let Some(&frame) = self.frames.last() {
                    self.stack.truncate(frame.height);
                    let params = self.block_type_arity(frame.ty).map_or(0, |a| a.0);
                    self.push_unknown(params);
                }
                self.reachable = reachable;
            }
            O::End => {
                if let Some(frame) = self.frames.pop() {
                    let reached = match frame.kind {
                        FrameKind::Loop => self.reachable,
                        FrameKind::If => frame.reached || self.reachable || frame.entry,
                        _ => frame.reached || self.reachable,
                    };
                    self.stack.truncate(frame.height);
                    self.push_unknown(frame.results);
                    self.reachable = reached;
                }
            }
            O::Br { relative_depth } => {
                self.branch(*relative_depth);
                self.unreachable();
            }
            O::BrIf { relative_depth } => {
                self.pop();
                self.branch(*relative_depth);
            }
            O::BrTable { targets } => {
                self.pop();
                for depth in targets.targets().flatten().chain([targets.default()]) {
                    self.branch(depth);
                }
                self.unreachable();
            }
            O::Return | O::Unreachable => self.unreachable(),
            _ => {
                let (pops, pushes) = op.operator_arity(&*self).unwrap_or((0, 0));
                for _ in 0..pops {
                    self.pop();
                }
                self.push_unknown(pushes);
            }
        }
    }
}

/// A load or store: its name in the text format, its memory argument, whether it stores (the
/// operators the layout's `code.rs` reads as accesses).
fn memory_op(op: &Operator<'_>) -> Option<(&'static str, MemArg, bool)> {
    use Operator as O;
    Some(match *op {
        O::I32Load { memarg } => ("i32.load", memarg, false),
        O::I64Load { memarg } => ("i64.load", memarg, false),
        O::F32Load { memarg } => ("f32.load", memarg, false),
        O::F64Load { memarg } => ("f64.load", memarg, false),
        O::I32Load8S { memarg } => ("i32.load8_s", memarg, false),
        O::I32Load8U { memarg } => ("i32.load8_u", memarg, false),
        O::I32Load16S { memarg } => ("i32.load16_s", memarg, false),
        O::I32Load16U { memarg } => ("i32.load16_u", memarg, false),
        O::I64Load8S { memarg } => ("i64.load8_s", memarg, false),
        O::I64Load8U { memarg } => ("i64.load8_u", memarg, false),
        O::I64Load16S { memarg } => ("i64.load16_s", memarg, false),
        O::I64Load16U { memarg } => ("i64.load16_u", memarg, false),
        O::I64Load32S { memarg } => ("i64.load32_s", memarg, false),
        O::I64Load32U { memarg } => ("i64.load32_u", memarg, false),
        O::V128Load { memarg } => ("v128.load", memarg, false),
        O::I32Store { memarg } => ("i32.store", memarg, true),
        O::I64Store { memarg } => ("i64.store", memarg, true),
        O::F32Store { memarg } => ("f32.store", memarg, true),
        O::F64Store { memarg } => ("f64.store", memarg, true),
        O::I32Store8 { memarg } => ("i32.store8", memarg, true),
        O::I32Store16 { memarg } => ("i32.store16", memarg, true),
        O::I64Store8 { memarg } => ("i64.store8", memarg, true),
        O::I64Store16 { memarg } => ("i64.store16", memarg, true),
        O::I64Store32 { memarg } => ("i64.store32", memarg, true),
        O::V128Store { memarg } => ("v128.store", memarg, true),
        _ => return None,
    })
}
