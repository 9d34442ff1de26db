//! The rules for what a walk needs of a script beyond where its code is: whether it is a
//! function's and whether it is self-hosted (`BaseScript::immutableFlags_`), where its source
//! notes end, and how a `Value` names a function (the tags of `JS::Value` on 32-bit targets,
//! "NUNBOX32": the high word of a string's or undefined's 64 bits).
//!
//! Sources, as for [`super::rules`]: SpiderMonkey 140's and 153's vm/JSScript.h (BaseScript's
//! fields), vm/StencilEnums.h (`ImmutableScriptFlagsEnum`), vm/SharedStencil.h
//! (`ImmutableScriptData`), vm/FrameIter.cpp, vm/JSFunction.h/.cpp, js/public/Value.h.

use std::rc::Rc;

use anyhow::{bail, Context, Result};

use super::code::{Reading, Val};
use super::rules::{load, one, stores, Cx, Derived, Rule};
use super::straight::{linear, Expr};

const CREATE_RAW_LAZY: &str = "js::BaseScript::CreateRawLazy(JSContext*, unsigned int, JS::Handle<JSFunction*>, JS::Handle<js::ScriptSourceObject*>, js::SourceExtent const&, unsigned int)";
const IS_FUNCTION_FRAME: &str = "js::FrameIter::isFunctionFrame() const";
const NON_BUILTIN_SETTLE: &str = "js::NonBuiltinFrameIter::settle()";
const FUNCTION_NAME_BYTES: &str = "js::GetFunctionNameBytes(JSContext*, JSFunction*, std::__2::unique_ptr<char [], JS::FreePolicy>*)";

/// The one-bit masks of loads: the value loaded from, and the bit as one of a 32-bit field's,
/// (field, bit). A field of 32 bits is 4-aligned, and the code may load one byte of it: a byte
/// at `field + k` masked with `m` is the field's bit `m << 8k`.
fn flag_bits(r: &Reading) -> impl Iterator<Item = (&Val, (i64, i64))> {
    r.masks.iter().filter_map(|m| {
        let Val::Masked(word, bit) = m else {
            return None;
        };
        let (base, at) = load(word)?;
        let (field, byte) = (at & !3, at & 3);
        (bit.count_ones() == 1 && (0..256).contains(bit))
            .then_some((base, (field, bit << (8 * byte))))
    })
}

