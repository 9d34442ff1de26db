//! Code that recognition ([`super`]) takes for SpiderMonkey's, made from the fingerprints
//! alone: for recognition's tests, its fuzz target and guests that look like SpiderMonkey
//! (`tests/hostile.rs`).
//!
//! A fingerprint's function has the fingerprint's type and, in order, its loads and stores,
//! each spelled as the reader folds it (a local plus the offset; a fixed address as an
//! `i32.const`), and no other access; `js::Interpret`'s has each of the interpreter's accesses
//! as many times as [`INTERPRETER`]'s bag counts it. No shape is copied from an engine: the
//! look-alike changes with the fingerprints. The accesses sit behind a branch on a local that
//! is always 0 (the reader reads both ways of a branch), so a call of the function runs none
//! of them: a guest can call its `js::Interpret`, to have its frame on the stack where the
//! engine's would be.

// A fixture, never run in the signal handler: fingerprints naming an access no instruction
// makes are a broken fixture, said by a panic.
#![allow(clippy::panic, clippy::unwrap_used)]

use wasm_encoder::{
    BlockType, CodeSection, ConstExpr, DataSection, Function, FunctionSection, Instruction, MemArg,
    MemorySection, MemoryType, Module, RawSection, TypeSection,
};
use wasmparser::{CompositeInnerType, Parser, Payload, TypeRef, ValType};

use super::{Access, FIXED, INTERPRETER, MARKS, TLS_CONTEXT};

/// A function of a look-alike: its type and its body's instructions (its final `end` left out).
pub struct MadeFunction {
    pub params: Vec<ValType>,
    pub results: Vec<ValType>,
    pub body: Vec<Instruction<'static>>,
}

impl MadeFunction {
    /// The body encoded, with the one local past the parameters that the accesses use.
    pub fn function(&self) -> Function {
        let mut f = Function::new([(1, wasm_encoder::ValType::I32)]);
        for instruction in &self.body {
            f.instruction(instruction);
        }
        f.instruction(&Instruction::End);
        f
    }
}

/// One function per fingerprint of `js::TlsContext`, the `i`th reading `tls[i]` where its
/// fingerprint reads `js::TlsContext` (as are its other fixed addresses); fingerprints past
/// `tls`' end get none.
pub fn tls_context_readers(tls: &[u32]) -> Vec<MadeFunction> {
    TLS_CONTEXT
        .iter()
        .zip(tls)
        .map(|(print, &at)| made(print.params, print.results, print.accesses, at, Vec::new()))
        .collect()
}

/// A function of `js::Interpret`'s type with its accesses (those at a fixed address at 0x1000:
/// recognition compares the interpreter's accesses, not their addresses), then `then` (a call
/// of what stands for the scripts it runs, say).
pub fn interpreter(then: Vec<Instruction<'static>>) -> MadeFunction {
    let bag: Vec<Access> = INTERPRETER
        .bag
        .iter()
        .flat_map(|&(op, offset, n)| std::iter::repeat_n((op, offset), n as usize))
        .collect();
    made(INTERPRETER.params, INTERPRETER.results, &bag, 0x1000, then)
}

/// A module of [`tls_context_readers`]`(tls)`, then `interpreters` [`interpreter`]s, and data
/// holding SpiderMonkey's [`MARKS`] ([`marked_data`]).
pub fn engine_like(tls: &[u32], interpreters: usize) -> Vec<u8> {
    let mut functions = tls_context_readers(tls);
    functions.extend((0..interpreters).map(|_| interpreter(Vec::new())));
    module(&functions, &marked_data())
}

/// Both of SpiderMonkey's marks, after another string.
pub fn marked_data() -> Vec<u8> {
    let mut data = b"hello\0".to_vec();
    for mark in MARKS {
        data.extend_from_slice(mark);
    }
    data
}

