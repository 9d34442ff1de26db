//! Go's own symbol table in a module built by Go's compiler (`GOOS=wasip1 GOARCH=wasm`): the
//! `pclntab` its linker writes into the data segments, which names every function as Go
//! writes it (`go/token.(*File).unpack`, where the `name` section has
//! `go_token.__File_.unpack`) and says the file and line where it starts. Go's Wasm carries
//! no DWARF: this is what `go tool pprof` shows for a native Go binary.
//!
//! Layout (Go's `runtime/symtab.go`, the same from Go 1.21 to 1.27): a header (`pcHeader`,
//! found by its magic number) with offsets of the function-name, compilation-unit, file and
//! pc-value tables and of the function table, whose entries (entry, offset of a `_func`) are
//! sorted by entry. An entry is the function's Go "PC" `PC_F << 16` before Go 1.25 and `PC_F`
//! from 1.25, where `PC_F` is 0x1000 plus the function's index among the module's own
//! (imports left out).

use std::collections::HashMap;

use wasmparser::{DataKind, Operator, Parser, Payload, TypeRef};

/// A Go function as its symbol table describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunction {
    pub name: String,
    /// Empty when the table names none.
    pub file: String,
    pub start_line: u32,
}

/// The custom section that Go's linker puts first in every module it writes.
pub const BUILD_ID_SECTION: &str = "go:buildid";
/// `pcHeader`'s first bytes: the magic number of Go 1.20's format, two pad bytes, the
/// instruction size quantum (1) and the pointer size (8).
const HEADER_START: [u8; 8] = [0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8];
/// `PC_F` of a module's first own function.
const FIRST_PC_F: u32 = 0x1000;

/// The functions of `wasm` by Wasm function index, if Go's compiler built it; `None` for any
/// other module, and for a Go module whose table cannot be read (then its `name` section names
/// its functions).
pub fn functions(wasm: &[u8]) -> Option<HashMap<u32, GoFunction>> {
    let module = Module::read(wasm)?;
    let image = module.data_image();
    let header = find(&image, &HEADER_START)?;
    Table::at(&image, header)?.functions(module.imported_functions)
}

/// What of the module the table is read with.
struct Module<'a> {
    imported_functions: u32,
    /// The active data segments of memory 0: (address, bytes).
    segments: Vec<(usize, &'a [u8])>,
}

impl<'a> Module<'a> {
    fn read(wasm: &'a [u8]) -> Option<Self> {
        let mut go = false;
        let mut module = Module {
            imported_functions: 0,
            segments: Vec::new(),
        };
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.ok()? {
                Payload::CustomSection(section) if section.name() == BUILD_ID_SECTION => {
                    go = true;
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        if matches!(import.ok()?.ty, TypeRef::Func(_) | TypeRef::FuncExact(_)) {
                            module.imported_functions += 1;
                        }
                    }
                }
                Payload::DataSection(reader) => {
                    for data in reader {
                        let data = data.ok()?;
                        let DataKind::Active {
                            memory_index: 0,
                            offset_expr,
                        } = data.kind
                        else {
                            continue;
                        };
                        let Ok(Operator::I32Const { value }) =
                            offset_expr.get_operators_reader().read()
                        else {
                            continue;
                        };
                        module.segments.push((value as u32 as usize, data.data));
                    }
                }
                _ => {}
            }
        }
        go.then_some(module)
    }

    /// Memory 0 as the data segments leave it: Go's linker splits its data wherever eight or
    /// more zero bytes run, so no table is whole in one segment.
    fn data_image(&self) -> Vec<u8> {
        let end = self
            .segments
            .iter()
            .map(|(at, bytes)| at + bytes.len())
            .max()
            .unwrap_or(0);
        let mut image = vec![0; end];
        for &(at, bytes) in &self.segments {
            image[at..at + bytes.len()].copy_from_slice(bytes);
        }
        image
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A `pcHeader` and the tables it points to, all offsets into the data image.
struct Table<'a> {
    image: &'a [u8],
    functions: usize,
    names: usize,
    compilation_units: usize,
    files: usize,
    pc_values: usize,
    function_table: usize,
}

impl<'a> Table<'a> {
    fn at(image: &'a [u8], header: usize) -> Option<Self> {
        let word = |offset: usize| -> Option<usize> {
            usize::try_from(u64::from_le_bytes(read(image, header + offset)?)).ok()
        };
        let from_header = |offset: usize| header.checked_add(word(offset)?);
        Some(Table {
            image,
            functions: word(8)?,
            names: from_header(32)?,
            compilation_units: from_header(40)?,
            files: from_header(48)?,
            pc_values: from_header(56)?,
            function_table: from_header(64)?,
        })
    }

