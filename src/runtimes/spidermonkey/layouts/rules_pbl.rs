//! The rules for the frames of the portable baseline interpreter (PBL), which runs JavaScript
//! in the weval engine (its AOT-compiled functions are PBL specialised per script).
//!
//! PBL keeps its frames on its own stack (`cx->portableBaselineStack()`), laid out as the
//! baseline JIT's: each frame's `fp` points at the `CommonFrameLayout` (jit/JitFrames.h) whose
//! first word is the caller's fp, then a return address (PBL pushes a fake one) and a
//! descriptor, whose low bits are the caller's `FrameType`; a `BaselineFrame` lies right below
//! its fp (`Stack::frameFromFP()`: `fp - BaselineFrame::Size()`). An exit frame, pushed for a
//! call into the VM, is the same header with the previous frame's fp (`frame + Size()`), and
//! `JitActivation::packedExitFP_` points at it.
//!
//! Sources: SpiderMonkey 140's and 153's vm/PortableBaselineInterpret.cpp (`Stack`,
//! `VMFrame`), jit/BaselineFrame.h, jit/JitFrames.h, jit/JSJitFrameIter.cpp,
//! vm/JitActivation.h.

use anyhow::{bail, Context, Result};

use super::code::Val;
use super::rules::{add, load, one, stores, Cx, Derived, Rule};
use super::straight::{linear, Expr};

const PBL_ENTER: &str = "js::pbl::PBIResult js::pbl::PortableBaselineInterpret<false, false, true>(JSContext*, js::pbl::State&, js::pbl::Stack&, js::pbl::StackVal*, JSObject*, JS::Value*, unsigned char*, unsigned int, js::ImmutableScriptData*, unsigned char*, js::jit::BaselineFrame*, js::pbl::StackVal*, js::pbl::PBIResult)";
const PBL_RESTART: &str = "js::pbl::PBIResult js::pbl::PortableBaselineInterpret<false, true, true>(JSContext*, js::pbl::State&, js::pbl::Stack&, js::pbl::StackVal*, JSObject*, JS::Value*, unsigned char*, unsigned int, js::ImmutableScriptData*, unsigned char*, js::jit::BaselineFrame*, js::pbl::StackVal*, js::pbl::PBIResult)";
const TRAMPOLINE: &str = "js::pbl::PortableBaselineTrampoline(JSContext*, unsigned long, JS::Value*, unsigned long, void*, JSObject*, JS::Value*)";
const IC_INTERPRET: &str = "unsigned long long js::pbl::ICInterpretOps<false>(unsigned long long, unsigned long long, js::jit::ICStub*, js::pbl::ICCtx&)";
const FRAME_ITER_NEXT: &str = "js::jit::JSJitFrameIter::operator++()";
const SCRIPT_AND_PC: &str =
    "js::jit::JSJitFrameIter::baselineScriptAndPc(JSScript**, unsigned char**) const";

/// A value read straight as an i32 constant.
fn constant(e: &Expr) -> Option<i64> {
    match e {
        Expr::Const(c) => Some(*c),
        _ => None,
    }
}

