//! What Linux perf is told of the guest's compiled code, so that `perf report` names it: a
//! perf map (`/tmp/perf-PID.map`: each function's address, size and name; [`perfmap`]) and a
//! jitdump (`jit-PID.dump`: each function's code, name and source lines, which `perf inject
//! -j` turns into ELF files with line tables; [`jitdump`]). Both list what
//! [`crate::resolve::Resolver::code_listing`] lists: the registered modules' functions, named
//! as profiles name them, with the lines of their DWARF.

#[cfg(target_os = "linux")]
pub mod jitdump;
pub mod perfmap;
