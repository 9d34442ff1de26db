//! The line of a bytecode offset, from a script's source notes, as `js::PCToLineNumber` reads
//! them (SpiderMonkey's frontend/SourceNotes.h and vm/JSScript.cpp; the format is the same
//! in 140 and 153, and 147's notes decode with it: the tests of the walk check lines against
//! the engine's own stack traces).
//!
//! A note is one byte, `type << 4 | delta` (the bytecode offset moves on by `delta`), or, with
//! its high bit set, an `XDelta` whose low seven bits are the delta; `0x80` (an `XDelta` of
//! nothing) ends the notes. A note's operands follow it: one byte, or four where the first has
//! its high bit (the value then its low 31 bits, big-endian). The notes that move the line:
//! `NewLine` and `NewLineColumn` (the next line), `SetLine` and `SetLineColumn` (the script's
//! first line plus the first operand).

/// Operands of each note type: `ColSpan`, `NewLine`, `NewLineColumn`, `SetLine`,
/// `SetLineColumn`, `Breakpoint`, `BreakpointStepSep`, `Unused7`.
const OPERANDS: [u8; 8] = [1, 0, 1, 1, 2, 0, 0, 0];
const NEW_LINE: u8 = 1;
const NEW_LINE_COLUMN: u8 = 2;
const SET_LINE: u8 = 3;
const SET_LINE_COLUMN: u8 = 4;
/// The bit of a note byte that makes it an `XDelta`, and of an operand's first byte that makes
/// it four bytes long.
const HIGH_BIT: u8 = 0x80;
const TERMINATOR: u8 = 0x80;

/// The line of bytecode offset `target` in a script whose first line is `start_line`, from its
/// notes (`bytes`, which may end before the terminator: the notes' end); `None` for a note cut
/// short, or a line that overflows.
pub fn line_at(mut bytes: impl Iterator<Item = u8>, start_line: u32, target: u32) -> Option<u32> {
    let mut line = start_line;
    let mut offset: u32 = 0;
    while let Some(note) = bytes.next() {
        if note == TERMINATOR {
            break;
        }
        let (kind, delta) = if note & HIGH_BIT != 0 {
            (None, note & !HIGH_BIT)
        } else {
            (Some(note >> 4), note & 0x0f)
        };
        offset = offset.checked_add(u32::from(delta))?;
        if offset > target {
            break;
        }
        let Some(kind) = kind else { continue };
        let mut first = 0;
        for i in 0..OPERANDS[usize::from(kind)] {
            let operand = operand(&mut bytes)?;
            if i == 0 {
                first = operand;
            }
        }
        line = match kind {
            NEW_LINE | NEW_LINE_COLUMN => line.checked_add(1)?,
            SET_LINE | SET_LINE_COLUMN => start_line.checked_add(first)?,
            _ => line,
        };
    }
    Some(line)
}

fn operand(bytes: &mut impl Iterator<Item = u8>) -> Option<u32> {
    let first = bytes.next()?;
    if first & HIGH_BIT == 0 {
        return Some(u32::from(first));
    }
    let mut value = u32::from(first & !HIGH_BIT);
    for _ in 0..3 {
        value = value << 8 | u32::from(bytes.next()?);
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::line_at;

    /// fib's notes as the debug engine compiled `function fib(n) {\n if (n < 2) return n;\n
    /// return fib(n - 1) + fib(n - 2);\n}` (starting at line 3): a `NewLineColumn` at offset 0,
    /// `ColSpan`s, then a `NewLine` at 66, its `Return`: SpiderMonkey's own line for it is 5.
    const FIB: &[u8] = &[
        0x20, 0x03, 0x60, 0xa4, 0x00, 0x17, 0x05, 0xff, 0xff, 0xff, 0xfc, 0x50, 0x03, 0x0d, 0x07,
        0x04, 0x06, 0xff, 0xff, 0xff, 0xfc, 0x50, 0x19, 0x51, 0x80, 0x80, 0x80,
    ];

    #[test]
    fn lines_of_a_function_the_engine_compiled() {
        let line = |target| line_at(FIB.iter().copied(), 3, target);
        assert_eq!(line(0), Some(4));
        assert_eq!(line(41), Some(4));
        assert_eq!(line(65), Some(4));
        assert_eq!(line(66), Some(5));
        assert_eq!(line(67), Some(5));
    }

    #[test]
    fn set_line_is_from_the_first_line_and_the_terminator_ends() {
        // SetLine +3 at offset 2 (a one-byte operand), NewLine at 5, the end, a NewLine after it.
        let notes = [0x32, 3, 0x13, 0x80, 0x10];
        let line = |target| line_at(notes.iter().copied(), 10, target);
        assert_eq!(
            [line(0), line(2), line(4), line(5), line(99)],
            [Some(10), Some(13), Some(13), Some(14), Some(14)]
        );
        // A four-byte operand: 0x80 0x00 0x01 0x00 is 256.
        let far = [0x30, 0x80, 0x00, 0x01, 0x00];
        assert_eq!(line_at(far.iter().copied(), 1, 0), Some(257));
    }

    #[test]
    fn notes_cut_short_or_overflowing_give_none() {
        assert_eq!(line_at([0x30u8].into_iter(), 1, 5), None);
        assert_eq!(line_at([0x30u8, 0xff, 0xff].into_iter(), 1, 5), None);
        let huge = [0x30, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(line_at(huge.iter().copied(), u32::MAX - 5, 5), None);
        // Notes that end without a terminator: the line so far.
        assert_eq!(line_at([0x11u8].into_iter(), 7, 5), Some(8));
    }
}
