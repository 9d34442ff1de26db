//! Reading a file whose path came from somewhere untrusted (a guest's custom section, a source
//! map, a profile): only a regular file, never blocking, never more than asked.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The first `limit` bytes of the regular file at `path`. Opened without blocking: a FIFO put
/// where a map or a source should be would wait for a writer.
pub fn read_at_most(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}
