//! What a Wasm binary says, read with `wasmparser`, for the stages that need it (the allocator
//! rewrite before the run, the resolver after): a component's core modules and the WIT
//! functions their imports lower ([`component`]), sections appended to one ([`appended`]),
//! the demangling of the names in them ([`demangle`]), where data segments put their bytes
//! ([`data`]), and where a C program keeps its own data, from its DWARF ([`dwarf_layout`]):
//! CPython's, to read its Python stack ([`crate::runtimes::cpython`]); a core module's bytes,
//! shared with its component's ([`module_bytes`]); a host function threaded into nested
//! components ([`nested`]); the toolchain that built a module, and what it must be told for
//! file:line ([`toolchain`]).

pub mod appended;
pub mod component;
pub mod data;
pub mod demangle;
pub mod dwarf_layout;
pub mod module_bytes;
pub mod nested;
pub mod toolchain;

#[cfg(test)]
pub(crate) mod tests {
    /// A committed test fixture's bytes (`tests/fixtures/NAME`).
    pub fn fixture(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        std::fs::read(path.join(name)).unwrap()
    }
}
