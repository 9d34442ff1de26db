//! The SpiderMonkey look-alike of `tests/hostile.rs`: the guest of `guest.rs` with
//! SpiderMonkey's marks, code made from recognition's fingerprints and the engine's state.

use super::guest::{guest, module_functions, LookAlike, ENTER};

/// How a SpiderMonkey look-alike's code is made from recognition's fingerprints.
#[derive(Clone, Copy, Debug)]
pub enum SpiderMonkeyCode {
    /// Alike: recognised.
    Alike,
    /// One function that reads `js::TlsContext` reads the word after it.
    ReadersDisagree,
    /// No function alike enough to `js::Interpret` (`_start` calls the rewrites itself).
    NoInterpreter,
}

/// The SpiderMonkey look-alike: a module with SpiderMonkey's marks in its data and, made from
/// recognition's fingerprints (as `code` says), functions that read its `js::TlsContext` and
/// one alike enough to `js::Interpret`, which runs the rewrites (so `--native` has the
/// interpreter's frame to replace). Its state is the walk's examples in one (`internals::
/// spidermonkey_state`): `fib` recursing under `run` in the portable baseline interpreter (a
/// JIT activation: its frames found through the trampoline's `Stack`), in the C++
/// interpreter's activation (the same again), in an outer one (`run`). The words the walk
/// follows are rewritten (the context, its runtime and activations, their kinds, links and
/// registers, the PBL stack's top and `Stack`, the PBL frames' headers and `BaselineFrame`s,
/// the interpreter frames' scripts, links and pcs, the scripts' data, bytecode lengths and
/// functions, the names' lengths), a frame's link may be set to any of both stacks' frames,
/// and all is restored every 16 rewrites, then left whole while 64 values are drawn: each of
/// those words matters to the walk (unlike most words of the other look-alikes' arenas), so
/// a walk that checks out needs a state few rewrites old, which without that pause walks met
/// whole in 1 % of the samples (some 30 % with it). The module, and the functions a profile
/// may name of it.
pub fn spidermonkey_look_alike(code: SpiderMonkeyCode) -> (Vec<u8>, Vec<String>) {
    use wasmspy::internals::runtimes::spidermonkey::recognize::{look_alike, MARKS, TLS_CONTEXT};
    let state = wasmspy::internals::spidermonkey_state();
    let mut tls_context = vec![state.tls_context; TLS_CONTEXT.len()];
    if let SpiderMonkeyCode::ReadersDisagree = code {
        tls_context[0] += 4;
    }
    let mut functions = look_alike::tls_context_readers(&tls_context);
    let interpreter = !matches!(code, SpiderMonkeyCode::NoInterpreter);
    // Function 2 is `$rewrites`; the look-alike's functions are declared after it.
    if interpreter {
        functions.push(look_alike::interpreter(vec![
            wasm_encoder::Instruction::Call(2),
        ]));
    }
    let types = |types: &[wasmparser::ValType]| -> String {
        types.iter().map(|t| format!(" {t}")).collect()
    };
    let declared: String = functions
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (params, results) = (types(&f.params), types(&f.results));
            format!("(func $sm_{i} (param{params}) (result{results}) unreachable)\n")
        })
        .collect();
    let (start, end) = (state.arena.start, state.arena.end);
    // The state (from 0x100) in the first page; its copy at 0x10000, the tables of the words
    // rewritten and of the PBL frames after it, then the marks: in the second.
    let (template, marks) = (0x10000, 0x1F000);
    let tables = 4 * (state.links.len() + state.pbl_frames.len()) as u32;
    assert!(end <= template && template + (end - start) + tables <= marks);
    let look_alike = LookAlike {
        data: vec![(marks, MARKS.concat())],
        custom: Vec::new(),
        arena: start,
        state: state.image[start as usize..end as usize].to_vec(),
        template,
        frames: (
            state.frames[0],
            state.frame_shift,
            state.frames.len() as u32,
        ),
        more_frames: state.pbl_frames.to_vec(),
        pages: 2,
        prologue: String::new(),
        words: state.links,
        heal_every: 16,
        quiet: 64,
        functions: declared,
        enter: match interpreter {
            true => format!(
                "(drop (call $sm_{} (i32.const 0) (i32.const 0)))",
                functions.len() - 1
            ),
            false => ENTER.to_string(),
        },
    };
    let placeholders = wat::parse_str(guest(&look_alike)).unwrap();
    // `$sm_0` … are functions 3 … (after the imports and `$rewrites`).
    let wasm = look_alike::with_bodies(&placeholders, 3, &functions).unwrap();
    let native = module_functions(&wasm);
    (wasm, native)
}
