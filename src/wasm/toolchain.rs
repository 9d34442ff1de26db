//! Which toolchain built a module, as its `producers` section says, and what that toolchain
//! must be told for its build to give a profile file:line: the advice of the warning a
//! module without DWARF gets. The section is optional and often stripped (Emscripten strips
//! it, AssemblyScript writes none): without it the advice is the generic `-g`.

use wasmparser::{KnownCustom, Parser, Payload};

/// The compiler that wrote the module's code, by what it must be told for file:line. Where the
/// section names several, the first of this order: a toolchain that drives clang or
/// binaryen itself (Emscripten, rustc with wasi-libc's C, TinyGo) is told its own flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Compiler {
    AssemblyScript,
    Emscripten,
    Go,
    TinyGo,
    Rust,
    Zig,
    Clang,
}

/// What a module's `producers` section says built it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Toolchain {
    compiler: Option<Compiler>,
    /// binaryen's `wasm-opt` ran on the compiler's output: unless told, it drops DWARF.
    wasm_opt: bool,
}

/// The custom section that Go's linker puts first in every module it writes: it says Go where
/// the `producers` section is stripped.
pub const GO_BUILD_ID: &str = "go:buildid";

impl Toolchain {
    /// The toolchain `wasm`'s `producers` section names (what it says before a fault, where
    /// malformed), or Go's build id.
    pub fn of(wasm: &[u8]) -> Self {
        let mut toolchain = Toolchain::default();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload {
                Ok(Payload::CustomSection(reader)) if reader.name() == GO_BUILD_ID => {
                    toolchain.found(Compiler::Go);
                }
                Ok(Payload::CustomSection(reader)) => {
                    if let KnownCustom::Producers(fields) = reader.as_known() {
                        toolchain.read(fields);
                    }
                }
                Ok(_) => {}
                // Malformed past here: what was read stands.
                Err(_) => break,
            }
        }
        toolchain
    }

    fn found(&mut self, compiler: Compiler) {
        self.compiler = Some(self.compiler.map_or(compiler, |c| c.min(compiler)));
    }

    fn read(&mut self, fields: wasmparser::ProducersSectionReader<'_>) {
        let mut c_language = false;
        let mut processed = false;
        for field in fields.into_iter().flatten() {
            for value in field.values.into_iter().flatten() {
                let name = value.name.to_ascii_lowercase();
                if field.name == "language" && is_c(&name) {
                    c_language = true;
                    continue;
                }
                processed |= field.name == "processed-by";
                let compiler = match name.as_str() {
                    "assemblyscript" | "asc" => Compiler::AssemblyScript,
                    "emscripten" => Compiler::Emscripten,
                    // `language Go`, `processed-by Go cmd/compile`.
                    "go" | "go cmd/compile" => Compiler::Go,
                    "tinygo" => Compiler::TinyGo,
                    "rust" | "rustc" => Compiler::Rust,
                    "zig" => Compiler::Zig,
                    // `clang`, `Debian clang`, `Apple clang`.
                    _ if name.split(' ').any(|word| word == "clang") => Compiler::Clang,
                    "binaryen" | "wasm-opt" => {
                        self.wasm_opt = true;
                        continue;
                    }
                    _ => continue,
                };
                self.found(compiler);
            }
        }
        if c_language && self.compiler.is_none() {
            // clang always names itself in `processed-by`; Zig's own compiler (0.17, Debug
            // and ReleaseFast) writes `language C99` and nothing else.
            self.compiler = Some(if processed {
                Compiler::Clang
            } else {
                Compiler::Zig
            });
        }
    }

    /// What would give the code of `module` file:line, said in the warning that it has no
    /// DWARF: what to build it with (for each toolchain named, in one sentence), or the source
    /// map to give. `None` for Go's, which has none to give: Go writes no DWARF for Wasm, and
    /// wasmspy reads its own symbol table instead.
    pub fn line_advice(&self, module: &str) -> Option<String> {
        let (by, build) = match self.compiler {
            Some(Compiler::Go) => return None,
            Some(Compiler::AssemblyScript) => (
                "AssemblyScript",
                "build with --sourceMap, and --debug for names",
            ),
            Some(Compiler::Emscripten) => ("Emscripten", "build with -g or -gsource-map"),
            Some(Compiler::TinyGo) => ("TinyGo", "build without -no-debug"),
            Some(Compiler::Rust) => (
                "rustc",
                "set debug = \"line-tables-only\" in its Cargo profile",
            ),
            Some(Compiler::Zig) => ("Zig", "build it unstripped, with -fno-strip"),
            Some(Compiler::Clang) => ("clang", "build with -g or -gline-tables-only"),
            None => ("", "build with -g"),
        };
        // AssemblyScript and Emscripten run binaryen themselves, and their flags reach it.
        let wasm_opt = self.wasm_opt
            && !matches!(
                self.compiler,
                Some(Compiler::AssemblyScript | Compiler::Emscripten)
            );
        let by = match (by, wasm_opt) {
            ("", false) => String::new(),
            ("", true) => "processed by wasm-opt: ".to_string(),
            (by, false) => format!("built by {by}: "),
            (by, true) => format!("built by {by}, then wasm-opt: "),
        };
        let opt = if wasm_opt {
            ", and run wasm-opt with -g or with --input-source-map and --output-source-map"
        } else {
            ""
        };
        // A component's core module (`app.wasm/core`) has no file of its own to be beside.
        let beside = match module.contains('/') {
            true => String::new(),
            false => format!(", or {module}.map beside it"),
        };
        Some(format!(
            "{by}{build}{opt}; or give wasmspy its source map: --source-map FILE or a sourceMappingURL section{beside}"
        ))
    }
}

