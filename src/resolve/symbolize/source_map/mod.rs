//! File, line and column of Wasm code from a source map (v3), for modules whose toolchain
//! writes one instead of DWARF (AssemblyScript, Emscripten's `-gsource-map`, wasm-opt). A Wasm
//! module's map has one generated line, whose columns are byte offsets in the module's file
//! (not in its code section, as DWARF's addresses are): the symbolizer's offsets as they are.
//! Maps have no inlined calls: one frame per address.

mod code;
mod find;
mod read;
mod sources;

use std::path::Path;

use self::code::Code;
use self::read::Segment;
use crate::shared::regular_file::read_at_most;

pub use self::find::{Searched, SourceMapSearch};

/// A map fits a module with up to one of this many of its offsets where no code starts.
const TOLERATED: usize = 100;

/// A source map read, not yet matched to a module.
pub struct SourceMap {
    /// Where it was found, as warnings name it.
    origin: String,
    file: Option<String>,
    /// Paths a reader can open ([`sources::resolve`]).
    sources: Vec<String>,
    /// Each source's text as the build had it (`sourcesContent`), where the map carries it.
    contents: Vec<Option<String>>,
    names: Vec<String>,
    /// By offset, those at one offset (wasm-opt writes several) in file order: the last of
    /// them is the one used. Binaryen writes an expression's location before its first
    /// child's, which starts at the same byte, so the last is the instruction found there.
    segments: Vec<Segment>,
}

/// A place in a source, as a frame shows it.
pub struct Mapped<'a> {
    pub file: &'a str,
    pub line: u32,
    pub column: u32,
}

impl SourceMap {
    /// Reads the map `json` found at `origin` (a path, or what pointed to it), whose relative
    /// sources are in `dir`. The error says what is malformed, as a warning does.
    pub fn parse(json: &[u8], dir: &Path, origin: &str) -> Result<Self, String> {
        let read =
            read::read(json).map_err(|e| format!("its source map {origin} is malformed ({e})"))?;
        let mut segments = read.segments;
        // Stable: equal offsets keep their file order. A map's segments are in order already
        // (then nothing is moved).
        if !segments.is_sorted_by_key(|s| s.offset) {
            segments.sort_by_key(|s| s.offset);
        }
        Ok(SourceMap {
            origin: origin.to_string(),
            file: read.file,
            sources: sources::resolve(&read.sources, read.source_root.as_deref(), dir),
            contents: read.contents,
            names: read.names,
            segments,
        })
    }

    /// The `file` it says it maps, where it says one.
    pub fn file(&self) -> Option<&str> {
        self.file.as_deref()
    }

    /// Why it is not a map of `wasm`'s code, if it is not, with how many of its offsets are
    /// wrong (see [`misfit`](Self::misfit)).
    pub fn misfit_of(&self, wasm: &[u8]) -> Option<(usize, String)> {
        match Code::read(wasm) {
            Ok(code) => self.misfit(&code, wasm),
            Err(why) => Some((usize::MAX, why)),
        }
    }

    /// Why it is not a map of `wasm`'s code, if it is not, with how many of its offsets are
    /// wrong: the offsets a map gives are where a function's body or one of its instructions
    /// starts, and a map of another build of the module points at the middle of
    /// instructions (about half of its offsets), or past the code. Up to one in
    /// [`TOLERATED`] may be wrong: the DWARF that a map is made from may be stale for a
    /// function that a tool re-encoded after the compiler (wit-bindgen's `cabi_realloc` in a
    /// Rust component: 3 of 11,574 offsets inside instructions).
    fn misfit(&self, code: &Code, wasm: &[u8]) -> Option<(usize, String)> {
        let misses = code.misses(wasm, &self.segments, |s| s.offset);
        if self.segments.is_empty() {
            return Some((0, format!("its source map {} maps no code", self.origin)));
        }
        let wrong = misses.outside + misses.inside_instructions;
        (wrong * TOLERATED > misses.of).then(|| {
            let why = format!(
                "its source map {} is not of this build of it (of {} offsets checked, {} outside its functions' code, {} inside instructions)",
                self.origin, misses.of, misses.outside, misses.inside_instructions
            );
            (wrong, why)
        })
    }
}

/// A source map matched to its module's code.
pub struct ModuleMap {
    map: SourceMap,
    code: Code,
}

impl ModuleMap {
    /// `map` as the map of `wasm`'s code, if it is one; the error says why not, as a warning
    /// does.
    pub fn new(map: SourceMap, wasm: &[u8]) -> Result<Self, String> {
        let code = Code::read(wasm)?;
        match map.misfit(&code, wasm) {
            Some((_, why)) => Err(why),
            None => Ok(ModuleMap { map, code }),
        }
    }

    /// The segment that covers `offset` in the body of the `defined`th function the module
    /// defines: the last one at or before it (of several at one offset, the last), within
    /// the body (a segment of the function before does not reach into this one).
    fn segment(&self, defined: usize, offset: u32) -> Option<&Segment> {
        let body = self.code.body(defined)?;
        let segments = &self.map.segments;
        let after = segments.partition_point(|s| s.offset <= offset);
        let segment = segments.get(after.checked_sub(1)?)?;
        (body.start <= segment.offset).then_some(segment)
    }

