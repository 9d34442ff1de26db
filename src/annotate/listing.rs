//! The text of chosen functions' instructions, as `wasm-tools print` (wasmprinter) shows them,
//! each line with its offset in the module.
//!
//! wasmprinter prints whole modules. A large one (an interpreter's, 12–18 MB) prints for
//! seconds, so it is given a copy of the module cut down to what the chosen functions' text
//! needs: the sections before the code (types, imports, the function index space), the code
//! section with every other body emptied (which keeps the function indices), and the name
//! section. Each printed line's offset in the copy is then taken back to the original.

use std::ops::Range;

use anyhow::{Context, Result};
use wasm_encoder::{CodeSection, RawSection};
use wasmparser::{Parser, Payload};

/// An empty function body: no locals, `end`.
const EMPTY_BODY: [u8; 2] = [0x00, 0x0b];

/// A module's function bodies, by where they are in its bytes.
pub struct Bodies {
    /// (body's range, its function index), in the code section's order (so by offset).
    pub bodies: Vec<(Range<usize>, u32)>,
}

impl Bodies {
    /// The bodies of module `wasm`.
    pub fn of(wasm: &[u8]) -> Result<Self> {
        let mut imported = 0;
        let mut bodies = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.context("malformed Wasm module")? {
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import.context("malformed import section")?;
                        if matches!(
                            import.ty,
                            wasmparser::TypeRef::Func(_) | wasmparser::TypeRef::FuncExact(_)
                        ) {
                            imported += 1;
                        }
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let index = imported + bodies.len() as u32;
                    bodies.push((body.range(), index));
                }
                _ => {}
            }
        }
        Ok(Bodies { bodies })
    }

    /// The function whose body holds `offset`: its index and body.
    pub fn at(&self, offset: usize) -> Option<(u32, Range<usize>)> {
        let i = self.bodies.partition_point(|(r, _)| r.start <= offset);
        let (range, index) = self.bodies.get(i.checked_sub(1)?)?;
        range.contains(&offset).then(|| (*index, range.clone()))
    }

    /// The body of function `index`.
    pub fn of_function(&self, index: u32) -> Option<Range<usize>> {
        let first = self.bodies.first()?.1;
        let (range, _) = self.bodies.get(index.checked_sub(first)? as usize)?;
        Some(range.clone())
    }
}

/// A printed line of a function: its offset in the module (the instruction's, for an
/// instruction) and its text, indented as printed within the function.
pub struct Line {
    pub offset: usize,
    pub text: String,
}

/// The printed lines of the functions whose bodies are `chosen` (ranges of `wasm`, among
/// `bodies`), each function's lines in order, the function's own opening line first.
pub fn print(wasm: &[u8], bodies: &Bodies, chosen: &[Range<usize>]) -> Result<Vec<Vec<Line>>> {
    let (copy, moved) = cut_down(wasm, bodies, chosen)?;
    let mut sink = Sink {
        moved: &moved,
        lines: (0..chosen.len()).map(|_| Vec::new()).collect(),
        current: None,
    };
    wasmprinter::Config::new()
        .print(&copy, &mut sink)
        .context("cannot print the module's code")?;
    sink.finish_line();
    let mut lines = sink.lines;
    for function in &mut lines {
        let indent = function
            .iter()
            .filter(|l| !l.text.trim().is_empty())
            .map(|l| l.text.len() - l.text.trim_start().len())
            .min()
            .unwrap_or(0);
        for line in function.iter_mut() {
            line.text = line.text.get(indent..).unwrap_or("").trim_end().to_string();
        }
        function.retain(|l| !l.text.is_empty());
    }
    Ok(lines)
}

/// Where a chosen body is in the cut-down copy, and how far it moved from the original.
struct Moved {
    copy: Range<usize>,
    /// The original's offset minus the copy's.
    delta: isize,
    /// Which of the chosen bodies it is.
    chosen: usize,
}

