//! Guests that look like a runtime wasmspy reads and rewrite what it reads while sampled:
//! the host never crashes, hangs or reads outside the guest's memory, and the guest's output
//! and exit code are those of `wasmtime run`.
//!
//! The CPython look-alike: a module whose data holds CPython 3.13's `_Py_DebugOffsets` (so
//! wasmspy reads it as CPython without DWARF), with a well-formed interpreter state (a thread,
//! eight frames, their code objects, `str`s and line table) in an arena. Its loop rewrites
//! random words of the arena with random and adversarial values (pointer cycles, the last
//! byte of memory and past it, `u32::MAX`, unaligned pointers, huge lengths), restores the
//! arena from a pristine copy every 256 rewrites (so that walks reach deep), grows its memory
//! as it goes, prints a checksum of what it wrote and exits with 3. Sampled at 10 kHz by both
//! samplers, in both stack views: the samples whose walk found a broken chain keep their Wasm
//! frames and are counted, in one warning.
//!
//! The same guest shape (`hostile/guest.rs`) looks like QuickJS (a `JSRuntime` and its
//! frames, the build record that names the engine's release, an interpreter loop) and like
//! SpiderMonkey (`hostile/spidermonkey.rs`: its marks, code recognition's fingerprints find it
//! by, a `JSContext`, its activations and frames, the C++ interpreter's and the portable
//! baseline interpreter's; and, with code unlike the fingerprints, not recognised); a Go
//! program lies about its own goroutine stacks (`tests/fixtures/go/hostile/`); and the CPython
//! look-alike's state is rewritten by another thread while the guest's is walked, through the
//! library.

mod common;
#[path = "hostile/guest.rs"]
mod guest;
#[path = "hostile/spidermonkey.rs"]
mod spidermonkey;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use common::{stderr, wasmspy, wasmtime_cli, Decoded};
use guest::{drawing, hex, write_guest, LookAlike, ENTER, HEAL_EVERY};
use spidermonkey::{spidermonkey_look_alike, SpiderMonkeyCode};
use wasmspy::SamplerKind;
use wasmspy::{Profiler, ProfilerOptions};

/// Where `_PyRuntime` (its `_Py_DebugOffsets` first) is.
const RUNTIME: u32 = 1024;
/// The interpreter state's structures, rewritten by the loop.
const ARENA: u32 = 4096;
const ARENA_BYTES: u32 = 12288;
/// A pristine copy of the arena, copied back over it every [`HEAL_EVERY`] rewrites.
const TEMPLATE: u32 = 32768;

const INTERP: u32 = ARENA + 256;
const TSTATE: u32 = ARENA + 512;
const FRAMES: u32 = ARENA + 1024;
const CODES: u32 = ARENA + 2048;
const CODE_TYPE: u32 = ARENA + 4096;
const FILE: u32 = ARENA + 4352;
const NAMES: u32 = ARENA + 4608;
const LINES: u32 = ARENA + 5376;
const FRAME_COUNT: u32 = 8;

/// The members the walk reads, and where this guest puts them.
const MEMBERS: &[(&str, u64)] = &[
    ("runtime_state.interpreters_head", (ARENA - RUNTIME) as u64),
    ("interpreter_state.threads_head", 8),
    ("thread_state.current_frame", 8),
    ("interpreter_frame.previous", 0),
    ("interpreter_frame.executable", 4),
    ("interpreter_frame.instr_ptr", 8),
    ("interpreter_frame.owner", 12),
    ("code_object.filename", 8),
    ("code_object.name", 12),
    ("code_object.qualname", 16),
    ("code_object.linetable", 20),
    ("code_object.firstlineno", 24),
    ("code_object.co_code_adaptive", 64),
    ("pyobject.ob_type", 4),
    ("type_object.tp_name", 12),
    ("bytes_object.ob_size", 8),
    ("bytes_object.ob_sval", 16),
    ("unicode_object.state", 16),
    ("unicode_object.length", 8),
    ("unicode_object.asciiobject_size", 20),
];

