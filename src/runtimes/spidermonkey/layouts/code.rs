//! What the layout's rules read of an engine's code: its functions by name (the `name`
//! section), and each function's loads and stores with what their addresses and stored values
//! are made of, as far as a straight reading of the code tells.
//!
//! The reading is symbolic and deliberately simple: one pass over the operators in order, with a
//! stack of values and the locals' values. A value is a parameter, a constant, a global, a
//! call's result, a load from a value plus an offset, or a value plus a constant; anything else
//! is unknown. Where paths join (a block's end, reached by falling through and by branches; an
//! `if` without `else`), a local keeps its value only if every path agrees on it; a loop's
//! head forgets the locals its body writes. Memory is not followed: a load's value is only
//! "what was at that address". The rules that use the reading are each checked to match
//! exactly once, so a reading gone wrong fails a rule rather than giving a wrong offset.

use std::collections::HashMap;
use std::rc::Rc;

use anyhow::{bail, Context, Result};
use wasmparser::{
    BlockType, ContType, FrameKind, FuncType, FunctionBody, KnownCustom, MemArg, ModuleArity, Name,
    Operator, Parser, Payload, RefType, SubType, TypeRef, ValType,
};

/// A value of the code's stack or locals, as far as the reading tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Unknown,
    /// The function's parameter `n`, as it was on entry.
    Param(u32),
    Const(i64),
    /// `global.get n`'s value (global 0 is the stack pointer in these builds).
    Global(u32),
    /// The result of a call to function `n`.
    Call(u32),
    /// What a load read from `base + offset`.
    Load(Rc<Val>, i64),
    /// `base + offset`: `base` is never an `Add` or a `Const` itself.
    Add(Rc<Val>, i64),
    /// `a + b`, neither a constant.
    Sum(Rc<Val>, Rc<Val>),
    /// `value & mask`.
    Masked(Rc<Val>, i64),
    /// One of these (2 to [`MAX_CHOICES`]), by the path taken: where paths join.
    OneOf(Rc<[Val]>),
}

/// The offset a shape gives an access to a fixed address: engines built from the same source
/// share their code's shapes, whatever their addresses and function indices.
pub const ADDRESS: u64 = u64::MAX;

/// The most values a joined value keeps apart; a join of more is unknown.
const MAX_CHOICES: usize = 4;

impl Val {
    /// `self + c`, folded.
    pub fn plus(&self, c: i64) -> Val {
        match self {
            Val::Const(k) => Val::Const(k.wrapping_add(c)),
            Val::Add(base, o) if o + c == 0 => (**base).clone(),
            Val::Add(base, o) => Val::Add(base.clone(), o + c),
            Val::Unknown => Val::Unknown,
            _ if c == 0 => self.clone(),
            _ => Val::Add(Rc::new(self.clone()), c),
        }
    }

    /// The value as a base and a constant offset (`Const(c)` as `Const(0)` plus `c`).
    pub fn split(&self) -> (Val, i64) {
        match self {
            Val::Add(base, o) => ((**base).clone(), *o),
            Val::Const(c) => (Val::Const(0), *c),
            _ => (self.clone(), 0),
        }
    }

    /// A load from `self + offset`.
    pub fn load(&self, offset: i64) -> Val {
        Val::Load(Rc::new(self.clone()), offset)
    }

    /// The values it may be: its choices, or itself.
    pub fn choices(&self) -> &[Val] {
        match self {
            Val::OneOf(choices) => choices,
            _ => std::slice::from_ref(self),
        }
    }

    /// The value where paths bringing `self` and `other` join.
    fn join(&self, other: &Val) -> Val {
        if self == other {
            return self.clone();
        }
        let mut choices: Vec<Val> = Vec::new();
        for v in self.choices().iter().chain(other.choices()) {
            if *v == Val::Unknown {
                return Val::Unknown;
            }
            if !choices.contains(v) {
                choices.push(v.clone());
            }
        }
        if choices.len() > MAX_CHOICES {
            return Val::Unknown;
        }
        Val::OneOf(choices.into())
    }
}

