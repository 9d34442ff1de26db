//! A source map's JSON read by the `oxc_sourcemap` crate (the v3 format, its fields, segments
//! and VLQ), its segments taken as the crate decoded them, in file order, which decides
//! between several segments at one offset.

/// A segment of `mappings`: the Wasm offset it starts at, and where in the source that is
/// (`None` for a one-field segment: code of no source line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub offset: u32,
    pub at: Option<Position>,
}

/// A place in a source: indices into the map's `sources` and `names`, line and column from 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub source: u32,
    pub line: u32,
    pub column: u32,
    pub name: Option<u32>,
}

/// What the map says, its segments in file order.
pub struct Read {
    pub file: Option<String>,
    pub source_root: Option<String>,
    pub sources: Vec<String>,
    /// `sourcesContent`: each source's text, where the map carries it.
    pub contents: Vec<Option<String>>,
    pub names: Vec<String>,
    pub segments: Vec<Segment>,
}

/// Reads a v3 source map of a Wasm module: its every segment on generated line 1, whose
/// column is the byte offset in the module. An error says what is malformed.
pub fn read(json: &[u8]) -> Result<Read, String> {
    let text = std::str::from_utf8(json).map_err(|e| e.to_string())?;
    let map = oxc_sourcemap::SourceMap::from_json_string(text).map_err(|e| e.to_string())?;
    let sources: Vec<String> = map.get_sources().map(str::to_string).collect();
    // `sourcesContent` may be shorter than `sources`, or absent.
    let mut contents: Vec<Option<String>> = map
        .get_source_contents()
        .map(|c| c.map(str::to_string))
        .collect();
    contents.resize(sources.len(), None);
    let mut segments = Vec::with_capacity(map.get_tokens().len());
    for token in map.get_tokens() {
        if token.get_dst_line() > 0 {
            return Err(format!(
                "it maps generated line {}, and a Wasm module's map has one line of byte offsets",
                token.get_dst_line() + 1
            ));
        }
        // The crate has checked the indices. A one-field segment has no source (and the
        // crate leaves the line of the segment before it in the token: not read then).
        let at = token.get_source_id().map(|source| Position {
            source,
            line: token.get_src_line().saturating_add(1),
            column: token.get_src_col().saturating_add(1),
            name: token.get_name_id(),
        });
        segments.push(Segment {
            offset: token.get_dst_col(),
            at,
        });
    }
    Ok(Read {
        file: map.get_file().map(str::to_string),
        source_root: map.get_source_root().map(str::to_string),
        sources,
        contents,
        names: map.get_names().map(str::to_string).collect(),
        segments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(mappings: &str) -> String {
        format!(
            r#"{{"version":3,"sources":["a.ts","b.ts"],"names":["f"],"mappings":"{mappings}"}}"#
        )
    }

    #[test]
    fn segments_keep_their_file_order_and_one_field_segments_have_no_line() {
        // Offset 2 → a.ts:1:1; offset 2 again → b.ts:3:2, name f; offset 4, no source.
        let read = read(map("EAAA,ACECA,E").as_bytes()).unwrap();
        let at = |source, line, column, name| {
            Some(Position {
                source,
                line,
                column,
                name,
            })
        };
        assert_eq!(
            read.segments,
            [
                Segment {
                    offset: 2,
                    at: at(0, 1, 1, None)
                },
                Segment {
                    offset: 2,
                    at: at(1, 3, 2, Some(0))
                },
                Segment {
                    offset: 4,
                    at: None
                },
            ]
        );
    }

    #[test]
    fn what_is_malformed_is_an_error() {
        for bad in [
            "not json".to_string(),
            map("AAAA;AAAA"),
            map("AA"),
            map("A!AA"),
            map("AEAA"),
            map("AAAAC"),
        ] {
            assert!(read(bad.as_bytes()).is_err(), "{bad}");
        }
        // No `mappings`, a negative offset.
        assert!(read(br#"{"version":3,"sources":[],"names":[]}"#).is_err());
        assert!(read(map("DAAA").as_bytes()).is_err());
    }
}