/// `_Py_DebugOffsets` of CPython 3.13 with [`MEMBERS`]' offsets (other members 0).
fn debug_offsets() -> Vec<u8> {
    wasmspy::internals::python_debug_offsets(13, MEMBERS).unwrap()
}

/// The arena as the interpreter would have it: thread state → eight frames (the last an entry
/// frame) → code objects `frame_0` … `frame_7` of `hostile.py` with a line table.
fn arena() -> Vec<u8> {
    let mut a = vec![0u8; ARENA_BYTES as usize];
    let mut put = |address: u32, value: u32| {
        let at = (address - ARENA) as usize;
        a[at..at + 4].copy_from_slice(&value.to_le_bytes());
    };
    put(ARENA, INTERP);
    put(INTERP + 8, TSTATE);
    put(TSTATE + 8, FRAMES);
    for i in 0..FRAME_COUNT {
        let (frame, code) = (FRAMES + 32 * i, CODES + 128 * i);
        let last = i == FRAME_COUNT - 1;
        put(frame, if last { 0 } else { frame + 32 });
        put(frame + 4, code);
        put(frame + 8, code + 64 + 2 * i);
        put(frame + 12, if last { 3 } else { 0 }); // owner: 3 is an entry frame (C's)
        put(code + 4, CODE_TYPE);
        put(code + 8, FILE);
        put(code + 12, NAMES + 64 * i);
        put(code + 16, NAMES + 64 * i);
        put(code + 20, LINES);
        put(code + 24, 10 * i + 1);
    }
    put(CODE_TYPE + 12, CODE_TYPE + 64);
    let mut text = |address: u32, bytes: &[u8]| {
        let at = (address - ARENA) as usize;
        a[at..at + bytes.len()].copy_from_slice(bytes);
    };
    text(CODE_TYPE + 64, b"code\0");
    for (i, name) in (0..FRAME_COUNT).map(|i| (i, format!("frame_{i}"))) {
        let s = NAMES + 64 * i;
        text(s + 8, &(name.len() as u32).to_le_bytes());
        text(s + 16, &100u32.to_le_bytes()); // kind 1, compact, ascii
        text(s + 20, name.as_bytes());
    }
    text(FILE + 8, &10u32.to_le_bytes());
    text(FILE + 16, &100u32.to_le_bytes());
    text(FILE + 20, b"hostile.py");
    // A line table of 3.11's form: entries of one code unit each, one line further each.
    let table: Vec<u8> = (0..16).flat_map(|_| [0xd8u8, 0x02]).collect();
    text(LINES + 8, &(table.len() as u32).to_le_bytes());
    text(LINES + 16, &table);
    a
}

/// The CPython look-alike.
fn python_look_alike() -> LookAlike {
    LookAlike {
        data: vec![(RUNTIME, debug_offsets())],
        custom: Vec::new(),
        arena: ARENA,
        state: arena(),
        template: TEMPLATE,
        frames: (FRAMES, 5, FRAME_COUNT),
        more_frames: Vec::new(),
        pages: 1,
        prologue: String::new(),
        words: Vec::new(),
        heal_every: HEAL_EVERY,
        quiet: 0,
        functions: String::new(),
        enter: ENTER.to_string(),
    }
}

fn run(command: &mut Command) -> Output {
    command.stdin(Stdio::null()).output().unwrap()
}

