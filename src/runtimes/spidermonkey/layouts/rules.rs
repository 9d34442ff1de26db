//! The rules that read SpiderMonkey's layout from the code of the debug engine's named
//! functions, each offset from the loads and stores of one function, and the check of every
//! rule in the engines without names (see [`super::matching`] for how their functions are
//! found).
//!
//! Each rule names the function it reads and says, in its comment, which accesses it takes
//! and why they are the field it says (the source is SpiderMonkey 140's and 153's, whose
//! structures 147 shares: vm/Activation.h, vm/Stack.h, vm/JSScript.h, vm/SharedStencil.h,
//! js/public/shadow/String.h). A rule fails, naming itself, unless what it looks for is
//! there and gives one answer; a field two rules derive must get the same value from both.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

use super::code::{Access, Engine, Reading, Val};
use super::matching::{Counterparts, Found};
use super::straight::{self, Straight};
use super::{rules_pbl, rules_script};

/// The fields derived so far, with the rule that derived each first.
pub type Fields = BTreeMap<&'static str, (i64, &'static str)>;

/// What a rule derives: fields and their values.
pub(super) type Derived = Vec<(&'static str, i64)>;

/// A rule: the function it reads, and how.
pub struct Rule {
    pub name: &'static str,
    pub function: &'static str,
    pub(super) derive: fn(&Cx<'_, '_>, &Reading) -> Result<Derived>,
}

/// What a rule may ask beyond its function's code.
pub struct Cx<'a, 'e> {
    fields: &'a Fields,
    /// The named engine's fields, for a rule whose input another rule (not checked in this
    /// engine) derives.
    reference: Option<&'a Fields>,
    callee: &'a dyn Fn(&str) -> Result<Option<u32>>,
    /// The engine, and the rule's function in it.
    engine: &'a Engine<'e>,
    func: u32,
}

impl Cx<'_, '_> {
    /// The function called `name` (in the named engine's `name` section), if found here.
    pub(super) fn callee(&self, name: &str) -> Result<Option<u32>> {
        (self.callee)(name)
    }

    /// The rule's function read straight ([`straight`]).
    pub(super) fn straight(&self) -> Result<Straight> {
        straight::read(self.engine, self.func)
    }

    pub(super) fn known(&self, field: &str) -> Result<i64> {
        self.fields
            .get(field)
            .or_else(|| self.reference?.get(field))
            .map(|(v, _)| *v)
            .with_context(|| format!("needs `{field}`, which no earlier rule derived"))
    }
}

/// The one value of `items`, or an error saying how many there were.
pub(super) fn one<T: PartialEq + std::fmt::Debug>(
    what: &str,
    items: impl IntoIterator<Item = T>,
) -> Result<T> {
    let mut distinct: Vec<T> = Vec::new();
    for item in items {
        if !distinct.contains(&item) {
            distinct.push(item);
        }
    }
    match distinct.len() {
        1 => Ok(distinct.remove(0)),
        0 => bail!("no {what}"),
        _ => bail!("{} different {what}: {distinct:?}", distinct.len()),
    }
}

pub(super) fn stores(r: &Reading) -> impl Iterator<Item = (&Access, &Val)> {
    r.accesses
        .iter()
        .filter_map(|a| Some((a, a.value.as_ref()?)))
}

/// The one 64-bit Value read from an object a field of the script (parameter `script`) points
/// to: (the field's offset, the Value's offset in that object).
fn value_of_a_field(r: &Reading, script: u32) -> Result<(i64, i64)> {
    one(
        "i64.load from a field of the script",
        r.accesses
            .iter()
            .filter(|a| a.op == "i64.load")
            .filter_map(|a| {
                let (base, o) = load(&a.base)?;
                (*base == Val::Param(script)).then_some((o, a.offset))
            }),
    )
}

/// `v` as a load: its address's base and offset.
pub(super) fn load(v: &Val) -> Option<(&Val, i64)> {
    match v {
        Val::Load(base, offset) => Some((base, *offset)),
        _ => None,
    }
}

/// `v` as `base + offset`.
pub(super) fn add(v: &Val) -> Option<(&Val, i64)> {
    match v {
        Val::Add(base, offset) => Some((base, *offset)),
        _ => None,
    }
}

/// Whether `v` is a load of a load of ... `depth` deep from `root`: the offsets, outermost
/// last.
fn chain(v: &Val, root: &Val, depth: usize) -> Option<Vec<i64>> {
    let mut offsets = Vec::new();
    let mut v = v;
    while v != root {
        let (base, offset) = load(v)?;
        offsets.push(offset);
        v = base;
    }
    offsets.reverse();
    (offsets.len() == depth).then_some(offsets)
}

/// `script->immutableScriptData()` of `script`, given the two offsets.
fn isd(script: &Val, shared_data: i64, isd: i64) -> Val {
    script.load(shared_data).load(isd)
}

/// The functions the rules read, as the debug engine's `name` section names them.
const JIT_ACTIVATION: &str = "js::jit::JitActivation::JitActivation(JSContext*)";
const INTERPRET: &str = "js::Interpret(JSContext*, js::RunState&)";
const PUSH_EXECUTE_FRAME: &str = "js::InterpreterStack::pushExecuteFrame(JSContext*, JS::Handle<JSScript*>, JS::Handle<JSObject*>, js::AbstractFramePtr)";
const PROFILER_ENTER: &str = "js::GeckoProfilerThread::enter(JSContext*, JSScript*)";
const SCRIPT_FILENAME: &str = "JS::ubi::Concrete<js::BaseScript>::scriptFilename() const";
const SET_FILENAME: &str = "js::ScriptSource::setFilename(js::FrontendContext*, std::__2::unique_ptr<char [], JS::FreePolicy>&&)";
const COMPUTE_LINE: &str = "js::FrameIter::computeLine(JS::TaggedColumnNumberOneOrigin*) const";
const COPY_STRING_CHARS: &str = "JS_CopyStringCharsZ(JSContext*, JSString*)";
const ALLOC_PROFILE_STRING: &str =
    "js::GeckoProfilerRuntime::allocProfileString(JSContext*, js::BaseScript*)";
const DISPLAY_NAME: &str = "bool js::DebuggerScript::CallData::ToNative<&js::DebuggerScript::CallData::getDisplayName()>(JSContext*, unsigned int, JS::Value*)";
pub const PC_TO_LINE_NUMBER: &str = "js::PCToLineNumber(unsigned int, JS::LimitedColumnNumberOneOrigin, js::SrcNote*, js::SrcNote*, unsigned char*, unsigned char*, JS::LimitedColumnNumberOneOrigin*)";

/// The rules, in the order they run (a rule may use the fields of those before it).
pub const RULES: &[Rule] = &[
    // `Activation::Activation(cx, Jit)`, inlined: `prev_(cx->activation_)`, and
    // `prevProfiling_(prev_ ? prev_->mostRecentProfiling() : nullptr)` reads the previous
    // activation; at the end `cx->activation_ = this`. JitActivation does the same with
    // `cx->jitActivation` (`prevJitActivation_`), whose previous one it does not read. So:
    // the field of cx (param 1) that is saved into `this` (param 0) and then set to `this`,
    // and whose saved value is read from, is `JSContext::activation_`; where it is saved,
    // `Activation::prev_`. `kind_(Jit)`: the one i32.store of the constant 1 into `this`.
    Rule {
        name: "activation",
        function: JIT_ACTIVATION,
        derive: |_, r| {
            let (this, cx) = (Val::Param(0), Val::Param(1));
            let (cx_field, prev) = one(
                "field of cx saved into `this`, set to `this` and read from",
                stores(r)
                    .filter(|(a, v)| a.base == cx && **v == this)
                    .filter_map(|(a, _)| {
                        let saved = cx.load(a.offset);
                        let read = r.accesses.iter().any(|b| b.base == saved);
                        let at = stores(r)
                            .find(|(b, v)| b.base == this && **v == saved)?
                            .0
                            .offset;
                        read.then_some((a.offset, at))
                    }),
            )?;
            let kind = one(
                "i32.store of 1 (Jit) into `this`",
                stores(r)
                    .filter(|(a, v)| a.op == "i32.store" && a.base == this && **v == Val::Const(1))
                    .map(|(a, _)| a.offset),
            )?;
            Ok(vec![
                ("cx_activation", cx_field),
                ("activation_prev", prev),
                ("activation_kind", kind),
                ("activation_kind_jit", 1),
            ])
        },
    },
    // `js::Interpret` keeps its `InterpreterActivation` on the stack (at `sp + a`):
    // `cx->activation_ = &activation` is the store into cx (param 0) at `activation_` of a
    // stack address. Its constructor stores `kind_ = Interpreter`, then
    // `regs_.prepareToRun(*entryFrame, script)`: `pc = script->code()`, the one store into
    // the activation of `script->sharedData_->isd_ + code` (`ImmutableScriptData`'s code
    // follows its header). Returning from an inline frame, `REGS.popInlineFrame()` does
    // `pc = fp_->prevpc(); fp_ = fp_->prev()`: the one field of the activation given a load
    // from the frame it points to is `regs_.fp_`, that load's offset `prev_`; the load from
    // that frame stored into `regs_.pc` is `prevpc_`. Whether a return leaves the
    // activation is `REGS.fp() == activation.entryFrame()`: the field compared with
    // `regs_.fp_` is `entryFrame_`. And `fp->script()->immutableScriptData()`, read often,
    // is three loads from the frame: the first is `InterpreterFrame::script_`.
    Rule {
        name: "interpreter",
        function: INTERPRET,
        derive: |cx, r| {
            let sp = Val::Global(0);
            let cx_activation = cx.known("cx_activation")?;
            let activation = one(
                "store of a stack address into cx->activation_",
                stores(r)
                    .filter(|(a, _)| a.base == Val::Param(0) && a.offset == cx_activation)
                    .filter_map(|(_, v)| add(v).filter(|(b, _)| **b == sp).map(|(_, o)| o)),
            )?;
            // The activation's fields: stores to `sp + activation + field`, field < 128.
            let field = |a: &Access| {
                (a.base == sp)
                    .then(|| a.offset - activation)
                    .filter(|f| (0..128).contains(f))
            };
            let in_activation = || stores(r).filter_map(|(a, v)| Some((field(a)?, v)));
            let kind_at = cx.known("activation_kind")?;
            let kind = one(
                "constant stored at the activation's kind_",
                in_activation()
                    .filter(|(f, _)| *f == kind_at)
                    .filter_map(|(_, v)| match v {
                        Val::Const(k) => Some(*k),
                        _ => None,
                    }),
            )?;
            let (pc, shared_data, isd_at, code) = one(
                "store of script->code() into the activation",
                in_activation().flat_map(|(f, v)| {
                    v.choices().iter().filter_map(move |c| {
                        let (x, code) = add(c)?;
                        let (y, isd_at) = load(x)?;
                        let (_, shared_data) = load(y)?;
                        Some((f, shared_data, isd_at, code))
                    })
                }),
            )?;
            let current = |fp: i64| sp.load(activation + fp);
            let (fp, prev) = one(
                "field of the activation given a load from the frame it points to",
                in_activation().filter_map(|(f, v)| {
                    load(v)
                        .filter(|(b, _)| **b == current(f))
                        .map(|(_, o)| (f, o))
                }),
            )?;
            let current = current(fp);
            let prevpc = one(
                "load from the frame stored into regs_.pc",
                in_activation()
                    .filter(|(f, _)| *f == pc)
                    .filter_map(|(_, v)| load(v).filter(|(b, _)| **b == current).map(|(_, o)| o)),
            )?;
            let entry = one(
                "field of the activation compared with regs_.fp_",
                r.compares.iter().filter_map(|(a, b)| {
                    let other = if *a == current {
                        b
                    } else if *b == current {
                        a
                    } else {
                        return None;
                    };
                    load(other)
                        .filter(|(base, _)| **base == sp)
                        .map(|(_, o)| o - activation)
                        .filter(|f| *f != fp)
                }),
            )?;
            let script = one(
                "load of fp->script()->sharedData_->isd_",
                r.accesses.iter().filter_map(|a| {
                    let (x, i) = load(&a.base)?;
                    let (y, d) = load(x)?;
                    let (z, s) = load(y)?;
                    (*z == current && d == shared_data && i == isd_at).then_some(s)
                }),
            )?;
            Ok(vec![
                ("activation_kind_interpreter", kind),
                ("interpreter_regs_pc", pc),
                ("interpreter_regs_fp", fp),
                ("interpreter_entry_frame", entry),
                ("frame_script", script),
                ("frame_prev", prev),
                ("frame_prevpc", prevpc),
                ("script_shared_data", shared_data),
                ("shared_data_isd", isd_at),
                ("isd_code", code),
            ])
        },
    },
    // `InterpreterStack::pushExecuteFrame` inlines `InterpreterFrame::initExecuteFrame`:
    // `flags_ = 0`, `script_ = script`, ..., then `if (script->isDebuggee()) setIsDebuggee()`:
    // the one i32.store of `*script` (param 2, a handle) into the new frame is at `script_`;
    // the one i32.store of the constant 64 (`DEBUGGEE`) is at `flags_`, which also gets 0.
    Rule {
        name: "frame flags",
        function: PUSH_EXECUTE_FRAME,
        derive: |_, r| {
            let i32_stores = |value: Val| {
                stores(r)
                    .filter(move |(a, v)| a.op == "i32.store" && **v == value)
                    .map(|(a, _)| a)
            };
            let script = one(
                "i32.store of *script",
                i32_stores(Val::Param(2).load(0)).map(|a| a.offset),
            )?;
            let flag = one("i32.store of DEBUGGEE (64)", i32_stores(Val::Const(64)))?;
            if !i32_stores(Val::Const(0)).any(|a| a.base == flag.base && a.offset == flag.offset) {
                bail!("no i32.store of 0 where DEBUGGEE is stored");
            }
            Ok(vec![("frame_script", script), ("frame_flags", flag.offset)])
        },
    },
    // `GeckoProfilerThread::enter(cx, script)` pushes a frame with
    // `script->scriptSource()->id()`: `scriptSource()` is `sourceObject_`'s reserved slot
    // `SOURCE_SLOT`, a PrivateValue, read as 64 bits: the one i64.load from a field of the
    // script (param 2). Its base's offset is `BaseScript::sourceObject_`; its own, the slot's.
    Rule {
        name: "script source",
        function: PROFILER_ENTER,
        derive: |_, r| {
            let (source_object, slot) = value_of_a_field(r, 2)?;
            Ok(vec![
                ("script_source_object", source_object),
                ("source_object_source", slot),
            ])
        },
    },
    // `ubi::Concrete<BaseScript>::scriptFilename()` is `get().filename()`:
    // `ptr->sourceObject_` → its source slot (the ScriptSource's address in the low word) →
    // `filename_` (a `SharedImmutableString`, a pointer to its box) → the box's chars: the
    // one access four loads deep from `this` (param 0); the first load is `ubi::Base::ptr`.
    Rule {
        name: "filename",
        function: SCRIPT_FILENAME,
        derive: |_, r| {
            let offsets = one(
                "access four loads deep from `this`",
                r.accesses.iter().filter_map(|a| {
                    let mut c = chain(&a.base, &Val::Param(0), 4)?;
                    c.push(a.offset);
                    Some(c)
                }),
            )?;
            Ok(vec![
                ("script_source_object", offsets[1]),
                ("source_object_source", offsets[2]),
                ("source_filename", offsets[3]),
                ("filename_chars", offsets[4]),
            ])
        },
    },
    // `ScriptSource::setFilename` assigns `filename_` a new `SharedImmutableString`: the old
    // box's reference count is decremented (a store into `Load(this + F) + n` of itself
    // minus 1) and `this + F` is stored the new box. F is `ScriptSource::filename_`.
    Rule {
        name: "set filename",
        function: SET_FILENAME,
        derive: |_, r| {
            let this = Val::Param(0);
            let field = one(
                "field of `this` whose box is released, then replaced",
                stores(r).filter_map(|(a, v)| {
                    let (_, f) = load(&a.base).filter(|(b, _)| **b == this)?;
                    let released = *v == a.base.load(a.offset).plus(-1);
                    let replaced = stores(r).any(|(b, _)| b.base == this && b.offset == f);
                    (released && replaced).then_some(f)
                }),
            )?;
            Ok(vec![("source_filename", field)])
        },
    },
    // `FrameIter::computeLine` calls `PCToLineNumber(script->lineno(), script->column(),
    // script->notes(), script->notesEnd(), script->code(), pc, &column)`: its arguments 0 and
    // 1 are loads from the script (`lineno`, `column` of `BaseScript::extent_`), argument 4
    // is `isd + code` (isd = `script->sharedData_->isd_`), and argument 2, the notes, which
    // follow the code, is `isd + codeLength_ + code`: `codeLength_` is the load from isd
    // added there. Argument 3, `notesEnd()`, gives where the notes end
    // ([`rules_script::notes_end`]).
    Rule {
        name: "line numbers",
        function: COMPUTE_LINE,
        derive: |cx, r| {
            let callee = cx
                .callee(PC_TO_LINE_NUMBER)?
                .context("js::PCToLineNumber not found")?;
            let args = one(
                "call of js::PCToLineNumber",
                r.calls.iter().filter(|c| c.func == callee).map(|c| &c.args),
            )?;
            let arg = |i: usize| args.get(i).with_context(|| format!("no argument {i}"));
            let (script, lineno) = load(arg(0)?).context("argument 0 is not a load")?;
            let column = load(arg(1)?)
                .filter(|(s, _)| *s == script)
                .context("argument 1 is not a load from the script")?
                .1;
            let (code_isd, code) = add(arg(4)?).context("argument 4 is not isd + code")?;
            let (d, i) = match chain(code_isd, script, 2).as_deref() {
                Some([d, i]) => (*d, *i),
                _ => bail!("argument 4 is not script->sharedData_->isd_ + code"),
            };
            let isd = isd(script, d, i);
            let code_length = match arg(2)? {
                Val::Add(sum, c) if *c == code => match &**sum {
                    Val::Sum(a, b) if **a == isd => {
                        load(b).filter(|(base, _)| **base == isd).map(|(_, o)| o)
                    }
                    _ => None,
                },
                _ => None,
            };
            let mut derived = vec![
                ("script_lineno", lineno),
                ("script_column", column),
                ("script_shared_data", d),
                ("shared_data_isd", i),
                ("isd_code", code),
                (
                    "isd_code_length",
                    code_length.context("argument 2 is not isd + codeLength_ + code")?,
                ),
            ];
            derived.extend(rules_script::notes_end(cx, callee, (lineno, d, i, code))?);
            Ok(derived)
        },
    },
    // `JS_CopyStringCharsZ` copies a linear string's chars: `latin1Chars()`/`twoByteChars()`
    // are `isInline() ? d.inlineStorage : d.s.u2.nonInlineChars`, a select between the
    // string's own address plus K and the pointer stored there, on `flags & INLINE_CHARS_BIT`
    // (flags: the load at F). The copy is chosen by `hasLatin1Chars()`: the other single-bit
    // mask of the same flags word. The one other field it reads is `length()`.
    Rule {
        name: "strings",
        function: COPY_STRING_CHARS,
        derive: |_, r| {
            let (string, flags, inline_bit, chars) = one(
                "select between a string's inline and out-of-line chars",
                r.choices.iter().filter_map(|c| {
                    let Val::Masked(word, bit) = &c.cond else {
                        return None;
                    };
                    let (s, flags) = load(word)?;
                    let (s2, chars) = add(&c.if_set)?;
                    (s2 == s && c.if_clear == s.load(chars))
                        .then(|| (s.clone(), flags, *bit, chars))
                }),
            )?;
            let word = string.load(flags);
            let latin1 = one(
                "other one-bit mask of the flags",
                r.masks.iter().filter_map(|m| match m {
                    Val::Masked(w, bit)
                        if **w == word && *bit != inline_bit && bit.count_ones() == 1 =>
                    {
                        Some(*bit)
                    }
                    _ => None,
                }),
            )?;
            let length = one(
                "other field of the string read",
                r.accesses
                    .iter()
                    .filter(|a| {
                        a.op == "i32.load"
                            && a.base == string
                            && ![flags, chars].contains(&a.offset)
                    })
                    .map(|a| a.offset),
            )?;
            Ok(vec![
                ("string_flags", flags),
                ("string_length", length),
                ("string_chars", chars),
                ("string_inline_bit", inline_bit),
                ("string_latin1_bit", latin1),
            ])
        },
    },
    // `GeckoProfilerRuntime::allocProfileString(cx, script)` names the script's function:
    // `script->function()->fullDisplayAtom()`, the `AtomSlot` Value read as 64 bits. The one
    // i64.load from a field of the script (param 1): that field is `BaseScript::function_`
    // (`functionOrGlobal_`), the load's offset the function's atom slot.
    Rule {
        name: "function name",
        function: ALLOC_PROFILE_STRING,
        derive: |_, r| {
            let (function, atom) = value_of_a_field(r, 1)?;
            Ok(vec![("script_function", function), ("function_atom", atom)])
        },
    },
    // `Debugger.Script.prototype.displayName`: `script->function()->fullDisplayAtom()` again,
    // the script taken from a handle: the one i64.load two loads deep from a handle's
    // referent, `Load(Load(handle) + function_) + atom`.
    Rule {
        name: "display name",
        function: DISPLAY_NAME,
        derive: |_, r| {
            let (function, atom) = one(
                "i64.load two loads deep from a handle",
                r.accesses
                    .iter()
                    .filter(|a| a.op == "i64.load")
                    .filter_map(|a| {
                        let (script, f) = load(&a.base)?;
                        let (_, zero) = load(script)?;
                        (zero == 0 && f != 0).then_some((f, a.offset))
                    }),
            )?;
            Ok(vec![("script_function", function), ("function_atom", atom)])
        },
    },
];

/// Every rule, in the order they run: these, then [`rules_script`]'s, then [`rules_pbl`]'s.
pub fn all() -> impl Iterator<Item = &'static Rule> {
    RULES
        .iter()
        .chain(rules_script::RULES)
        .chain(rules_pbl::RULES)
}

