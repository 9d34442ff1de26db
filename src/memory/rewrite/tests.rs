//! Tests of the whole rewrite: rewritten modules run in Wasmtime with a hook acting as the
//! host, and every other function body checked byte-identical and mapped back.

use std::ops::Range;

use wasmparser::{Parser, Payload};
use wasmtime::{Engine, Func, Instance, Ref, Store};

use super::scan::Scan;
use super::{
    block_slot, report, rewrite, rewrite_in_component, Allocator, HOOK_TABLE, SAMPLE_COUNTDOWN,
};

/// A bump allocator whose `realloc` calls `malloc` and `free`, and a `run` that calls the
/// allocators directly and through a table.
const BUMP: &str = r#"(module
    (memory (export "memory") 1)
    (global $next (mut i32) (i32.const 1024))
    (type $one (func (param i32) (result i32)))
    (table 1 funcref)
    (elem (i32.const 0) $malloc)
    (func $malloc (param $size i32) (result i32) (local $p i32)
        (local.set $p (global.get $next))
        (global.set $next (i32.add (global.get $next) (local.get $size)))
        (local.get $p))
    (func $free (param i32))
    (func $realloc (param $old i32) (param $size i32) (result i32) (local $new i32)
        (local.set $new (call $malloc (local.get $size)))
        (call $free (local.get $old))
        (local.get $new))
    (func $unrelated (param i32) (result i32) (i32.mul (local.get 0) (i32.const 3)))
    (func (export "run") (result i32)
        (drop (call $malloc (i32.const 16)))
        (call $free
            (call $realloc
                (call_indirect (type $one) (i32.const 8) (i32.const 0))
                (i32.const 32)))
        (call $unrelated (i32.const 7))))"#;

/// Each function body's bytes, in order.
fn bodies(wasm: &[u8]) -> Vec<Range<usize>> {
    Parser::new(0)
        .parse_all(wasm)
        .filter_map(|p| match p.unwrap() {
            Payload::CodeSectionEntry(body) => Some(body.range()),
            _ => None,
        })
        .collect()
}

/// (allocator, size, freed, allocated, countdown).
type Heard = (Allocator, i32, i32, i32, i64);

/// Runs `run`, with a hook acting as the host does when `interval` is given: every sampled
/// allocation's block flagged until freed, the countdown reset to `interval`. Returns
/// what the hook heard.
fn run(wasm: &[u8], interval: Option<i64>) -> (i32, Vec<Heard>) {
    let engine = Engine::default();
    let module = wasmtime::Module::new(&engine, wasm).unwrap();
    let mut store = Store::new(&engine, Vec::new());
    let instance = Instance::new(&mut store, &module, &[]).unwrap();
    if let Some(interval) = interval {
        // The sampled blocks still live.
        let live = std::sync::Mutex::new(std::collections::HashSet::new());
        let countdown = instance.get_global(&mut store, SAMPLE_COUNTDOWN).unwrap();
        countdown
            .set(&mut store, wasmtime::Val::I64(interval))
            .unwrap();
        let report = Func::wrap(
            &mut store,
            move |mut caller: wasmtime::Caller<'_, Vec<_>>,
                  a: i32,
                  size: i32,
                  freed: i32,
                  new: i32,
                  countdown: i64|
                  -> i64 {
                let allocator = Allocator::from_code(a).unwrap();
                caller
                    .data_mut()
                    .push((allocator, size, freed, new, countdown));
                let mut live = live.lock().unwrap();
                live.remove(&freed);
                let next = if new != 0 && countdown < 0 {
                    live.insert(new);
                    interval
                } else {
                    countdown
                };
                let slot_live = |a: i32| {
                    live.iter()
                        .any(|&l| block_slot(l as u32) == block_slot(a as u32))
                };
                report(next, slot_live(freed), slot_live(new))
            },
        );
        let table = instance.get_table(&mut store, HOOK_TABLE).unwrap();
        table.set(&mut store, 0, Ref::Func(Some(report))).unwrap();
    }
    let run = instance
        .get_typed_func::<(), i32>(&mut store, "run")
        .unwrap();
    let result = run.call(&mut store, ()).unwrap();
    (result, store.into_data())
}

