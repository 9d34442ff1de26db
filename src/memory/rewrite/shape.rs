//! Allocators found by their code's shape, in a module of a component whose functions have no
//! names (a release build stripped of its `name` section: componentize-qjs's QuickJS engine,
//! a Rust `cdylib` linking QuickJS and wasi-libc). The anchor is the function the module
//! exports as `cabi_realloc`, the canonical ABI's allocator, which wit-bindgen writes on
//! Rust's global allocator: on WASI, Rust's `System` allocator, inlined into it, calls C's
//! `malloc` (a new block), `realloc` (a block grown), `posix_memalign` (an alignment above 8
//! or above the size) and `free` (a block moved to a stricter alignment), and nothing else.
//! Its direct callees, told apart by their signatures, are therefore those four, each once;
//! and C's contract checks them against each other: `realloc` of a null block is `malloc`, and
//! so is `posix_memalign` at `malloc`'s alignment (both call it), while `malloc` and `free`
//! call none of the others. Anything else (another callee, one signature twice, one of the
//! four missing, a check failing) is a module whose allocator wasmspy does not recognise: it
//! is not rewritten, and says why, so that no allocation is ever reported with another
//! function's arguments.
//!
//! `calloc` is not among them, nor needed: it returns what the `malloc` it calls returns, of
//! the size it computed, which `malloc`'s wrapper reports.

use wasmparser::{Operator, ValType};

use super::allocators::Allocator;
use super::scan::Scan;

/// The export that anchors the search.
const ANCHOR: &str = "cabi_realloc";

/// What the search found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// No anchor to start from: the module defines no `cabi_realloc`, or one that calls no
    /// function directly (a trampoline into another module's).
    NoAnchor,
    /// Malloc, free, realloc and posix_memalign: (function index, allocator).
    Found(Vec<(u32, Allocator)>),
    /// An anchor whose callees are not C's allocator as Rust's calls it: why.
    Unrecognised(String),
}

/// C's allocator functions in `wasm`, found from its `cabi_realloc`.
pub(super) fn from_canonical_realloc(scan: &Scan, wasm: &[u8]) -> Shape {
    let Some(&anchor) = scan.exports.get(ANCHOR) else {
        return Shape::NoAnchor;
    };
    if scan.defined(anchor).is_none() {
        return Shape::NoAnchor;
    }
    let callees = match calls_of(scan, wasm, anchor) {
        Ok(callees) => callees,
        Err(why) => return Shape::Unrecognised(why),
    };
    if callees.is_empty() {
        return Shape::NoAnchor;
    }
    match recognise(scan, wasm, &callees) {
        Ok(found) => Shape::Found(found),
        Err(why) => Shape::Unrecognised(format!(
            "its `{ANCHOR}` does not call C's allocator as Rust's does on WASI ({why})"
        )),
    }
}

/// The four allocators among `callees`, checked.
fn recognise(scan: &Scan, wasm: &[u8], callees: &[u32]) -> Result<Vec<(u32, Allocator)>, String> {
    let mut found: Vec<(Allocator, u32)> = Vec::new();
    for &callee in callees {
        let Some((params, results)) = scan.signature(callee) else {
            return Err(format!("it calls function {callee}, an import"));
        };
        let allocator = allocator_of(params, results)
            .ok_or_else(|| format!("it calls function {callee}, of a type no C allocator has"))?;
        if let Some(&(_, other)) = found.iter().find(|(a, _)| *a == allocator) {
            return Err(format!(
                "it calls functions {other} and {callee}, both of {}'s type",
                name(allocator)
            ));
        }
        found.push((allocator, callee));
    }
    let get = |allocator| {
        found
            .iter()
            .find(|(a, _)| *a == allocator)
            .map(|&(_, f)| f)
            .ok_or_else(|| format!("it calls no function of {}'s type", name(allocator)))
    };
    let [malloc, free, realloc, memalign] = [
        Allocator::Malloc,
        Allocator::Free,
        Allocator::Realloc,
        Allocator::PosixMemalign,
    ]
    .map(get);
    let (malloc, free, realloc, memalign) = (malloc?, free?, realloc?, memalign?);
    for (caller, allocator) in [
        (realloc, Allocator::Realloc),
        (memalign, Allocator::PosixMemalign),
    ] {
        if !calls_of(scan, wasm, caller)?.contains(&malloc) {
            return Err(format!(
                "its {} (function {caller}) does not call its malloc (function {malloc})",
                name(allocator)
            ));
        }
    }
    for (callee, allocator) in [(malloc, Allocator::Malloc), (free, Allocator::Free)] {
        let calls = calls_of(scan, wasm, callee)?;
        if let Some(other) = [malloc, free, realloc, memalign]
            .into_iter()
            .find(|f| calls.contains(f))
        {
            return Err(format!(
                "its {} (function {callee}) calls function {other}, another of them",
                name(allocator)
            ));
        }
    }
    let mut found: Vec<(u32, Allocator)> = found.into_iter().map(|(a, f)| (f, a)).collect();
    found.sort_unstable_by_key(|&(f, _)| f);
    Ok(found)
}

