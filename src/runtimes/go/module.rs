//! Modules built by Go's compiler (`GOOS=wasip1 GOARCH=wasm`), as Go itself sees them. Go's
//! Wasm carries no DWARF; its linker writes Go's own symbol table (`pclntab`, [`pclntab`])
//! into the data segments, which names every function as Go writes it
//! (`go/token.(*File).unpack`, where the `name` section has `go_token.__File_.unpack`), and
//! gives each of its PCs a file, a line and the calls inlined there: what `go tool pprof`
//! shows for a native Go binary.
//!
//! A Go "PC" is `PC_F << 16 | PC_B`: `PC_F` is 0x1000 plus the function's index among the
//! module's own (imports left out), `PC_B` a resume point within it ([`body`] finds them in
//! the code). Go keeps its goroutines' stacks in linear memory, with these PCs as return
//! addresses, which the samplers read ([`super::stack`]).

use std::sync::OnceLock;

use wasmparser::{FunctionBody, KnownCustom, Parser, Payload, TypeRef, ValType};

use super::body::BodyMap;
use super::pclntab::{Func, Pclntab, FLAG_TOP_FRAME};
use crate::runtimes::NamedFrame;
use crate::wasm::data::constant_address;

/// A Go function as its symbol table describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunction {
    pub name: String,
    /// Empty when the table names none.
    pub file: String,
    pub start_line: u32,
    /// The SP delta past its prologue.
    pub frame_size: u32,
    /// What a stack walk must know of it.
    pub role: Role,
}

/// What a function is to a walk of Go's stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A function of Go's calling convention: `(PC_B i32) -> (unwind i32)`, with a frame on
    /// Go's stack.
    Go,
    /// The outermost frame of a stack (`runtime.goexit`, `runtime.mstart`, `runtime.rt0_go`).
    TopFrame,
    /// `wasm_pc_f_loop`: resumes the function whose PC is just below Go's SP.
    ResumeLoop,
    /// Called as plain Wasm (write barriers, `memeqbody`, `runtime.wasmDiv`, the entry
    /// `_rt0_wasm_wasip1`): no return address on Go's stack, no frame of its own.
    Plain,
    /// On the scheduler's stack (g0): `runtime.morestack`, above which the goroutine that
    /// needed more stack continues, and `runtime.mcall`, whose goroutine is parked (Go's
    /// traceback ends there).
    Morestack,
    Mcall,
}

pub use crate::wasm::toolchain::GO_BUILD_ID as BUILD_ID_SECTION;
/// `PC_F` of a module's first own function.
pub const FIRST_PC_F: u32 = 0x1000;

/// What of a module built by Go the profile needs: its functions, its table of PCs, and
/// where its functions' code is.
pub struct GoModule {
    imported_functions: u32,
    /// By `PC_F - FIRST_PC_F` (the index among defined functions).
    functions: Vec<Option<(GoFunction, Func)>>,
    table: Pclntab,
    /// The defined functions' bodies, by the same index: where each is in the module's bytes,
    /// and its map of Go's PCs, read once (`None`: unreadable).
    bodies: Vec<(std::ops::Range<usize>, OnceLock<Option<BodyMap>>)>,
}

impl GoModule {
    /// `wasm`'s Go view if Go's compiler built it; `None` for any other module, and for a Go
    /// module whose table cannot be read (then its `name` section names its functions).
    pub fn read(wasm: &[u8]) -> Option<Self> {
        let module = Module::read(wasm)?;
        let table = Pclntab::find(module.data_image()?, module.go_minor)?;
        let defined = module.function_types.len();
        let mut functions = vec![None; defined];
        for entry in table.functions() {
            let (pc_f, func) = entry?;
            let index = pc_f.checked_sub(FIRST_PC_F)? as usize;
            let name = table.name(func)?;
            let go_abi = module.function_types.get(index) == Some(&true);
            let role = match name.as_str() {
                "runtime.morestack" => Role::Morestack,
                "runtime.mcall" => Role::Mcall,
                "wasm_pc_f_loop" | "wasm_pc_f_loop_export" => Role::ResumeLoop,
                _ if func.flag & FLAG_TOP_FRAME != 0 => Role::TopFrame,
                _ if !go_abi => Role::Plain,
                _ => Role::Go,
            };
            let function = GoFunction {
                file: table.start_file(func),
                start_line: table.start_line(func)?,
                frame_size: table.frame_size(func)?,
                name,
                role,
            };
            *functions.get_mut(index)? = Some((function, func));
        }
        Some(GoModule {
            imported_functions: module.imported_functions,
            functions,
            table,
            bodies: module
                .bodies
                .into_iter()
                .map(|range| (range, OnceLock::new()))
                .collect(),
        })
    }

