//! Human-readable names for mangled Rust (legacy and v0) and C++ (Itanium) symbols.

use std::borrow::Cow;

/// Demangles `name`, or returns it unchanged when it is not a mangled symbol.
pub fn demangle(name: &str) -> Cow<'_, str> {
    // Rust first: legacy Rust symbols are also valid Itanium symbols, and the C++ demangler
    // would keep the `17h<hash>E` suffix that rustc-demangle strips.
    if let Ok(sym) = rustc_demangle::try_demangle(name) {
        return Cow::Owned(format!("{sym:#}"));
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(demangled) = sym.demangle() {
                return Cow::Owned(demangled);
            }
        }
    }
    Cow::Borrowed(name)
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn rust_legacy_drops_the_hash() {
        assert_eq!(
            demangle("_ZN7hotspot6engine9warm_path17hf943d30d5f82710bE"),
            "hotspot::engine::warm_path"
        );
    }

    #[test]
    fn rust_v0() {
        assert_eq!(
            demangle("_RNvCs1234_7mycrate3foo"),
            "mycrate::foo",
            "v0 symbols demangle without the crate disambiguator"
        );
    }

    #[test]
    fn cpp_itanium() {
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(
            demangle("_ZNSt3__16vectorIiNS_9allocatorIiEEE9push_backEOi"),
            "std::__1::vector<int, std::__1::allocator<int> >::push_back(int&&)"
        );
    }

    #[test]
    fn plain_names_unchanged() {
        assert_eq!(demangle("hot_function"), "hot_function");
        assert_eq!(demangle("_Zbogus"), "_Zbogus");
    }
}
