//! Allocators found by their code's shape, in a module of a component whose functions have no
//! names (a release build stripped of its `name` section). The anchor is the function the
//! module exports as `cabi_realloc`, the canonical ABI's allocator, written in one of two ways:
//!
//! - **On Rust's global allocator** (wit-bindgen's Rust `cabi_realloc`: componentize-qjs's
//!   QuickJS engine, a Rust `cdylib` linking QuickJS and wasi-libc). On WASI, Rust's `System`
//!   allocator, inlined into it, calls C's `malloc` (a new block), `realloc` (a block grown),
//!   `posix_memalign` (an alignment above 8 or above the size) and `free` (a block moved to a
//!   stricter alignment), and nothing else. Its direct callees, told apart by their
//!   signatures, are therefore those four, each once.
//! - **On C's `realloc`** (wit-bindgen's C `cabi_realloc`, `realloc` then `abort` if it
//!   failed; ComponentizeJS's StarlingMonkey engine, whose `JS_realloc` and `JS_free` are
//!   inlined into it as `realloc` and `free`). It calls `realloc`, maybe `free` (a zero size),
//!   and nothing else. `malloc` and `free` are then the functions that `realloc` calls, one of
//!   each signature: C's `realloc` of a null block is `malloc`, and a block it moves it frees
//!   (the anchor's own `free` is that one, or forwards to it: wasi-libc's `free` calling
//!   dlmalloc's `dlfree`, where not inlined).
//!   `posix_memalign`, which nothing here reaches, is the one function of its signature that
//!   calls `malloc` and a helper of the allocator's own (a function its `realloc` calls that is
//!   neither `malloc` nor `free`: dlmalloc's `dispose_chunk`) and nothing else, and whose code
//!   holds both errors C gives it to return, `EINVAL` and `ENOMEM` (wasi-libc's 28 and 48):
//!   not the allocator's `internal_memalign`, had it not been inlined, which returns a block,
//!   not an error, and has no `EINVAL`. Where there is none, the other three are wrapped (the
//!   blocks of a `posix_memalign` of another shape are then seen where it calls `malloc`, at
//!   malloc's alignment, and left out at others).
//!
//! Either way a callee that only forwards some of its arguments to another function (the weval
//! engine's `JS_realloc` and `JS_free`, not inlined there: `realloc(p, new)`, `free(p)`) is taken
//! for that function, and a callee that never returns (the failure path: `abort`, StarlingMonkey's
//! `api::Engine::abort`, whose bodies end in `unreachable` and contain no `return`) allocates
//! nothing the anchor returns and is set aside. C's contract then checks the allocators against
//! each other: `realloc` and `posix_memalign` call `malloc` (at malloc's alignment), while `malloc`
//! and `free` call none of the others. Anything else (another callee, one signature twice, one of
//! them missing, a check failing) is a module whose allocator wasmspy does not recognise: it is not
//! rewritten, and says why, so that no allocation is ever reported with another function's
//! arguments.
//!
//! `calloc` is not among them, nor needed: it returns what the `malloc` it calls returns, of
//! the size it computed, which `malloc`'s wrapper reports.

use wasmparser::{Operator, OperatorsReader, ValType};

use super::allocators::Allocator;
use super::scan::Scan;

/// The export that anchors the search.
const ANCHOR: &str = "cabi_realloc";

/// wasi-libc's `EINVAL` and `ENOMEM`, what `posix_memalign` returns when it fails.
const POSIX_MEMALIGN_ERRORS: [i32; 2] = [28, 48];

/// What the search found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Shape {
    /// No anchor to start from: the module defines no `cabi_realloc`, or one that calls no
    /// function directly (a trampoline into another module's).
    NoAnchor,
    /// Malloc, free, realloc and posix_memalign (where there is one): (function index,
    /// allocator).
    Found(Vec<(u32, Allocator)>),
    /// An anchor whose callees are not C's allocator as Rust's or C's calls it: why.
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
    let mut callees = Vec::new();
    let called = calls_of(scan, wasm, anchor).and_then(|all| {
        for callee in all {
            let callee = forwarded_to(scan, wasm, callee)?;
            if !never_returns(scan, wasm, callee)? && !callees.contains(&callee) {
                callees.push(callee);
            }
        }
        Ok(())
    });
    if let Err(why) = called {
        return Shape::Unrecognised(why);
    }
    if callees.is_empty() {
        return Shape::NoAnchor;
    }
    // Rust's calls `malloc` itself; C's only `realloc` (and `free`).
    let on_rust = callees.iter().any(|&callee| {
        scan.signature(callee)
            .and_then(|(params, results)| allocator_of(params, results))
            == Some(Allocator::Malloc)
    });
    let found = match on_rust {
        true => recognise_rust(scan, wasm, &callees).map_err(|why| {
            format!("its `{ANCHOR}` does not call C's allocator as Rust's does on WASI ({why})")
        }),
        false => recognise_c(scan, wasm, &callees).map_err(|why| {
            format!("its `{ANCHOR}` calls neither C's allocator as Rust's does on WASI nor C's `realloc` ({why})")
        }),
    };
    match found {
        Ok(found) => Shape::Found(found),
        Err(why) => Shape::Unrecognised(why),
    }
}