/// What the rules found in one engine: the fields, and for each rule how its function was
/// found (in the named engine, by name: [`Found::Exact`] of itself).
pub struct Outcome {
    pub fields: Fields,
    pub rules: Vec<(&'static str, Found)>,
}

/// Runs the rules on `engine`: the named engine (`via` `None`), or one whose functions are the
/// counterparts of the named engine's, checked against `reference`, the named engine's fields.
pub fn run(
    engine: &Engine<'_>,
    via: Option<(&Engine<'_>, &Counterparts)>,
    reference: Option<&Fields>,
) -> Result<Outcome> {
    let lookup = |name: &str| -> Result<Found> {
        match via {
            None => Ok(Found::Exact(engine.named(name)?)),
            Some((named, counterparts)) => counterparts.find(named, named.named(name)?),
        }
    };
    let callee = |name: &str| Ok(lookup(name)?.func());
    let mut fields = Fields::new();
    let mut rules = Vec::new();
    for rule in all() {
        let found = lookup(rule.function).with_context(|| format!("rule `{}`", rule.name))?;
        rules.push((rule.name, found));
        let Some(func) = found.func() else { continue };
        let reading = engine.read(func)?;
        let cx = Cx {
            fields: &fields,
            reference,
            callee: &callee,
            engine,
            func,
        };
        let derived = (rule.derive)(&cx, &reading)
            .with_context(|| format!("rule `{}` (in `{}`)", rule.name, rule.function))?;
        for (field, value) in derived {
            if let Some((before, by)) = fields.get(field).or_else(|| reference?.get(field)) {
                if *before != value {
                    bail!(
                        "rule `{}` gives {field} = {value}, but rule `{by}` gave {before}",
                        rule.name
                    );
                }
            }
            fields.entry(field).or_insert((value, rule.name));
        }
    }
    Ok(Outcome { fields, rules })
}
