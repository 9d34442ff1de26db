//! The jitdump file (`tools/perf/Documentation/jitdump-specification.txt`): a code-load record
//! per function (its address, name and code bytes), each preceded by a debug-info record of
//! its source lines, so that after `perf inject -j` a `perf report --sort srcline` shows the
//! guest's `file.c:N`. Wasmtime's own jitdump agent writes no debug-info records; its writer
//! (`wasmtime-internal-jit-debug`, the same version) creates the file, maps it for perf to
//! find and writes the header and code loads; the debug-info records are written here.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use wasmtime_internal_jit_debug::perf_jitdump::{JitDumpFile, RecordId};

use crate::resolve::ListedFunction;

/// The jitdump file, kept open (and mapped: perf finds it by that mapping) while it lives.
pub struct JitDump {
    _file: JitDumpFile,
    pub path: PathBuf,
}

/// Writes `listing` to `jit-PID.dump` in the working directory, as perf expects it named.
pub fn write(listing: &[ListedFunction]) -> Result<JitDump> {
    let path = PathBuf::from(format!("jit-{}.dump", std::process::id()));
    // A file left by an earlier process with this pid would be appended to.
    let _ = std::fs::remove_file(&path);
    let cannot = || format!("cannot write {}", path.display());
    let mut file = JitDumpFile::new(&path, E_MACHINE).with_context(cannot)?;
    let pid = std::process::id();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    for f in listing {
        let timestamp = file.get_time_stamp();
        if !f.lines.is_empty() {
            let record = debug_info(f, timestamp);
            file.file_mut().write_all(&record).with_context(cannot)?;
        }
        // SAFETY: the function's code is in a registered module's text, mapped while the
        // module lives (it is registered, so alive).
        let code = unsafe { std::slice::from_raw_parts(f.code.start as *const u8, f.code.len()) };
        file.dump_code_load_record(&f.name, code, timestamp, pid, tid)
            .with_context(cannot)?;
    }
    Ok(JitDump { _file: file, path })
}

/// `JIT_CODE_DEBUG_INFO`: the record header, the code's address and the number of entries,
/// then each entry: address, line, discriminator, file name (NUL-terminated), in the host's
/// byte order.
fn debug_info(f: &ListedFunction, timestamp: u64) -> Vec<u8> {
    let mut entries = Vec::new();
    for line in &f.lines {
        entries.extend_from_slice(&(line.address as u64).to_ne_bytes());
        entries.extend_from_slice(&(line.line as i32).to_ne_bytes());
        entries.extend_from_slice(&0i32.to_ne_bytes());
        entries.extend_from_slice(line.file.as_bytes());
        entries.push(0);
    }
    let size = 16 + 8 + 8 + entries.len();
    let mut record = Vec::with_capacity(size);
    record.extend_from_slice(&(RecordId::JitCodeDebugInfo as u32).to_ne_bytes());
    record.extend_from_slice(&(size as u32).to_ne_bytes());
    record.extend_from_slice(&timestamp.to_ne_bytes());
    record.extend_from_slice(&(f.code.start as u64).to_ne_bytes());
    record.extend_from_slice(&(f.lines.len() as u64).to_ne_bytes());
    record.extend_from_slice(&entries);
    record
}

#[cfg(target_arch = "x86_64")]
const E_MACHINE: u32 = 62; // EM_X86_64
#[cfg(target_arch = "aarch64")]
const E_MACHINE: u32 = 183; // EM_AARCH64
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const E_MACHINE: u32 = 0; // EM_NONE