/// The rules, in the order they run (after [`super::rules::RULES`]).
pub const RULES: &[Rule] = &[
    // `BaseScript::CreateRawLazy(cx, ngcthings, fun, sourceObject, extent, immutableFlags)`
    // calls `BaseScript::New`, inlined with the constructor: `function_(function),
    // sourceObject_(sourceObject), extent_(extent), immutableFlags_(immutableFlags)` into the
    // new cell (a call's result). The one cell that gets `*fun` (param 2, a handle) and
    // `*sourceObject` (param 3): its fields `function_` and `sourceObject_`; where it gets the
    // param `immutableFlags` (5) is `immutableFlags_` (an i32.store: the flags are 32 bits).
    Rule {
        name: "script flags",
        function: CREATE_RAW_LAZY,
        derive: |_, r| {
            let given = |value: Val| {
                stores(r)
                    .filter(move |(_, v)| **v == value)
                    .map(|(a, _)| (a.base.clone(), a.offset))
            };
            let (cell, function, source_object) = one(
                "cell given *fun and *sourceObject",
                given(Val::Param(2).load(0)).flat_map(|(cell, function)| {
                    given(Val::Param(3).load(0))
                        .filter(move |(c, _)| *c == cell && matches!(c, Val::Call(_)))
                        .map(move |(c, source_object)| (c, function, source_object))
                }),
            )?;
            let flags = one(
                "i32.store of immutableFlags (param 5) into the cell",
                stores(r)
                    .filter(|(a, v)| a.op == "i32.store" && a.base == cell && **v == Val::Param(5))
                    .map(|(a, _)| a.offset),
            )?;
            Ok(vec![
                ("script_function", function),
                ("script_source_object", source_object),
                ("script_immutable_flags", flags),
            ])
        },
    },
    // `FrameIter::isFunctionFrame()`: for an interpreter frame, `interpFrame()->
    // isFunctionFrame()`, which is `script_->isFunction()` (vm/Stack.h): the one field and
    // bit masked of the script loaded from a frame's `script_` (`frame_script`) are
    // `immutableFlags_` and `IsFunction`. (For a JIT frame it tests the same bit of
    // `script()`'s flags; that script is not loaded from an `InterpreterFrame`, not taken.)
    Rule {
        name: "function frames",
        function: IS_FUNCTION_FRAME,
        derive: |cx, r| {
            let frame_script = cx.known("frame_script")?;
            let (flags, bit) = one(
                "one-bit mask of a field of a frame's script",
                flag_bits(r)
                    .filter(|(script, _)| load(script).is_some_and(|(_, o)| o == frame_script))
                    .map(|(_, bit)| bit),
            )?;
            Ok(vec![
                ("script_immutable_flags", flags),
                ("script_flag_is_function", bit),
            ])
        },
    },
    // `NonBuiltinFrameIter::settle()` skips self-hosted frames, as stack traces do:
    // `while (!done() && hasScript() && script()->selfHosted()) ++*this`. The one bit of a
    // script's flags it tests is `SelfHosted`.
    Rule {
        name: "self-hosted frames",
        function: NON_BUILTIN_SETTLE,
        derive: |cx, r| {
            let flags = cx.known("script_immutable_flags")?;
            let bit = one(
                "one-bit mask of a script's flags",
                flag_bits(r).filter_map(|(_, (f, bit))| (f == flags).then_some(bit)),
            )?;
            Ok(vec![("script_flag_self_hosted", bit)])
        },
    },
    // `GetFunctionNameBytes(cx, fun, bytes)` (vm/JSFunction-inl.h): for an accessor with a
    // lazy name, `fun->getAccessorNameForLazy(cx)`, inlined: `NameToPrefixedFunctionName(cx,
    // rawAtom(), ...)`, then `setAtom(name)`; else `fun->fullExplicitName()`, `rawAtom()`
    // again. `rawAtom()` reads the `AtomSlot` Value (at `function_atom` of the function, a
    // parameter; 64 bits) and tests `isUndefined()`: the Value masked to its high word
    // (`JSVAL_TAG_SHIFT` is 32) compared with a constant, undefined's tag. `setAtom(name)` is
    // `setFixedSlot(AtomSlot, StringValue(name))`: the Value built on the stack, `name | tag
    // << 32` with name a call's result, passed by address to a call on the function: the
    // string's tag. Tags are the high words (`JSVAL_TAG_CLEAR | JSVAL_TYPE_*`).
    Rule {
        name: "value tags",
        function: FUNCTION_NAME_BYTES,
        derive: |cx, _| {
            let s = cx.straight()?;
            let atom = cx.known("function_atom")?;
            let high_word = |c: i64| {
                (c & 0xffff_ffff == 0)
                    .then_some((c >> 32) & 0xffff_ffff)
                    .with_context(|| format!("{c:#x} is not a Value's high word"))
            };
            // The function whose atom slot's tag is compared, and the constant.
            let slot_tag = |x: &Expr| match x {
                Expr::Op("i64.and", o) => match &o[..] {
                    [Expr::Load("i64.load", f, at), Expr::Const(high)]
                        if *at == atom && *high == -1 << 32 && matches!(**f, Expr::Param(_)) =>
                    {
                        Some((**f).clone())
                    }
                    _ => None,
                },
                _ => None,
            };
            let (function, undefined) = one(
                "comparison of a function's atom slot's tag with a constant",
                s.compares.iter().filter_map(|(op, a, b)| match (a, b) {
                    (x, Expr::Const(c)) | (Expr::Const(c), x) if op.starts_with("i64.") => {
                        Some((slot_tag(x)?, *c))
                    }
                    _ => None,
                }),
            )?;
            let string = one(
                "Value of a call's result or'ed with a tag, stored, passed to a call on the function",
                s.accesses.iter().filter_map(|a| {
                    let Some(Expr::Op("i64.or", o)) = &a.value else {
                        return None;
                    };
                    let [Expr::Op("i64.extend_i32_u", p), Expr::Const(tag)] = &o[..] else {
                        return None;
                    };
                    let [Expr::Call { .. }] = &p[..] else {
                        return None;
                    };
                    let (terms, constant) = linear(&a.base);
                    let at = (terms, constant + a.offset);
                    let passed = s.calls.iter().any(|c| {
                        c.args.first() == Some(&function)
                            && c.args.last().map(linear) == Some(at.clone())
                    });
                    (a.op == "i64.store" && passed).then_some(*tag)
                }),
            )?;
            let (undefined, string) = (high_word(undefined)?, high_word(string)?);
            if undefined == string {
                bail!("undefined's tag and the string's are the same, {undefined:#x}");
            }
            Ok(vec![
                ("value_tag_undefined", undefined),
                ("value_tag_string", string),
            ])
        },
    },
];

