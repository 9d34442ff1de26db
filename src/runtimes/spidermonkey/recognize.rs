//! SpiderMonkey recognised from a core module's own bytes, and where this binary keeps what
//! the walks need: `js::TlsContext` (the global holding the `JSContext*`) and its interpreter
//! loop, `js::Interpret`.
//!
//! 1. **Is it SpiderMonkey?** Its data holds SpiderMonkey's error messages and their names
//!    ([`MARKS`]: `JSMSG_OVER_RECURSED`, "too much recursion"); a module without both is not
//!    SpiderMonkey. This costs a walk over the section headers and a search of the data
//!    section: microseconds for a small module, a millisecond or so for a big one.
//! 2. **Which release?** The engines do not name it (`JS_GetImplementationVersion` is not
//!    linked: no "JavaScript-C…" string, nor any other), so its code says. SpiderMonkey is the
//!    same build in every StarlingMonkey engine of a release, and a function keeps the
//!    sequence of its loads and stores ([`Code::accesses`]: operators and offsets, fixed
//!    addresses as [`FIXED`]) whatever the linker did with addresses and indices. The
//!    generator (`layouts/fingerprints.rs`) took functions of ComponentizeJS's debug engine
//!    that load `js::TlsContext` and whose type and sequence every one of the package's three
//!    engines has, only in functions loading that engine's `js::TlsContext` where the debug
//!    one loads its own ([`TLS_CONTEXT`]). Here, each must be found again, every function of
//!    its type and sequence must load one fixed address where it loads `js::TlsContext`, and
//!    all fingerprints must agree: that address is this binary's `js::TlsContext`. Only
//!    functions of a fingerprint's type are read, each up to its first access that differs.
//! 3. **The interpreter loop**, `js::Interpret`, is huge and inlined differently by each build,
//!    so it is found by likeness: the one function of its type whose accesses, counted as a
//!    multiset, overlap the debug engine's ([`INTERPRETER`]) by at least [`NEAR`]
//!    (intersection over union), ahead of every other by at least [`MARGIN`], as the layout's
//!    `matching.rs` finds counterparts (88 % alike in the release engine, 97 % in the weval
//!    one; the next function of its type 17 % at most, in each of the three). Every function that could come within
//!    [`MARGIN`] of [`NEAR`] is compared: one with fewer than `NEAR - MARGIN` times the
//!    interpreter's accesses cannot, and its body (at least [`ACCESS_BYTES`] an access) says
//!    so before it is read; one read past `1 / (NEAR - MARGIN)` times as many is dropped.
//!
//! Anything else (a fingerprint found nowhere, found reading different addresses, no
//! interpreter or two alike) is [`Recognition::Unreadable`]: never a guessed address.

#[path = "fingerprints.rs"]
mod fingerprints;
#[cfg(any(test, feature = "internals"))]
#[path = "look_alike.rs"]
pub mod look_alike;
#[path = "fingerprints_reader.rs"]
mod reader;
#[cfg(test)]
#[path = "fingerprints_tests.rs"]
mod tests;

use std::collections::HashMap;
use std::ops::ControlFlow;

use wasmparser::{FuncType, ValType};

#[cfg(test)]
pub use fingerprints::FOUND;
pub use fingerprints::{INTERPRETER, PACKAGE, RELEASE, TLS_CONTEXT};
pub use reader::{Code, Scratch};

/// What a core module is to the SpiderMonkey runtime.
#[derive(Debug, PartialEq, Eq)]
pub enum Recognition {
    NotSpiderMonkey,
    /// SpiderMonkey whose frames wasmspy cannot read, and why: a warning's sentence without
    /// its end ("SpiderMonkey, but its code does not match …").
    Unreadable(String),
    Engine(Recognized),
}

/// A SpiderMonkey engine whose layout wasmspy has.
#[derive(Debug, PartialEq, Eq)]
pub struct Recognized {
    /// The SpiderMonkey release its code is ([`RELEASE`]).
    pub version: &'static str,
    /// Where this binary keeps `js::TlsContext`.
    pub tls_context: u32,
    /// The function index (imports counted) of `js::Interpret(JSContext*, js::RunState&)`.
    pub interpreter: u32,
}

