//! The TOML `cordon import` writes: tables of keys with the comments that explain each choice
//! the translation made. Values are rendered here (strings escaped as TOML basic strings), and
//! the whole text is loaded by cordon's own parser before anything is written.

use std::fmt::Write as _;

/// A TOML basic string.
pub(crate) fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML array of strings.
pub(crate) fn strings<S: AsRef<str>>(items: &[S]) -> String {
    let inner: Vec<String> = items.iter().map(|s| string(s.as_ref())).collect();
    format!("[{}]", inner.join(", "))
}

/// A TOML key: bare when it can be.
pub(crate) fn key(k: &str) -> String {
    if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        k.to_string()
    } else {
        string(k)
    }
}

/// One `key = value` line, with the comments above it.
#[derive(Debug, Default)]
pub(crate) struct Entry {
    pub(crate) notes: Vec<String>,
    pub(crate) key: String,
    pub(crate) value: String,
}

/// One table: its header, the comments above it, and its entries.
#[derive(Debug, Default)]
pub(crate) struct Table {
    pub(crate) header: String,
    pub(crate) notes: Vec<String>,
    pub(crate) entries: Vec<Entry>,
    /// Comment lines after the entries (e.g. a commented-out example).
    pub(crate) trailer: Vec<String>,
}

impl Table {
    pub(crate) fn new(header: String) -> Table {
        Table { header, ..Table::default() }
    }

    pub(crate) fn set(&mut self, key: &str, value: String) {
        self.entries.push(Entry { notes: Vec::new(), key: key.to_string(), value });
    }

    /// `key = value` with a comment above it.
    pub(crate) fn set_noted(&mut self, key: &str, value: String, note: impl Into<String>) {
        self.entries.push(Entry { notes: vec![note.into()], key: key.to_string(), value });
    }

    pub(crate) fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }
}

/// `text` with every character a TOML comment may not hold (controls other than tab, DEL)
/// written as an escape, so that text from the foreign file cannot end the comment.
pub(crate) fn comment_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (c.is_control() && c != '\t') || c == '\u{7f}' {
            let _ = write!(out, "\\u{:04X}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Comment lines, each note wrapped at about 100 characters.
pub(crate) fn comment(out: &mut String, note: &str) {
    let note = comment_safe(note);
    let mut line = String::from("#");
    for word in note.split_whitespace() {
        if line.len() > 1 && line.len() + 1 + word.len() > 100 {
            out.push_str(&line);
            out.push('\n');
            line = String::from("#  ");
        }
        line.push(' ');
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
}

/// The file: header comments, top-level entries, then the tables.
pub(crate) fn render(header: &[String], top: &[Entry], tables: &[&Table]) -> String {
    let mut out = String::new();
    for h in header {
        comment(&mut out, h);
    }
    for e in top {
        for n in &e.notes {
            comment(&mut out, n);
        }
        let _ = writeln!(out, "{} = {}", key(&e.key), e.value);
    }
    for t in tables {
        out.push('\n');
        for n in &t.notes {
            comment(&mut out, n);
        }
        let _ = writeln!(out, "[{}]", t.header);
        for e in &t.entries {
            for n in &e.notes {
                comment(&mut out, n);
            }
            let _ = writeln!(out, "{} = {}", key(&e.key), e.value);
        }
        for line in &t.trailer {
            let _ = writeln!(out, "# {}", comment_safe(line));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(strings(&["a", "b c"]), "[\"a\", \"b c\"]");
        assert_eq!(key("LANG"), "LANG");
        assert_eq!(key("a.b"), "\"a.b\"");
    }
}
