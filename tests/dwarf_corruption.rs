//! Corrupted DWARF never panics the symbolizer: the fuzz target's check (`fuzz/`), run here on
//! a fixed series of random corruptions of the fixtures' DWARF.

#[path = "common/corrupt_dwarf.rs"]
mod corrupt_dwarf;

use corrupt_dwarf::symbolize_corrupted;

fn fixture(rel: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(rel),
    )
    .unwrap()
}

/// xorshift64: the same corruptions on every run.
fn patches(seed: u64, count: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut state = seed;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count).map(move |i| {
        // From one corrupted byte up to a few dozen.
        let records = 1 + (i % 40);
        (0..records)
            .flat_map(|_| next().to_le_bytes()[..5].to_vec())
            .collect()
    })
}

#[test]
fn corrupted_c_dwarf_does_not_panic() {
    let module = fixture("c/inline-dwarf5.wasm");
    for patch in patches(0x5eed, 300) {
        symbolize_corrupted(&module, &patch);
    }
}

#[test]
fn corrupted_rust_dwarf_does_not_panic() {
    let module = fixture("rust/iter.wasm");
    for patch in patches(0xd1a5, 60) {
        symbolize_corrupted(&module, &patch);
    }
}