/// For the rule `line numbers`, on `FrameIter::computeLine`: where the notes end.
/// `PCToLineNumber`'s argument 3 is `script->notesEnd()`, `notes() + numNotes()`, where
/// `noteLength()` is `optionalOffsetsOffset() - noteOffset()` and `optionalOffsetsOffset()` is
/// `optArrayOffset_ - numOffsets * sizeof(Offset)`, `numOffsets` the flags'
/// `tryNotesEndIndex` (vm/SharedStencil.h): so `isd + optArrayOffset_ - ((flags >> s) & m)`,
/// the flags a byte at `flagOffset()`, just before the code. Read straight, in terms of the
/// script argument 0 reads `lineno` from (`known`: `lineno`, `sharedData_`, `isd_`, code),
/// the argument is the sum of isd, a load from it (`optArrayOffset_`), and minus the flags
/// byte, shifted right and masked.
pub(super) fn notes_end(
    cx: &Cx<'_, '_>,
    callee: u32,
    (lineno, shared_data, isd_at, code): (i64, i64, i64, i64),
) -> Result<Derived> {
    let s = cx.straight()?;
    let args = one(
        "call of js::PCToLineNumber (read straight)",
        s.calls.iter().filter(|c| c.func == callee).map(|c| &c.args),
    )?;
    let script = match args.first() {
        Some(Expr::Load("i32.load", script, o)) if *o == lineno => script.clone(),
        _ => bail!("argument 0 is not a load of the script's lineno"),
    };
    let isd = Rc::new(Expr::Load(
        "i32.load",
        Rc::new(Expr::Load("i32.load", script, shared_data)),
        isd_at,
    ));
    let (terms, constant) = linear(args.get(3).context("no argument 3")?);
    let mut opt_array = None;
    let mut opt_offsets = None;
    for (term, coefficient) in &terms {
        match (term, coefficient) {
            (t, 1) if *t == *isd => {}
            (Expr::Load("i32.load", base, o), 1) if *base == isd => opt_array = Some(*o),
            (Expr::Op("i32.and", o), -1) => {
                let [Expr::Op("i32.shr_u", p), Expr::Const(mask)] = &o[..] else {
                    bail!("argument 3 subtracts {term:?}")
                };
                let [Expr::Load("i32.load8_u", base, flags), Expr::Const(shift)] = &p[..] else {
                    bail!("argument 3 subtracts {term:?}")
                };
                if *base != isd {
                    bail!("argument 3 subtracts a byte of something else than isd");
                }
                opt_offsets = Some((*flags, *shift, *mask));
            }
            _ => bail!("argument 3 has the term {term:?} times {coefficient}"),
        }
    }
    let (Some(opt_array), Some((flags, shift, mask)), 0, true) = (
        opt_array,
        opt_offsets,
        constant,
        terms.get(&*isd) == Some(&1),
    ) else {
        bail!("argument 3 is not isd + optArrayOffset_ - ((flags >> s) & m)")
    };
    if flags != code - 1 {
        bail!("the flags byte ({flags}) is not just before the code ({code})");
    }
    Ok(vec![
        ("isd_opt_array_offset", opt_array),
        ("isd_flags", flags),
        ("isd_opt_offsets_shift", shift),
        ("isd_opt_offsets_mask", mask),
    ])
}