/// A module with `functions` (no imports: the first is function 0), one memory of a page and
/// `data` in it at address 16.
pub fn module(functions: &[MadeFunction], data: &[u8]) -> Vec<u8> {
    let mut types = TypeSection::new();
    let mut funcs = FunctionSection::new();
    let mut code = CodeSection::new();
    for (i, f) in functions.iter().enumerate() {
        types.ty().function(encoded(&f.params), encoded(&f.results));
        funcs.function(i as u32);
        code.function(&f.function());
    }
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut segments = DataSection::new();
    segments.active(0, &ConstExpr::i32_const(16), data.iter().copied());
    let mut wasm = Module::new();
    wasm.section(&types)
        .section(&funcs)
        .section(&memories)
        .section(&code)
        .section(&segments);
    wasm.finish()
}

/// `wasm` with the bodies of functions `first`, `first + 1`… (imports counted) replaced by
/// `functions`' (the functions a text-format guest declares in their place, with their
/// types); every other byte as it was. An error where `wasm` does not parse or has no such
/// functions of those types.
pub fn with_bodies(wasm: &[u8], first: u32, functions: &[MadeFunction]) -> Result<Vec<u8>, String> {
    let mut out = Module::new();
    let mut types = Vec::new();
    let mut func_types = Vec::new();
    let mut code: Option<CodeSection> = None;
    // The function of the next body (imports counted).
    let mut next = 0;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| e.to_string())?;
        match &payload {
            Payload::TypeSection(reader) => {
                for group in reader.clone() {
                    let group = group.map_err(|e| e.to_string())?;
                    types.extend(group.into_types().map(|t| match t.composite_type.inner {
                        CompositeInnerType::Func(f) => Some(f),
                        _ => None,
                    }));
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.clone().into_imports() {
                    if let TypeRef::Func(ty) | TypeRef::FuncExact(ty) =
                        import.map_err(|e| e.to_string())?.ty
                    {
                        func_types.push(ty);
                    }
                }
            }
            Payload::FunctionSection(reader) => {
                for ty in reader.clone() {
                    func_types.push(ty.map_err(|e| e.to_string())?);
                }
            }
            Payload::CodeSectionStart { count, .. } => {
                // The first body's function: the one after the imported ones.
                next = func_types.len().saturating_sub(*count as usize);
                code = Some(CodeSection::new());
                continue;
            }
            Payload::CodeSectionEntry(body) => {
                let func = next as u32;
                next += 1;
                let section = code.as_mut().ok_or("a body outside the code section")?;
                match func
                    .checked_sub(first)
                    .and_then(|i| functions.get(i as usize))
                {
                    Some(made) => {
                        let ty = func_types.get(func as usize);
                        let ty = ty.and_then(|&t| types.get(t as usize)?.as_ref());
                        if !ty.is_some_and(|t| {
                            t.params() == made.params && t.results() == made.results
                        }) {
                            return Err(format!(
                                "function {func} is not of the type of its new body"
                            ));
                        }
                        section.function(&made.function());
                    }
                    None => {
                        section.raw(&wasm[body.range()]);
                    }
                }
                continue;
            }
            _ => {}
        }
        if let Some(section) = code.take() {
            out.section(&section);
        }
        if let Some((id, range)) = payload.as_section() {
            out.section(&RawSection {
                id,
                data: &wasm[range],
            });
        }
    }
    if !functions.is_empty() && first as usize + functions.len() > next {
        return Err(format!(
            "no functions {first} to {} to replace",
            first as usize + functions.len() - 1
        ));
    }
    Ok(out.finish())
}

fn encoded(types: &[ValType]) -> Vec<wasm_encoder::ValType> {
    types
        .iter()
        .map(|t| wasm_encoder::ValType::try_from(*t).unwrap())
        .collect()
}