#[test]
fn every_allocator_call_is_reported_once() {
    let original = wat::parse_str(BUMP).unwrap();
    let rewritten = rewrite(&original).unwrap().unwrap();
    let names: Vec<Allocator> = rewritten.wrapped.iter().map(|&(_, a)| a).collect();
    assert_eq!(
        names,
        [Allocator::Malloc, Allocator::Free, Allocator::Realloc]
    );
    assert_eq!(run(&original, None), (21, vec![]));
    // Every allocation sampled, as at --mem-rate 1.
    let (result, events) = run(&rewritten.wasm, Some(-1));
    assert_eq!(result, 21);
    // $malloc is function 0: its wrapper stands for it as a whole; its moved body
    // (function 5, after the five originals) is it, byte for byte.
    let (old, new) = (bodies(&original), bodies(&rewritten.wasm));
    let malloc = old[0].start as u32;
    let (wrapper, moved) = (new[0].start as u32, new[5].start as u32);
    assert_eq!(rewritten.original(0, wrapper + 2), Some((0, malloc, true)));
    assert_eq!(
        rewritten.original(5, moved + 3),
        Some((0, malloc + 3, false))
    );
    let unrelated = (old[3].start as u32, new[3].start as u32);
    assert_eq!(
        rewritten.original(3, unrelated.1 + 1),
        Some((3, unrelated.0 + 1, false))
    );
    assert_eq!(
        events,
        [
            (Allocator::Malloc, 16, 0, 1024, -17),
            // Through the table: the table holds the same index, now the wrapper.
            (Allocator::Malloc, 8, 0, 1040, -9),
            // realloc's own malloc and free are inside it: not reported again.
            (Allocator::Realloc, 32, 1040, 1048, -33),
            (Allocator::Free, 0, 1048, 0, -1),
        ]
    );
}

/// The wrapper counts bytes down and calls the host only for the allocation that crosses
/// zero and for frees of flagged blocks.
#[test]
fn only_sampled_allocations_and_their_frees_reach_the_host() {
    let rewritten = rewrite(&wat::parse_str(BUMP).unwrap()).unwrap().unwrap();
    let (result, events) = run(&rewritten.wasm, Some(20));
    assert_eq!(result, 21);
    assert_eq!(
        events,
        [
            // 20 − 16 = 4 left: malloc(16) stays in Wasm; malloc(8) crosses zero.
            (Allocator::Malloc, 8, 0, 1040, -4),
            // Frees the sampled block at 1040, and crosses zero again (20 − 32).
            (Allocator::Realloc, 32, 1040, 1048, -12),
            // 1048 was sampled: its free is heard, without counting anything down.
            (Allocator::Free, 0, 1048, 0, 20),
        ]
    );
    // 100 bytes outlast the 56 allocated: nothing is sampled, no free is flagged.
    assert_eq!(run(&rewritten.wasm, Some(100)), (21, vec![]));
}