/// Strings of SpiderMonkey's data every release has: an error's name in `js.msg` and its
/// message (NUL-terminated C strings).
pub const MARKS: [&[u8]; 2] = [b"JSMSG_OVER_RECURSED\0", b"too much recursion\0"];

/// The offset an access to a fixed address has in a sequence of accesses (the address itself
/// differs from binary to binary); the same as the layout's `code::ADDRESS`.
pub const FIXED: u64 = u64::MAX;

/// A load or store: its operator's name in the text format, and its offset ([`FIXED`] for a
/// fixed address).
pub type Access = (&'static str, u64);

/// The least overlap of the interpreter's accesses with the debug engine's.
pub const NEAR: f64 = 0.7;
/// How far ahead of every other function the interpreter's overlap must be.
pub const MARGIN: f64 = 0.1;
/// The fewest bytes an access takes in a body: its opcode, alignment and offset.
pub const ACCESS_BYTES: usize = 3;

/// A function of the debug engine that reads `js::TlsContext`, as found in every engine.
#[derive(Debug)]
pub struct Fingerprint {
    /// Its name in the debug engine.
    pub function: &'static str,
    pub params: &'static [ValType],
    pub results: &'static [ValType],
    /// Its loads and stores, in code order.
    pub accesses: &'static [Access],
    /// Which of them read `js::TlsContext` (fixed-address loads).
    pub reads: &'static [usize],
}

/// `js::Interpret` in the debug engine: its type, and its accesses as a multiset.
#[derive(Debug)]
pub struct Interpreter {
    pub function: &'static str,
    pub params: &'static [ValType],
    pub results: &'static [ValType],
    /// How many accesses it has.
    pub accesses: u32,
    /// Each access and how many times it occurs.
    pub bag: &'static [(&'static str, u64, u32)],
}

/// `wasm`'s SpiderMonkey, if it is one; see the module documentation.
pub fn recognize(wasm: &[u8]) -> Recognition {
    let Some(data) = data_section(wasm) else {
        return Recognition::NotSpiderMonkey;
    };
    if !MARKS
        .iter()
        .all(|m| memchr::memmem::find(data, m).is_some())
    {
        return Recognition::NotSpiderMonkey;
    }
    match find(wasm) {
        Ok((tls_context, interpreter)) => Recognition::Engine(Recognized {
            version: RELEASE,
            tls_context,
            interpreter,
        }),
        Err(why) => Recognition::Unreadable(format!(
            "SpiderMonkey, but its code does not match SpiderMonkey {RELEASE}'s as \
             ComponentizeJS {PACKAGE} builds it, whose layout wasmspy has ({why})"
        )),
    }
}

/// The data section of a core module: `None` for anything else, or a module without one.
fn data_section(wasm: &[u8]) -> Option<&[u8]> {
    let mut reader = wasmparser::BinaryReader::new(wasm.get(8..)?, 8);
    if wasm[..8] != *b"\0asm\x01\0\0\0" {
        return None;
    }
    while !reader.eof() {
        let id = reader.read_u8().ok()?;
        let size = reader.read_var_u32().ok()?;
        let bytes = reader.read_bytes(size as usize).ok()?;
        if id == 11 {
            return Some(bytes);
        }
    }
    None
}

