//! The generator of `../fingerprints.rs`: what run-time recognition ([`recognize`]) looks for
//! in a SpiderMonkey binary, taken from ComponentizeJS's three engines.
//!
//! - `js::TlsContext`: a function of the debug engine that loads it (its address, from
//!   `JSContext::init()`: [`addresses::named`]), its accesses read as [`Code::accesses`] reads
//!   them, is a candidate when every engine has functions of its type and accesses, and in each
//!   engine all of them load that engine's `js::TlsContext` (`generated.rs`'s [`ENGINES`])
//!   wherever it loads its own. (In these engines such functions are few, as the layout's
//!   `addresses.rs` found: the release engine inlines most of the 460 that read it. Of 5
//!   candidates, 3 are alone of their kind in every engine; the other 2 are twins: two
//!   constructors of the same code.) The layout's symbolic reading ([`Engine::read`]) of it
//!   must see the same operators, and `js::TlsContext` at the same places. Of the candidates,
//!   the [`PRINTS`] with the fewest accesses, at least [`LEAST_ACCESSES`] (a short sequence
//!   is too easily had by chance), are taken.
//! - `js::Interpret`: the debug engine's function of that name, its accesses as a multiset; in
//!   the other engines, what the layout's matching finds for it ([`Counterparts::find`]), which
//!   recognition must find too.
//!
//! The test `fingerprints_are_derived` runs this on the package's engines and compares the
//! text with `../fingerprints.rs`; the ignored test `write_fingerprints` writes it
//! (`cargo test --features internals --lib spidermonkey::layouts -- --ignored
//! write_fingerprints`).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, ensure, Context, Result};
use wasmparser::ValType;

use super::addresses;
use super::code::{Engine, Val};
use super::generate::{package, DEBUG, STRIPPED};
use super::matching::{Counterparts, Found};
use super::ENGINES;
use crate::runtimes::spidermonkey::recognize::{
    self, recognize, Access, Code, Recognition, Scratch, FIXED, NEAR,
};

/// The SpiderMonkey release ComponentizeJS 0.23.0's engines are built from, which they do not
/// carry: StarlingMonkey's `cmake/spidermonkey.cmake` fetches release
/// `FIREFOX_147_0_4_RELEASE_STARLING` (see docs/javascript.md).
const RELEASE: &str = "147.0.4";
const INTERPRET: &str = "js::Interpret(JSContext*, js::RunState&)";
/// How many fingerprints of `js::TlsContext` recognition must find in agreement.
const PRINTS: usize = 3;
/// The fewest accesses a fingerprint has.
const LEAST_ACCESSES: usize = 8;

/// A defined function's type and accesses, with the fixed addresses they use.
struct Read {
    func: u32,
    signature: (Vec<ValType>, Vec<ValType>),
    accesses: Vec<Access>,
    addresses: Vec<Option<u32>>,
}

type Signature = (Vec<ValType>, Vec<ValType>);

/// Every defined function of `code`, read.
fn read_all(code: &Code<'_>) -> Result<Vec<Read>> {
    let mut scratch = Scratch::default();
    code.defined()
        .map(|func| {
            let ty = code.func_type(func).context("a function without a type")?;
            let (mut accesses, mut addresses) = (Vec::new(), Vec::new());
            code.accesses(&mut scratch, func, |access, address| {
                accesses.push(access);
                addresses.push(address);
                std::ops::ControlFlow::Continue(())
            })
            .map_err(anyhow::Error::msg)?;
            Ok(Read {
                func,
                signature: (ty.params().to_vec(), ty.results().to_vec()),
                accesses,
                addresses,
            })
        })
        .collect()
}

/// The functions of each type and sequence of accesses.
fn by_shape(reads: &[Read]) -> HashMap<(&Signature, &[Access]), Vec<usize>> {
    let mut map: HashMap<_, Vec<usize>> = HashMap::new();
    for (i, r) in reads.iter().enumerate() {
        map.entry((&r.signature, &r.accesses[..]))
            .or_default()
            .push(i);
    }
    map
}