/// Each of `callees` as the allocator its signature says, each allocator once; `accepted` are
/// the allocators it may be.
fn by_signature(
    scan: &Scan,
    callees: &[u32],
    accepted: &[Allocator],
) -> Result<Vec<(Allocator, u32)>, String> {
    let mut found: Vec<(Allocator, u32)> = Vec::new();
    for &callee in callees {
        let Some((params, results)) = scan.signature(callee) else {
            return Err(format!("it calls function {callee}, an import"));
        };
        let allocator = allocator_of(params, results)
            .ok_or_else(|| format!("it calls function {callee}, of a type no C allocator has"))?;
        if !accepted.contains(&allocator) {
            return Err(format!(
                "it calls function {callee}, of {}'s type, beside its realloc",
                name(allocator)
            ));
        }
        if let Some(&(_, other)) = found.iter().find(|(a, _)| *a == allocator) {
            return Err(format!(
                "it calls functions {other} and {callee}, both of {}'s type",
                name(allocator)
            ));
        }
        found.push((allocator, callee));
    }
    Ok(found)
}

/// The function of `allocator`'s type in `found`.
fn get(found: &[(Allocator, u32)], allocator: Allocator) -> Result<u32, String> {
    found
        .iter()
        .find(|(a, _)| *a == allocator)
        .map(|&(_, f)| f)
        .ok_or_else(|| format!("it calls no function of {}'s type", name(allocator)))
}

/// The four allocators among `callees` of Rust's `cabi_realloc`, checked.
fn recognise_rust(
    scan: &Scan,
    wasm: &[u8],
    callees: &[u32],
) -> Result<Vec<(u32, Allocator)>, String> {
    let found = by_signature(scan, callees, &C_ALLOCATORS)?;
    let [malloc, free, realloc, memalign] = C_ALLOCATORS.map(|a| get(&found, a));
    let (malloc, free, realloc, memalign) = (malloc?, free?, realloc?, memalign?);
    check_contract(scan, wasm, malloc, free, realloc, Some(memalign))
}

/// Malloc, free and realloc from `callees` of C's `cabi_realloc` (its `realloc`, maybe its
/// `free`), posix_memalign where it is found, checked.
fn recognise_c(scan: &Scan, wasm: &[u8], callees: &[u32]) -> Result<Vec<(u32, Allocator)>, String> {
    let found = by_signature(scan, callees, &[Allocator::Realloc, Allocator::Free])?;
    let realloc = get(&found, Allocator::Realloc)?;
    // Of what `realloc` calls: defined functions of malloc's and free's types, once each.
    let inner = calls_of(scan, wasm, realloc)?;
    let of_type = |allocator| -> Result<u32, String> {
        let all: Vec<u32> = inner
            .iter()
            .copied()
            .filter(|&f| {
                scan.signature(f)
                    .and_then(|(params, results)| allocator_of(params, results))
                    == Some(allocator)
            })
            .collect();
        match all[..] {
            [one] => Ok(one),
            [] => Err(format!(
                "its realloc (function {realloc}) calls no function of {}'s type",
                name(allocator)
            )),
            [first, second, ..] => Err(format!(
                "its realloc (function {realloc}) calls functions {first} and {second}, both of {}'s type",
                name(allocator)
            )),
        }
    };
    let (malloc, free) = (of_type(Allocator::Malloc)?, of_type(Allocator::Free)?);
    // The anchor's `free` is its `realloc`'s, or forwards to it (wasi-libc's `free` calling
    // dlmalloc's `dlfree`, where not inlined): wrapping that one sees every block freed.
    if let Some(&(_, other)) = found.iter().find(|(a, _)| *a == Allocator::Free) {
        if other != free && forwards(scan, wasm, other)? != Some(free) {
            return Err(format!(
                "it frees with function {other}, its realloc (function {realloc}) with function {free}"
            ));
        }
    }
    let helpers: Vec<u32> = inner
        .into_iter()
        .filter(|&f| f != malloc && f != free && scan.defined(f).is_some())
        .collect();
    let memalign = posix_memalign(scan, wasm, malloc, &helpers)?;
    check_contract(scan, wasm, malloc, free, realloc, memalign)
}

