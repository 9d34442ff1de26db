//! A source file's path as every view of a profile shows it: cleaned lexically, once, where
//! the path is made, so that one file has one path in the profile, `report` and pprof alike.

/// Go's `filepath.Clean`, which pprof applies to file names: no `.` elements, no `..` after a
/// name, no repeated slashes.
pub fn clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." if parts.last().is_some_and(|&p| p != "..") => {
                parts.pop();
            }
            ".." if rooted => {}
            _ => parts.push(part),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// [`clean`], a URL's `scheme://` kept whole (`wasisdk://v30/libc/x.c`, `file:///a.c`).
pub fn clean_keeping_scheme(path: &str) -> String {
    match path.find("://") {
        Some(at) => {
            let (scheme, rest) = path.split_at(at + 3);
            match clean(rest).as_str() {
                "." => scheme.to_string(),
                cleaned => format!("{scheme}{cleaned}"),
            }
        }
        None => clean(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_cleaned_as_go_cleans_them() {
        for (path, cleaned) in [
            ("././libc/a.c", "libc/a.c"),
            ("/x//y/../z", "/x/z"),
            ("../a/./b", "../a/b"),
            ("/..", "/"),
            ("wasisdk://v30/x.c", "wasisdk:/v30/x.c"),
        ] {
            assert_eq!(clean(path), cleaned, "{path}");
        }
    }

    #[test]
    fn paths_are_normalised_lexically() {
        for (joined, normal) in [
            (
                "./build/./libc-bottom-half/crt/crt1-command.c",
                "build/libc-bottom-half/crt/crt1-command.c",
            ),
            ("./build/./x/../libc/crt1.c", "build/libc/crt1.c"),
            ("/usr//lib/../include/./stdio.h", "/usr/include/stdio.h"),
            ("../src/./a.c", "../src/a.c"),
            ("a/../../b.c", "../b.c"),
            ("/../a.c", "/a.c"),
            ("examples/hotspots.c", "examples/hotspots.c"),
            (
                "wasisdk://v30.0/./src/../libc/x.c",
                "wasisdk://v30.0/libc/x.c",
            ),
            ("file:///home/./me/a.c", "file:///home/me/a.c"),
        ] {
            assert_eq!(clean_keeping_scheme(joined), normal, "{joined}");
        }
    }
}