    /// Function `func_index` (in the function index space, imports first).
    pub fn function(&self, func_index: u32) -> Option<&GoFunction> {
        let defined = func_index.checked_sub(self.imported_functions)?;
        Some(&self.functions.get(defined as usize)?.as_ref()?.0)
    }

    /// Whether Go's release is before 1.25 (whose runtime structures differ), as its table's
    /// layout tells.
    pub fn before_go_1_25(&self) -> bool {
        self.table.entries_are_pcs()
    }

    /// The functions by their index among the defined ones (`PC_F - FIRST_PC_F`).
    pub fn defined_functions(&self) -> impl Iterator<Item = Option<&GoFunction>> {
        self.functions.iter().map(|f| f.as_ref().map(|(f, _)| f))
    }

    pub fn imported_functions(&self) -> u32 {
        self.imported_functions
    }

    /// The function index and code offset of Go PC `pc`: a return address is its call.
    pub fn location_of(&self, wasm: &[u8], pc: u64) -> Option<(u32, u32)> {
        let defined = u32::try_from(pc >> 16).ok()?.checked_sub(FIRST_PC_F)?;
        let map = self.body_map(wasm, defined)?;
        Some((
            self.imported_functions + defined,
            map.offset_of(pc as u32 & 0xffff),
        ))
    }

    /// The frames at code offset `offset` of function `func_index`, innermost first (the calls
    /// inlined there, then the function): a call's line for a call, else its basic block's.
    pub fn frames_at(&self, wasm: &[u8], func_index: u32, offset: u32) -> Option<Vec<NamedFrame>> {
        let defined = func_index.checked_sub(self.imported_functions)?;
        let (_, func) = self.functions.get(defined as usize)?.as_ref()?;
        let pc = self.body_map(wasm, defined)?.pc_at(offset);
        self.table.frames_at(*func, pc)
    }

    fn body_map(&self, wasm: &[u8], defined: u32) -> Option<&BodyMap> {
        let (range, map) = self.bodies.get(defined as usize)?;
        map.get_or_init(|| {
            let body = FunctionBody::new(wasmparser::BinaryReader::new(
                wasm.get(range.clone())?,
                range.start,
            ));
            BodyMap::of(&body, FIRST_PC_F + defined)
        })
        .as_ref()
    }
}

/// What of the module the table is read with.
struct Module<'a> {
    imported_functions: u32,
    /// Per defined function: whether it has Go's signature, `(i32) -> i32`.
    function_types: Vec<bool>,
    bodies: Vec<std::ops::Range<usize>>,
    /// The active data segments of memory 0: (address, bytes).
    segments: Vec<(usize, &'a [u8])>,
    go_minor: Option<u32>,
}