/// The one defined function of posix_memalign's type that calls `malloc` and one of the
/// allocator's `helpers`, nothing else, and whose code holds both of
/// [`POSIX_MEMALIGN_ERRORS`]; `None` where there is none.
fn posix_memalign(
    scan: &Scan,
    wasm: &[u8],
    malloc: u32,
    helpers: &[u32],
) -> Result<Option<u32>, String> {
    if helpers.is_empty() {
        return Ok(None);
    }
    let mut found = None;
    for (i, defined) in scan.defined.iter().enumerate() {
        let index = scan.imported_functions + i as u32;
        let typed = scan
            .types
            .get(defined.type_index as usize)
            .and_then(Option::as_ref)
            .and_then(|(params, results)| allocator_of(params, results));
        if typed != Some(Allocator::PosixMemalign) {
            continue;
        }
        let calls = calls_of(scan, wasm, index)?;
        if !calls.contains(&malloc)
            || !calls.iter().any(|f| helpers.contains(f))
            || calls.iter().any(|f| *f != malloc && !helpers.contains(f))
            || !POSIX_MEMALIGN_ERRORS
                .iter()
                .all(|&e| holds_constant(scan, wasm, index, e).unwrap_or(false))
        {
            continue;
        }
        if let Some(other) = found {
            return Err(format!(
                "functions {other} and {index} both have its posix_memalign's shape"
            ));
        }
        found = Some(index);
    }
    Ok(found)
}

/// C's contract, checked: `realloc` and `posix_memalign` call `malloc`; `malloc` and `free`
/// call none of the others. The allocators, by function index.
fn check_contract(
    scan: &Scan,
    wasm: &[u8],
    malloc: u32,
    free: u32,
    realloc: u32,
    memalign: Option<u32>,
) -> Result<Vec<(u32, Allocator)>, String> {
    let mut callers = vec![(realloc, Allocator::Realloc)];
    callers.extend(memalign.map(|f| (f, Allocator::PosixMemalign)));
    for &(caller, allocator) in &callers {
        if !calls_of(scan, wasm, caller)?.contains(&malloc) {
            return Err(format!(
                "its {} (function {caller}) does not call its malloc (function {malloc})",
                name(allocator)
            ));
        }
    }
    let all: Vec<u32> = [malloc, free, realloc]
        .into_iter()
        .chain(memalign)
        .collect();
    for (callee, allocator) in [(malloc, Allocator::Malloc), (free, Allocator::Free)] {
        let calls = calls_of(scan, wasm, callee)?;
        if let Some(other) = all.iter().find(|f| calls.contains(f)) {
            return Err(format!(
                "its {} (function {callee}) calls function {other}, another of them",
                name(allocator)
            ));
        }
    }
    let mut found = vec![
        (malloc, Allocator::Malloc),
        (free, Allocator::Free),
        (realloc, Allocator::Realloc),
    ];
    found.extend(memalign.map(|f| (f, Allocator::PosixMemalign)));
    found.sort_unstable_by_key(|&(f, _)| f);
    Ok(found)
}

/// C's allocators as Rust's `System` calls them on WASI.
const C_ALLOCATORS: [Allocator; 4] = [
    Allocator::Malloc,
    Allocator::Free,
    Allocator::Realloc,
    Allocator::PosixMemalign,
];

/// The C allocator a function with this signature can be.
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

/// The operators of defined function `index`'s body.
fn operators<'a>(scan: &Scan, wasm: &'a [u8], index: u32) -> Result<OperatorsReader<'a>, String> {
    let body = scan
        .defined(index)
        .ok_or_else(|| format!("function {index} is not defined"))?
        .body
        .clone();
    let body = wasmparser::FunctionBody::new(wasmparser::BinaryReader::new(
        &wasm[body.clone()],
        body.start,
    ));
    body.get_operators_reader().map_err(unreadable(index))
}

fn unreadable(index: u32) -> impl Fn(wasmparser::BinaryReaderError) -> String {
    move |e| format!("function {index} does not decode ({e})")
}

/// The functions defined function `index` calls directly (`call`, `return_call`), each once,
/// in order of first call.
fn calls_of(scan: &Scan, wasm: &[u8], index: u32) -> Result<Vec<u32>, String> {
    let mut reader = operators(scan, wasm, index)?;
    let mut calls = Vec::new();
    while !reader.eof() {
        if let Operator::Call { function_index } | Operator::ReturnCall { function_index } =
            reader.read().map_err(unreadable(index))?
        {
            if !calls.contains(&function_index) {
                calls.push(function_index);
            }
        }
    }
    Ok(calls)
}

