//! What `wasmspy report` and `wasmspy convert` do with a file's bytes: read them, rank every
//! sample type (by function and by line) and write every format. It must never panic, whatever
//! the bytes: the fuzz targets (`fuzz/`) and `tests/fuzz_corpus.rs` call it.

use wasmspy::export::{self, Format};
use wasmspy::report::top;

pub fn read_and_use(bytes: &[u8]) {
    let Ok(profile) = export::read(bytes) else {
        return;
    };
    for index in 0..profile.sample_types.len() {
        for lines in [false, true] {
            let _ = top(&profile, index, lines).render(None);
        }
        let mut chosen = profile.clone();
        chosen.default_sample_type = index;
        for format in ["pprof", "firefox", "speedscope", "svg", "folded"] {
            let format: Format = format.parse().unwrap();
            let _ = format.write(&chosen, &mut std::io::sink());
        }
    }
}

/// `bytes` gzipped, as pprof files are.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}