/// Runs `guest` (with `args`) under `wasmtime run`, then under `wasmspy record --rate 10000`
/// with both samplers, with and without `--native`: the same output and exit code (3) each
/// time, `warning` (what the walks read, e.g. "Python interpreter's frames") said once, and
/// `check` given each profile, its function names, wasmspy's stderr and what ran.
fn sampled_like_wasmtime_run(
    guest: &Path,
    args: &[&str],
    warning: &str,
    check: impl Fn(&Decoded, &[&str], &str, &str),
) {
    let dir = tempfile::tempdir().unwrap();
    let plain = run(Command::new(wasmtime_cli())
        .arg("run")
        .arg(guest)
        .args(args));
    assert_eq!(plain.status.code(), Some(3), "{}", stderr(&plain));
    let expected = String::from_utf8_lossy(&plain.stdout).to_string();
    assert!(expected.contains("checksum "), "{expected}");
    for sampler in ["signal", "epoch"] {
        for native in [false, true] {
            let out = dir.path().join(format!("{sampler}-{native}.pb.gz"));
            let mut command = wasmspy();
            command
                .args(["record", "--rate", "10000", "--sampler", sampler, "-o"])
                .arg(&out);
            if native {
                command.arg("--native");
            }
            let result = run(command.arg("--").arg(guest).args(args));
            let err = stderr(&result);
            let what = format!("--sampler {sampler}, native {native}: {err}");
            assert_eq!(result.status.code(), Some(3), "{what}");
            assert_eq!(String::from_utf8_lossy(&result.stdout), expected, "{what}");
            // The walks that found the state broken are counted, and said once.
            let said: Vec<&str> = err
                .lines()
                .filter(|l| l.contains(&format!("{warning} unreadable")))
                .collect();
            assert_eq!(said.len(), 1, "{what}");
            eprintln!("{}", said[0]);
            let p = Decoded::load(&out);
            let names = p.sampled_function_names();
            check(&p, &names, &err, &what);
            eprintln!(
                "--sampler {sampler}, native {native}: {} samples, {names:?}",
                p.total("samples")
            );
        }
    }
}

#[test]
fn a_cpython_look_alike_rewriting_its_frames_cannot_hurt_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let guest = write_guest(dir.path(), "hostile_python.wasm", &python_look_alike());
    sampled_like_wasmtime_run(
        &guest,
        &[],
        "Python interpreter's frames",
        |_, names, _, what| python_and_wasm_frames(names, &["rewrite", "heal", "next"], what),
    );
}

/// Values the QuickJS look-alike draws before it rewrites anything (~40 ms of `wasmtime run`):
/// the first walks, at 10 kHz, name its code from the state whole. A name read while the
/// state was rewritten stays the code's for the run (one CI run of the four in a test saw
/// `fib (:10:3)` for every walk of the intact frame).
const WHOLE: u32 = 1 << 24;

/// The QuickJS look-alike: a module whose build record (cargo-auditable's `.dep-v0`) names
/// rquickjs-sys 0.13.0, whose `_start` stores the runtime's current frame three times (so
/// wasmspy takes it for the interpreter loop), with a `JSRuntime` running `fib` of `app.js` in
/// two frames (a native call between them) that it then rewrites as the CPython look-alike
/// rewrites its state: atoms, strings, bytecode, line table, frames, the runtime itself.
/// Walks name a code once, from what memory says the first time they meet it, so it runs
/// [`WHOLE`] values first with its state whole.
#[test]
fn a_quickjs_look_alike_rewriting_its_frames_cannot_hurt_the_host() {
    use wasmspy::internals::quickjs_state;
    let state = quickjs_state();
    let json = format!(
        r#"{{"packages":[{{"name":"rquickjs-sys","version":"{}","source":"crates.io"}}]}}"#,
        state.crate_version
    );
    let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut zlib, json.as_bytes()).unwrap();
    let (start, end) = (state.arena.start, state.arena.end);
    let (runtime, offset) = (state.runtime, state.current_frame_offset);
    let inner = state.frames[0];
    let look_alike = LookAlike {
        data: Vec::new(),
        custom: vec![(".dep-v0", zlib.finish().unwrap())],
        arena: start,
        state: state.image[start as usize..end as usize].to_vec(),
        template: 0x10000,
        frames: (inner, state.frame_shift, state.frames.len() as u32),
        more_frames: Vec::new(),
        pages: 2,
        prologue: format!(
            "(i32.store offset={offset} (i32.const {runtime}) (i32.const {inner}))\n"
        )
        .repeat(3)
            + "(call $whole)",
        words: Vec::new(),
        heal_every: HEAL_EVERY,
        quiet: 0,
        functions: drawing("whole", WHOLE),
        enter: ENTER.to_string(),
    };
    let dir = tempfile::tempdir().unwrap();
    let guest = write_guest(dir.path(), "hostile_js.wasm", &look_alike);
    sampled_like_wasmtime_run(
        &guest,
        &[],
        "JavaScript interpreter's frames",
        |_, names, _, what| {
            interpreted_and_wasm_frames(
                names,
                |n| n == "fib (app.js:10:3)",
                &["rewrite", "heal", "next"],
                what,
            )
        },
    );
}

