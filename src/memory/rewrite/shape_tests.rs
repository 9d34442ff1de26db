//! The shapes' tests: modules written in WAT as each kind of `cabi_realloc` and allocator
//! compiles, found as they are, and each departure from them refused with why.

use super::*;

/// A module exporting `cabi_realloc`, which calls `callees` (WAT function names), with
/// `body` defining them.
fn shape_of(body: &str) -> Shape {
    shape_with(
        body,
        r#"(if (i32.eqz (local.get 1))
                (then (return (call $malloc (local.get 3)))))
            (drop (call $memalign (i32.const 0) (local.get 2) (local.get 3)))
            (call $free (local.get 0))
            (call $realloc (local.get 0) (local.get 3))"#,
    )
}

/// A module with `body`, exporting a `cabi_realloc` of `code`.
fn shape_with(body: &str, code: &str) -> Shape {
    let wasm = wat::parse_str(format!(
        r#"(module (memory 1) {body}
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) {code}))"#
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

/// dlmalloc's shape, as wasi-libc builds it: `realloc` calls `malloc`, `free` and a helper
/// of its own (`dispose_chunk`); `posix_memalign` calls `malloc` and the helper and checks
/// its alignment (`EINVAL`, 28) and size (`ENOMEM`, 48).
const DLMALLOC: &str = r#"
    (func $malloc (param i32) (result i32) (local.get 0))
    (func $free (param i32))
    (func $dispose (param i32 i32))
    (func $realloc (param i32 i32) (result i32) (local i32)
        (local.set 2 (call $malloc (local.get 1)))
        (call $dispose (local.get 0) (local.get 1))
        (call $free (local.get 0))
        (local.get 2))
    (func $memalign (param i32 i32 i32) (result i32)
        (if (i32.and (local.get 1) (i32.const 3)) (then (return (i32.const 28))))
        (if (i32.gt_u (local.get 2) (i32.const -64)) (then (return (i32.const 48))))
        (call $dispose (local.get 0) (local.get 1))
        (i32.store (local.get 0) (call $malloc (local.get 2)))
        (i32.const 0))"#;

/// StarlingMonkey's `cabi_realloc`: `JS_free` for a zero size, else `JS_realloc`, both
/// inlined to C's; `api::Engine::abort` (which never returns) when it fails.
const STARLING: &str = r#"
    (if (i32.eqz (local.get 3)) (then (call $free (local.get 0)) (return (i32.const 0))))
    (local.set 3 (call $realloc (local.get 0) (local.get 3)))
    (if (i32.eqz (local.get 3)) (then (call $abort (i32.const 0) (i32.const 8))))
    (local.get 3)"#;

/// Never returns: its last instruction is `unreachable`, its branches stay inside it.
const ABORT: &str = r#"(func $abort (param i32 i32)
    (block (br_if 0 (local.get 0)) (drop (i32.const 1)))
    (unreachable))"#;

/// A `cabi_realloc` on C's `realloc` (StarlingMonkey's, wit-bindgen's C one): `malloc`
/// and `free` are found from `realloc`, `posix_memalign` by its shape; the abort on the
/// failure path is set aside.
#[test]
fn c_allocators_are_found_from_a_cabi_realloc_on_realloc() {
    assert_eq!(
        shape_with(&[DLMALLOC, ABORT].concat(), STARLING),
        Shape::Found(vec![
            (0, Allocator::Malloc),
            (1, Allocator::Free),
            (3, Allocator::Realloc),
            (4, Allocator::PosixMemalign),
        ])
    );
    // wit-bindgen's C `cabi_realloc`: `realloc`, then `abort()` if it failed.
    let wit_bindgen_c = r#"(local.set 3 (call $realloc (local.get 0) (local.get 3)))
        (if (i32.eqz (local.get 3)) (then (call $abort_c)))
        (local.get 3)"#;
    let abort_c = r#"(func $abort_c (unreachable))"#;
    assert!(matches!(
        shape_with(&[DLMALLOC, abort_c].concat(), wit_bindgen_c),
        Shape::Found(found) if found.len() == 4
    ));
}