/// `js::TlsContext`'s address and `js::Interpret`'s index in `wasm`, a SpiderMonkey module.
fn find(wasm: &[u8]) -> Result<(u32, u32), String> {
    let code = Code::parse(wasm)?;
    let mut scratch = Scratch::default();
    // For each fingerprint: how many functions have its accesses, and the addresses they read
    // where it reads js::TlsContext.
    let mut found: Vec<(usize, Vec<Option<u32>>)> = vec![(0, Vec::new()); TLS_CONTEXT.len()];
    let mut likeness = Likeness::new();
    for func in code.defined() {
        let (Some(ty), Some(body)) = (code.func_type(func), code.body(func)) else {
            continue;
        };
        let size = body.as_bytes().len();
        for (print, (count, addresses)) in TLS_CONTEXT.iter().zip(&mut found) {
            if signature_is(ty, print.params, print.results)
                && size >= ACCESS_BYTES * print.accesses.len()
            {
                if let Some(read) = code.matches(&mut scratch, func, print) {
                    *count += 1;
                    addresses.extend(read);
                }
            }
        }
        if signature_is(ty, INTERPRETER.params, INTERPRETER.results)
            && size >= ACCESS_BYTES * likeness.least
        {
            likeness.compare(&code, &mut scratch, func);
        }
    }
    let mut tls_context = None;
    for (print, (count, addresses)) in TLS_CONTEXT.iter().zip(&found) {
        let address = match addresses.first() {
            None => return Err(format!("no function is `{}`", print.function)),
            Some(Some(a)) if addresses.iter().all(|b| *b == Some(*a)) => *a,
            Some(_) => {
                return Err(format!(
                    "the {count} functions like `{}` do not read one fixed address where it \
                     reads js::TlsContext",
                    print.function
                ))
            }
        };
        match tls_context {
            Some(a) if a != address => {
                return Err(format!(
                    "the functions that read js::TlsContext disagree on its address ({a:#x}, \
                     and {address:#x} in functions like `{}`)",
                    print.function
                ))
            }
            _ => tls_context = Some(address),
        }
    }
    let tls_context = tls_context.ok_or("no function reads js::TlsContext")?;
    Ok((tls_context, likeness.best()?))
}

/// The search for `js::Interpret`: the functions whose overlap with [`INTERPRETER`]'s accesses
/// could be within [`MARGIN`] of [`NEAR`] or more.
struct Likeness {
    /// Each access of the interpreter's, by its place in [`INTERPRETER`]'s bag.
    keys: HashMap<Access, usize>,
    /// The fewest and most accesses a function may have to overlap that much.
    least: usize,
    most: usize,
    counts: Vec<u32>,
    alike: Vec<(f64, u32)>,
}

impl Likeness {
    fn new() -> Self {
        let keys = INTERPRETER
            .bag
            .iter()
            .enumerate()
            .map(|(i, (op, offset, _))| ((*op, *offset), i))
            .collect();
        let low = NEAR - MARGIN;
        let n = f64::from(INTERPRETER.accesses);
        Likeness {
            keys,
            least: (n * low).ceil() as usize,
            most: (n / low).floor() as usize,
            counts: vec![0; INTERPRETER.bag.len()],
            alike: Vec::new(),
        }
    }

    /// Counts function `func`'s accesses (up to more than [`Self::most`]), and keeps it if it
    /// is alike enough.
    fn compare(&mut self, code: &Code<'_>, scratch: &mut Scratch, func: u32) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        let (mut total, mut others) = (0, 0u32);
        let read = code.accesses(scratch, func, |access, _| {
            total += 1;
            match self.keys.get(&access) {
                Some(&i) => self.counts[i] += 1,
                None => others += 1,
            }
            match total > self.most {
                true => ControlFlow::Break(()),
                false => ControlFlow::Continue(()),
            }
        });
        if read.is_err() || total > self.most || total < self.least {
            return;
        }
        let (mut both, mut either) = (0, others);
        for (&(_, _, x), &y) in INTERPRETER.bag.iter().zip(&self.counts) {
            both += x.min(y);
            either += x.max(y);
        }
        let overlap = f64::from(both) / f64::from(either.max(1));
        if overlap >= NEAR - MARGIN {
            self.alike.push((overlap, func));
        }
    }

    /// The one function alike enough, ahead of the others.
    fn best(mut self) -> Result<u32, String> {
        self.alike.sort_by(|a, b| b.0.total_cmp(&a.0));
        let next = self.alike.get(1).map_or(0.0, |a| a.0);
        match self.alike.first() {
            Some(&(best, func)) if best >= NEAR && best - next >= MARGIN => Ok(func),
            Some(&(best, _)) => Err(format!(
                "no function is `{}` ({} alike at best, {} the next)",
                INTERPRETER.function,
                percent(best),
                percent(next)
            )),
            None => Err(format!("no function is `{}`", INTERPRETER.function)),
        }
    }
}

fn percent(x: f64) -> String {
    format!("{:.0} %", x * 100.0)
}

fn signature_is(ty: &FuncType, params: &[ValType], results: &[ValType]) -> bool {
    ty.params() == params && ty.results() == results
}