/// A fingerprint chosen: its function in the debug engine and in each other engine.
pub struct Print {
    name: String,
    signature: Signature,
    accesses: Vec<Access>,
    reads: Vec<usize>,
    /// The functions of its type and accesses in each engine.
    funcs: Vec<Vec<u32>>,
}

/// What recognition finds in an engine, and how the interpreter was found there.
pub struct Found1 {
    file: &'static str,
    tls_context: u32,
    interpreter: u32,
    how: String,
}

pub struct Derived {
    version: String,
    candidates: usize,
    prints: Vec<Print>,
    interpreter_signature: Signature,
    bag: BTreeMap<Access, u32>,
    found: Vec<Found1>,
}

fn package_version(package: &Path) -> Result<String> {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(package.join("package.json"))?)?;
    Ok(json["version"].as_str().context("no version")?.to_string())
}

pub fn derive(package: &Path) -> Result<Derived> {
    let files: Vec<&'static str> = std::iter::once(DEBUG).chain(STRIPPED).collect();
    let bytes: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(package.join("lib").join(f)).with_context(|| f.to_string()))
        .collect::<Result<_>>()?;
    let named = Engine::parse(&bytes[0])?;
    let tls = addresses::named(&named)?.tls_context;
    let tls_of: Vec<u32> = files
        .iter()
        .map(|f| {
            let e = ENGINES.iter().find(|e| e.file == *f);
            e.map(|e| e.tls_context).context("not in ENGINES")
        })
        .collect::<Result<_>>()?;
    ensure!(
        tls_of[0] == tls,
        "generated.rs's js::TlsContext for {DEBUG} is not {tls}"
    );
    let codes: Vec<Code<'_>> = bytes
        .iter()
        .map(|b| Code::parse(b).map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    let reads: Vec<Vec<Read>> = codes.iter().map(read_all).collect::<Result<_>>()?;
    let shapes: Vec<_> = reads.iter().map(|r| by_shape(r)).collect();
    let names: HashMap<u32, &str> = names(&bytes[0])?;

    // Candidates for js::TlsContext, fewest accesses first.
    let mut candidates = Vec::new();
    'debug: for r in &reads[0] {
        let at_tls: Vec<usize> = (0..r.accesses.len())
            .filter(|i| r.addresses[*i] == Some(tls))
            .collect();
        if at_tls.is_empty() || at_tls.iter().any(|i| !r.accesses[*i].0.contains("load")) {
            continue;
        }
        // Every function of its type and accesses, in every engine, loads js::TlsContext
        // where it does.
        let mut funcs = Vec::new();
        for (e, shapes) in shapes.iter().enumerate() {
            let Some(same) = shapes.get(&(&r.signature, &r.accesses[..])) else {
                continue 'debug;
            };
            let theirs = || same.iter().map(|i| &reads[e][*i]);
            if theirs().any(|t| at_tls.iter().any(|i| t.addresses[*i] != Some(tls_of[e]))) {
                continue 'debug;
            }
            funcs.push(theirs().map(|t| t.func).collect());
        }
        // The layout's reading sees the same accesses, and js::TlsContext where this does.
        let reading = named.read(r.func)?;
        let agree = reading.accesses.len() == r.accesses.len()
            && reading
                .accesses
                .iter()
                .zip(&r.accesses)
                .all(|(a, b)| a.op == b.0)
            && at_tls.iter().all(|i| {
                let a = &reading.accesses[*i];
                a.base == Val::Const(0) && a.offset == i64::from(tls)
            });
        ensure!(
            agree,
            "the layout's reading of `{}` differs",
            names.get(&r.func).unwrap_or(&"?")
        );
        let name = names.get(&r.func).map_or("?", |n| *n).to_string();
        candidates.push(Print {
            name,
            signature: r.signature.clone(),
            accesses: r.accesses.clone(),
            reads: at_tls,
            funcs,
        });
    }
    candidates.sort_by_key(|p| (p.accesses.len() < LEAST_ACCESSES, p.accesses.len()));
    let mut prints: Vec<Print> = Vec::new();
    let count = candidates.len();
    for p in candidates {
        let new = prints
            .iter()
            .all(|q| (&q.signature, &q.accesses) != (&p.signature, &p.accesses));
        if p.accesses.len() >= LEAST_ACCESSES && prints.len() < PRINTS && new {
            prints.push(p);
        }
    }
    ensure!(
        prints.len() == PRINTS,
        "only {} fingerprints of js::TlsContext ({count} candidates)",
        prints.len()
    );

    // js::Interpret.
    let interpret = named.named(INTERPRET)?;
    let ours = &reads[0][(interpret - codes[0].defined().start) as usize];
    let mut bag = BTreeMap::new();
    for a in &ours.accesses {
        *bag.entry(*a).or_insert(0) += 1;
    }
    let mut interpreters = vec![(interpret, "by its name".to_string())];
    for (file, b) in STRIPPED.iter().zip(&bytes[1..]) {
        let engine = Engine::parse(b)?;
        let found = Counterparts::new(&engine)?.find(&named, interpret)?;
        interpreters.push(match found {
            Found::Exact(f) => (f, "the same accesses".to_string()),
            Found::Near(f, overlap) if overlap >= NEAR => {
                (f, format!("{:.0} % alike", overlap * 100.0))
            }
            _ => bail!("{file}: js::Interpret has no counterpart ({found:?})"),
        });
    }
    let found = files
        .iter()
        .zip(tls_of)
        .zip(interpreters)
        .map(|((file, tls_context), (interpreter, how))| Found1 {
            file,
            tls_context,
            interpreter,
            how,
        })
        .collect();
    Ok(Derived {
        version: package_version(package)?,
        candidates: count,
        prints,
        interpreter_signature: ours.signature.clone(),
        bag,
        found,
    })
}

