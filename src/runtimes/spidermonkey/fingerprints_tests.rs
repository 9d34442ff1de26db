//! Recognition's tests: ComponentizeJS's three engines (from the npm package) and a component
//! built from the debug one, recognised as the generator found them; modules built here that
//! are not SpiderMonkey, or say they are but have other code.

use std::path::Path;
use std::time::{Duration, Instant};

use wasm_encoder::{
    CodeSection, ConstExpr, DataSection, Function, FunctionSection, Instruction, MemArg,
    MemorySection, MemoryType, Module, TypeSection,
};

use super::super::layouts::generate::package;
use super::super::layouts::ENGINES;
use super::*;

/// `recognize(wasm)`, and the least time it took of a few runs.
fn timed(wasm: &[u8]) -> (Recognition, Duration) {
    let mut least = Duration::MAX;
    let mut recognition = Recognition::NotSpiderMonkey;
    for _ in 0..3 {
        let start = Instant::now();
        recognition = recognize(wasm);
        least = least.min(start.elapsed());
    }
    (recognition, least)
}

/// The function the module's `name` section gives `name`.
fn named(wasm: &[u8], name: &str) -> Option<u32> {
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        if let Ok(wasmparser::Payload::CustomSection(s)) = payload {
            if let wasmparser::KnownCustom::Name(reader) = s.as_known() {
                for n in reader.into_iter().flatten() {
                    if let wasmparser::Name::Function(map) = n {
                        let mut found = map.into_iter().flatten().filter(|n| n.name == name);
                        return found.next().map(|n| n.index);
                    }
                }
            }
        }
    }
    None
}

/// The core modules of a component.
fn core_modules(component: &[u8]) -> Vec<&[u8]> {
    crate::wasm::component::own_sections(component, 0)
        .filter_map(|payload| match payload.ok()? {
            wasmparser::Payload::ModuleSection {
                unchecked_range, ..
            } => component.get(unchecked_range),
            _ => None,
        })
        .collect()
}

/// Each engine of the package is recognised, `js::TlsContext` where the layout's generator
/// found it (`ENGINES`), `js::Interpret` where the layout's matching finds it (`FOUND`, which
/// `fingerprints_are_derived` checks) and, in the debug engine, where its name section says.
#[test]
fn the_packages_engines_are_recognized() {
    let Some(lib) = package("spidermonkey recognition").map(|p| p.join("lib")) else {
        return;
    };
    for &(file, tls_context, interpreter) in FOUND {
        let wasm = std::fs::read(lib.join(file)).unwrap();
        let (recognition, took) = timed(&wasm);
        eprintln!("recognize({file}, {} MB): {took:?}", wasm.len() / 1_000_000);
        let engine = ENGINES.iter().find(|e| e.file == file).unwrap();
        assert_eq!(engine.tls_context, tls_context, "{file}");
        assert_eq!(
            recognition,
            Recognition::Engine(Recognized {
                version: RELEASE,
                tls_context,
                interpreter,
            }),
            "{file}"
        );
        if file.contains("debug") {
            assert_eq!(named(&wasm, INTERPRETER.function), Some(interpreter));
        }
    }
}

/// In a component ComponentizeJS built with the debug engine (its bindings spliced in, its
/// memory snapshotted by Wizer), the engine is recognised with the debug engine's
/// `js::TlsContext` and the interpreter its name section names; its other modules are not
/// SpiderMonkey.
#[test]
fn a_componentize_js_component_is_recognized() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/interpreters/fib-js.wasm");
    let Ok(component) = std::fs::read(&path) else {
        eprintln!(
            "skipped: {} is missing (tests/fixtures/interpreters/build.sh builds it)",
            path.display()
        );
        return;
    };
    let modules = core_modules(&component);
    let (recognition, took) = timed(modules[0]);
    eprintln!(
        "recognize(fib-js.wasm's engine, {} MB): {took:?}",
        modules[0].len() / 1_000_000
    );
    let debug = FOUND.iter().find(|f| f.0.contains("debug")).unwrap();
    assert_eq!(
        recognition,
        Recognition::Engine(Recognized {
            version: RELEASE,
            tls_context: debug.1,
            interpreter: named(modules[0], INTERPRETER.function).unwrap(),
        })
    );
    for module in &modules[1..] {
        assert_eq!(recognize(module), Recognition::NotSpiderMonkey);
    }
    assert_eq!(recognize(&component), Recognition::NotSpiderMonkey);
}