/// A function of type `params` → `results` whose accesses are `accesses` (a fixed address's
/// at `fixed`), behind a branch never taken, then `then`, then zeros of `results`.
fn made(
    params: &[ValType],
    results: &[ValType],
    accesses: &[Access],
    fixed: u32,
    then: Vec<Instruction<'static>>,
) -> MadeFunction {
    // The local past the parameters: 0, the base of the accesses and the branch's condition.
    let base = params.len() as u32;
    let mut body = vec![
        Instruction::LocalGet(base),
        Instruction::If(BlockType::Empty),
    ];
    body.extend(accessing(accesses, base, fixed));
    body.push(Instruction::End);
    body.extend(then);
    body.extend(results.iter().map(|t| match t {
        ValType::I64 => Instruction::I64Const(0),
        ValType::F32 => Instruction::F32Const(0.0.into()),
        ValType::F64 => Instruction::F64Const(0.0.into()),
        ValType::V128 => Instruction::V128Const(0),
        _ => Instruction::I32Const(0),
    }));
    MadeFunction {
        params: params.to_vec(),
        results: results.to_vec(),
        body,
    }
}

/// Instructions making `accesses`, in order: a fixed address's at `fixed`, others from local
/// `base` (an offset beyond 32 bits, a negative one, added to it).
fn accessing(accesses: &[Access], base: u32, fixed: u32) -> Vec<Instruction<'static>> {
    let mut out = Vec::new();
    for &(op, offset) in accesses {
        let offset = match offset {
            FIXED => {
                out.push(Instruction::I32Const(fixed as i32));
                0
            }
            o if o > u64::from(u32::MAX) => {
                out.extend([
                    Instruction::LocalGet(base),
                    Instruction::I32Const(o as i64 as i32),
                    Instruction::I32Add,
                ]);
                0
            }
            o => {
                out.push(Instruction::LocalGet(base));
                o
            }
        };
        let arg = MemArg {
            offset,
            align: 0,
            memory_index: 0,
        };
        let (instruction, store) = memory_instruction(op, arg);
        if store {
            out.push(match op.split('.').next() {
                Some("i64") => Instruction::I64Const(0),
                Some("f32") => Instruction::F32Const(0.0.into()),
                Some("f64") => Instruction::F64Const(0.0.into()),
                Some("v128") => Instruction::V128Const(0),
                _ => Instruction::I32Const(0),
            });
            out.push(instruction);
        } else {
            out.extend([instruction, Instruction::Drop]);
        }
    }
    out
}

/// The load or store `op` (its name in the text format, as the reader names it) with `arg`:
/// the instruction, and whether it stores.
fn memory_instruction(op: &str, arg: MemArg) -> (Instruction<'static>, bool) {
    use Instruction as I;
    match op {
        "i32.load" => (I::I32Load(arg), false),
        "i64.load" => (I::I64Load(arg), false),
        "f32.load" => (I::F32Load(arg), false),
        "f64.load" => (I::F64Load(arg), false),
        "i32.load8_s" => (I::I32Load8S(arg), false),
        "i32.load8_u" => (I::I32Load8U(arg), false),
        "i32.load16_s" => (I::I32Load16S(arg), false),
        "i32.load16_u" => (I::I32Load16U(arg), false),
        "i64.load8_s" => (I::I64Load8S(arg), false),
        "i64.load8_u" => (I::I64Load8U(arg), false),
        "i64.load16_s" => (I::I64Load16S(arg), false),
        "i64.load16_u" => (I::I64Load16U(arg), false),
        "i64.load32_s" => (I::I64Load32S(arg), false),
        "i64.load32_u" => (I::I64Load32U(arg), false),
        "v128.load" => (I::V128Load(arg), false),
        "i32.store" => (I::I32Store(arg), true),
        "i64.store" => (I::I64Store(arg), true),
        "f32.store" => (I::F32Store(arg), true),
        "f64.store" => (I::F64Store(arg), true),
        "i32.store8" => (I::I32Store8(arg), true),
        "i32.store16" => (I::I32Store16(arg), true),
        "i64.store8" => (I::I64Store8(arg), true),
        "i64.store16" => (I::I64Store16(arg), true),
        "i64.store32" => (I::I64Store32(arg), true),
        "v128.store" => (I::V128Store(arg), true),
        other => panic!("no instruction for {other}"),
    }
}
