//! CPython: the Python frames of the interpreter's own frame chain ([`walk`]), laid out as the
//! module says ([`layout`]), named by their code objects with the line each runs, in place of
//! CPython's C frames (py-spy's view), or each activation of the eval loop replaced by the
//! Python frames it runs (`--native`, py-spy's `--native`).

pub(crate) mod debug_offsets;
pub mod layout;
pub(crate) mod walk;

use std::sync::{Arc, OnceLock};

use super::interpreted::{is_function, splice_frames, CodeId};
use super::{ModuleFacts, Runtime, SpliceContext};
use crate::profile::Function;
use crate::shared::{LinearMemory, ModuleId, RawFrame};
use crate::warning::{Warning, WarningKind};
use layout::PythonLayout;
use walk::PythonCode;

/// A CPython module.
pub struct CPython {
    code: PythonCode,
    /// The module and function index of its eval loop, once looked for (see
    /// [`layout::eval_loop`]).
    eval_loop: OnceLock<Option<(ModuleId, u32)>>,
}

/// A Python frame whose code object's names did not fit the table of names.
const UNKNOWN: &str = "<python>";

/// CPython in `wasm`, if it is CPython whose layout can be read; a warning where it is
/// CPython but the Python view is unavailable.
pub fn detect(
    file_name: &str,
    wasm: &[u8],
    facts: &ModuleFacts<'_>,
    warnings: &mut Vec<Warning>,
) -> Option<Arc<dyn Runtime>> {
    let unavailable = |why: &str| {
        Warning::about(
            file_name,
            WarningKind::RuntimeUnreadable {
                why: format!("CPython, but {why}: samples show its C functions, not Python frames"),
            },
        )
    };
    // Every CPython defines its eval loop, and a build with DWARF keeps its names: the DWARF
    // strings of a module whose names are known without it are not searched (0.15 ms of a
    // 2.8 MB Rust component's start). Its data still is, for `_Py_DebugOffsets`.
    let eval_loop_unnamed = facts.names_functions && !(facts.defines)("_PyEval_EvalFrameDefault");
    if eval_loop_unnamed || memchr::memmem::find(facts.debug_str, b"_PyRuntime\0").is_none() {
        // Without DWARF, CPython 3.13 and later say where they are and how they are laid out.
        return match layout_without_dwarf(wasm) {
            Some(Ok(layout)) => Some(Arc::new(CPython::new(layout))),
            Some(Err(why)) => {
                warnings.push(unavailable(&why));
                None
            }
            None => {
                if (facts.defines)("_PyEval_EvalFrameDefault") {
                    warnings.push(unavailable(
                        "without DWARF debug info or _Py_DebugOffsets (CPython 3.13 and later publish their layout there; build it with -g)",
                    ));
                }
                None
            }
        };
    }
    match PythonLayout::read(wasm) {
        Ok(Ok(layout)) => Some(Arc::new(CPython::new(layout))),
        Ok(Err(why)) => {
            warnings.push(unavailable(&why));
            None
        }
        Err(e) => {
            warnings.push(unavailable(&format!("its DWARF is unreadable ({e:#})")));
            None
        }
    }
}

/// CPython's layout in `wasm` from the `_Py_DebugOffsets` in its data (3.13 and later), where
/// it has one; why it cannot be read, for one it cannot.
pub fn layout_without_dwarf(wasm: &[u8]) -> Option<Result<PythonLayout, String>> {
    debug_offsets::find(wasm).map(|(runtime, offsets)| debug_offsets::layout(runtime, offsets))
}

impl CPython {
    pub fn new(layout: PythonLayout) -> Self {
        CPython {
            code: PythonCode::new(layout),
            eval_loop: OnceLock::new(),
        }
    }
}

impl Runtime for CPython {
    fn walk_memory(&self, memory: &LinearMemory, _root: u32, out: &mut [usize]) -> usize {
        self.code.walk(memory, out)
    }

    /// As [`splice_frames`] says, the eval loop's frames being the loop's.
    fn splice(&self, cx: &mut SpliceContext<'_>, words: &[usize], frames: &mut Vec<RawFrame>) {
        let eval = cx.native.then(|| {
            *self.eval_loop.get_or_init(|| {
                cx.code.iter().find_map(|(module, wasm)| {
                    let eval = layout::eval_loop(wasm).ok().flatten()?;
                    Some((*module, eval))
                })
            })
        });
        splice_frames(cx, words, frames, |f| is_function(f, eval.flatten()));
    }

    /// Qualified names repeat across files (`<module>`, `main`, `__init__`) and within one
    /// (`<lambda>`, `<genexpr>`), and pprof's views merge functions by name, so the name says
    /// the file and first line too (`main (app.py:30)`, [`CodeName::function`](super::interpreted::CodeName::function)); the
    /// qualified name alone is its system name.
    fn function(&self, code: u32) -> Option<Function> {
        Some(match self.code.names().get(CodeId(code)) {
            Some(name) => {
                let qualname = name.qualname.clone();
                name.function(qualname)
            }
            None => Function {
                name: UNKNOWN.to_string(),
                system_name: String::new(),
                file: String::new(),
                start_line: 0,
            },
        })
    }

    fn walks_warning(&self) -> Option<String> {
        self.code
            .counts()
            .warning("the Python interpreter's frames")
    }

    fn with_unreadable_dwarf(&self) -> Option<&'static str> {
        // Its Python frames do not come from its DWARF: only its C frames (before Python
        // runs, with `--native`) lack their lines.
        Some("its C functions are named, without file:line (its Python frames come from the interpreter's state)")
    }
}
