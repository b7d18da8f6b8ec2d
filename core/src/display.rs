//! Text for people: values a caller chose (arguments, paths, tool output quoted in messages)
//! shown on one line with every byte that could steer a terminal made visible.
//!
//! An argument may hold ESC sequences (erase the line, move the cursor, set the title), a CR
//! that returns to the start of the line, or Unicode bidi controls that reorder what follows.
//! Printed raw, the line an admin approves can look harmless while the tool runs something else.
//! [`escape_line`] is applied where text is rendered for a person (`cordon pending`, the
//! confirmation description, MCP elicitation messages, `cordon tools`, `cordon audit tail`, error
//! messages); JSON output stays exact JSON, which escapes C0 controls itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is shown escaped: C0 and C1 controls, DEL, the bidi embedding, override and
/// isolate controls and marks, line and paragraph separators, and invisible characters that
/// hide or join text (zero-width space, word joiner, BOM).
pub fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{61c}'                       // arabic letter mark
        | '\u{200b}'                      // zero-width space
        | '\u{200e}' | '\u{200f}'         // left-to-right and right-to-left marks
        | '\u{2028}' | '\u{2029}'         // line and paragraph separators
        | '\u{202a}'..='\u{202e}'         // embeddings and overrides
        | '\u{2060}'                      // word joiner
        | '\u{2066}'..='\u{2069}'         // isolates
        | '\u{feff}'                      // byte order mark / zero-width no-break space
    )
}

/// `text` on one line with every [`is_unsafe`] character made visible: `\n`, `\r`, `\t`, other
/// controls as `\u{1b}`, the rest (bidi and invisible characters) as `<U+202E>`. Text without
/// such characters is returned as it is; applying it twice changes nothing more.
pub fn escape_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c <= '\u{9f}' && is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c if is_unsafe(c) => {
                let _ = write!(out, "<U+{:04X}>", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `text` as lines: each line escaped as [`escape_line`] does, the line breaks (`\n`) kept, so
/// that a message of several lines (a policy's problems, one per line) prints as lines and not
/// as one line with literal `\n`s. A `\r` is still shown escaped: it cannot rewrite a line.
pub fn escape_lines(text: &str) -> String {
    text.split('\n').map(escape_line).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bidi_become_visible() {
        assert_eq!(escape_line("plain text, é, 日本"), "plain text, é, 日本");
        assert_eq!(escape_line("a\x1b[2Kb"), "a\\u{1b}[2Kb");
        assert_eq!(escape_line("x\ry\nz\t"), "x\\ry\\nz\\t");
        assert_eq!(escape_line("\u{7f}\u{9b}\u{85}"), "\\u{7f}\\u{9b}\\u{85}");
        assert_eq!(escape_line("rm \u{202e}txt.exe"), "rm <U+202E>txt.exe");
        assert_eq!(
            escape_line("\u{2066}\u{2069}\u{200e}\u{200f}\u{61c}\u{2028}"),
            "<U+2066><U+2069><U+200E><U+200F><U+061C><U+2028>"
        );
    }

    #[test]
    fn escape_lines_keeps_line_breaks_and_nothing_else() {
        assert_eq!(escape_lines("one\ntwo\x1b[2K\r\nthree"), "one\ntwo\\u{1b}[2K\\r\nthree");
        assert_eq!(escape_lines("single"), "single");
        assert!(escape_lines("a\u{202e}b\nc").lines().all(|l| !l.chars().any(is_unsafe)));
    }

    #[test]
    fn escaping_is_idempotent_and_leaves_nothing_unsafe() {
        let nasty: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        let once = escape_line(&nasty).into_owned();
        assert!(!once.chars().any(is_unsafe));
        assert_eq!(escape_line(&once), once);
    }
}