/// The C allocator a callee of `cabi_realloc` with this signature is.
fn allocator_of(params: &[ValType], results: &[ValType]) -> Option<Allocator> {
    use ValType::I32;
    Some(match (params, results) {
        ([I32], [I32]) => Allocator::Malloc,
        ([I32], []) => Allocator::Free,
        ([I32, I32], [I32]) => Allocator::Realloc,
        ([I32, I32, I32], [I32]) => Allocator::PosixMemalign,
        _ => return None,
    })
}

fn name(allocator: Allocator) -> &'static str {
    allocator.c_name().unwrap_or_default()
}

/// The functions defined function `index` calls directly (`call`, `return_call`), each once,
/// in order of first call.
fn calls_of(scan: &Scan, wasm: &[u8], index: u32) -> Result<Vec<u32>, String> {
    let unreadable =
        |e: wasmparser::BinaryReaderError| format!("function {index} does not decode ({e})");
    let body = scan
        .defined(index)
        .ok_or_else(|| format!("function {index} is not defined"))?
        .body
        .clone();
    let body = wasmparser::FunctionBody::new(wasmparser::BinaryReader::new(
        &wasm[body.clone()],
        body.start,
    ));
    let mut reader = body.get_operators_reader().map_err(unreadable)?;
    let mut calls = Vec::new();
    while !reader.eof() {
        if let Operator::Call { function_index } | Operator::ReturnCall { function_index } =
            reader.read().map_err(unreadable)?
        {
            if !calls.contains(&function_index) {
                calls.push(function_index);
            }
        }
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module exporting `cabi_realloc`, which calls `callees` (WAT function names), with
    /// `body` defining them.
    fn shape_of(body: &str) -> Shape {
        let wasm = wat::parse_str(format!(
            r#"(module (memory 1) {body}
                (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
                    (if (i32.eqz (local.get 1))
                        (then (return (call $malloc (local.get 3)))))
                    (drop (call $memalign (i32.const 0) (local.get 2) (local.get 3)))
                    (call $free (local.get 0))
                    (call $realloc (local.get 0) (local.get 3))))"#
        ))
        .unwrap();
        let scan = Scan::of(&wasm).unwrap();
        from_canonical_realloc(&scan, &wasm)
    }

    const MALLOC: &str = r#"(func $malloc (param i32) (result i32) (local.get 0))"#;
    const FREE: &str = r#"(func $free (param i32))"#;
    const REALLOC: &str =
        r#"(func $realloc (param i32 i32) (result i32) (call $malloc (local.get 1)))"#;
    const MEMALIGN: &str = r#"(func $memalign (param i32 i32 i32) (result i32) (drop (call $malloc (local.get 2))) (i32.const 0))"#;

    #[test]
    fn the_four_allocators_are_found_from_cabi_realloc() {
        let shape = shape_of(&[MALLOC, FREE, REALLOC, MEMALIGN].concat());
        assert_eq!(
            shape,
            Shape::Found(vec![
                (0, Allocator::Malloc),
                (1, Allocator::Free),
                (2, Allocator::Realloc),
                (3, Allocator::PosixMemalign),
            ])
        );
    }

    /// Each way the shape can differ from C's allocator under Rust's is refused, with why.
    #[test]
    fn anything_else_is_refused_with_why() {
        let cases = [
            // `realloc` that does not call `malloc`.
            (
                [
                    MALLOC,
                    FREE,
                    r#"(func $realloc (param i32 i32) (result i32) (local.get 0))"#,
                    MEMALIGN,
                ]
                .concat(),
                "does not call its malloc",
            ),
            // `free` calling `malloc`.
            (
                [
                    MALLOC,
                    r#"(func $free (param i32) (drop (call $malloc (local.get 0))))"#,
                    REALLOC,
                    MEMALIGN,
                ]
                .concat(),
                "calls function 0, another of them",
            ),
            // A callee of a type no allocator has.
            (
                [
                    MALLOC,
                    FREE,
                    REALLOC,
                    r#"(func $memalign (param i32 i32 i32) (result i64) (i64.const 0))"#,
                ]
                .concat(),
                "of a type no C allocator has",
            ),
        ];
        for (body, why) in cases {
            match shape_of(&body) {
                Shape::Unrecognised(said) => assert!(said.contains(why), "{said}"),
                other => panic!("{why}: {other:?}"),
            }
        }
    }

    /// A `cabi_realloc` that calls nothing directly (a trampoline through a table) anchors
    /// nothing, and is no reason for a warning.
    #[test]
    fn a_trampoline_is_no_anchor() {
        let wasm = wat::parse_str(
            r#"(module (type $t (func (param i32 i32 i32 i32) (result i32))) (table 1 funcref)
                (func (export "cabi_realloc") (type $t)
                    (call_indirect (type $t) (local.get 0) (local.get 1) (local.get 2)
                        (local.get 3) (i32.const 0))))"#,
        )
        .unwrap();
        let scan = Scan::of(&wasm).unwrap();
        assert_eq!(from_canonical_realloc(&scan, &wasm), Shape::NoAnchor);
    }
}