/// The rules, in the order they run (after [`super::rules_script::RULES`]).
pub const RULES: &[Rule] = &[
    // `JSJitFrameIter::operator++()` steps to the caller's frame: `type_ =
    // current()->prevType()`, the descriptor masked with `FRAMETYPE_MASK`; `current_ =
    // prevFp()`, which is `current()->callerFramePtr()`. The one field of `this` stored a load
    // from the frame its own value points to is `current_`, that load's offset
    // `callerFramePtr_`; the field stored a masked load from the frame is `type_`, giving the
    // descriptor's offset and the mask. It first tests `current()->prevType() ==
    // FrameType::BaselineJS`: the one constant the masked descriptor is compared with.
    Rule {
        name: "jit frames",
        function: FRAME_ITER_NEXT,
        derive: |_, r| {
            let this = Val::Param(0);
            let (current, caller_fp) = one(
                "field of `this` given a load from the frame it points to",
                stores(r).filter_map(|(a, v)| {
                    let (frame, o) = load(v)?;
                    (a.base == this && *frame == this.load(a.offset)).then_some((a.offset, o))
                }),
            )?;
            let frame = this.load(current);
            let (descriptor, mask) = one(
                "field of `this` given a masked load from the frame",
                stores(r).filter_map(|(a, v)| match v {
                    Val::Masked(word, mask) if a.base == this => {
                        let (f, o) = load(word)?;
                        (*f == frame).then_some((o, *mask))
                    }
                    _ => None,
                }),
            )?;
            let prev_type = Val::Masked(frame.load(descriptor).into(), mask);
            let baseline_js = one(
                "constant compared with the caller's frame type",
                r.compares.iter().filter_map(|(a, b)| match (a, b) {
                    (x, Val::Const(c)) | (Val::Const(c), x) if *x == prev_type => Some(*c),
                    _ => None,
                }),
            )?;
            Ok(vec![
                ("jit_frame_caller_fp", caller_fp),
                ("jit_frame_descriptor", descriptor),
                ("jit_frame_type_mask", mask),
                ("jit_frame_type_baseline_js", baseline_js),
            ])
        },
    },
    // `PortableBaselineTrampoline`, PBL's entry from C++, pushes the arguments, the callee
    // token and `MakeFrameDescriptorForJitCall(FrameType::CppToJSJit, numActuals)`, that is
    // `numActuals << NUMACTUALARGS_SHIFT | CppToJSJit` (jit/JitFrames.h): read straight, the
    // one value stored that is a shifted value or'ed with a constant. The frame whose
    // caller's type is `CppToJSJit` is the first of its activation. The callee token (a
    // parameter, `JitFrameLayout::calleeToken_`) is stored beside it, the distance between the
    // two stores its place from the descriptor's; the trampoline then reads the function's
    // script through the token with its tag bits masked off (`CalleeTokenToFunction`, then
    // `nonLazyScript()`): the mask's complement is the tag bits, the load's offset the
    // function's script slot (the `BaseScript`, a `PrivateValue`'s low word).
    Rule {
        name: "entry frames",
        function: TRAMPOLINE,
        derive: |cx, _| {
            let mask = cx.known("jit_frame_type_mask")?;
            let s = cx.straight()?;
            let (shift, entry, descriptor) = one(
                "store of a shifted value or'ed with a constant",
                s.accesses.iter().filter_map(|a| {
                    let Some(Expr::Op("i32.or", o)) = &a.value else {
                        return None;
                    };
                    let [Expr::Op("i32.shl", p), Expr::Const(entry)] = &o[..] else {
                        return None;
                    };
                    let shift = constant(p.get(1)?)?;
                    (entry & !mask == 0).then_some((shift, *entry, a))
                }),
            )?;
            let (token, from_descriptor) = one(
                "parameter stored beside the descriptor",
                s.accesses.iter().filter_map(|a| match &a.value {
                    Some(Expr::Param(n)) if a.base == descriptor.base => {
                        Some((*n, a.offset - descriptor.offset))
                    }
                    _ => None,
                }),
            )?;
            let (tag_mask, script) = one(
                "load through the callee token with its tag bits masked off",
                s.accesses.iter().filter_map(|a| {
                    let Expr::Op("i32.and", o) = &a.base else {
                        return None;
                    };
                    let [Expr::Param(n), Expr::Const(m)] = &o[..] else {
                        return None;
                    };
                    (*n == token && a.value.is_none()).then_some((!*m & 0xffff_ffff, a.offset))
                }),
            )?;
            Ok(vec![
                ("jit_frame_descriptor_argc_shift", shift),
                ("jit_frame_type_cpp_to_js_jit", entry),
                (
                    "jit_frame_callee_token",
                    cx.known("jit_frame_descriptor")? + from_descriptor,
                ),
                ("callee_token_tag_mask", tag_mask),
                ("function_script", script),
            ])
        },
    },
    // PBL's calls into the VM construct a `VMFrame` (inlined at each): `exitFP =
    // stack.pushExitFrame(sp, frame)` pushes a descriptor, a fake return address and
    // `prevFP = frame + BaselineFrame::Size()`, exitFP pointing at that last word; then
    // `cx->activation()->asJit()->setJSExitFP(exitFP)`. See [`exit_frames`].
    Rule {
        name: "exit frames",
        function: PBL_RESTART,
        derive: |cx, _| exit_frames(cx),
    },
    // The IC interpreter's calls into the VM (`PUSH_IC_FRAME()`) construct the same
    // `VMFrame`, for the frame whose IC runs.
    Rule {
        name: "IC exit frames",
        function: IC_INTERPRET,
        derive: |cx, _| exit_frames(cx),
    },
    // `PortableBaselineInterpret` begins (when not restarting) by pushing the script's frame:
    // `PUSHNATIVE(nullptr)` (a fake return address), then `stack.pushFrame(sp, cx,
    // envChain)`, inlined: `PUSHNATIVE(StackValNative(fp)); fp = sp;` (the caller's fp saved
    // at the new fp: a store of `stack.fp`, `Load(stack, F)`, at `sp + k`, and of `sp + k` into
    // `stack + F`), `frame = allocate(sp, BaselineFrame::Size())`, whose check is `base +
    // size <= sp` (read straight: the constant added to a field of the stack, compared with
    // the new fp, is `Size()`), `frame->setFlags(RUNNING_IN_INTERPRETER)` (the one constant
    // stored into the frame), and `setInterpreterFields(script->code())`: `interpreterPC_ =
    // script->code()` (the store into the frame of `S->sharedData_->isd_ + code`, known fields)
    // and `interpreterScript_ = S` (the store of S itself). The frame's fields are offsets
    // from `fp - Size()`.
    Rule {
        name: "baseline frames",
        function: PBL_ENTER,
        derive: |cx, r| {
            let (stack, sp) = (Val::Param(2), Val::Param(3));
            let at_sp = |v: &Val| add(v).filter(|(b, _)| **b == sp).map(|(_, o)| o);
            let (field, fp) = one(
                "field of the stack set to an address below sp",
                stores(r)
                    .filter(|(a, _)| a.base == stack)
                    .filter_map(|(a, v)| Some((a.offset, at_sp(v)?))),
            )?;
            let saved = one(
                "store of the stack's fp below sp",
                stores(r)
                    .filter(|(a, v)| a.base == sp && **v == stack.load(field))
                    .map(|(a, _)| a.offset),
            )?;
            let s = cx.straight()?;
            let new_fp = linear(&Expr::Param(3)).0;
            let size = one(
                "constant added to a field of the stack, compared with the new fp",
                s.compares.iter().filter_map(|(_, a, b)| {
                    let Expr::Op("i32.add", o) = a else {
                        return None;
                    };
                    let [Expr::Load("i32.load", base, _), Expr::Const(size)] = &o[..] else {
                        return None;
                    };
                    let (terms, c) = linear(b);
                    (**base == Expr::Param(2) && terms == new_fp && c == fp).then_some(*size)
                }),
            )?;
            let frame = fp - size;
            let in_frame = |a: &super::code::Access| {
                (a.base == sp)
                    .then(|| a.offset - frame)
                    .filter(|f| (0..size).contains(f))
            };
            let (flags, running) = one(
                "constant stored into the frame",
                stores(r).filter_map(|(a, v)| match v {
                    Val::Const(c) => Some((in_frame(a)?, *c)),
                    _ => None,
                }),
            )?;
            let (d, i, code) = (
                cx.known("script_shared_data")?,
                cx.known("shared_data_isd")?,
                cx.known("isd_code")?,
            );
            let (pc, script) = one(
                "stores into the frame of script->code() and of the script",
                stores(r).flat_map(|(a, v)| {
                    v.choices()
                        .iter()
                        .filter_map(|c| {
                            let (isd, o) = add(c)?;
                            let (data, io) = load(isd)?;
                            let (script, so) = load(data)?;
                            (o == code && io == i && so == d).then_some(script.clone())
                        })
                        .filter_map(move |script| Some((in_frame(a)?, script)))
                        .flat_map(|(pc, script)| {
                            stores(r)
                                .filter(move |(_, w)| **w == script)
                                .filter_map(move |(b, _)| Some((pc, in_frame(b)?)))
                        })
                }),
            )?;
            Ok(vec![
                ("pbl_stack_fp", field),
                ("jit_frame_caller_fp", saved - fp),
                ("baseline_frame_size", size),
                ("baseline_frame_script", script),
                ("baseline_frame_pc", pc),
                ("baseline_frame_flags", flags),
                ("baseline_flag_running_in_interpreter", running),
            ])
        },
    },
    // `JSJitFrameIter::baselineScriptAndPc(scriptRes, pcRes)`: `if
    // (baselineFrame()->runningInInterpreter()) *pcRes = baselineFrame()->interpreterPC()`,
    // `baselineFrame()` being `fp() - BaselineFrame::Size()` (fp: the iterator's `current_`, a
    // field of `this`): the load below fp stored into `*pcRes` (param 2) is `interpreterPC_`,
    // the one-bit mask of a load below the same fp `flags_ & RUNNING_IN_INTERPRETER`. Both
    // offsets are from fp, so `Size()` is added.
    Rule {
        name: "baseline pc",
        function: SCRIPT_AND_PC,
        derive: |cx, r| {
            let size = cx.known("baseline_frame_size")?;
            let (fp, pc) = one(
                "load below a field of `this` stored into *pcRes",
                stores(r)
                    .filter(|(a, _)| a.base == Val::Param(2))
                    .filter_map(|(_, v)| {
                        let (fp, o) = load(v)?;
                        let (this, _) = load(fp)?;
                        (*this == Val::Param(0) && o < 0).then(|| (fp.clone(), o))
                    }),
            )?;
            let (flags, running) = one(
                "one-bit mask of a load below fp",
                r.masks.iter().filter_map(|m| match m {
                    Val::Masked(word, bit) if bit.count_ones() == 1 => {
                        let (b, o) = load(word)?;
                        (*b == fp && o < 0).then_some((o, *bit))
                    }
                    _ => None,
                }),
            )?;
            let from_frame = |o: i64| {
                Some(o + size)
                    .filter(|f| (0..size).contains(f))
                    .with_context(|| format!("{o} from fp is not in a frame of {size} bytes"))
            };
            Ok(vec![
                ("baseline_frame_pc", from_frame(pc)?),
                ("baseline_frame_flags", from_frame(flags)?),
                ("baseline_flag_running_in_interpreter", running),
            ])
        },
    },
    // The trampoline's `Stack stack(cx->portableBaselineStack())` (a local, in its frame of
    // the shadow stack) is what PBL keeps its `fp` in: its constructor copies the runtime's
    // stack's `base` and `top` into its `base` and `top`, and `top` into `fp` (SpiderMonkey
    // 140 and 153's `Stack`). The stores into the trampoline's frame of the runtime's `top`
    // are `fp`'s and `top`'s; where `fp` is (the field the interpreter sets, rule `baseline
    // frames`) places the `Stack`, the one placing that leaves no field before it.
    Rule {
        name: "the trampoline's stack",
        function: TRAMPOLINE,
        derive: |cx, r| {
            let (runtime, top, fp) = (
                cx.known("cx_runtime")?,
                cx.known("runtime_pbl_stack_top")?,
                cx.known("pbl_stack_fp")?,
            );
            let copies: Vec<(i64, bool)> = stores(r)
                .filter(|(a, _)| a.base == Val::Global(0))
                .filter_map(|(a, v)| {
                    let (from, o) = load(v)?;
                    (*from == Val::Param(0).load(runtime)).then_some((a.offset, o == top))
                })
                .collect();
            let base = one(
                "copy of the runtime's stack's base",
                copies.iter().filter(|c| !c.1).map(|c| c.0),
            )?;
            let tops: Vec<i64> = copies.iter().filter(|c| c.1).map(|c| c.0).collect();
            let [a, b] = tops[..] else {
                bail!("{} copies of the runtime's stack's top, not 2", tops.len());
            };
            let (base, top) = one(
                "placing of the stack with no field before fp",
                [(a, b), (b, a)].into_iter().filter_map(|(at_fp, at_top)| {
                    let start = at_fp - fp;
                    (base >= start && at_top >= start).then_some((base - start, at_top - start))
                }),
            )?;
            Ok(vec![("pbl_stack_base", base), ("pbl_stack_top", top)])
        },
    },
];

