//! The sources that the modules' source maps carry (`sourcesContent`) and that are not on disk
//! (AssemblyScript's standard library, a build made on another machine), written beside the
//! profile for viewers that show source: `go tool pprof -source_path DIR -trim_path / -list
//! FUNCTION PROFILE`, or an editor opening the frame's file under DIR.

use std::path::{Component, Path, PathBuf};

use crate::Profiler;

/// Writes the carried sources under `PROFILE.sources/`, each at its path as the profile names
/// it (an absolute path under the directory's root). A map's paths are the guest's: one that
/// climbs out (`..`) is not written. What cannot be written is a warning.
pub fn write(profiler: &Profiler, profile: &Path) {
    let carried = profiler.carried_sources();
    if carried.is_empty() {
        return;
    }
    let dir = PathBuf::from(format!("{}.sources", profile.display()));
    let mut written = 0;
    for (path, text) in &carried {
        let Some(relative) = within(path) else {
            continue;
        };
        let file = dir.join(relative);
        let wrote = file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&file, text));
        match wrote {
            Ok(()) => written += 1,
            Err(e) => {
                say!(
                    "wasmspy: warning: cannot write {} ({e}): its source map's copy of {path}",
                    file.display()
                );
                return;
            }
        }
    }
    if written > 0 {
        say!(
            "wasmspy: wrote {written} sources that source maps carry to {d} (`go tool pprof -source_path {d} -trim_path / -list FUNCTION {}` shows them)",
            profile.display(),
            d = dir.display()
        );
    }
}

/// `path` as a path below a directory: its root dropped, `.` skipped; `None` where it climbs
/// (`..`) or names nothing.
fn within(path: &str) -> Option<PathBuf> {
    let mut relative = PathBuf::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => relative.push(part),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    (!relative.as_os_str().is_empty()).then_some(relative)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_below_the_directory() {
        assert_eq!(within("/work/app/hot.ts"), Some("work/app/hot.ts".into()));
        assert_eq!(within("~lib/rt/itcms.ts"), Some("~lib/rt/itcms.ts".into()));
        assert_eq!(within("./a/./b.ts"), Some("a/b.ts".into()));
        assert_eq!(within("../../etc/passwd"), None);
        assert_eq!(within("/a/../../b"), None);
        assert_eq!(within("/"), None);
    }
}