    /// Where the instruction at `offset` of the `defined`th function the module defines is
    /// in the source; `None` where the map gives it no line (a one-field segment, or none).
    pub fn position(&self, defined: usize, offset: u32) -> Option<Mapped<'_>> {
        let at = self.segment(defined, offset)?.at?;
        Some(Mapped {
            file: self.map.sources.get(at.source as usize)?,
            line: at.line,
            column: at.column,
        })
    }

    /// The first segment with a line in the body of the `defined`th function: where the
    /// function starts in the source.
    fn first_position(&self, defined: usize) -> Option<read::Position> {
        let body = self.code.body(defined)?;
        let segments = &self.map.segments;
        let first = segments.partition_point(|s| s.offset < body.start);
        let mut in_body = segments[first..]
            .iter()
            .take_while(|s| s.offset < body.end)
            .filter(|s| s.at.is_some());
        let first = in_body.next()?;
        // Of several at its offset, the last, as for any offset.
        let last = in_body
            .take_while(|s| s.offset == first.offset)
            .last()
            .unwrap_or(first);
        last.at
    }

    /// The line the `defined`th function starts at, if the map says.
    pub fn start_line(&self, defined: usize) -> Option<u32> {
        self.first_position(defined).map(|at| at.line)
    }

    /// The sources the map carries the text of (`sourcesContent`) and that are not where it
    /// says (`~lib/…`, or a build on another machine): (path, text), for viewers that show
    /// source.
    #[cfg(feature = "cli")]
    pub fn carried_sources(&self) -> impl Iterator<Item = (&str, &str)> {
        let map = &self.map;
        map.sources
            .iter()
            .zip(&map.contents)
            .filter_map(|(path, text)| {
                let text = text.as_deref()?;
                (!path.is_empty() && !Path::new(path).exists()).then_some((path.as_str(), text))
            })
    }

    /// The sources on disk that differ from the text the map carries of them: edited since
    /// the build, whose lines the map's are. Each file is read as a map is (a regular file,
    /// without blocking), up to the carried text's length and one byte more.
    pub fn changed_sources(&self) -> Vec<&str> {
        let map = &self.map;
        let differs = |path: &str, text: &str| {
            read_at_most(Path::new(path), text.len() as u64 + 1)
                .is_ok_and(|read| read != text.as_bytes())
        };
        map.sources
            .iter()
            .zip(&map.contents)
            .filter_map(|(path, text)| {
                let text = text.as_deref()?;
                differs(path, text).then_some(path.as_str())
            })
            .collect()
    }

    /// A name for the `defined`th function where the module gives none: the map's name at its
    /// start, else where it starts (`hot.ts:5`).
    pub fn function_name(&self, defined: usize) -> Option<String> {
        let at = self.first_position(defined)?;
        if let Some(name) = at.name.and_then(|n| self.map.names.get(n as usize)) {
            return Some(name.clone());
        }
        let file = self.map.sources.get(at.source as usize)?;
        let base = file.rsplit('/').next().unwrap_or(file);
        Some(format!("{base}:{}", at.line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module of two functions and a map of it whose offsets are relative to its code.
    fn module_and_map(mappings: impl Fn(u32, u32) -> String) -> (Vec<u8>, SourceMap) {
        let wasm = wat::parse_str(
            "(module (func (result i32) i32.const 1000 i32.const 2 i32.add) (func nop))",
        )
        .unwrap();
        let code = Code::read(&wasm).unwrap();
        let json = format!(
            r#"{{"version":3,"sources":["a.ts"],"names":[],"mappings":"{}"}}"#,
            mappings(code.body(0).unwrap().start, code.body(1).unwrap().start)
        );
        let map = SourceMap::parse(json.as_bytes(), Path::new(""), "m.wasm.map").unwrap();
        (wasm, map)
    }

    /// `n` as one base64 VLQ field (the crate's encoder is its builder's, for whole maps).
    fn vlq(n: i64) -> String {
        const DIGITS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut rest = if n < 0 { ((-n) << 1) | 1 } else { n << 1 };
        let mut out = String::new();
        loop {
            let digit = (rest & 31) as usize;
            rest >>= 5;
            out.push(DIGITS[digit | if rest > 0 { 32 } else { 0 }] as char);
            if rest == 0 {
                return out;
            }
        }
    }

    #[test]
    fn lines_come_from_the_last_segment_at_an_offset_and_stay_in_their_function() {
        // First body's start → a.ts:3 then a.ts:4 (the same offset), its `i32.add` (+6) →
        // no line; the second body's start → a.ts:9.
        let (wasm, map) = module_and_map(|first, second| {
            format!(
                "{}AEA,AACA,M,{}AKA",
                vlq(first.into()),
                &vlq((second - first - 6).into())
            )
        });
        let map = ModuleMap::new(map, &wasm).unwrap();
        let first = map.code.body(0).unwrap().start;
        let line = |defined, offset| map.position(defined, offset).map(|m| m.line);
        assert_eq!(line(0, first + 1), Some(4));
        assert_eq!(line(0, first + 6), None);
        assert_eq!(line(1, map.code.body(1).unwrap().start + 1), Some(9));
        assert_eq!(map.function_name(0).as_deref(), Some("a.ts:4"));
        assert_eq!(map.start_line(1), Some(9));
    }

    #[test]
    fn a_map_of_other_code_does_not_fit() {
        let (wasm, map) = module_and_map(|first, _| format!("{}AAA", vlq((first + 2).into())));
        assert!(map.misfit_of(&wasm).is_some());
        let why = ModuleMap::new(map, &wasm).err().unwrap();
        assert!(why.contains("not of this build"), "{why}");
    }
}