/// The debug engine's function names.
fn names(wasm: &[u8]) -> Result<HashMap<u32, &str>> {
    let mut names = HashMap::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        if let wasmparser::Payload::CustomSection(s) = payload? {
            if let wasmparser::KnownCustom::Name(reader) = s.as_known() {
                for name in reader {
                    if let wasmparser::Name::Function(map) = name? {
                        for naming in map {
                            let naming = naming?;
                            names.insert(naming.index, naming.name);
                        }
                    }
                }
            }
        }
    }
    Ok(names)
}

fn types(types: &[ValType]) -> String {
    let names: Vec<String> = types.iter().map(|t| format!("ValType::{t:?}")).collect();
    format!("&[{}]", names.join(", "))
}

fn access(op: &str, offset: u64) -> String {
    match offset {
        FIXED => format!("(\"{op}\", FIXED)"),
        o => format!("(\"{op}\", {o})"),
    }
}

/// `../fingerprints.rs`'s text.
pub fn text(d: &Derived) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "// Generated by layouts/fingerprints.rs from the engines of \
         @bytecodealliance/componentize-js {}: do not\n\
         // edit. `cargo test --features internals --lib spidermonkey::layouts -- --ignored \
         write_fingerprints`\n\
         // writes it again.\n//\n\
         // js::TlsContext: {} functions of {DEBUG} load it whose type and accesses\n\
         // every engine has, in functions that all load its own where they do; these {}\n\
         // (their functions in the debug / release / weval engines):",
        d.version,
        d.candidates,
        d.prints.len()
    )?;
    for p in &d.prints {
        let funcs: Vec<String> = p.funcs.iter().map(|f| format!("{f:?}")).collect();
        let funcs = funcs.join(" / ");
        writeln!(
            out,
            "//   `{}`: {} accesses, functions {}",
            p.name,
            p.accesses.len(),
            funcs
        )?;
    }
    writeln!(out, "// js::Interpret:")?;
    for f in &d.found {
        writeln!(
            out,
            "//   {}: function {}, {}",
            f.file, f.interpreter, f.how
        )?;
    }
    writeln!(
        out,
        "\nuse wasmparser::ValType;\n\nuse super::{{Fingerprint, Interpreter, FIXED}};\n\n\
         /// The SpiderMonkey release of these engines (StarlingMonkey's \
         `FIREFOX_147_0_4_RELEASE_STARLING`).\n\
         pub const RELEASE: &str = \"{RELEASE}\";\n\
         /// The ComponentizeJS release whose engines these fingerprints are of.\n\
         pub const PACKAGE: &str = \"{}\";\n\n\
         pub const TLS_CONTEXT: &[Fingerprint] = &[",
        d.version
    )?;
    for p in &d.prints {
        let accesses: Vec<String> = p.accesses.iter().map(|(o, f)| access(o, *f)).collect();
        let reads: Vec<String> = p.reads.iter().map(usize::to_string).collect();
        writeln!(
            out,
            "    Fingerprint {{\n        function: {:?},\n        params: {},\n        \
             results: {},\n        accesses: &[\n            {},\n        ],\n        \
             reads: &[{}],\n    }},",
            p.name,
            types(&p.signature.0),
            types(&p.signature.1),
            accesses.join(",\n            "),
            reads.join(", ")
        )?;
    }
    writeln!(
        out,
        "];\n\npub const INTERPRETER: Interpreter = Interpreter {{\n    function: {INTERPRET:?},\n    \
         params: {},\n    results: {},\n    accesses: {},\n    bag: &[",
        types(&d.interpreter_signature.0),
        types(&d.interpreter_signature.1),
        d.bag.values().sum::<u32>()
    )?;
    for ((op, offset), n) in &d.bag {
        let key = access(op, *offset);
        writeln!(out, "        ({}, {n}),", &key[1..key.len() - 1])?;
    }
    writeln!(
        out,
        "    ],\n}};\n\n/// What recognition finds in each engine of the package: its file, \
         js::TlsContext, js::Interpret.\n#[cfg(test)]\npub const FOUND: &[(&str, u32, u32)] = &["
    )?;
    for f in &d.found {
        writeln!(
            out,
            "    (\"{}\", {}, {}),",
            f.file, f.tls_context, f.interpreter
        )?;
    }
    writeln!(out, "];")?;
    Ok(out)
}