/// A load or store of a function, in code order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// Its operator's name in the text format, as `i32.store` or `i32.load8_u`.
    pub op: &'static str,
    pub store: bool,
    /// The address is `base + offset` (the memory argument's offset and any constant added to
    /// the address folded in; a constant address has base `Const(0)`).
    pub base: Val,
    pub offset: i64,
    /// The value stored; `None` for a load.
    pub value: Option<Val>,
}

/// A core module of the engine: its types, functions and their names.
pub struct Engine<'a> {
    types: Vec<SubType>,
    /// The type of each function, imported ones first.
    func_types: Vec<u32>,
    imported: u32,
    bodies: Vec<FunctionBody<'a>>,
    /// The functions the `name` section names, by name (a name given twice maps to none).
    names: HashMap<String, Option<u32>>,
}

impl<'a> Engine<'a> {
    pub fn parse(wasm: &'a [u8]) -> Result<Engine<'a>> {
        let mut engine = Engine {
            types: Vec::new(),
            func_types: Vec::new(),
            imported: 0,
            bodies: Vec::new(),
            names: HashMap::new(),
        };
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::Version { encoding, .. } if encoding != wasmparser::Encoding::Module => {
                    bail!("not a core module")
                }
                Payload::TypeSection(types) => {
                    for group in types {
                        engine.types.extend(group?.into_types());
                    }
                }
                Payload::ImportSection(imports) => {
                    for import in imports.into_imports() {
                        if let TypeRef::Func(ty) = import?.ty {
                            engine.func_types.push(ty);
                            engine.imported += 1;
                        }
                    }
                }
                Payload::FunctionSection(funcs) => {
                    for ty in funcs {
                        engine.func_types.push(ty?);
                    }
                }
                Payload::CodeSectionEntry(body) => engine.bodies.push(body),
                Payload::CustomSection(section) => {
                    if let KnownCustom::Name(names) = section.as_known() {
                        for name in names.into_iter().flatten() {
                            if let Name::Function(map) = name {
                                for naming in map.into_iter().flatten() {
                                    engine
                                        .names
                                        .entry(naming.name.to_string())
                                        .and_modify(|f| *f = None)
                                        .or_insert(Some(naming.index));
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(engine)
    }

    /// The indices of the functions defined in the module.
    pub fn defined(&self) -> std::ops::Range<u32> {
        self.imported..self.imported + self.bodies.len() as u32
    }

    /// The one defined function named `name`.
    pub fn named(&self, name: &str) -> Result<u32> {
        match self.names.get(name) {
            Some(Some(f)) if self.defined().contains(f) => Ok(*f),
            Some(_) => bail!("more than one function, or an import, is named `{name}`"),
            None => bail!("no function is named `{name}`"),
        }
    }

    fn body(&self, func: u32) -> Result<&FunctionBody<'a>> {
        func.checked_sub(self.imported)
            .and_then(|i| self.bodies.get(i as usize))
            .with_context(|| format!("function {func} is not defined in the module"))
    }

    fn func_type(&self, func: u32) -> Option<&FuncType> {
        let ty = self
            .types
            .get(*self.func_types.get(func as usize)? as usize)?;
        match &ty.composite_type.inner {
            wasmparser::CompositeInnerType::Func(f) => Some(f),
            _ => None,
        }
    }

    /// The operators of function `func`'s body, in order.
    pub fn operators(&self, func: u32) -> Result<Vec<Operator<'a>>> {
        let mut reader = self.body(func)?.get_operators_reader()?;
        let mut ops = Vec::new();
        while !reader.eof() {
            ops.push(reader.read()?);
        }
        Ok(ops)
    }

    /// The type of function `func`: its parameters' and results' types.
    pub fn signature(&self, func: u32) -> (Vec<ValType>, Vec<ValType>) {
        self.func_type(func)
            .map(|t| (t.params().to_vec(), t.results().to_vec()))
            .unwrap_or_default()
    }

    /// Function `func` read symbolically (see the module documentation).
    pub fn read(&self, func: u32) -> Result<Reading> {
        let ty = self.func_type(func);
        let params = ty.map_or(0, |t| t.params().len() as u32);
        let results = ty.map_or(0, |t| t.results().len() as u32);
        let mut locals: Vec<Val> = (0..params).map(Val::Param).collect();
        for local in self.body(func)?.get_locals_reader()? {
            let (count, _) = local?;
            locals.extend((0..count).map(|_| Val::Const(0)));
        }
        let ops = self.operators(func)?;
        let mut reading = Reader {
            engine: self,
            stack: Vec::new(),
            frames: vec![Frame {
                ty: BlockType::FuncType(self.func_types[func as usize]),
                kind: FrameKind::Block,
                height: 0,
                results,
                joined: None,
                joined_results: None,
                entry: None,
            }],
            loop_writes: loop_writes(&ops),
            locals: Some(locals),
            out: Reading::default(),
        };
        for (at, op) in ops.iter().enumerate() {
            reading.step(at, op);
        }
        Ok(reading.out)
    }
}

/// For each `loop` (by its operator's index), the locals its body writes.
fn loop_writes(ops: &[Operator<'_>]) -> HashMap<usize, Vec<u32>> {
    let mut open: Vec<Option<(usize, Vec<u32>)>> = Vec::new();
    let mut writes = HashMap::new();
    for (at, op) in ops.iter().enumerate() {
        match op {
            Operator::Loop { .. } => open.push(Some((at, Vec::new()))),
            Operator::Block { .. } | Operator::If { .. } => open.push(None),
            Operator::End => {
                if let Some(Some((start, locals))) = open.pop() {
                    for frame in open.iter_mut().flatten() {
                        frame.1.extend(&locals);
                    }
                    writes.insert(start, locals);
                }
            }
            Operator::LocalSet { local_index } | Operator::LocalTee { local_index } => {
                if let Some(Some((_, locals))) = open.iter_mut().rev().find(|f| f.is_some()) {
                    locals.push(*local_index);
                }
            }
            _ => {}
        }
    }
    writes
}

/// The values (of the locals, or a block's results) where paths join.
fn join(into: &mut Option<Vec<Val>>, from: &[Val]) {
    match into {
        None => *into = Some(from.to_vec()),
        Some(values) => {
            for (a, b) in values.iter_mut().zip(from) {
                *a = a.join(b);
            }
        }
    }
}

/// A `select`: `if_set` where `cond` is not zero, else `if_clear`.
#[derive(Clone, Debug)]
pub struct Choice {
    pub cond: Val,
    pub if_set: Val,
    pub if_clear: Val,
}

/// A direct call: the function called, and its arguments.
#[derive(Clone, Debug)]
pub struct CallSite {
    pub func: u32,
    pub args: Vec<Val>,
}

/// What a reading of a function found: its loads and stores in code order, its calls, its
/// `select`s, masks and comparisons.
#[derive(Debug, Default)]
pub struct Reading {
    pub accesses: Vec<Access>,
    pub calls: Vec<CallSite>,
    pub choices: Vec<Choice>,
    /// Every `value & constant` it computes.
    pub masks: Vec<Val>,
    /// Every pair of values it compares (`i32.eq`, `i32.ne`), neither unknown.
    pub compares: Vec<(Val, Val)>,
}

impl Reading {
    /// The sequence of (operator, offset) of the loads and stores: the function's exact shape,
    /// an access to a constant address with offset [`ADDRESS`] however the code spells it.
    pub fn shape(&self) -> Vec<(&'static str, u64)> {
        let offset = |a: &Access| {
            if a.base == Val::Const(0) {
                ADDRESS
            } else {
                a.offset as u64
            }
        };
        self.accesses.iter().map(|a| (a.op, offset(a))).collect()
    }
}

/// A control frame: its type, the stack's height below it, the locals and results of the
/// paths that reach its end so far (by branches), and (an `if`'s) its locals on entry.
struct Frame {
    ty: BlockType,
    kind: FrameKind,
    height: usize,
    results: u32,
    joined: Option<Vec<Val>>,
    joined_results: Option<Vec<Val>>,
    entry: Option<Vec<Val>>,
}

struct Reader<'e, 'a> {
    engine: &'e Engine<'a>,
    stack: Vec<Val>,
    frames: Vec<Frame>,
    loop_writes: HashMap<usize, Vec<u32>>,
    /// The locals' values here; `None` where the code is unreachable.
    locals: Option<Vec<Val>>,
    out: Reading,
}

impl ModuleArity for Reader<'_, '_> {
    fn sub_type_at(&self, type_idx: u32) -> Option<&SubType> {
        self.engine.types.get(type_idx as usize)
    }
    fn tag_type_arity(&self, _at: u32) -> Option<(u32, u32)> {
        None
    }
    fn type_index_of_function(&self, function_idx: u32) -> Option<u32> {
        self.engine.func_types.get(function_idx as usize).copied()
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
    fn pop(&mut self) -> Val {
        let floor = self.frames.last().map_or(0, |f| f.height);
        if self.stack.len() > floor {
            self.stack.pop().unwrap_or(Val::Unknown)
        } else {
            Val::Unknown
        }
    }

    fn push_unknown(&mut self, n: u32) {
        self.stack.extend((0..n).map(|_| Val::Unknown));
    }

    fn block_arity(&self, ty: BlockType) -> (u32, u32) {
        self.block_type_arity(ty).unwrap_or((0, 0))
    }

    /// The top `n` values of the stack (unknown below the frame's floor).
    fn top(&self, n: u32) -> Vec<Val> {
        let floor = self.frames.last().map_or(0, |f| f.height);
        let have = self.stack.len().saturating_sub(floor).min(n as usize);
        let mut top = vec![Val::Unknown; n as usize - have];
        top.extend_from_slice(&self.stack[self.stack.len() - have..]);
        top
    }

    /// A branch to the label `depth` frames out: its locals and results join that frame's
    /// end (a loop's head forgets what its body writes anyway).
    fn branch(&mut self, depth: u32) {
        let Some(at) = self.frames.len().checked_sub(1 + depth as usize) else {
            return;
        };
        if self.locals.is_none() || self.frames[at].kind == FrameKind::Loop {
            return;
        }
        let top = self.top(self.frames[at].results);
        let frame = &mut self.frames[at];
        join(&mut frame.joined_results, &top);
        if let Some(locals) = &self.locals {
            join(&mut frame.joined, locals);
        }
    }

    /// The end of the innermost frame's path (at `else` or `end`), if it is reachable.
    fn fall_through(&mut self) {
        self.branch(0);
    }

    /// After an unconditional branch: nothing is known until a join.
    fn unreachable(&mut self) {
        let floor = self.frames.last().map_or(0, |f| f.height);
        self.stack.truncate(floor);
        self.locals = None;
    }

    fn step(&mut self, at: usize, op: &Operator<'_>) {
        use Operator as O;
        if let Some((name, arg, store)) = memory_op(op) {
            let value = store.then(|| self.pop());
            let (base, offset) = self.pop().split();
            let offset = offset + arg.offset as i64;
            if !store {
                self.stack.push(base.load(offset));
            }
            if self.locals.is_some() {
                self.out.accesses.push(Access {
                    op: name,
                    store,
                    base,
                    offset,
                    value,
                });
            }
            return;
        }
        match op {
            O::LocalGet { local_index } => {
                let v = self
                    .locals
                    .as_ref()
                    .and_then(|l| l.get(*local_index as usize));
                self.stack.push(v.cloned().unwrap_or(Val::Unknown));
            }
            O::LocalSet { local_index } | O::LocalTee { local_index } => {
                let v = self.pop();
                if matches!(op, O::LocalTee { .. }) {
                    self.stack.push(v.clone());
                }
                if let Some(slot) = self
                    .locals
                    .as_mut()
                    .and_then(|l| l.get_mut(*local_index as usize))
                {
                    *slot = v;
                }
            }
            O::GlobalGet { global_index } => self.stack.push(Val::Global(*global_index)),
            O::I32Const { value } => self.stack.push(Val::Const(*value as i64)),
            O::I64Const { value } => self.stack.push(Val::Const(*value)),
            O::I32Add | O::I32Sub => {
                let b = self.pop();
                let a = self.pop();
                let v = match (&a, &b, op) {
                    (_, Val::Const(c), O::I32Add) => a.plus(*c),
                    (Val::Const(c), _, O::I32Add) => b.plus(*c),
                    (_, Val::Const(c), _) => a.plus(-*c),
                    (Val::Unknown, _, _) | (_, Val::Unknown, _) | (_, _, O::I32Sub) => Val::Unknown,
                    _ => {
                        // The constants added outside: `(a + c) + b` is `(a + b) + c`.
                        let ((a, i), (b, j)) = (a.split(), b.split());
                        Val::Sum(Rc::new(a), Rc::new(b)).plus(i + j)
                    }
                };
                self.stack.push(v);
            }
            O::I32And => {
                let b = self.pop();
                let a = self.pop();
                let v = match (a, b) {
                    (Val::Unknown, _) | (_, Val::Unknown) => Val::Unknown,
                    (v, Val::Const(m)) | (Val::Const(m), v) => Val::Masked(Rc::new(v), m),
                    _ => Val::Unknown,
                };
                if self.locals.is_some() && v != Val::Unknown {
                    self.out.masks.push(v.clone());
                }
                self.stack.push(v);
            }
            O::I32Eq | O::I32Ne => {
                let b = self.pop();
                let a = self.pop();
                if self.locals.is_some() && a != Val::Unknown && b != Val::Unknown {
                    self.out.compares.push((a, b));
                }
                self.stack.push(Val::Unknown);
            }
            O::Select | O::TypedSelect { .. } => {
                let cond = self.pop();
                let if_clear = self.pop();
                let if_set = self.pop();
                self.stack.push(if_set.join(&if_clear));
                if self.locals.is_some() {
                    self.out.choices.push(Choice {
                        cond,
                        if_set,
                        if_clear,
                    });
                }
            }
            O::Call { function_index } => {
                let (params, results) = self
                    .engine
                    .func_type(*function_index)
                    .map_or((0, 0), |t| (t.params().len(), t.results().len()));
                let mut args: Vec<Val> = (0..params).map(|_| self.pop()).collect();
                args.reverse();
                if self.locals.is_some() {
                    self.out.calls.push(CallSite {
                        func: *function_index,
                        args,
                    });
                }
                if results == 1 {
                    self.stack.push(Val::Call(*function_index));
                } else {
                    self.push_unknown(results as u32);
                }
            }
            O::Block { blockty } | O::Loop { blockty } | O::If { blockty } => {
                if matches!(op, O::If { .. }) {
                    self.pop();
                }
                let (params, results) = self.block_arity(*blockty);
                let kind = match op {
                    O::Loop { .. } => FrameKind::Loop,
                    O::If { .. } => FrameKind::If,
                    _ => FrameKind::Block,
                };
                if let (FrameKind::Loop, Some(locals)) = (kind, &mut self.locals) {
                    for local in self.loop_writes.get(&at).into_iter().flatten() {
                        if let Some(slot) = locals.get_mut(*local as usize) {
                            *slot = Val::Unknown;
                        }
                    }
                }
                let height = self.stack.len().saturating_sub(params as usize);
                let entry = (kind == FrameKind::If)
                    .then(|| self.locals.clone())
                    .flatten();
                self.frames.push(Frame {
                    ty: *blockty,
                    kind,
                    height,
                    results,
                    joined: None,
                    joined_results: None,
                    entry,
                });
            }
            O::Else => {
                self.fall_through();
                if let Some(frame) = self.frames.last_mut() {
                    frame.kind = FrameKind::Else;
                    self.locals = frame.entry.take();
                    let (height, ty) = (frame.height, frame.ty);
                    self.stack.truncate(height);
                    let params = self.block_arity(ty).0;
                    self.push_unknown(params);
                }
            }
            O::End => {
                if self
                    .frames
                    .last()
                    .is_some_and(|f| f.kind != FrameKind::Loop)
                {
                    self.fall_through();
                }
                if let Some(frame) = self.frames.pop() {
                    let mut joined = frame.joined;
                    if let Some(entry) = frame.entry {
                        // An `if` without `else`: its end is reached from its entry too.
                        join(&mut joined, &entry);
                    }
                    let loop_end = frame.kind == FrameKind::Loop;
                    self.locals = if loop_end { self.locals.take() } else { joined };
                    let results = if loop_end {
                        Some(self.top(frame.results))
                    } else {
                        frame.joined_results
                    };
                    self.stack.truncate(frame.height);
                    match results {
                        Some(values) => self.stack.extend(values),
                        None => self.push_unknown(frame.results),
                    }
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

/// A load or store: its name in the text format, its memory argument, whether it stores.
pub(super) fn memory_op(op: &Operator<'_>) -> Option<(&'static str, MemArg, bool)> {
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