/// Big modules of other runtimes are rejected fast (the times are printed: `--nocapture`).
#[test]
fn other_runtimes_are_not_spidermonkey() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/interpreters");
    for file in ["fib-py.wasm", "fib-qjs.wasm", "http-qjs.wasm"] {
        let Ok(component) = std::fs::read(dir.join(file)) else {
            eprintln!("skipped: {file} is missing");
            continue;
        };
        for module in core_modules(&component) {
            let (recognition, took) = timed(module);
            assert_eq!(recognition, Recognition::NotSpiderMonkey, "{file}");
            if module.len() > 1_000_000 {
                eprintln!(
                    "recognize({file}'s module, {} MB): {took:?}",
                    module.len() / 1_000_000
                );
            }
        }
    }
}

/// A module with `functions` (each a type and a body's instructions) and a data segment of
/// `data`.
fn module(
    functions: &[(&[ValType], &[ValType], Vec<Instruction<'static>>)],
    data: &[u8],
) -> Vec<u8> {
    let mut types = TypeSection::new();
    let mut funcs = FunctionSection::new();
    let mut code = CodeSection::new();
    let encoded = |types: &[ValType]| -> Vec<wasm_encoder::ValType> {
        types
            .iter()
            .map(|t| wasm_encoder::ValType::try_from(*t).unwrap())
            .collect()
    };
    for (i, (params, results, body)) in functions.iter().enumerate() {
        types.ty().function(encoded(params), encoded(results));
        funcs.function(i as u32);
        // One i32 local besides the parameters: what accesses not at a fixed address use.
        let mut f = Function::new([(1, wasm_encoder::ValType::I32)]);
        for instruction in body {
            f.instruction(instruction);
        }
        f.instruction(&Instruction::End);
        code.function(&f);
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

/// Both of SpiderMonkey's marks, among other strings.
fn spidermonkey_data() -> Vec<u8> {
    let mut data = b"hello\0".to_vec();
    for mark in MARKS {
        data.extend_from_slice(mark);
    }
    data
}

/// The load or store `op` (its name in the text format) with `arg`: the instruction, and
/// whether it stores.
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
        "i32.store" => (I::I32Store(arg), true),
        "i64.store" => (I::I64Store(arg), true),
        "f32.store" => (I::F32Store(arg), true),
        "f64.store" => (I::F64Store(arg), true),
        "i32.store8" => (I::I32Store8(arg), true),
        "i32.store16" => (I::I32Store16(arg), true),
        "i64.store8" => (I::I64Store8(arg), true),
        "i64.store16" => (I::I64Store16(arg), true),
        "i64.store32" => (I::I64Store32(arg), true),
        other => panic!("no instruction for {other}"),
    }
}

/// Instructions making `accesses`, in order: a fixed address's at `fixed`, others from the
/// local after `params` (an offset beyond 32 bits, a negative one, added to it).
fn accessing(accesses: &[(&str, u64)], params: usize, fixed: u32) -> Vec<Instruction<'static>> {
    let mut out = Vec::new();
    for &(op, offset) in accesses {
        let offset = match offset {
            FIXED => {
                out.push(Instruction::I32Const(fixed as i32));
                0
            }
            o if o > u64::from(u32::MAX) => {
                out.extend([
                    Instruction::LocalGet(params as u32),
                    Instruction::I32Const(o as i64 as i32),
                    Instruction::I32Add,
                ]);
                0
            }
            o => {
                out.push(Instruction::LocalGet(params as u32));
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
                _ => Instruction::I32Const(0),
            });
            out.push(instruction);
        } else {
            out.extend([instruction, Instruction::Drop]);
        }
    }
    out
}

