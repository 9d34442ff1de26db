//! The host's frames named (see [`RawFrame::Host`](crate::shared::RawFrame::Host)): an
//! address in the executable or a library, as Linux perf names it, from the object's file:
//! DWARF where it has some (file, line, inlined calls; not with `--no-dwarf`), else its symbol table, else the
//! object and the offset in it. Each object's file is opened the first time one of its
//! addresses is named, each address named once.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::{FunctionName, SourceFrame};
use crate::shared::loaded_objects::{object_at, LoadedObject};

pub struct HostSymbols {
    /// Whether DWARF is read (file, line, inlined calls), or symbols alone (`--no-dwarf`).
    use_dwarf: bool,
    /// By object (its index in `loaded_objects`): its file's symbols; `None` where it has
    /// no file or the file cannot be read.
    files: FxHashMap<usize, Option<addr2line::Loader>>,
    named: FxHashMap<u64, Arc<[SourceFrame]>>,
}

impl HostSymbols {
    pub fn new(use_dwarf: bool) -> Self {
        HostSymbols {
            use_dwarf,
            files: FxHashMap::default(),
            named: FxHashMap::default(),
        }
    }

    /// The source frames of `address`, innermost first.
    pub fn source_frames(&mut self, address: u64) -> Arc<[SourceFrame]> {
        if let Some(found) = self.named.get(&address) {
            return found.clone();
        }
        let named: Arc<[SourceFrame]> = self.name(address).into();
        self.named.insert(address, named.clone());
        named
    }

    fn name(&mut self, address: u64) -> Vec<SourceFrame> {
        let Some((index, object)) = object_at(address) else {
            return vec![plain(format!("[unknown] {address:#x}"))];
        };
        let probe = address - object.bias;
        let file = self
            .files
            .entry(index)
            .or_insert_with(|| open(object))
            .as_ref();
        let mut frames = Vec::new();
        if let Some(file) = file {
            if let Some(mut found) = self
                .use_dwarf
                .then(|| file.find_frames(probe).ok())
                .flatten()
            {
                while let Ok(Some(frame)) = found.next() {
                    let Some(function) = frame.function.as_ref() else {
                        continue;
                    };
                    let Ok(raw) = function.raw_name() else {
                        continue;
                    };
                    let location = frame.location.as_ref();
                    frames.push(SourceFrame {
                        function: FunctionName::from_raw(raw.into_owned()),
                        file: location
                            .and_then(|l| l.file)
                            .map(crate::shared::source_path::clean)
                            .unwrap_or_default(),
                        line: location.and_then(|l| l.line).unwrap_or(0),
                        column: location.and_then(|l| l.column).unwrap_or(0),
                        start_line: 0,
                    });
                }
            }
            // The function the code is in (the outermost frame) by its symbol where it has
            // one: DWARF's name of it is unqualified without a linkage name (`-C debuginfo=
            // line-tables-only`), the symbol is what perf shows.
            if let Some(symbol) = file.find_symbol(probe) {
                let function = FunctionName::from_raw(symbol.to_string());
                match frames.last_mut() {
                    Some(outermost) => outermost.function = function,
                    None => frames.push(named(function)),
                }
            }
        }
        if frames.is_empty() {
            frames.push(plain(format!("{}+{probe:#x}", file_name(&object.path))));
        }
        frames
    }
}

/// The symbols of `object`'s file: the running executable's own (`/proc/self/exe`, whatever
/// replaced its path since), a library's at its path.
fn open(object: &LoadedObject) -> Option<addr2line::Loader> {
    match object.executable {
        true => addr2line::Loader::new("/proc/self/exe").ok(),
        false if object.path.starts_with('/') => addr2line::Loader::new(&object.path).ok(),
        false => None,
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A frame of a name that is not mangled.
fn plain(name: String) -> SourceFrame {
    named(FunctionName {
        name: name.clone(),
        system_name: name,
    })
}

/// A frame of a function alone, its file and line unknown.
fn named(function: FunctionName) -> SourceFrame {
    SourceFrame {
        function,
        file: String::new(),
        line: 0,
        column: 0,
        start_line: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_host_function_with_a_name() -> u64 {
        a_host_function_with_a_name as *const () as usize as u64
    }

    #[test]
    fn an_address_in_this_executable_is_named_from_its_symbols() {
        let address = std::hint::black_box(a_host_function_with_a_name()) + 1;
        let frames = HostSymbols::new(true).source_frames(address);
        let leaf = frames.last().expect("named");
        assert!(
            leaf.function.name.ends_with("a_host_function_with_a_name"),
            "{frames:?}"
        );
    }

    #[test]
    fn an_address_in_no_object_is_named_by_its_value() {
        let frames = HostSymbols::new(true).source_frames(8);
        assert_eq!(frames[0].function.name, "[unknown] 0x8");
    }
}
