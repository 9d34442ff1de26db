//! Source files as V8 names its scripts: absolute paths as `file://` URLs, and back.

/// A source file as V8 writes its scripts: an absolute path as a `file://` URL.
pub(super) fn url_of(file: &str) -> String {
    if !file.starts_with('/') {
        return file.to_string();
    }
    let mut url = String::from("file://");
    for c in file.chars() {
        match c {
            ' ' => url.push_str("%20"),
            '%' => url.push_str("%25"),
            '#' => url.push_str("%23"),
            '?' => url.push_str("%3F"),
            c => url.push(c),
        }
    }
    url
}

/// A `file://` URL's path, as [`url_of`] writes it.
pub(super) fn file_of(url: &str) -> String {
    let Some(path) = url.strip_prefix("file://") else {
        return url.to_string();
    };
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).and_then(|&b| hex(b)),
            bytes.get(i + 2).and_then(|&b| hex(b)),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths() {
        assert_eq!(url_of("/a b/x%.c"), "file:///a%20b/x%25.c");
        assert_eq!(file_of("file:///a%20b/x%25.c"), "/a b/x%.c");
        assert_eq!(url_of("src/x.c"), "src/x.c");
        assert_eq!(file_of("wasm://wasm/0001"), "wasm://wasm/0001");
    }
}
