//! Recognition's tests: ComponentizeJS's three engines (from the npm package) and a component
//! built from the debug one, recognised as the generator found them; modules built from the
//! fingerprints (`look_alike.rs`) recognised, and modules that are not SpiderMonkey, or say
//! they are but have other code, not; the look-alike's code put in a module's placeholders.

use std::path::Path;
use std::time::{Duration, Instant};

use wasm_encoder::Instruction;

use super::super::layouts::generate::package;
use super::super::layouts::ENGINES;
use super::look_alike::{engine_like, marked_data, module, MadeFunction};
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

/// A module of one function `(i32) -> i32` and `data`.
fn one_function(data: &[u8]) -> Vec<u8> {
    let function = MadeFunction {
        params: vec![ValType::I32],
        results: vec![ValType::I32],
        body: vec![Instruction::LocalGet(0)],
    };
    module(&[function], data)
}

#[test]
fn modules_without_spidermonkeys_marks_are_not_spidermonkey() {
    let small = one_function(b"hello\0");
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
    let other = one_function(&marked_data());
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

/// Value types as the text format writes them.
fn wat_types(types: &[ValType]) -> String {
    types.iter().map(|t| format!(" {t}")).collect()
}

/// A text-format module that declares the look-alike's functions in their place (their bodies
/// `unreachable`) gets their bodies: replacing none gives the module back byte for byte; with
/// them it is recognised as SpiderMonkey where the placeholders were not, its `js::Interpret`
/// callable (running what it was given to run, none of its accesses); a body of another type,
/// or past the module's functions, is refused.
#[test]
fn placeholders_get_the_look_alikes_bodies() {
    let mut functions = look_alike::tls_context_readers(&[0x2000; 3]);
    functions.push(look_alike::interpreter(vec![Instruction::Call(0)]));
    let placeholders: String = functions
        .iter()
        .map(|f| {
            format!(
                "(func (param{}) (result{}) unreachable)\n",
                wat_types(&f.params),
                wat_types(&f.results)
            )
        })
        .collect();
    let marks: String = marked_data().iter().map(|b| format!("\\{b:02x}")).collect();
    let interpreter = functions.len();
    let wat = format!(
        r#"(module
  (func $work (global.set $ran (i32.const 7)))
  {placeholders}
  (global $ran (export "ran") (mut i32) (i32.const 0))
  (memory 1)
  (data (i32.const 16) "{marks}")
  (func (export "run") (result i32) (call {interpreter} (i32.const 0) (i32.const 0))))"#
    );
    let wasm = wat::parse_str(wat).unwrap();
    assert_eq!(look_alike::with_bodies(&wasm, 1, &[]).unwrap(), wasm);
    assert!(matches!(recognize(&wasm), Recognition::Unreadable(_)));
    let look_alike = look_alike::with_bodies(&wasm, 1, &functions).unwrap();
    assert_eq!(
        recognize(&look_alike),
        Recognition::Engine(Recognized {
            version: RELEASE,
            tls_context: 0x2000,
            interpreter: interpreter as u32,
        })
    );
    let engine = wasmtime::Engine::default();
    let module = wasmtime::Module::new(&engine, &look_alike).unwrap();
    let mut store = wasmtime::Store::new(&engine, ());
    let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
    let run = instance
        .get_typed_func::<(), i32>(&mut store, "run")
        .unwrap();
    assert_eq!(run.call(&mut store, ()).unwrap(), 0);
    let ran = instance.get_global(&mut store, "ran").unwrap();
    assert_eq!(ran.get(&mut store).i32(), Some(7));
    // Function 0 is `$work`, of another type.
    let refused = look_alike::with_bodies(&wasm, 0, &functions).unwrap_err();
    assert!(refused.contains("function 0"), "{refused}");
    // Functions 0 to 5: `$work`, the look-alike's four, `run`.
    let past = look_alike::with_bodies(&wasm, 6, &functions[..1]).unwrap_err();
    assert!(past.contains("no functions 6 to 6"), "{past}");
}