impl<'a> Module<'a> {
    fn read(wasm: &'a [u8]) -> Option<Self> {
        let mut go = false;
        let mut go_signature = Vec::new();
        let mut module = Module {
            imported_functions: 0,
            function_types: Vec::new(),
            bodies: Vec::new(),
            segments: Vec::new(),
            go_minor: None,
        };
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.ok()? {
                Payload::CustomSection(section) => match section.as_known() {
                    _ if section.name() == BUILD_ID_SECTION => go = true,
                    KnownCustom::Producers(producers) => {
                        module.go_minor = go_release(producers);
                    }
                    _ => {}
                },
                Payload::TypeSection(reader) => {
                    for ty in reader.into_iter_err_on_gc_types() {
                        let ty = ty.ok()?;
                        go_signature
                            .push(ty.params() == [ValType::I32] && ty.results() == [ValType::I32]);
                    }
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        if matches!(import.ok()?.ty, TypeRef::Func(_) | TypeRef::FuncExact(_)) {
                            module.imported_functions += 1;
                        }
                    }
                }
                Payload::FunctionSection(reader) => {
                    for ty in reader {
                        let ty = ty.ok()? as usize;
                        module
                            .function_types
                            .push(go_signature.get(ty).copied().unwrap_or(false));
                    }
                }
                Payload::CodeSectionEntry(body) => module.bodies.push(body.range()),
                Payload::DataSection(reader) => {
                    for data in reader {
                        let data = data.ok()?;
                        if let Some(address) = constant_address(&data) {
                            module.segments.push((address as usize, data.data));
                        }
                    }
                }
                _ => {}
            }
        }
        go.then_some(module)
    }

    /// Memory 0 as the data segments leave it: Go's linker splits its data wherever eight or
    /// more zero bytes run, so no table is whole in one segment. `None` past
    /// [`MAX_DATA_IMAGE`].
    fn data_image(&self) -> Option<Vec<u8>> {
        let end = self
            .segments
            .iter()
            .map(|(at, bytes)| at + bytes.len())
            .max()
            .unwrap_or(0);
        if end > MAX_DATA_IMAGE {
            return None;
        }
        let mut image = vec![0; end];
        for &(at, bytes) in &self.segments {
            image[at..at + bytes.len()].copy_from_slice(bytes);
        }
        Some(image)
    }
}

/// Bytes of data-segment memory read at most, from address 0: Go's linker lays its data out from
/// 4 KiB on, a few tens of MiB for large programs; a module with a segment at 4 GiB would
/// otherwise have the table searched through 4 GiB of zeros.
const MAX_DATA_IMAGE: usize = 512 << 20;

/// The `x` of Go 1.x in a `producers` section (`language: Go go1.27.3`).
fn go_release(producers: wasmparser::ProducersSectionReader<'_>) -> Option<u32> {
    for field in producers {
        for value in field.ok()?.values {
            let value = value.ok()?;
            if let Some(rest) = value.version.strip_prefix("go1.") {
                let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
                return minor.parse().ok();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::wasm::tests::fixture;

    /// The Go functions of `wasm` by function index.
    fn functions(wasm: &[u8]) -> Option<HashMap<u32, GoFunction>> {
        let module = GoModule::read(wasm)?;
        let first = module.imported_functions();
        Some(
            module
                .defined_functions()
                .enumerate()
                .filter_map(|(i, f)| Some((first + i as u32, f?.clone())))
                .collect(),
        )
    }

    /// A module that says Go built it, with the table's magic number in a data segment at
    /// 3.75 GiB: not read (the image of its memory would be searched through 3.75 GiB).
    #[test]
    fn a_data_segment_far_out_is_not_searched() {
        use wasm_encoder::{ConstExpr, CustomSection, DataSection, MemorySection, MemoryType};
        let mut module = wasm_encoder::Module::new();
        let mut memories = MemorySection::new();
        memories.memory(MemoryType {
            minimum: 65536,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        module.section(&memories);
        let mut data = DataSection::new();
        let header = [0xf1, 0xff, 0xff, 0xff, 0, 0, 1, 8];
        data.active(0, &ConstExpr::i32_const(0xf000_0000u32 as i32), header);
        module.section(&data);
        module.section(&CustomSection {
            name: BUILD_ID_SECTION.into(),
            data: b"id".as_slice().into(),
        });
        let wasm = module.finish();
        let module = Module::read(&wasm).unwrap();
        assert_eq!(module.segments.len(), 1);
        assert!(module.data_image().is_none());
        assert!(GoModule::read(&wasm).is_none());
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
        assert!(GoModule::read(&fixture("c/cprog.wasm")).is_none());
        assert!(GoModule::read(&fixture("rust/alloc.wasm")).is_none());
    }
}