fn generated_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtimes/spidermonkey/fingerprints.rs")
}

/// Recognition, with the fingerprints in `../fingerprints.rs`, finds in each engine what the
/// generator found there.
fn check_recognition(package: &Path, d: &Derived) -> Result<()> {
    for f in &d.found {
        let wasm = std::fs::read(package.join("lib").join(f.file))?;
        let expected = Recognition::Engine(recognize::Recognized {
            version: RELEASE,
            tls_context: f.tls_context,
            interpreter: f.interpreter,
        });
        ensure!(
            recognize(&wasm) == expected,
            "{}: {:?}",
            f.file,
            recognize(&wasm)
        );
    }
    Ok(())
}

#[test]
fn fingerprints_are_derived() {
    let Some(package) = package("spidermonkey fingerprints") else {
        return;
    };
    let derived = derive(&package).unwrap_or_else(|e| panic!("{e:?}"));
    let text = text(&derived).unwrap();
    assert!(
        text == include_str!("../fingerprints.rs"),
        "fingerprints.rs is not what the generator derives now: `cargo test --features \
         internals --lib spidermonkey::layouts -- --ignored write_fingerprints` writes it again"
    );
    check_recognition(&package, &derived).unwrap_or_else(|e| panic!("{e:?}"));
}

/// The generator: writes `../fingerprints.rs`.
#[test]
#[ignore = "writes fingerprints.rs"]
fn write_fingerprints() {
    let package = package("spidermonkey fingerprints").expect("the npm package");
    let derived = derive(&package).unwrap_or_else(|e| panic!("{e:?}"));
    std::fs::write(generated_path(), text(&derived).unwrap()).unwrap();
}