/// The exits of a function that calls into the VM from PBL, read straight: the stores into a
/// field of a load of `activation_` (`cx_activation`) whose value is an address where
/// `something + constant` was stored: the field is `packedExitFP_`, the constant `Size()`, and
/// where that word is from exitFP, `callerFramePtr_`. `VMFrame` then sets
/// `cx->portableBaselineStack().top = spBelowFrame()` (`exitFP - sizeof(StackValNative)`),
/// which is `runtime()->portableBaselineStack()` (vm/JSContext.h): the one store of `exitFP -
/// k` into a field of another field of the same cx gives `JSContext::runtime_`, the stack's `top`
/// in `JSRuntime`, and k. Every exit must agree.
fn exit_frames(cx: &Cx<'_, '_>) -> Result<Derived> {
    let s = cx.straight()?;
    let activation = cx.known("cx_activation")?;
    let exits = s.accesses.iter().filter_map(|a| {
        let Expr::Load("i32.load", cx, at) = &a.base else {
            return None;
        };
        let exit_fp = linear(a.value.as_ref().filter(|_| *at == activation)?);
        let (size, caller_fp) = one(
            "store of frame + Size at the exit frame",
            s.accesses.iter().filter_map(|b| {
                let Some(Expr::Op("i32.add", o)) = &b.value else {
                    return None;
                };
                let size = constant(o.get(1)?)?;
                let (terms, c) = linear(&b.base);
                (terms == exit_fp.0).then_some((size, c + b.offset - exit_fp.1))
            }),
        )
        .ok()?;
        let (runtime, top, below) = one(
            "store of exitFP - k into a field of another field of cx",
            s.accesses.iter().filter_map(|b| {
                let Expr::Load("i32.load", of, runtime) = &b.base else {
                    return None;
                };
                let (terms, c) = linear(b.value.as_ref()?);
                (of == cx && *runtime != activation && terms == exit_fp.0).then_some((
                    *runtime,
                    b.offset,
                    exit_fp.1 - c,
                ))
            }),
        )
        .ok()?;
        Some((a.offset, size, caller_fp, runtime, top, below))
    });
    let (exit_fp, size, caller_fp, runtime, top, below) = one("exit", exits)?;
    Ok(vec![
        ("jit_activation_exit_fp", exit_fp),
        ("baseline_frame_size", size),
        ("jit_frame_caller_fp", caller_fp),
        ("cx_runtime", runtime),
        ("runtime_pbl_stack_top", top),
        ("pbl_stack_top_below_exit_fp", below),
    ])
}