/// The SpiderMonkey look-alike ([`spidermonkey_look_alike`]), recognised: no warning says
/// otherwise, and its JavaScript frames are named. From both activations: walks that found the
/// state whole give the three PBL frames (`fib` at lines 5 and 4, `run` at 9) on the
/// interpreter's three (the same, the self-hosted `forEach` left out) on the outer `run` (at
/// 8); a `run` called by a `fib` is PBL's entry frame on the interpreter's innermost, which
/// no rewrite of the interpreter's state alone can make. None invented: the names' characters
/// and where their functions start are never rewritten (rewritten, they read as what memory
/// then said, which no check tells from a name: the QuickJS look-alike's `<anonymous>
/// (appÿÿÿ)`), so every frame is `fib`'s or `run`'s (`<anonymous>` if first read while its
/// name's length was 0: an empty name), a function of the module, a host call or Wasmtime's
/// own code.
#[test]
fn a_spidermonkey_look_alike_rewriting_its_frames_cannot_hurt_the_host() {
    let (wasm, native) = spidermonkey_look_alike(SpiderMonkeyCode::Alike);
    let dir = tempfile::tempdir().unwrap();
    let guest = dir.path().join("hostile_sm.wasm");
    std::fs::write(&guest, &wasm).unwrap();
    let (fib, run) = ("(fib.js:3:13)", "(fib.js:8:6)");
    let javascript = [
        "fib (fib.js:3:13)",
        "run (fib.js:8:6)",
        "<anonymous> (fib.js:3:13)",
        "<anonymous> (fib.js:8:6)",
    ];
    // Leaf first: PBL's frames, the interpreter's, the outer activation's.
    let whole_stack = [
        (fib, 5),
        (fib, 4),
        (run, 9),
        (fib, 5),
        (fib, 4),
        (run, 9),
        (run, 8),
    ];
    sampled_like_wasmtime_run(
        &guest,
        &[],
        "SpiderMonkey's JavaScript frames",
        |p, names, err, what| {
            // Recognised, said once; the walks' warning the only other.
            let recognised = "hostile_sm.wasm is SpiderMonkey's engine (StarlingMonkey)";
            for line in err.lines().filter(|l| l.contains("warning")) {
                assert!(
                    line.contains(recognised)
                        || line.contains("SpiderMonkey's JavaScript frames unreadable"),
                    "{what}"
                );
            }
            assert_eq!(err.matches(recognised).count(), 1, "{what}");
            interpreted_and_wasm_frames(
                names,
                |n| javascript.contains(&n),
                &["rewrite", "heal", "next"],
                what,
            );
            for name in names {
                assert!(
                    javascript.contains(name) || native.iter().any(|n| n == name),
                    "an invented frame: {name:?} in {names:?} ({what})"
                );
            }
            // Each stack's JavaScript frames, as (where the function starts, line), and its
            // samples.
            let samples = p.value_index("samples");
            let stacks: Vec<(Vec<(&str, i64)>, i64)> = p
                .0
                .sample
                .iter()
                .map(|s| {
                    let frames = p.sample_frames(s).into_iter();
                    let frames = frames.filter(|(name, ..)| javascript.contains(&name.as_str()));
                    let start = |name: &str| if name.ends_with(fib) { fib } else { run };
                    let js = frames.map(|(name, _, line)| (start(&name), line));
                    (js.collect(), s.value[samples])
                })
                .collect();
            let (mut pbl, mut whole) = (0, 0);
            for (stack, n) in &stacks {
                // A `run` called by a `fib`: PBL's entry frame on the interpreter's.
                if stack.windows(2).any(|w| w[0].0 == run && w[1].0 == fib) {
                    pbl += n;
                }
                if stack[..] == whole_stack {
                    whole += n;
                }
            }
            let total = p.total("samples");
            let ran = what.split(':').next().unwrap_or_default();
            eprintln!("{ran}: {pbl} of {total} samples with PBL's frames, {whole} whole");
            // About 30 % in our runs: 2 % leaves room for a loaded machine's slower walks.
            assert!(
                whole * 50 >= total,
                "{whole} of {total}: {stacks:?} ({what})"
            );
        },
    );
}

