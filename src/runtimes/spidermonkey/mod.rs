//! SpiderMonkey 147 as StarlingMonkey builds link it (ComponentizeJS, jco, Spin's and Fastly's
//! JavaScript): the JavaScript frames of the engine's own activations and frames ([`walk`]),
//! named as its stack traces name them, with the line each runs, in place of the engine's
//! Wasm frames, or each call of the interpreter loop (`js::Interpret`) replaced by the
//! JavaScript frames it runs (`--native`).
//!
//! The engine is recognised from its own bytes ([`recognize`]): the release it says it is,
//! and, from its code, where this binary keeps `js::TlsContext` (the `JSContext*`) and which
//! function is its interpreter loop. The layout its walks read ([`layouts`]) was derived from
//! the code of ComponentizeJS's debug engine and checked on its release and weval engines. An
//! engine of another release, or whose code does not match, gets one warning and keeps its
//! Wasm frames.

#[cfg(any(test, feature = "internals"))]
pub mod example;
mod layouts;
mod notes;
pub mod recognize;
mod walk;

use std::sync::Arc;

use super::interpreted::{is_function, splice_frames, CodeId};
use super::{ModuleFacts, Runtime, SpliceContext};
use crate::profile::Function;
use crate::shared::{LinearMemory, Memory, RawFrame};
use crate::warning::{Warning, WarningKind};
use recognize::{recognize, Recognition};
#[cfg(feature = "internals")]
pub use walk::ScriptCode;
use walk::NOT_A_FUNCTION;

/// A SpiderMonkey engine module.
pub struct SpiderMonkey {
    code: walk::ScriptCode,
    /// Where this binary keeps `js::TlsContext`.
    tls_context: u32,
    /// The module's function index of `js::Interpret`.
    interpreter: u32,
}

/// SpiderMonkey in `wasm`, if it is a build whose layout wasmspy has; a warning where it is
/// SpiderMonkey but its JavaScript frames cannot be read.
pub fn detect(
    file_name: &str,
    wasm: &[u8],
    _facts: &ModuleFacts<'_>,
    warnings: &mut Vec<Warning>,
) -> Option<Arc<dyn Runtime>> {
    match recognize(wasm) {
        Recognition::NotSpiderMonkey => None,
        Recognition::Unreadable(why) => {
            warnings.push(Warning::about(
                file_name,
                WarningKind::RuntimeUnreadable {
                    why: format!("{why}: samples show its Wasm functions, not JavaScript frames"),
                },
            ));
            None
        }
        Recognition::Engine(engine) => Some(Arc::new(SpiderMonkey {
            code: walk::ScriptCode::new(&layouts::LAYOUT),
            tls_context: engine.tls_context,
            interpreter: engine.interpreter,
        })),
    }
}

impl Runtime for SpiderMonkey {
    fn walks_warning(&self) -> Option<String> {
        self.code
            .counts()
            .warning("SpiderMonkey's JavaScript frames")
    }

    fn walk_memory(&self, memory: &LinearMemory, root: u32, out: &mut [usize]) -> usize {
        self.code.walk(memory, root, out)
    }

    /// `js::TlsContext`'s address: the walks read the `JSContext*` there each time (it is set
    /// once the engine made its context, in a Wizer-initialised component before it runs).
    fn root(&self, memory: &LinearMemory) -> Result<u32, String> {
        match memory.u32_at(u64::from(self.tls_context)) {
            Some(_) => Ok(self.tls_context),
            None => Err(format!(
                "SpiderMonkey: js::TlsContext ({:#x}) is outside the instance's memory",
                self.tls_context
            )),
        }
    }

    /// As [`splice_frames`] says, `js::Interpret`'s frames being the loop's.
    fn splice(&self, cx: &mut SpliceContext<'_>, words: &[usize], frames: &mut Vec<RawFrame>) {
        let interpreter = Some((cx.module, self.interpreter));
        splice_frames(cx, words, frames, |f| is_function(f, interpreter));
    }

    /// Named as SpiderMonkey's stack traces name them (the function's atom), with its file and
    /// where it starts ([`CodeName::function`](super::interpreted::CodeName::function):
    /// `fib (app.js:3:13)`). Where the traces print no name, `<anonymous>` for a function
    /// and `<top-level>` for a script's top level.
    fn function(&self, code: u32) -> Option<Function> {
        Some(match self.code.names().get(CodeId(code)) {
            Some(mut names) => {
                let is_function = names.first_column & NOT_A_FUNCTION == 0;
                names.first_column &= !NOT_A_FUNCTION;
                let name = match names.qualname.as_str() {
                    "" if is_function => "<anonymous>".to_string(),
                    "" => "<top-level>".to_string(),
                    name => name.to_string(),
                };
                names.function(name)
            }
            None => Function {
                name: "<javascript>".to_string(),
                system_name: String::new(),
                file: String::new(),
                start_line: 0,
            },
        })
    }

    fn without_dwarf(&self) -> Option<&'static str> {
        // Said after "is" (`NoDwarf`).
        Some("SpiderMonkey's engine (StarlingMonkey), without DWARF: its JavaScript frames come from the engine's state")
    }
}