/// A C or C++ dialect as LLVM names it in `language` (`C99`, `C11`, `C_plus_plus_14`).
fn is_c(name: &str) -> bool {
    let version = name
        .strip_prefix("c_plus_plus")
        .or_else(|| name.strip_prefix('c'));
    version.is_some_and(|v| {
        v.trim_start_matches('_')
            .bytes()
            .all(|b| b.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{CustomSection, Module, ProducersField, ProducersSection};

    /// A `producers` section's fields, each with its values' names.
    type Fields<'a> = &'a [(&'a str, &'a [&'a str])];

    /// A module whose `producers` section has these fields.
    fn module(fields: Fields<'_>) -> Vec<u8> {
        let mut section = ProducersSection::new();
        for (name, values) in fields {
            let mut field = ProducersField::new();
            for value in *values {
                field.value(value, "1.0");
            }
            section.field(name, &field);
        }
        let mut module = Module::new();
        module.section(&section);
        module.finish()
    }

    fn advice(fields: Fields<'_>) -> Option<String> {
        Toolchain::of(&module(fields)).line_advice("app.wasm")
    }

    const MAP: &str = "; or give wasmspy its source map: --source-map FILE or a sourceMappingURL section, or app.wasm.map beside it";

    #[test]
    fn each_toolchain_gets_its_flags() {
        let cases: [(Fields<'_>, &str); 9] = [
            (
                &[("language", &["C99"]), ("processed-by", &["Debian clang"])],
                "built by clang: build with -g or -gline-tables-only",
            ),
            (
                &[("language", &["C11", "C_plus_plus_14"]), ("processed-by", &["clang"])],
                "built by clang: build with -g or -gline-tables-only",
            ),
            // Rust's own C (wasi-libc) is clang's: rustc's flags are the ones to give.
            (
                &[("language", &["C11", "Rust"]), ("processed-by", &["clang", "rustc"])],
                "built by rustc: set debug = \"line-tables-only\" in its Cargo profile",
            ),
            (
                &[("processed-by", &["clang", "Emscripten"])],
                "built by Emscripten: build with -g or -gsource-map",
            ),
            (
                &[("processed-by", &["AssemblyScript", "binaryen"])],
                "built by AssemblyScript: build with --sourceMap, and --debug for names",
            ),
            (
                &[("language", &["C11", "C99"]), ("processed-by", &["clang", "TinyGo"])],
                "built by TinyGo: build without -no-debug",
            ),
            (
                &[("language", &["C99"])],
                "built by Zig: build it unstripped, with -fno-strip",
            ),
            (
                &[("language", &["C99"]), ("processed-by", &["Debian clang", "wasm-opt"])],
                "built by clang, then wasm-opt: build with -g or -gline-tables-only, and run wasm-opt with -g or with --input-source-map and --output-source-map",
            ),
            (
                &[("processed-by", &["binaryen"])],
                "processed by wasm-opt: build with -g, and run wasm-opt with -g or with --input-source-map and --output-source-map",
            ),
        ];
        for (fields, expected) in cases {
            assert_eq!(
                advice(fields),
                Some(format!("{expected}{MAP}")),
                "{fields:?}"
            );
        }
    }

    #[test]
    fn go_needs_no_advice() {
        let go = [
            ("language", &["Go"][..]),
            ("processed-by", &["Go cmd/compile"]),
        ];
        assert_eq!(advice(&go), None);
        // Its producers stripped, Go's build id still says it.
        let mut wasm = Module::new();
        wasm.section(&CustomSection {
            name: GO_BUILD_ID.into(),
            data: b"id".into(),
        });
        assert_eq!(Toolchain::of(&wasm.finish()).line_advice("app.wasm"), None);
    }

    #[test]
    fn without_a_producers_section_the_advice_is_generic() {
        let generic = Some(format!("build with -g{MAP}"));
        assert_eq!(advice(&[]), generic);
        assert_eq!(
            Toolchain::of(&Module::new().finish()).line_advice("app.wasm"),
            generic
        );
        // A tool wasmspy does not know of says nothing either.
        assert_eq!(advice(&[("processed-by", &["wit-component"])]), generic);
    }

    #[test]
    fn a_malformed_section_names_no_toolchain() {
        let mut wasm = Module::new();
        wasm.section(&CustomSection {
            name: "producers".into(),
            data: [2, 8].as_slice().into(),
        });
        assert_eq!(Toolchain::of(&wasm.finish()), Toolchain::default());
    }

    #[test]
    fn c_dialects() {
        for c in [
            "c",
            "c89",
            "c99",
            "c11",
            "c17",
            "c_plus_plus",
            "c_plus_plus_14",
        ] {
            assert!(is_c(c), "{c}");
        }
        for other in ["", "rust", "cobol", "go", "c_sharp"] {
            assert!(!is_c(other), "{other}");
        }
    }
}