/// SpiderMonkey's marks with code that does not match the fingerprints, as an engine of
/// another release or build would have: the look-alike with one of its readers of
/// `js::TlsContext` reading another address, and without its `js::Interpret`. Each runs as
/// `wasmtime run` runs it, under both samplers; one warning says SpiderMonkey's frames cannot
/// be read, and why; no walk is tried (no warning of walks); every sample keeps its Wasm
/// frames (the rewrites' loop), none is JavaScript.
#[test]
fn spidermonkey_look_alikes_whose_code_does_not_match_keep_their_wasm_frames() {
    let dir = tempfile::tempdir().unwrap();
    for (code, why) in [
        (SpiderMonkeyCode::ReadersDisagree, "disagree on its address"),
        (
            SpiderMonkeyCode::NoInterpreter,
            "no function is `js::Interpret",
        ),
    ] {
        let (wasm, native) = spidermonkey_look_alike(code);
        let guest = dir.path().join(format!("{code:?}.wasm"));
        std::fs::write(&guest, &wasm).unwrap();
        let plain = run(Command::new(wasmtime_cli()).arg("run").arg(&guest));
        assert_eq!(plain.status.code(), Some(3), "{}", stderr(&plain));
        for sampler in ["signal", "epoch"] {
            let what = format!("{code:?}, --sampler {sampler}");
            let out = dir.path().join(format!("{code:?}-{sampler}.pb.gz"));
            let result = run(wasmspy()
                .args(["record", "--rate", "10000", "--sampler", sampler, "-o"])
                .arg(&out)
                .arg("--")
                .arg(&guest));
            let err = stderr(&result);
            assert_eq!(result.status.code(), Some(3), "{what}: {err}");
            assert_eq!(result.stdout, plain.stdout, "{what}: {err}");
            // Said once; the other warning, of a module without DWARF, is not SpiderMonkey's
            // (which says "is SpiderMonkey's engine" instead).
            let (warned, others): (Vec<&str>, Vec<&str>) = err
                .lines()
                .filter(|l| l.contains("warning"))
                .partition(|l| l.contains("SpiderMonkey"));
            assert_eq!(warned.len(), 1, "{what}: {err}");
            assert!(
                others.iter().all(|l| l.contains("has no DWARF debug info")),
                "{what}: {err}"
            );
            assert!(
                warned[0].contains("SpiderMonkey, but its code does not match")
                    && warned[0].contains(why)
                    && warned[0].ends_with("not JavaScript frames"),
                "{what}: {err}"
            );
            eprintln!("{}", warned[0]);
            let p = Decoded::load(&out);
            let (total, samples) = (p.total("samples"), p.value_index("samples"));
            let in_rewrites: i64 =
                p.0.sample
                    .iter()
                    .filter(|s| p.sample_frames(s).iter().any(|(f, ..)| f == "rewrites"))
                    .map(|s| s.value[samples])
                    .sum();
            let names = p.sampled_function_names();
            eprintln!("{what}: {in_rewrites} of {total} samples in `rewrites`: {names:?}");
            // The loop is where the time goes: nearly all of it, and a hundred samples at
            // least (0.3 s at 10 kHz), each under its Wasm callers down to `_start` (but
            // Wasmtime's own code before or after it runs).
            assert!(
                total >= 100 && in_rewrites * 10 >= total * 9,
                "{what}: {names:?}"
            );
            for s in &p.0.sample {
                let frames = p.sample_frames(s);
                let names: Vec<&str> = frames.iter().map(|(f, ..)| f.as_str()).collect();
                assert!(
                    names.last() == Some(&"start")
                        || names == ["[wasmtime]"]
                        || names == ["[host]"],
                    "{what}: {frames:?}"
                );
            }
            for name in &names {
                assert!(
                    native.iter().any(|n| n == name),
                    "{what}: {name:?} in {names:?}"
                );
            }
        }
    }
}