/// Without a function of posix_memalign's shape, the other three; a function that calls
/// the allocator's helper as `posix_memalign` does but returns no error of its own
/// (dlmalloc's `internal_memalign`, not inlined) is not taken for it.
#[test]
fn posix_memalign_is_found_only_by_its_whole_shape() {
    let internal = DLMALLOC.replace("(i32.const 28)", "(i32.const 0)");
    assert_eq!(
        shape_with(&[internal.as_str(), ABORT].concat(), STARLING),
        Shape::Found(vec![
            (0, Allocator::Malloc),
            (1, Allocator::Free),
            (3, Allocator::Realloc),
        ])
    );
    // Two of that shape: which is which is not known.
    let twice = r#"(func $memalign2 (param i32 i32 i32) (result i32)
        (if (local.get 1) (then (return (i32.const 28))))
        (call $dispose (local.get 0) (local.get 1))
        (drop (call $malloc (local.get 2)))
        (i32.const 48))"#;
    match shape_with(&[DLMALLOC, ABORT, twice].concat(), STARLING) {
        Shape::Unrecognised(why) => assert!(
            why.contains("both have its posix_memalign's shape"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
}

/// On C's `realloc`, each departure from the shape is refused, with why: a failure path
/// that may return, a `free` that is not the one `realloc` calls, a `realloc` calling no
/// `malloc`.
#[test]
fn a_cabi_realloc_on_realloc_is_checked() {
    let may_return = r#"(func $abort (param i32 i32)
        (block (br_if 1 (local.get 0)) (drop (i32.const 1)))
        (unreachable))"#;
    let other_free = DLMALLOC.replace(
        "(call $free (local.get 0))\n",
        "(call $free2 (local.get 0))\n",
    );
    let free2 = r#"(func $free2 (param i32))"#;
    let no_malloc = DLMALLOC.replace(
        "(local.set 2 (call $malloc (local.get 1)))",
        "(local.set 2 (local.get 1))",
    );
    let cases = [
        (
            [DLMALLOC, may_return].concat(),
            "function 5, of a type no C allocator has",
        ),
        (
            [other_free.as_str(), ABORT, free2].concat(),
            "it frees with function 1, its realloc (function 3) with function 6",
        ),
        (
            [no_malloc.as_str(), ABORT].concat(),
            "calls no function of malloc's type",
        ),
    ];
    for (body, why) in cases {
        match shape_with(&body, STARLING) {
            Shape::Unrecognised(said) => assert!(said.contains(why), "{why}: {said}"),
            other => panic!("{why}: {other:?}"),
        }
    }
}

/// The weval engine's `cabi_realloc`: `JS_free(cx, p)` and `JS_realloc(cx, p, old, new)` not
/// inlined, forwarding to `free(p)` and `realloc(p, new)`: the allocators are found through
/// them, and wrapped themselves, not the forwarders. A function that does anything more than
/// forward its arguments (here: adds to the size) is no forwarder, and is refused.
#[test]
fn forwarders_are_followed_to_the_allocators() {
    let forwarders = r#"
        (func $js_free (param i32 i32) (call $free (local.get 1)))
        (func $js_realloc (param i32 i32 i32 i32) (result i32)
            (call $realloc (local.get 1) (local.get 3)))"#;
    let weval = r#"
        (if (i32.eqz (local.get 3))
            (then (call $js_free (i32.const 0) (local.get 0)) (return (i32.const 0))))
        (local.set 3 (call $js_realloc (i32.const 0) (local.get 0) (local.get 1) (local.get 3)))
        (if (i32.eqz (local.get 3)) (then (call $abort (i32.const 0) (i32.const 8))))
        (local.get 3)"#;
    assert_eq!(
        shape_with(&[DLMALLOC, ABORT, forwarders].concat(), weval),
        Shape::Found(vec![
            (0, Allocator::Malloc),
            (1, Allocator::Free),
            (3, Allocator::Realloc),
            (4, Allocator::PosixMemalign),
        ])
    );
    let computes = forwarders.replace(
        "(local.get 1) (local.get 3)",
        "(local.get 1) (i32.add (local.get 3) (i32.const 8))",
    );
    match shape_with(&[DLMALLOC, ABORT, computes.as_str()].concat(), weval) {
        Shape::Unrecognised(why) => {
            assert!(why.contains("of a type no C allocator has"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

/// Where wasi-libc's `free` is not inlined, the anchor frees with `free`, which forwards to
/// dlmalloc's `dlfree`, which `realloc` calls: `dlfree` is wrapped (every block freed goes
/// through it); a `free` that does anything else is not that one, and is refused.
#[test]
fn the_anchors_free_may_forward_to_reallocs() {
    let public_free = r#"(func $public_free (param i32) (call $free (local.get 0)))"#;
    let frees_publicly = STARLING.replace(
        "(call $free (local.get 0))",
        "(call $public_free (local.get 0))",
    );
    assert_eq!(
        shape_with(&[DLMALLOC, ABORT, public_free].concat(), &frees_publicly),
        Shape::Found(vec![
            (0, Allocator::Malloc),
            (1, Allocator::Free),
            (3, Allocator::Realloc),
            (4, Allocator::PosixMemalign),
        ])
    );
    let other_free = r#"(func $public_free (param i32) (call $free (i32.const 16)))"#;
    match shape_with(&[DLMALLOC, ABORT, other_free].concat(), &frees_publicly) {
        Shape::Unrecognised(why) => assert!(
            why.contains("it frees with function 6, its realloc (function 3) with function 1"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
}