/// Whether defined function `index`'s code holds `i32.const value`.
fn holds_constant(scan: &Scan, wasm: &[u8], index: u32, value: i32) -> Result<bool, String> {
    let mut reader = operators(scan, wasm, index)?;
    while !reader.eof() {
        if let Operator::I32Const { value: v } = reader.read().map_err(unreadable(index))? {
            if v == value {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The function that function `index` forwards to, through any chain of forwarders (at most
/// [`FORWARDS`]) of types no C allocator has, or `index` itself: as the weval engine's
/// `JS_realloc(cx, p, old, new)` calls `realloc(p, new)` and its `JS_free(cx, p)` calls
/// `free(p)`, calling one is calling that function. A function of an allocator's type is
/// taken as what its type says, whatever it calls (a bump allocator's `realloc` may just call
/// `malloc`).
fn forwarded_to(scan: &Scan, wasm: &[u8], index: u32) -> Result<u32, String> {
    let mut at = index;
    for _ in 0..FORWARDS {
        let of_allocator_type = scan
            .signature(at)
            .and_then(|(params, results)| allocator_of(params, results))
            .is_some();
        match of_allocator_type {
            true => return Ok(at),
            false => match forwards(scan, wasm, at)? {
                Some(target) => at = target,
                None => return Ok(at),
            },
        }
    }
    Ok(at)
}

/// The function defined function `index` forwards to, if it is a forwarder: its body passes
/// some of its parameters, in order, to one function of its own results and does nothing else
/// (`local.get`s, one `call`).
fn forwards(scan: &Scan, wasm: &[u8], index: u32) -> Result<Option<u32>, String> {
    let Some((params, results)) = scan.signature(index) else {
        return Ok(None);
    };
    let mut reader = operators(scan, wasm, index)?;
    let mut passed: Vec<u32> = Vec::new();
    let target = loop {
        match reader.read().map_err(unreadable(index))? {
            Operator::LocalGet { local_index }
                if (local_index as usize) < params.len()
                    && passed.last().is_none_or(|&last| local_index > last) =>
            {
                passed.push(local_index)
            }
            Operator::Call { function_index } => break function_index,
            _ => return Ok(None),
        }
    };
    let ends = matches!(reader.read().map_err(unreadable(index))?, Operator::End) && reader.eof();
    let typed = scan
        .signature(target)
        .is_some_and(|(target_params, target_results)| {
            target_results == results
                && target_params.len() == passed.len()
                && passed
                    .iter()
                    .zip(target_params)
                    .all(|(&p, t)| params[p as usize] == *t)
        });
    Ok((ends && typed).then_some(target))
}

/// The longest chain of forwarders followed.
const FORWARDS: usize = 4;

/// Whether function `index` never returns to its caller: defined, without `return` (nor a
/// tail call) and without a branch out of its body, its last instruction `unreachable` (an
/// `abort`: clang ends a `noreturn` call with it). An import may return.
fn never_returns(scan: &Scan, wasm: &[u8], index: u32) -> Result<bool, String> {
    if scan.defined(index).is_none() {
        return Ok(false);
    }
    let mut reader = operators(scan, wasm, index)?;
    // Blocks open inside the body: a branch of this depth leaves the function.
    let mut depth = 0u32;
    let mut last_unreachable = false;
    while !reader.eof() {
        let operator = reader.read().map_err(unreadable(index))?;
        let leaves = match &operator {
            Operator::Return
            | Operator::ReturnCall { .. }
            | Operator::ReturnCallIndirect { .. }
            | Operator::ReturnCallRef { .. } => true,
            Operator::Br { relative_depth }
            | Operator::BrIf { relative_depth }
            | Operator::BrOnNull { relative_depth }
            | Operator::BrOnNonNull { relative_depth }
            | Operator::BrOnCast { relative_depth, .. }
            | Operator::BrOnCastFail { relative_depth, .. }
            | Operator::BrOnCastDescEq { relative_depth, .. }
            | Operator::BrOnCastDescEqFail { relative_depth, .. } => *relative_depth == depth,
            Operator::BrTable { targets } => {
                targets.default() == depth
                    || targets.targets().any(|t| t.map_or(true, |t| t == depth))
            }
            Operator::TryTable { try_table } => try_table.catches.iter().any(|c| {
                let (wasmparser::Catch::One { label, .. }
                | wasmparser::Catch::OneRef { label, .. }
                | wasmparser::Catch::All { label }
                | wasmparser::Catch::AllRef { label }) = c;
                *label == depth
            }),
            _ => false,
        };
        if leaves {
            return Ok(false);
        }
        match operator {
            Operator::Block { .. }
            | Operator::Loop { .. }
            | Operator::If { .. }
            | Operator::Try { .. }
            | Operator::TryTable { .. } => depth += 1,
            Operator::End | Operator::Delegate { .. } if depth > 0 => depth -= 1,
            // The body's own end.
            Operator::End => return Ok(last_unreachable),
            _ => {}
        }
        last_unreachable = matches!(operator, Operator::Unreachable);
    }
    Ok(false)
}

#[cfg(test)]
#[path = "shape_tests.rs"]
mod tests;