/// Walks that found the look-alike's state well-formed named its Python frames; the others
/// kept the Wasm frames (one of `wasm`).
fn python_and_wasm_frames(names: &[&str], wasm: &[&str], what: &str) {
    interpreted_and_wasm_frames(
        names,
        |n| n.starts_with("frame_") && n.contains(" (hostile.py:"),
        wasm,
        what,
    );
}

/// Walks that found the state well-formed named its interpreted frames (`interpreted`); the
/// others kept the Wasm frames (one of `wasm`).
fn interpreted_and_wasm_frames(
    names: &[&str],
    interpreted: impl Fn(&str) -> bool,
    wasm: &[&str],
    what: &str,
) {
    assert!(
        names.iter().any(|n| interpreted(n)),
        "no interpreted frame: {names:?} ({what})"
    );
    assert!(
        names.iter().any(|n| wasm.iter().any(|w| n.contains(w))),
        "no Wasm frame: {names:?} ({what})"
    );
}

/// A Go program (`tests/fixtures/go/hostile/`) whose two goroutines rewrite their callers'
/// frames on Go's stack, their `g` (stack bounds, `m`, the scheduler's saved SP and PC) and
/// their `m` (`g0`, `curg`) with random and adversarial values (PCs of any function, the
/// last byte of memory and past it, the stack's own top and past it, `g` for everything), calling
/// nothing while they lie and restoring the truth every eighth round, and grow the heap
/// between lies.
#[test]
fn a_go_program_lying_about_its_stacks_cannot_hurt_the_host() {
    let guest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/go/hostile.wasm");
    sampled_like_wasmtime_run(&guest, &[], "Go's goroutine stacks", |_, names, _, what| {
        // Walks of a stack told the truth reach main through the chain of `deep` calls.
        for name in ["main.lie", "main.deep", "main.main"] {
            assert!(names.contains(&name), "no {name}: {names:?} ({what})");
        }
    });
}

/// The look-alike's interpreter state, well-formed, and a `run(n)` that computes without
/// touching it: for a walk whose memory another thread rewrites.
fn quiet_guest() -> String {
    format!(
        r#"(module
  (memory (export "memory") 1)
  (data (i32.const {RUNTIME}) "{offsets}")
  (data (i32.const {ARENA}) "{arena}")
  (func $step (param $x i32) (result i32)
    (i32.add (i32.mul (local.get $x) (i32.const 31)) (i32.const 7)))
  (func (export "run") (param $n i32) (result i32) (local $acc i32)
    (loop $l
      (local.set $acc (call $step (local.get $acc)))
      (local.tee $n (i32.sub (local.get $n) (i32.const 1)))
      (br_if $l))
    (local.get $acc)))"#,
        offsets = hex(&debug_offsets()),
        arena = hex(&arena()),
    )
}