/// `wasm` up to its code section, that section with only the `chosen` bodies kept, and its
/// name section; with where each chosen body landed.
fn cut_down(
    wasm: &[u8],
    bodies: &Bodies,
    chosen: &[Range<usize>],
) -> Result<(Vec<u8>, Vec<Moved>)> {
    let mut copy = wasm_encoder::Module::new();
    let mut names = None;
    let mut before_code = true;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.context("malformed Wasm module")?;
        match &payload {
            Payload::CodeSectionStart { .. } => {
                let mut code = CodeSection::new();
                for (range, _) in &bodies.bodies {
                    if chosen.contains(range) {
                        code.raw(&wasm[range.clone()]);
                    } else {
                        code.raw(&EMPTY_BODY);
                    }
                }
                copy.section(&code);
                before_code = false;
            }
            Payload::CustomSection(reader) if reader.name() == "name" => {
                names = Some(reader.range());
            }
            _ => {
                if let (true, Some((id, range))) = (before_code, payload.as_section()) {
                    copy.section(&RawSection {
                        id,
                        data: &wasm[range],
                    });
                }
            }
        }
    }
    if let Some(range) = names {
        // The whole custom section (its name included), as it was.
        copy.section(&RawSection {
            id: wasm_encoder::SectionId::Custom as u8,
            data: &wasm[range],
        });
    }
    let copy = copy.finish();
    let copied = Bodies::of(&copy).context("cannot cut the module down")?;
    let moved = copied
        .bodies
        .iter()
        .zip(&bodies.bodies)
        .filter_map(|((new, _), (old, _))| {
            let chosen = chosen.iter().position(|c| c == old)?;
            Some(Moved {
                copy: new.clone(),
                delta: old.start as isize - new.start as isize,
                chosen,
            })
        })
        .collect();
    Ok((copy, moved))
}

/// Keeps the printed lines that fall in a chosen body.
struct Sink<'a> {
    moved: &'a [Moved],
    lines: Vec<Vec<Line>>,
    /// The line being printed, where it is kept: (which chosen body, its line).
    current: Option<(usize, Line)>,
}

impl Sink<'_> {
    fn finish_line(&mut self) {
        if let Some((chosen, line)) = self.current.take() {
            self.lines[chosen].push(line);
        }
    }
}

impl wasmprinter::Print for Sink<'_> {
    fn write_str(&mut self, s: &str) -> std::io::Result<()> {
        if let Some((_, line)) = &mut self.current {
            line.text.push_str(s);
        }
        Ok(())
    }

    fn start_line(&mut self, offset: Option<usize>) {
        self.finish_line();
        let Some(offset) = offset else {
            return;
        };
        let i = self.moved.partition_point(|m| m.copy.start <= offset);
        let Some(moved) = i.checked_sub(1).map(|i| &self.moved[i]) else {
            return;
        };
        // A body's range ends before its `end`'s closing line, which is at its end.
        if offset <= moved.copy.end {
            let original = (offset as isize + moved.delta) as usize;
            self.current = Some((
                moved.chosen,
                Line {
                    offset: original,
                    text: String::new(),
                },
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Vec<u8> {
        wat::parse_str(
            r#"(module
                (import "env" "f" (func $f (param i32)))
                (func $a (result i32) i32.const 1 i32.const 2 i32.add)
                (func $b (param i32) (result i32) (local i64)
                    local.get 0
                    if (result i32)
                        i32.const 3
                    else
                        local.get 0
                        call $f
                        i32.const 4
                    end)
                (data (i32.const 0) "hello")
                (memory 1))"#,
        )
        .unwrap()
    }

    #[test]
    fn a_chosen_function_prints_as_wasm_tools_prints_it_at_its_offsets() {
        let wasm = fixture();
        let bodies = Bodies::of(&wasm).unwrap();
        assert_eq!(bodies.bodies.len(), 2);
        let b = bodies.of_function(2).unwrap();
        assert_eq!(bodies.at(b.start + 3).map(|(i, _)| i), Some(2));
        let printed = print(&wasm, &bodies, std::slice::from_ref(&b)).unwrap();
        let texts: Vec<&str> = printed[0].iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "(func $b (;2;) (type 2) (param i32) (result i32)",
                "  (local i64)",
                "  local.get 0",
                "  if (result i32) ;; label = @1",
                "    i32.const 3",
                "  else",
                "    local.get 0",
                "    call $f",
                "    i32.const 4",
                "  end",
                ")",
            ]
        );
        // Each instruction's offset is its own in the original module.
        let mut ops =
            wasmparser::FunctionBody::new(wasmparser::BinaryReader::new(&wasm[b.clone()], b.start))
                .get_operators_reader()
                .unwrap();
        let mut offsets = Vec::new();
        while !ops.eof() {
            offsets.push(ops.read_with_offset().unwrap().1);
        }
        let printed_offsets: Vec<usize> = printed[0][2..].iter().map(|l| l.offset).collect();
        assert_eq!(printed_offsets, offsets);
    }

    #[test]
    fn two_functions_print_apart() {
        let wasm = fixture();
        let bodies = Bodies::of(&wasm).unwrap();
        let (a, b) = (
            bodies.of_function(1).unwrap(),
            bodies.of_function(2).unwrap(),
        );
        let printed = print(&wasm, &bodies, &[b, a]).unwrap();
        assert_eq!(printed[1][0].text, "(func $a (;1;) (type 1) (result i32)");
        assert_eq!(printed[1].last().unwrap().text, ")");
        assert!(printed[0][0].text.starts_with("(func $b"));
    }
}
