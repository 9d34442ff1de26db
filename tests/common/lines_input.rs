//! The input of the `lines` fixture (`tests/fixtures/c/lines.c`), made where it is needed
//! rather than committed: the same text on every run.

use std::path::Path;

/// About `bytes` of text: lines of three to fifteen words from a vocabulary of 5,000.
pub fn write(path: &Path, bytes: usize) {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let vocabulary: Vec<String> = (0..5000)
        .map(|_| {
            (0..2 + next(8))
                .map(|_| (b'a' + next(26) as u8) as char)
                .collect()
        })
        .collect();
    let mut text = String::with_capacity(bytes + 200);
    while text.len() < bytes {
        let words = 3 + next(13);
        for w in 0..words {
            if w > 0 {
                text.push(' ');
            }
            text.push_str(&vocabulary[next(5000) as usize]);
        }
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}
