//! The look-alikes' guest (`tests/hostile.rs`): a WAT module holding a runtime's state, which
//! it rewrites in a loop with adversarial values, restoring it now and then.

use std::path::Path;

/// Rewrites between two restorations of the state from its pristine copy, but where a
/// look-alike says otherwise.
pub const HEAL_EVERY: u32 = 256;
/// Rewrites in one run: 0.3 s of `wasmtime run`.
const REWRITES: u32 = 1 << 23;

/// Bytes as a WAT string.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("\\{b:02x}")).collect()
}

/// What a look-alike holds and rewrites.
pub struct LookAlike {
    /// Data segments its runtime is recognised by.
    pub data: Vec<(u32, Vec<u8>)>,
    /// Custom sections its runtime is recognised by.
    pub custom: Vec<(&'static str, Vec<u8>)>,
    /// The runtime's state, well-formed, at `arena` (and a pristine copy at `template`).
    pub arena: u32,
    pub state: Vec<u8>,
    pub template: u32,
    /// The frames: the first, log2 of the distance between two, how many.
    pub frames: (u32, u32, u32),
    /// More frames, not evenly spaced, that a rewrite picks as it picks one of `frames` (their
    /// table kept after `words`').
    pub more_frames: Vec<u32>,
    /// Initial pages of memory (it grows to 16).
    pub pages: u32,
    /// WAT at the start of `_start`.
    pub prologue: String,
    /// The words rewritten, and restored one by one (their table kept after the pristine
    /// copy); where there are none, every word of the arena, restored by one copy.
    pub words: Vec<u32>,
    /// Rewrites between two restorations.
    pub heal_every: u32,
    /// Values drawn after each restoration, the state whole while they are (0: none), so that
    /// walks find it whole often enough where every word rewritten matters to them.
    pub quiet: u32,
    /// WAT functions, defined right after `$rewrites` (function 2, after the imports).
    pub functions: String,
    /// How `_start` has `$rewrites` run, after `prologue`.
    pub enter: String,
}

/// How `_start` has `$rewrites` run: a call (the SpiderMonkey look-alike's goes through its
/// `js::Interpret`).
pub const ENTER: &str = "(call $rewrites)";

/// A WAT function `$name` that draws `n` values (into the checksum), rewriting nothing.
pub fn drawing(name: &str, n: u32) -> String {
    format!(
        r#"(func ${name}
    (local $i i32)
    (loop $values
      (global.set $sum (i32.add (global.get $sum) (call $next)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $values (i32.lt_u (local.get $i) (i32.const {n})))))"#
    )
}

/// A guest, in WAT: `$rewrite` picks a word (of the arena, or of `words`) and a value,
/// `$heal` restores them, `$rewrites` loops, `_start` runs it, prints `checksum XXXXXXXX` and
/// exits with 3.
pub fn guest(g: &LookAlike) -> String {
    let LookAlike {
        arena,
        template,
        pages,
        heal_every,
        ..
    } = *g;
    let arena_bytes = g.state.len() as u32;
    let arena_words = arena_bytes / 4;
    let (frames, frame_shift, frame_count) = g.frames;
    // The words rewritten, after the pristine copy.
    let words_at = template + arena_bytes;
    let words = g.words.len();
    let table: Vec<u8> = g.words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let more_frames_at = words_at + table.len() as u32;
    let more_table: Vec<u8> = g.more_frames.iter().flat_map(|w| w.to_le_bytes()).collect();
    let data: String = g
        .data
        .iter()
        .chain([
            &(arena, g.state.clone()),
            &(template, g.state.clone()),
            &(words_at, table),
            &(more_frames_at, more_table),
        ])
        .map(|(at, bytes)| format!("(data (i32.const {at}) \"{}\")\n", hex(bytes)))
        .collect();
    let custom: String = g
        .custom
        .iter()
        .map(|(name, bytes)| format!("(@custom \"{name}\" \"{}\")\n", hex(bytes)))
        .collect();
    let (pick, heal) = if g.words.is_empty() {
        (
            format!("(i32.add (i32.const {arena}) (i32.shl (i32.rem_u (call $next) (i32.const {arena_words})) (i32.const 2)))"),
            format!("(memory.copy (i32.const {arena}) (i32.const {template}) (i32.const {arena_bytes}))"),
        )
    } else {
        (
            format!("(i32.load (i32.add (i32.const {words_at}) (i32.shl (i32.rem_u (call $next) (i32.const {words})) (i32.const 2))))"),
            format!(
                r#"(local $i i32) (local $at i32)
    (loop $words
      (local.set $at (i32.load (i32.add (i32.const {words_at}) (i32.shl (local.get $i) (i32.const 2)))))
      (i32.store (local.get $at) (i32.load offset={} (local.get $at)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $words (i32.lt_u (local.get $i) (i32.const {words}))))"#,
                template - arena
            ),
        )
    };
    // One of the frames, evenly spaced, or of the others.
    let frame = if g.more_frames.is_empty() {
        format!("(i32.add (i32.const {frames}) (i32.shl (i32.rem_u (call $next) (i32.const {frame_count})) (i32.const {frame_shift})))")
    } else {
        let all = frame_count + g.more_frames.len() as u32;
        format!(
            r#"(local.set $i (i32.rem_u (call $next) (i32.const {all})))
        (if (result i32) (i32.lt_u (local.get $i) (i32.const {frame_count}))
          (then (i32.add (i32.const {frames}) (i32.shl (local.get $i) (i32.const {frame_shift}))))
          (else (i32.load (i32.add (i32.const {more_frames_at}) (i32.shl (i32.sub (local.get $i) (i32.const {frame_count})) (i32.const 2))))))"#
        )
    };
    let (prologue, functions, enter) = (&g.prologue, &g.functions, &g.enter);
    let (quiet, quiet_function) = match g.quiet {
        0 => (String::new(), String::new()),
        n => ("(call $quiet)".to_string(), drawing("quiet", n)),
    };
    format!(
        r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") {pages} 16)
  (global $seed (mut i32) (i32.const 0x2545f491))
  (global $sum (mut i32) (i32.const 0))
  {custom}
  {data}
  (data (i32.const 64) "checksum ")
  (func $rewrites
    (local $n i32)
    (call $heal)
    (loop $rewrites
      (global.set $sum (i32.add (i32.mul (global.get $sum) (i32.const 31)) (call $rewrite)))
      (if (i32.eqz (i32.rem_u (local.get $n) (i32.const {heal_every}))) (then (call $heal) {quiet}))
      ;; Memory grows under the walks, to 16 pages.
      (if (i32.eqz (i32.rem_u (local.get $n) (i32.const 0x200000)))
        (then (drop (memory.grow (i32.const 1)))))
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (br_if $rewrites (i32.lt_u (local.get $n) (i32.const {REWRITES})))))
  {functions}
  {quiet_function}
  (func $next (result i32)
    (local $x i32)
    (local.set $x (global.get $seed))
    (local.set $x (i32.xor (local.get $x) (i32.shl (local.get $x) (i32.const 13))))
    (local.set $x (i32.xor (local.get $x) (i32.shr_u (local.get $x) (i32.const 17))))
    (local.set $x (i32.xor (local.get $x) (i32.shl (local.get $x) (i32.const 5))))
    (global.set $seed (local.get $x))
    (local.get $x))
  (func $heal
    {heal})
  ;; Writes an adversarial value at a random word; returns it.
  (func $rewrite (result i32)
    (local $at i32) (local $value i32) (local $end i32) (local $r i32) (local $i i32)
    (local.set $at {pick})
    (local.set $end (i32.shl (memory.size) (i32.const 16)))
    (local.set $r (call $next))
    (local.set $value
      (block $chosen (result i32)
        (block $b9 (block $b8 (block $b7 (block $b6 (block $b5 (block $b4 (block $b3 (block $b2 (block $b1 (block $b0
          (br_table $b0 $b1 $b2 $b3 $b4 $b5 $b6 $b7 $b8 $b9 (i32.rem_u (local.get $r) (i32.const 10))))
          (br $chosen (call $next)))
          ;; an aligned pointer into the arena
          (br $chosen (i32.add (i32.const {arena}) (i32.shl (i32.rem_u (call $next) (i32.const {arena_words})) (i32.const 2)))))
          (br $chosen (i32.const 0)))
          ;; the last byte of memory, the last word, just past the end
          (br $chosen (i32.sub (local.get $end) (i32.const 1))))
          (br $chosen (i32.sub (local.get $end) (i32.const 4))))
          (br $chosen (local.get $end)))
          (br $chosen (i32.const -1)))
          ;; itself: a cycle of one
          (br $chosen (local.get $at)))
          ;; an unaligned pointer into the arena
          (br $chosen (i32.add (i32.const {arena}) (i32.rem_u (call $next) (i32.const {arena_bytes})))))
        ;; one of the frames: cycles through the chain
        {frame}))
    (i32.store (local.get $at) (local.get $value))
    (local.get $value))
  (func $hex (param $at i32) (param $value i32)
    (local $i i32) (local $digit i32)
    (loop $digits
      (local.set $digit (i32.and (i32.shr_u (local.get $value) (i32.sub (i32.const 28) (i32.shl (local.get $i) (i32.const 2)))) (i32.const 15)))
      (i32.store8 (i32.add (local.get $at) (local.get $i))
        (i32.add (local.get $digit) (select (i32.const 48) (i32.const 87) (i32.lt_u (local.get $digit) (i32.const 10)))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $digits (i32.lt_u (local.get $i) (i32.const 8)))))
  (func $start (export "_start")
    {prologue}
    {enter}
    (call $hex (i32.const 73) (global.get $sum))
    (i32.store8 (i32.const 81) (i32.const 10))
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 18))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (call $proc_exit (i32.const 3))))"#
    )
}

/// `look_alike`'s guest, compiled, at `dir/name`.
pub fn write_guest(dir: &Path, name: &str, look_alike: &LookAlike) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, wat::parse_str(guest(look_alike)).unwrap()).unwrap();
    path
}

/// What a profile may name of `wasm`'s own: its functions (by its name section), its imports
/// (`module::name`), Wasmtime's code and the root of the host's own work.
pub fn module_functions(wasm: &[u8]) -> Vec<String> {
    let mut names = vec!["[wasmtime]".to_string(), "[host]".to_string()];
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload.unwrap() {
            wasmparser::Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    let import = import.unwrap();
                    names.push(format!("{}::{}", import.module, import.name));
                }
            }
            wasmparser::Payload::CustomSection(section) => {
                if let wasmparser::KnownCustom::Name(reader) = section.as_known() {
                    for name in reader {
                        if let wasmparser::Name::Function(map) = name.unwrap() {
                            names.extend(map.into_iter().map(|n| n.unwrap().name.to_string()));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    names
}