/// Rewrites words of the arena at `base` (the guest's memory, `size` bytes) with the values
/// the WAT guest writes, from this thread while another runs the guest, restoring the arena
/// every [`HEAL_EVERY`] rewrites, until `stop`. Atomic stores: the walks read while they
/// write, as they would a guest's shared memory. Returns the rewrites.
fn rewrite_from_another_thread(base: usize, size: u32, stop: &AtomicBool) -> u64 {
    let pristine = arena();
    let word = |address: u32| {
        assert!(address.is_multiple_of(4) && address + 4 <= size);
        // SAFETY: an aligned word inside the guest's memory, which outlives this thread
        // (the store is dropped after it is joined) and does not grow (the guest never grows
        // it). Its other writer is the guest, which never writes the arena.
        unsafe { &*((base + address as usize) as *const AtomicU32) }
    };
    let arena_words = ARENA_BYTES / 4;
    let mut seed = 0x2545f491u32;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    let mut rewrites = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if rewrites.is_multiple_of(u64::from(HEAL_EVERY)) {
            for (i, chunk) in pristine.chunks_exact(4).enumerate() {
                let value = u32::from_le_bytes(chunk.try_into().unwrap());
                word(ARENA + 4 * i as u32).store(value, Ordering::Relaxed);
            }
        }
        let at = ARENA + 4 * (next() % arena_words);
        let value = match next() % 10 {
            0 => next(),
            1 => ARENA + 4 * (next() % arena_words),
            2 => 0,
            3 => size - 1,
            4 => size - 4,
            5 => size,
            6 => u32::MAX,
            7 => at,
            8 => ARENA + next() % ARENA_BYTES,
            _ => FRAMES + 32 * (next() % FRAME_COUNT),
        };
        word(at).store(value, Ordering::Relaxed);
        rewrites += 1;
    }
    rewrites
}

/// Frames that change while they are read: the look-alike's state rewritten by another thread
/// as the guest's thread is sampled (through the library, both samplers), each walk racing
/// the writes. The guest computes what it computes unprofiled; walks that found the state
/// well-formed named Python frames, the others kept their Wasm frames, counted in one warning.
#[test]
fn frames_rewritten_by_another_thread_during_the_walks() {
    let wasm = wat::parse_str(quiet_guest()).unwrap();
    let rounds = 60_000_000;
    let expected = {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, &wasm).unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let run = instance
            .get_typed_func::<i32, i32>(&mut store, "run")
            .unwrap();
        run.call(&mut store, rounds).unwrap()
    };
    for sampler in [SamplerKind::Signal, SamplerKind::Epoch] {
        let options = ProfilerOptions {
            sampler,
            rate_hz: 10_000,
            ..Default::default()
        };
        let mut config = wasmtime::Config::new();
        Profiler::configure(&mut config, &options);
        let engine = wasmtime::Engine::new(&config).unwrap();
        let module = wasmtime::Module::new(&engine, &wasm).unwrap();
        let mut profiler = Profiler::new(&engine, options).unwrap();
        profiler
            .add_module("hostile_python.wasm", &module, wasm.as_slice())
            .unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        profiler.attach(&mut store).unwrap();
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        profiler.attach_instance(&mut store, &instance).unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        let (base, size) = (
            memory.data_ptr(&store) as usize,
            memory.data_size(&store) as u32,
        );
        let run = instance
            .get_typed_func::<i32, i32>(&mut store, "run")
            .unwrap();
        let stop = AtomicBool::new(false);
        profiler.start().unwrap();
        let (result, rewrites) = std::thread::scope(|s| {
            let writer = s.spawn(|| rewrite_from_another_thread(base, size, &stop));
            let result = run.call(&mut store, rounds).unwrap();
            stop.store(true, Ordering::Relaxed);
            (result, writer.join().unwrap())
        });
        let profile = profiler.stop();
        let warnings = profiler.handle().take_warnings();
        assert_eq!(result, expected, "{sampler:?}");
        let names: Vec<&str> = profile.functions.iter().map(|f| f.name.as_str()).collect();
        eprintln!(
            "{sampler:?}: {rewrites} rewrites, {} samples, {names:?}, {warnings:?}",
            profile.total(wasmspy::profile::SAMPLES)
        );
        assert!(rewrites > 10_000, "{sampler:?}: {rewrites} rewrites");
        python_and_wasm_frames(&names, &["step", "run"], &format!("{sampler:?}"));
        let said = warnings
            .iter()
            .filter(|w| {
                matches!(&w.kind, wasmspy::WarningKind::RuntimeWalks { why }
                    if why.contains("Python interpreter's frames unreadable"))
            })
            .count();
        assert_eq!(said, 1, "{sampler:?}: {warnings:?}");
    }
}
