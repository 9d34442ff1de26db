//! Where each engine keeps the `JSContext*`: in globals of linear memory, at addresses the
//! linker chose for that binary.
//!
//! - StarlingMonkey's `CONTEXT`: in the debug engine, `api::Engine::cx()` is `return CONTEXT;`,
//!   its one access a load from that address. Only StarlingMonkey's own code reads it, and the
//!   debug engine compiles that code differently (it is "debug" there only), so its functions
//!   have no true counterparts in the other engines, only lookalikes: in the release engine,
//!   four functions that look like debug ones reading `CONTEXT` read 2391244, a fifth reads
//!   another address. It is not derived for them.
//! - SpiderMonkey's `js::TlsContext` (a plain global in a build without threads), which holds
//!   the same pointer: `JS_NewContext` → `JSContext::init()`, which begins with
//!   `TlsContext.set(this)`, its one store of `this` (param 0) to a fixed address. Some 460
//!   functions of the engine read it (its write barriers check it), and SpiderMonkey is the
//!   same build in the three engines: in an engine without names, the counterparts (exact
//!   ones, so that accesses correspond one to one; see [`super::matching`]) of the debug
//!   engine's functions that read it read it at the same position. Every one must agree;
//!   [`ENOUGH`] of them are taken.

use anyhow::{bail, Context, Result};
use wasmparser::Operator;

use super::code::{Access, Engine, Val};
use super::matching::{Counterparts, Found};

pub const ENGINE_CX: &str = "api::Engine::cx()";
pub const CONTEXT_INIT: &str = "JSContext::init()";

/// How many functions must agree on an address found by correspondence, at most (the more,
/// the longer the search takes).
const ENOUGH: usize = 8;

/// An engine's fixed addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Addresses {
    /// `CONTEXT`, in the named engine only.
    pub context: Option<u32>,
    pub tls_context: u32,
    /// How many functions gave `tls_context` (1 in the named engine: `JSContext::init()`).
    pub tls_context_functions: usize,
}

/// The addresses in the named engine, read from its functions.
pub fn named(engine: &Engine<'_>) -> Result<Addresses> {
    let cx = engine.read(engine.named(ENGINE_CX)?)?;
    let context = match &cx.accesses[..] {
        [a] if a.op == "i32.load" && a.base == Val::Const(0) => a.offset,
        _ => bail!("`{ENGINE_CX}` is not one load from a fixed address"),
    };
    let init = engine.read(engine.named(CONTEXT_INIT)?)?;
    let mut tls = init.accesses.iter().filter(|a| {
        a.op == "i32.store" && a.base == Val::Const(0) && a.value == Some(Val::Param(0))
    });
    let tls_context = match (tls.next(), tls.next()) {
        (Some(a), None) => a.offset,
        _ => bail!("`{CONTEXT_INIT}` has not one store of `this` to a fixed address"),
    };
    Ok(Addresses {
        context: Some(address(context)?),
        tls_context: address(tls_context)?,
        tls_context_functions: 1,
    })
}

fn address(offset: i64) -> Result<u32> {
    u32::try_from(offset).with_context(|| format!("{offset} is no address"))
}

/// The addresses in `engine`, an engine without names, by correspondence with `named`'s.
pub fn corresponding(
    named: &Engine<'_>,
    in_named: &Addresses,
    engine: &Engine<'_>,
    counterparts: &Counterparts,
) -> Result<Addresses> {
    let tls = in_named.tls_context;
    let mut found: Vec<(u32, i64)> = Vec::new();
    for func in named.defined() {
        if found.len() >= ENOUGH {
            break;
        }
        let mentions = named.operators(func)?.iter().any(|op| match op {
            Operator::I32Const { value } => *value as u32 == tls,
            _ => super::code::memory_op(op).is_some_and(|(_, arg, _)| arg.offset == u64::from(tls)),
        });
        if !mentions {
            continue;
        }
        let ours = named.read(func)?;
        let reads = |a: &&Access| a.base == Val::Const(0) && a.offset == i64::from(tls);
        if !ours.accesses.iter().any(|a| reads(&a)) {
            continue;
        }
        let Found::Exact(counterpart) = counterparts.find(named, func)? else {
            continue;
        };
        let theirs = engine.read(counterpart)?;
        let addresses: Vec<i64> = ours
            .accesses
            .iter()
            .zip(&theirs.accesses)
            .filter(|(a, _)| reads(a))
            .map(|(a, b)| {
                if b.base == Val::Const(0) && b.op == a.op {
                    b.offset
                } else {
                    -1
                }
            })
            .collect();
        let one = addresses[0];
        if addresses.iter().any(|a| *a != one) || one < 0 {
            bail!(
                "function {counterpart}, the counterpart of {func}, does not read one fixed \
                 address where it reads js::TlsContext"
            );
        }
        found.push((counterpart, one));
    }
    let Some(&(_, first)) = found.first() else {
        bail!("no function of the engine corresponds to one that reads js::TlsContext");
    };
    if let Some((f, other)) = found.iter().find(|(_, a)| *a != first) {
        bail!("the functions disagree on js::TlsContext: {first}, and {other} in function {f}");
    }
    Ok(Addresses {
        context: None,
        tls_context: address(first)?,
        tls_context_functions: found.len(),
    })
}