    fn u32_at(&self, at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(read(self.image, at)?))
    }

    fn string_at(&self, at: usize) -> Option<String> {
        let bytes = self.image.get(at..)?;
        let end = bytes.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }

    fn functions(&self, imported_functions: u32) -> Option<HashMap<u32, GoFunction>> {
        // The entries' unit: PCs (`PC_F << 16`) before Go 1.25, `PC_F` since.
        let first_entry = self.u32_at(self.function_table)?;
        let shift = if first_entry >= FIRST_PC_F << 16 {
            16
        } else {
            0
        };
        let mut functions = HashMap::with_capacity(self.functions);
        for i in 0..self.functions {
            let entry = self.function_table + 8 * i;
            let pc_f = self.u32_at(entry)? >> shift;
            let func = self.function_table + self.u32_at(entry + 4)? as usize;
            let index = (imported_functions + pc_f).checked_sub(FIRST_PC_F)?;
            functions.insert(index, self.function(func)?);
        }
        Some(functions)
    }

    /// The `_func` at `func`: `entryOff u32, nameOff i32, args i32, deferreturn u32, pcsp u32,
    /// pcfile u32, pcln u32, npcdata u32, cuOffset u32, startLine i32, …`.
    fn function(&self, func: usize) -> Option<GoFunction> {
        let name = self.string_at(self.names + self.u32_at(func + 4)? as usize)?;
        let pcfile = self.u32_at(func + 20)? as usize;
        let unit = self.u32_at(func + 32)? as usize;
        let file = match pcfile {
            0 => None,
            _ => self.file(unit, self.first_value(self.pc_values + pcfile)?),
        };
        Some(GoFunction {
            name,
            file: file.unwrap_or_default(),
            start_line: self.u32_at(func + 36)?,
        })
    }

    /// The value a pc-value table starts with (at the function's entry): its first varint,
    /// zig-zag encoded, added to -1.
    fn first_value(&self, at: usize) -> Option<i64> {
        let (mut value, mut shift) = (0u64, 0);
        for &byte in self.image.get(at..)?.iter().take(10) {
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                let delta = if value & 1 == 0 {
                    (value >> 1) as i64
                } else {
                    !((value >> 1) as i64)
                };
                return Some(delta - 1);
            }
            shift += 7;
        }
        None
    }

    /// File `number` of compilation unit `unit`.
    fn file(&self, unit: usize, number: i64) -> Option<String> {
        let index = unit.checked_add(usize::try_from(number).ok()?)?;
        let offset = self.u32_at(self.compilation_units + 4 * index)?;
        // `!0`: a file the unit does not use.
        (offset != u32::MAX).then(|| self.string_at(self.files + offset as usize))?
    }
}

fn read<const N: usize>(image: &[u8], at: usize) -> Option<[u8; N]> {
    image.get(at..at.checked_add(N)?)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        std::fs::read(path.join(name)).unwrap()
    }

    /// `tests/fixtures/go/alloc.go` built by Go 1.27 (`alloc.wasm`) and by Go 1.21
    /// (`alloc-go1.21.wasm`, whose table gives entries as PCs): its functions named as Go
    /// writes them, with the file and line where each starts; the `name` section's forms of the
    /// same functions stand at the same indices.
    #[test]
    fn a_go_module_names_its_functions_as_go_does() {
        for fixture_name in ["go/alloc.wasm", "go/alloc-go1.21.wasm"] {
            let wasm = fixture(fixture_name);
            let functions = functions(&wasm).expect("a Go module's table");
            let by_name = |name: &str| {
                functions
                    .values()
                    .find(|f| f.name == name)
                    .unwrap_or_else(|| panic!("{fixture_name}: no {name}"))
            };
            let build = by_name("main.build");
            assert_eq!((build.file.as_str(), build.start_line), ("./alloc.go", 17));
            assert_eq!(by_name("main.buffers").start_line, 27);
            let mallocgc = by_name("runtime.mallocgc");
            assert!(mallocgc.file.ends_with("runtime/malloc.go"), "{mallocgc:?}");
            let section = name_section(&wasm);
            for (index, function) in &functions {
                // The name section writes Go's punctuation as `_`.
                let mangled: String = function
                    .name
                    .chars()
                    .map(|c| {
                        if c.is_alphanumeric() || c == '_' || c == '.' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                assert_eq!(section.get(index), Some(&mangled), "{fixture_name}");
            }
            assert!(functions.values().any(|f| f.name.contains("(*")));
        }
    }

    /// The `name` section's function names.
    fn name_section(wasm: &[u8]) -> HashMap<u32, String> {
        let mut section = HashMap::new();
        for payload in Parser::new(0).parse_all(wasm) {
            if let Payload::CustomSection(reader) = payload.unwrap() {
                if let wasmparser::KnownCustom::Name(names) = reader.as_known() {
                    for subsection in names {
                        if let wasmparser::Name::Function(map) = subsection.unwrap() {
                            for naming in map {
                                let naming = naming.unwrap();
                                section.insert(naming.index, naming.name.to_string());
                            }
                        }
                    }
                }
            }
        }
        section
    }

    #[test]
    fn other_modules_have_no_go_table() {
        assert_eq!(functions(&fixture("c/cprog.wasm")), None);
        assert_eq!(functions(&fixture("rust/alloc.wasm")), None);
    }
}
