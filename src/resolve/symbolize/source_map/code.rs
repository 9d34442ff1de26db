//! Where in a module a source map may point: its functions' bodies, and in them the first byte
//! of each instruction. A map of another build of the module points elsewhere.

use std::ops::Range;

use wasmparser::{Parser, Payload};

/// The code section of a module: its functions' bodies (the locals and the instructions), in
/// order, as offsets in the module.
pub struct Code {
    bodies: Vec<Range<u32>>,
}

/// At most this many functions' instructions are decoded to check a map's offsets against.
const CHECKED_FUNCTIONS: usize = 64;

/// Out of how many offsets of a map (those checked), how many are not where code starts.
pub struct Misses {
    pub outside: usize,
    pub inside_instructions: usize,
    pub of: usize,
}

impl Code {
    /// The bodies of `wasm`'s functions (a module already read once: an error here is a
    /// malformed module).
    pub fn read(wasm: &[u8]) -> Result<Code, String> {
        let mut bodies = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            if let Payload::CodeSectionEntry(body) = payload.map_err(|e| e.to_string())? {
                let range = body.range();
                bodies.push(range.start as u32..range.end as u32);
            }
        }
        Ok(Code { bodies })
    }

    /// The body of the `index`th function the module defines.
    pub fn body(&self, index: usize) -> Option<Range<u32>> {
        self.bodies.get(index).cloned()
    }

    /// How many of `offsets` (sorted by `offset`) are not at the start of a body or of an instruction of
    /// `wasm`'s code: a map's offsets all are, toolchains map the start of a body to the
    /// function's line (LLVM's DWARF places a function there, and so does a map made of it).
    /// Every offset is checked to be in some function's body; those inside one are checked
    /// against the instructions of [`CHECKED_FUNCTIONS`] functions spread over the code
    /// (decoding all of a 35 MB module's took longer than reading its DWARF), which a map of
    /// another build misses as much as any. Nothing kept.
    pub fn misses<T>(&self, wasm: &[u8], offsets: &[T], offset: impl Fn(&T) -> u32) -> Misses {
        let mut misses = Misses {
            outside: 0,
            inside_instructions: 0,
            of: 0,
        };
        let every = self.bodies.len().div_ceil(CHECKED_FUNCTIONS).max(1);
        let mut rest = offsets;
        for (index, body) in self.bodies.iter().enumerate() {
            let before = rest.partition_point(|o| offset(o) < body.start);
            misses.outside += before;
            rest = &rest[before..];
            let within = rest.partition_point(|o| offset(o) < body.end);
            let (here, after) = rest.split_at(within);
            rest = after;
            if here.is_empty() || index % every != 0 {
                continue;
            }
            misses.of += here.len();
            let starts = instruction_starts(wasm, body.clone());
            let mut starts = std::iter::once(body.start).chain(starts).peekable();
            for at in here.iter().map(&offset) {
                while starts.next_if(|&s| s < at).is_some() {}
                if starts.peek() != Some(&at) {
                    misses.inside_instructions += 1;
                }
            }
        }
        misses.outside += rest.len();
        misses.of += misses.outside;
        misses
    }
}

/// The offsets of the instructions of the function body at `range` of `wasm`, in order; where
/// the body cannot be read, up to there.
fn instruction_starts(wasm: &[u8], range: Range<u32>) -> impl Iterator<Item = u32> + '_ {
    let bytes = &wasm[range.start as usize..range.end as usize];
    let body =
        wasmparser::FunctionBody::new(wasmparser::BinaryReader::new(bytes, range.start as usize));
    let operators = body.get_operators_reader().ok();
    operators
        .into_iter()
        .flat_map(|reader| reader.into_iter_with_offsets())
        .map_while(Result::ok)
        .map(|(_, offset)| offset as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_between_instructions_or_outside_the_code_are_misses() {
        let wasm = wat::parse_str(
            "(module (func (result i32) i32.const 1000 i32.const 2 i32.add) (func nop))",
        )
        .unwrap();
        let code = Code::read(&wasm).unwrap();
        let first = code.body(0).unwrap();
        let second = code.body(1).unwrap();
        // The body: 0 locals (1 byte), i32.const 1000 (3 bytes), i32.const 2, i32.add, end.
        let start = first.start;
        let good = [
            start,
            start + 1,
            start + 4,
            start + 6,
            start + 7,
            second.start + 1,
        ];
        let misses = code.misses(&wasm, &good, |&o| o);
        assert_eq!(
            (misses.outside, misses.inside_instructions, misses.of),
            (0, 0, 6)
        );
        let bad = [1, start + 2, start + 3, second.end + 100];
        let misses = code.misses(&wasm, &bad, |&o| o);
        assert_eq!((misses.outside, misses.inside_instructions), (2, 2));
    }
}
