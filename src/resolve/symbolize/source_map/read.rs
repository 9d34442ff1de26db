//! A source map's JSON read: the v3 format (its fields, segments and VLQ) checked by the
//! `sourcemap` crate, then the `mappings` walked again segment by segment in file order, with
//! the crate's VLQ decoder, because the crate sorts its tokens unstably and that order is what
//! decides between several segments at one column.

use serde::Deserialize;

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

#[derive(Deserialize)]
struct Mappings {
    mappings: String,
}

/// Reads a v3 source map of a Wasm module: its every segment on generated line 1, whose
/// column is the byte offset in the module. An error says what is malformed.
pub fn read(json: &[u8]) -> Result<Read, String> {
    let mut map = sourcemap::SourceMap::from_slice(json).map_err(|e| e.to_string())?;
    let Mappings { mappings } = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    let source_root = map.get_source_root().map(str::to_string);
    // The sources as written: the crate would prefix `sourceRoot` to them.
    map.set_source_root(None::<&str>);
    let sources: Vec<String> = map.sources().map(str::to_string).collect();
    let contents = (0..sources.len() as u32)
        .map(|i| map.get_source_contents(i).map(str::to_string))
        .collect();
    let names: Vec<String> = map.names().map(str::to_string).collect();
    let segments = walk(&mappings, sources.len(), names.len())?;
    Ok(Read {
        file: map.get_file().map(str::to_string),
        source_root,
        sources,
        contents,
        names,
        segments,
    })
}

/// The segments of `mappings` in file order. The crate has checked the indices already; they
/// are checked again so that nothing here rests on it.
fn walk(mappings: &str, sources: usize, names: usize) -> Result<Vec<Segment>, String> {
    let mut segments = Vec::new();
    // Each field after the first is relative to its value in the previous segment.
    let (mut offset, mut source, mut line, mut column, mut name) = (0i64, 0i64, 0i64, 0i64, 0i64);
    for (generated_line, segments_of_line) in mappings.split(';').enumerate() {
        for text in segments_of_line.split(',').filter(|s| !s.is_empty()) {
            if generated_line > 0 {
                return Err(format!(
                    "it maps generated line {}, and a Wasm module's map has one line of byte offsets",
                    generated_line + 1
                ));
            }
            let fields = sourcemap::vlq::parse_vlq_segment(text).map_err(|e| e.to_string())?;
            offset += fields[0];
            let at = match fields[..] {
                [_] => None,
                [_, s, l, c, ..] if fields.len() <= 5 => {
                    source += s;
                    line += l;
                    column += c;
                    let named = fields.get(4).map(|n| {
                        name += n;
                        name
                    });
                    Some(Position {
                        source: index(source, sources, "source")?,
                        line: number(line + 1, "line")?,
                        column: number(column + 1, "column")?,
                        name: named.map(|n| index(n, names, "name")).transpose()?,
                    })
                }
                _ => return Err(format!("a segment of {} fields", fields.len())),
            };
            segments.push(Segment {
                offset: number(offset, "generated column")?,
                at,
            });
        }
    }
    Ok(segments)
}

fn index(value: i64, len: usize, what: &str) -> Result<u32, String> {
    match usize::try_from(value) {
        Ok(i) if i < len => Ok(i as u32),
        _ => Err(format!("a segment refers to {what} {value} of {len}")),
    }
}

fn number(value: i64, what: &str) -> Result<u32, String> {
    u32::try_from(value).map_err(|_| format!("a segment's {what} is {value}"))
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
            map("DAAA"),
            map("AAAAC"),
        ] {
            assert!(read(bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(read(br#"{"version":3,"sources":[],"names":[]}"#).is_err());
    }
}