/// In a component, a function the host calls (of any signature) and the allocators of a
/// module that does not define `malloc` (here `PyObject_Malloc`, calling an imported
/// one) tell the hook they enter and leave, around their original, whose results they
/// return; the allocator then reports as ever. Alone, such a module's `PyObject_Malloc`
/// is not wrapped.
#[test]
fn wrappers_nesting_across_modules_tell_the_hook() {
    let original = wat::parse_str(
        r#"(module
        (import "libc" "malloc" (func $malloc (param i32) (result i32)))
        (func $PyObject_Malloc (export "PyObject_Malloc") (param i32) (result i32)
            (call $malloc (local.get 0)))
        (func (export "post") (param i64 f64) (result f32 i64)
            (f32.demote_f64 (local.get 1)) (local.get 0)))"#,
    )
    .unwrap();
    assert!(rewrite(&original).unwrap().is_none());
    let rewritten = rewrite_in_component(&original, &["post".into()])
        .unwrap()
        .unwrap();
    let kinds: Vec<Allocator> = rewritten.wrapped.iter().map(|&(_, a)| a).collect();
    assert_eq!(kinds, [Allocator::Malloc, Allocator::HostCalled]);

    let engine = Engine::default();
    let module = wasmtime::Module::new(&engine, &rewritten.wasm).unwrap();
    let mut store = Store::new(&engine, Vec::<String>::new());
    let malloc = Func::wrap(
        &mut store,
        |mut caller: wasmtime::Caller<'_, Vec<String>>, size: i32| -> i32 {
            caller.data_mut().push(format!("libc malloc {size}"));
            64
        },
    );
    let instance = Instance::new(&mut store, &module, &[malloc.into()]).unwrap();
    let hook = Func::wrap(
        &mut store,
        |mut caller: wasmtime::Caller<'_, Vec<String>>,
         a: i32,
         size: i32,
         _: i32,
         allocated: i32,
         countdown: i64|
         -> i64 {
            let allocator = Allocator::from_code(a).unwrap();
            let heard = format!("{allocator:?} {size} {allocated} {countdown}");
            caller.data_mut().push(heard);
            report(1000, false, false)
        },
    );
    let table = instance.get_table(&mut store, HOOK_TABLE).unwrap();
    table.set(&mut store, 0, Ref::Func(Some(hook))).unwrap();
    let countdown = instance.get_global(&mut store, SAMPLE_COUNTDOWN).unwrap();
    countdown.set(&mut store, wasmtime::Val::I64(1)).unwrap();

    let allocate = instance
        .get_typed_func::<i32, i32>(&mut store, "PyObject_Malloc")
        .unwrap();
    assert_eq!(allocate.call(&mut store, 10).unwrap(), 64);
    let post = instance
        .get_typed_func::<(i64, f64), (f32, i64)>(&mut store, "post")
        .unwrap();
    assert_eq!(post.call(&mut store, (5, 2.5)).unwrap(), (2.5, 5));
    assert_eq!(
        store.into_data(),
        [
            "HostCalled 3 0 0",
            "libc malloc 10",
            "HostCalled 2 0 0",
            "Malloc 10 64 -9",
            "HostCalled 1 0 0",
            "HostCalled 0 0 0",
        ]
    );
}

#[test]
fn a_module_without_allocators_is_left_alone() {
    let wasm = wat::parse_str("(module (func $main))").unwrap();
    assert!(rewrite(&wasm).unwrap().is_none());
    // A `malloc` of another signature is not an allocator.
    let wasm =
        wat::parse_str("(module (func $malloc (param i64) (result i64) local.get 0))").unwrap();
    assert!(rewrite(&wasm).unwrap().is_none());
}

/// Every other body is byte-identical and every byte of it maps back to its original offset.
#[test]
fn other_code_is_unchanged_and_maps_back() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/rust/iter.wasm");
    let original = std::fs::read(path).unwrap();
    let rewritten = rewrite(&original).unwrap().unwrap();
    let kinds: Vec<Allocator> = rewritten.wrapped.iter().map(|&(_, a)| a).collect();
    for expected in [
        Allocator::Malloc,
        Allocator::Free,
        Allocator::RustAlloc,
        Allocator::RustDealloc,
    ] {
        assert!(kinds.contains(&expected), "{kinds:?}");
    }
    let (old, new) = (bodies(&original), bodies(&rewritten.wasm));
    let imported = Scan::of(&original).unwrap().imported_functions as usize;
    assert_eq!(new.len(), old.len() + rewritten.wrapped.len());
    let mut moved = old.len();
    for (k, old_body) in old.iter().enumerate() {
        let wrapped = rewritten
            .wrapped
            .iter()
            .any(|&(i, _)| i as usize == imported + k);
        let new_body = if wrapped {
            // The wrapper stands for the whole allocator.
            assert_eq!(
                rewritten.original_offset(new[k].start as u32),
                Some(old_body.start as u32)
            );
            moved += 1;
            &new[moved - 1]
        } else {
            &new[k]
        };
        assert_eq!(original[old_body.clone()], rewritten.wasm[new_body.clone()]);
        for (o, n) in old_body.clone().zip(new_body.clone()) {
            assert_eq!(rewritten.original_offset(n as u32), Some(o as u32));
        }
    }
}