/// A body returning zeros of `results`.
fn returning(
    mut body: Vec<Instruction<'static>>,
    results: &[ValType],
) -> Vec<Instruction<'static>> {
    body.extend(results.iter().map(|t| match t {
        ValType::I64 => Instruction::I64Const(0),
        _ => Instruction::I32Const(0),
    }));
    body
}

/// A module with SpiderMonkey's marks, the fingerprints' functions (fixed addresses at
/// `tls[i]` for the `i`th), and `interpreters` functions with the interpreter's accesses.
fn engine_like(tls: &[u32], interpreters: usize) -> Vec<u8> {
    let mut functions = Vec::new();
    for (print, &at) in TLS_CONTEXT.iter().zip(tls) {
        let body = accessing(print.accesses, print.params.len(), at);
        functions.push((print.params, print.results, returning(body, print.results)));
    }
    let bag: Vec<(&str, u64)> = INTERPRETER
        .bag
        .iter()
        .flat_map(|&(op, offset, n)| std::iter::repeat_n((op, offset), n as usize))
        .collect();
    for _ in 0..interpreters {
        let body = accessing(&bag, INTERPRETER.params.len(), 0x1000);
        functions.push((
            INTERPRETER.params,
            INTERPRETER.results,
            returning(body, INTERPRETER.results),
        ));
    }
    module(&functions, &spidermonkey_data())
}

#[test]
fn modules_without_spidermonkeys_marks_are_not_spidermonkey() {
    let i32s: &[ValType] = &[ValType::I32];
    let small = module(&[(i32s, i32s, vec![Instruction::LocalGet(0)])], b"hello\0");
    let (recognition, took) = timed(&small);
    eprintln!("recognize(a small module): {took:?}");
    assert_eq!(recognition, Recognition::NotSpiderMonkey);
    // One mark is not enough; the fingerprints' code without the marks is not SpiderMonkey.
    let one = module(&[], MARKS[0]);
    assert_eq!(recognize(&one), Recognition::NotSpiderMonkey);
    let mut unmarked = engine_like(&[64; 3], 1);
    let at = memchr::memmem::find(&unmarked, MARKS[1]).unwrap();
    unmarked[at] = b'T';
    assert_eq!(recognize(&unmarked), Recognition::NotSpiderMonkey);
    for bytes in [
        &b""[..],
        b"\0asm",
        b"\0asm\x0d\0\x01\0",
        b"\0asm\x01\0\0\0\x0b\xff",
    ] {
        assert_eq!(recognize(bytes), Recognition::NotSpiderMonkey);
    }
}

#[test]
fn spidermonkey_whose_code_matches_is_read() {
    assert!(TLS_CONTEXT.len() >= 2);
    let tls = vec![0x2000; TLS_CONTEXT.len()];
    let interpreter = TLS_CONTEXT.len() as u32;
    assert_eq!(
        recognize(&engine_like(&tls, 1)),
        Recognition::Engine(Recognized {
            version: RELEASE,
            tls_context: 0x2000,
            interpreter,
        })
    );
}

/// SpiderMonkey's marks with other code, fingerprints that disagree, none or two interpreters:
/// unreadable, and said why.
#[test]
fn spidermonkey_with_other_code_is_unreadable() {
    let unreadable = |wasm: &[u8], why: &str| match recognize(wasm) {
        Recognition::Unreadable(said) => {
            assert!(
                said.contains("does not match") && said.contains(why),
                "{said}"
            )
        }
        other => panic!("{other:?}"),
    };
    let i32s: &[ValType] = &[ValType::I32];
    let other = module(
        &[(i32s, i32s, vec![Instruction::LocalGet(0)])],
        &spidermonkey_data(),
    );
    unreadable(&other, "no function is");
    let mut tls = vec![0x2000; TLS_CONTEXT.len()];
    tls[1] = 0x3000;
    unreadable(&engine_like(&tls, 1), "disagree");
    let tls = vec![0x2000; TLS_CONTEXT.len()];
    unreadable(&engine_like(&tls, 0), INTERPRETER.function);
    unreadable(&engine_like(&tls, 2), "100 % alike at best, 100 % the next");
    // Only the interpreter's accesses, none of the fingerprints'.
    unreadable(&engine_like(&[], 1), TLS_CONTEXT[0].function);
}
