//! The sources that the modules' source maps carry (`sourcesContent`) and that are not on disk
//! (AssemblyScript's standard library, a build made on another machine), written beside the
//! profile for viewers that show source: `go tool pprof -source_path DIR -trim_path / -list
//! FUNCTION PROFILE`, `wasmspy report --lines`, or an editor opening the frame's file under DIR.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use crate::shared::regular_file::read_at_most;
use crate::ProfilerHandle;

/// The longest source file whose lines `report --lines` shows: a source, not a data file.
const MAX_SOURCE_BYTES: u64 = 16 << 20;

/// The most of a line's text `report --lines` shows, in characters.
const MAX_TEXT_CHARS: usize = 80;

/// The directory the sources carried for `profile` are written to.
fn directory(profile: &Path) -> PathBuf {
    PathBuf::from(format!("{}.sources", profile.display()))
}

/// Writes the carried sources under `PROFILE.sources/`, each at its path as the profile names
/// it (an absolute path under the directory's root). A map's paths are the guest's: one that
/// climbs out (`..`) is not written. What cannot be written is a warning.
pub fn write(profiler: &ProfilerHandle, profile: &Path) {
    let carried = profiler.carried_sources();
    if carried.is_empty() {
        return;
    }
    let dir = directory(profile);
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

/// The text of source lines, for `report --lines`: read from the file where the profile says it
/// is or, where that is absent, from the copy its source map carried (`PROFILE.sources/`);
/// each file read once.
pub struct SourceText {
    dir: PathBuf,
    files: HashMap<String, Option<Vec<String>>>,
}

impl SourceText {
    /// The lines of the sources named by the profile at `profile`.
    pub fn of(profile: &Path) -> Self {
        SourceText {
            dir: directory(profile),
            files: HashMap::new(),
        }
    }

    /// Line `line` (from 1) of `file`, trimmed and cut to [`MAX_TEXT_CHARS`]; `None` where the
    /// file cannot be read, is not text, or is shorter.
    pub fn line(&mut self, file: &str, line: u32) -> Option<String> {
        let dir = &self.dir;
        let lines = self.files.entry(file.to_string()).or_insert_with(|| {
            let copy = within(file).map(|relative| dir.join(relative));
            [Some(PathBuf::from(file)), copy]
                .into_iter()
                .flatten()
                .find_map(|path| read_at_most(&path, MAX_SOURCE_BYTES).ok())
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .map(|text| text.lines().map(str::to_string).collect())
        });
        let text = lines.as_ref()?.get((line as usize).checked_sub(1)?)?.trim();
        Some(match text.char_indices().nth(MAX_TEXT_CHARS) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text.to_string(),
        })
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

    #[test]
    fn a_line_is_read_beside_the_profile_where_absent_and_cut() {
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("out.pb.gz");
        let copy = directory(&profile).join("~lib/a.ts");
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        let long = "x".repeat(MAX_TEXT_CHARS + 5);
        std::fs::write(&copy, format!("first\n  \tsecond  \n{long}\n")).unwrap();
        let mut text = SourceText::of(&profile);
        assert_eq!(text.line("~lib/a.ts", 2).as_deref(), Some("second"));
        let cut = text.line("~lib/a.ts", 3).unwrap();
        assert_eq!(cut, format!("{}…", &long[..MAX_TEXT_CHARS]));
        assert_eq!(text.line("~lib/a.ts", 0), None);
        assert_eq!(text.line("~lib/a.ts", 4), None);
        assert_eq!(text.line("../a.ts", 1), None);
        let on_disk = dir.path().join("b.ts");
        std::fs::write(&on_disk, "on disk\n").unwrap();
        assert_eq!(
            text.line(on_disk.to_str().unwrap(), 1).as_deref(),
            Some("on disk")
        );
    }
}
