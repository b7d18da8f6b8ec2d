//! CtxNest's param patterns (re2 syntax, matched with re2's semantics) rewritten into cordon's
//! pattern dialect, which has no inline flags, no `\A`/`\z`, no named groups and only the
//! portable escapes (see `cordon_core::policy::pattern`).
//!
//! What is translated, exactly as re2 reads it:
//! - `(?i)`, `(?i:...)`, `(?-i)`: each letter (in and out of classes, and `\w`) becomes the class
//!   of its case variants under Unicode simple case folding (`k` is `[Kk\u{212A}]`), as re2 folds;
//! - `(?s)`: `.` becomes "any character" (`(?:[^\n]|\n)`); without it `.` is re2's `[^\n]`;
//! - `(?U)`: dropped (greediness changes which match is found, never whether a value matches);
//! - `(?m)`: dropped, with `^`/`$` kept as whole-value anchors and the caller told (cordon matches
//!   the whole value: a value with a line break no longer passes on one matching line, stricter);
//! - `\A`, `\z` -> `^`, `$`; `\Q...\E` -> escaped text; `\x{HHHH}`, `\a` -> the character;
//!   `\s` -> re2's `[\t\n\f\r ]`; named groups -> `(?:...)`.
//!
//! What is refused, with the reason (the tool is then skipped, not the import): `(?x)` and other
//! flags re2 does not know (CtxNest's re2 refused them too), look-around and back-references (re2
//! refuses them), `\b`/`\B`, `\p{..}`, `\C`, POSIX classes `[[:alpha:]]`.

use regex_syntax::hir::{ClassUnicode, ClassUnicodeRange};

/// A translated pattern.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Translated {
    pub(crate) text: String,
    /// Byte offsets in `text` of `^`/`$` written under `(?m)`.
    pub(crate) multiline_anchors: Vec<usize>,
    /// What the translation changed, for the comment beside the key.
    pub(crate) notes: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    fold: bool,
    multi: bool,
    dot_nl: bool,
}

struct Parser<'a> {
    chars: Vec<char>,
    i: usize,
    out: Translated,
    source: &'a str,
    used: [bool; 4],
}

const FLAG_NAMES: [&str; 4] = ["i", "m", "s", "U"];

pub(crate) fn translate(source: &str) -> Result<Translated, String> {
    let mut p = Parser { chars: source.chars().collect(), i: 0, out: Translated::default(), source, used: [false; 4] };
    p.sequence(Flags::default(), 0)?;
    let used: Vec<&str> = FLAG_NAMES.iter().zip(p.used).filter(|(_, u)| *u).map(|(n, _)| *n).collect();
    if !used.is_empty() {
        let mut note = format!(
            "The inline flag(s) {} of {:?} were translated (cordon's patterns have no flags):",
            used.iter().map(|f| format!("(?{f})")).collect::<Vec<_>>().join(" "),
            p.source
        );
        if p.used[0] {
            note.push_str(" each letter became the class of its case variants, as re2 folds case;");
        }
        if p.used[2] {
            note.push_str(" `.` matches any character, line breaks included;");
        }
        if p.used[3] {
            note.push_str(" (?U) only changes which match re2 finds, never whether a value matches;");
        }
        if p.used[1] {
            note.push_str(
                " (?m) let CtxNest accept a value with line breaks when one line matched; cordon matches the whole \
                 value, so such values are refused (stricter);",
            );
        }
        note.pop();
        note.push('.');
        p.out.notes.push(note);
    }
    Ok(p.out)
}

fn refuse(what: &str) -> String {
    what.to_string()
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn rest_starts(&self, s: &str) -> bool {
        s.chars().enumerate().all(|(k, c)| self.chars.get(self.i + k) == Some(&c))
    }

    /// A sequence up to the `)` that closes a group at `depth` (or the end at depth 0).
    fn sequence(&mut self, mut flags: Flags, depth: usize) -> Result<(), String> {
        while let Some(c) = self.peek() {
            match c {
                ')' => {
                    if depth == 0 {
                        return Err(refuse("it has a `)` that closes no group"));
                    }
                    return Ok(());
                }
                '(' => self.group(&mut flags, depth)?,
                '[' => {
                    self.i += 1;
                    self.class(flags)?;
                }
                '\\' => {
                    self.i += 1;
                    self.escape(flags)?;
                }
                '.' => {
                    self.i += 1;
                    if flags.dot_nl {
                        self.out.text.push_str("(?:[^\\n]|\\n)");
                    } else {
                        self.out.text.push_str("[^\\n]");
                    }
                }
                '^' | '$' => {
                    self.i += 1;
                    if flags.multi {
                        self.out.multiline_anchors.push(self.out.text.len());
                    }
                    self.out.text.push(c);
                }
                '*' | '+' | '?' | '|' | '{' | '}' | ',' => {
                    self.i += 1;
                    self.out.text.push(c);
                }
                _ => {
                    self.i += 1;
                    self.literal(c, flags);
                }
            }
        }
        if depth > 0 {
            return Err(refuse("a group `(` does not close"));
        }
        Ok(())
    }

    fn group(&mut self, flags: &mut Flags, depth: usize) -> Result<(), String> {
        self.i += 1; // (
        let inner = if self.peek() == Some('?') {
            self.i += 1;
            if self.rest_starts(":") {
                self.i += 1;
                self.out.text.push_str("(?:");
                *flags
            } else if self.rest_starts("P<")
                || (self.rest_starts("<") && !self.rest_starts("<=") && !self.rest_starts("<!"))
            {
                let close = self.chars[self.i..]
                    .iter()
                    .position(|&c| c == '>')
                    .ok_or_else(|| refuse("a named group `(?<name>` does not close its name with `>`"))?;
                self.i += close + 1;
                self.out.text.push_str("(?:");
                *flags
            } else if self.rest_starts("=") || self.rest_starts("!") || self.rest_starts("<=") || self.rest_starts("<!")
            {
                return Err(refuse(
                    "look-around `(?=`, `(?!`, `(?<=`, `(?<!` is not supported by re2 (CtxNest refused this pattern \
                     too) nor by cordon",
                ));
            } else if self.rest_starts("P=") {
                return Err(refuse("back-references are not supported by re2 (CtxNest refused this pattern too)"));
            } else {
                // Flags: (?flags) or (?flags:...).
                let mut next = *flags;
                let mut negate = false;
                loop {
                    let Some(c) = self.peek() else {
                        return Err(refuse("an inline flag group `(?` does not close"));
                    };
                    self.i += 1;
                    let on = !negate;
                    match c {
                        'i' => {
                            next.fold = on;
                            self.used[0] = true;
                        }
                        'm' => {
                            next.multi = on;
                            self.used[1] = true;
                        }
                        's' => {
                            next.dot_nl = on;
                            self.used[2] = true;
                        }
                        'U' => self.used[3] = true,
                        '-' if !negate => negate = true,
                        ')' => {
                            *flags = next;
                            return Ok(());
                        }
                        ':' => break,
                        'x' => {
                            return Err(refuse(
                                "the flag (?x) is not one re2 accepts (its flags are i, m, s and U), so CtxNest \
                                 refused this pattern too; write the pattern without spaces or comments",
                            ));
                        }
                        other => {
                            return Err(refuse(&format!(
                                "the inline flag {other:?} is not one re2 accepts (i, m, s, U), so CtxNest refused \
                                 this pattern too"
                            )));
                        }
                    }
                }
                self.out.text.push_str("(?:");
                next
            }
        } else {
            self.out.text.push('(');
            *flags
        };
        self.sequence(inner, depth + 1)?;
        self.i += 1; // )
        self.out.text.push(')');
        Ok(())
    }

    fn escape(&mut self, flags: Flags) -> Result<(), String> {
        let Some(e) = self.peek() else {
            return Err(refuse("it ends with a lone backslash"));
        };
        self.i += 1;
        match e {
            'A' => self.out.text.push('^'),
            'z' => self.out.text.push('$'),
            'd' | 'w' | 's' | 'D' | 'W' | 'S' => {
                let class = perl_class(e.to_ascii_lowercase(), flags.fold);
                let class = if e.is_ascii_uppercase() { negate(&class) } else { class };
                self.out.text.push_str(&render_class(&class)?);
            }
            'Q' => {
                while self.peek().is_some() && !self.rest_starts("\\E") {
                    let c = self.chars[self.i];
                    self.i += 1;
                    self.literal(c, flags);
                }
                if self.rest_starts("\\E") {
                    self.i += 2;
                }
            }
            'E' => {}
            _ => {
                let c = self.simple_escape(e)?;
                match c {
                    Some(c) => self.literal(c, flags),
                    None => {
                        // Escaped punctuation: the same text.
                        self.out.text.push('\\');
                        self.out.text.push(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// An escape that stands for one character (`None`: escaped punctuation, kept as written).
    fn simple_escape(&mut self, e: char) -> Result<Option<char>, String> {
        Ok(Some(match e {
            't' => '\t',
            'n' => '\n',
            'r' => '\r',
            'f' => '\x0C',
            'v' => '\x0B',
            'a' => '\x07',
            'x' => {
                let code = if self.peek() == Some('{') {
                    let close = self.chars[self.i..]
                        .iter()
                        .position(|&c| c == '}')
                        .ok_or_else(|| refuse("a \\x{...} escape does not close"))?;
                    let hex: String = self.chars[self.i + 1..self.i + close].iter().collect();
                    self.i += close + 1;
                    hex
                } else {
                    let hex: String = self.chars.iter().skip(self.i).take(2).collect();
                    self.i += 2;
                    hex
                };
                u32::from_str_radix(&code, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| refuse(&format!("\\x{code} is not a valid character code")))?
            }
            p if p.is_ascii_punctuation() => return Ok(None),
            'b' | 'B' => {
                return Err(refuse("word boundaries (\\b, \\B) have no equivalent in cordon's patterns"));
            }
            'p' | 'P' => {
                return Err(refuse(
                    "Unicode classes (\\p{..}, \\P{..}) are not supported by cordon's patterns; list the characters",
                ));
            }
            d if d.is_ascii_digit() => {
                return Err(refuse("back-references and octal escapes (\\1, \\0...) are not supported by cordon"));
            }
            other => return Err(refuse(&format!("the escape \\{other} is not supported by cordon's patterns"))),
        }))
    }

    /// One literal character, as a class of its case variants under `(?i)`.
    fn literal(&mut self, c: char, flags: Flags) {
        if flags.fold {
            let class = fold(ClassUnicode::new([ClassUnicodeRange::new(c, c)]));
            let several = class.ranges().len() > 1 || class.ranges().first().is_some_and(|r| r.start() != r.end());
            if several && let Ok(rendered) = render_class(&class) {
                self.out.text.push_str(&rendered);
                return;
            }
        }
        if "\\.+*?()|[]{}^$".contains(c) {
            self.out.text.push('\\');
            self.out.text.push(c);
        } else {
            push_char(&mut self.out.text, c, false);
        }
    }

    /// A class after its `[`: kept as written when nothing in it needs translating, else
    /// rebuilt from its ranges (under `(?i)` each item folded as re2 folds it).
    fn class(&mut self, flags: Flags) -> Result<(), String> {
        let start = self.i;
        let negated = self.peek() == Some('^');
        if negated {
            self.i += 1;
        }
        let mut set = ClassUnicode::empty();
        let mut rewrite = flags.fold;
        let mut first = true;
        let item = |lo: char, hi: char| {
            let c = ClassUnicode::new([ClassUnicodeRange::new(lo, hi)]);
            if flags.fold { fold(c) } else { c }
        };
        loop {
            let Some(c) = self.peek() else {
                return Err(refuse("a class `[` does not close"));
            };
            if c == ']' && !first {
                self.i += 1;
                break;
            }
            first = false;
            if self.rest_starts("[:") {
                return Err(refuse(
                    "POSIX classes like [[:alpha:]] are not supported by cordon's patterns; list the characters",
                ));
            }
            let lo = match self.class_atom(flags.fold, &mut rewrite)? {
                Atom::Char(c) => c,
                Atom::Set(s) => {
                    set.union(&s);
                    continue;
                }
            };
            if self.peek() == Some('-') && self.chars.get(self.i + 1).is_some_and(|&n| n != ']') {
                self.i += 1;
                let hi = match self.class_atom(flags.fold, &mut rewrite)? {
                    Atom::Char(c) => c,
                    Atom::Set(_) => return Err(refuse("a class range ends in a class like \\d")),
                };
                if hi < lo {
                    return Err(refuse(&format!("the class range {lo}-{hi} is out of order")));
                }
                set.union(&item(lo, hi));
            } else {
                set.union(&item(lo, lo));
            }
        }
        if !rewrite {
            self.out.text.push('[');
            self.out.text.extend(&self.chars[start..self.i]);
            return Ok(());
        }
        let set = if negated { negate(&set) } else { set };
        self.out.text.push_str(&render_class(&set)?);
        Ok(())
    }

    fn class_atom(&mut self, fold_case: bool, rewrite: &mut bool) -> Result<Atom, String> {
        let c = self.chars[self.i];
        self.i += 1;
        if c != '\\' {
            if c == '[' {
                *rewrite = true; // a literal [ in a class: cordon wants it escaped
            }
            return Ok(Atom::Char(c));
        }
        let Some(e) = self.peek() else {
            return Err(refuse("it ends with a lone backslash"));
        };
        self.i += 1;
        match e {
            'd' | 'w' | 's' | 'D' | 'W' | 'S' => {
                if !matches!(e, 'd' | 'w') {
                    *rewrite = true;
                }
                // Negated: the complement of the folded class, as re2 builds it.
                let class = perl_class(e.to_ascii_lowercase(), fold_case);
                Ok(Atom::Set(if e.is_ascii_uppercase() { negate(&class) } else { class }))
            }
            _ => match self.simple_escape(e)? {
                Some(c) => {
                    if !(matches!(e, 't' | 'n' | 'r' | 'f' | 'v') || e == 'x' && c <= '\u{ff}') {
                        *rewrite = true;
                    }
                    Ok(Atom::Char(c))
                }
                None => Ok(Atom::Char(e)),
            },
        }
    }
}

enum Atom {
    Char(char),
    Set(ClassUnicode),
}

/// re2's Perl classes: `\d` `[0-9]`, `\w` `[0-9A-Za-z_]`, `\s` `[\t\n\f\r ]` (no \v).
fn perl_class(c: char, fold_case: bool) -> ClassUnicode {
    let ranges: &[(char, char)] = match c {
        'd' => &[('0', '9')],
        'w' => &[('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')],
        _ => &[('\t', '\n'), ('\x0C', '\r'), (' ', ' ')],
    };
    let class = ClassUnicode::new(ranges.iter().map(|&(a, b)| ClassUnicodeRange::new(a, b)));
    if fold_case { fold(class) } else { class }
}

fn fold(mut class: ClassUnicode) -> ClassUnicode {
    class.case_fold_simple();
    class
}

fn negate(class: &ClassUnicode) -> ClassUnicode {
    let mut c = class.clone();
    c.negate();
    c
}

/// A class as cordon writes it: `[...]` of ranges, or `[^...]` of the others when shorter.
fn render_class(class: &ClassUnicode) -> Result<String, String> {
    if class.ranges().is_empty() {
        return Err(refuse("a class matches no character at all"));
    }
    let inverse = negate(class);
    let (set, mut out) = if !inverse.ranges().is_empty() && inverse.ranges().len() < class.ranges().len() {
        (&inverse, String::from("[^"))
    } else {
        (class, String::from("["))
    };
    for r in set.ranges() {
        push_char(&mut out, r.start(), true);
        if r.end() != r.start() {
            if u32::from(r.end()) > u32::from(r.start()) + 1 {
                out.push('-');
            }
            push_char(&mut out, r.end(), true);
        }
    }
    out.push(']');
    Ok(out)
}

fn push_char(out: &mut String, c: char, in_class: bool) {
    match c {
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\x0C' => out.push_str("\\f"),
        '\x0B' => out.push_str("\\v"),
        c if c.is_control() && u32::from(c) <= 0xFF => out.push_str(&format!("\\x{:02X}", u32::from(c))),
        '\\' | ']' | '[' | '^' | '-' if in_class => {
            out.push('\\');
            out.push(c);
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use cordon_core::policy::Pattern;

    use super::translate;

    fn t(s: &str) -> String {
        translate(s).unwrap_or_else(|e| panic!("{s}: {e}")).text
    }

    /// Whether `value` matches `source` as re2 would (full match), checked with the regex crate
    /// on the original and with cordon's engine on the translation.
    fn same(source: &str, values: &[&str]) {
        let original = regex::Regex::new(&format!("^(?:{source})$")).unwrap();
        let translated = t(source);
        let ours = Pattern::compile(&translated).unwrap_or_else(|e| panic!("{source} -> {translated}: {e}"));
        for v in values {
            assert_eq!(original.is_match(v), ours.is_match(v), "{source} -> {translated} on {v:?}");
        }
    }

    #[test]
    fn flags_translate_exactly() {
        assert_eq!(t("(?i)ab"), "[Aa][Bb]");
        assert_eq!(t("(?i)k"), "[Kk\u{212A}]");
        assert_eq!(t("[a-zA-Z0-9 _/-]*"), "[a-zA-Z0-9 _/-]*");
        assert_eq!(t("[a-zA-Z0-9._-]+"), "[a-zA-Z0-9._-]+");
        assert_eq!(t("a.b"), "a[^\\n]b");
        assert_eq!(t("(?s)a.b"), "a(?:[^\\n]|\\n)b");
        assert_eq!(t("\\Aabc\\z"), "^abc$");
        assert_eq!(t("(?P<x>a)(?<y>b)"), "(?:a)(?:b)");
        assert_eq!(t("x\\Q.*\\Ey"), "x\\.\\*y");
        assert_eq!(t("(?i)\\W"), "[^0-9A-Z_a-z\u{17F}\u{212A}]");
        let words = ["abc", "ABC", "aBc", "abd", "", "a\nb", "K", "\u{212A}", "ſ", "S", "x-y", "X_Y", "ab c", "1"];
        for src in [
            "(?i)abc",
            "(?i:ab)c",
            "(?i)a(?-i)bc",
            "(?i)[a-c]+",
            "(?i)[^a-c]+",
            "(?i)\\w+",
            "(?i)\\W+",
            "(?i)[\\w-]+",
            "(?i)k|s",
            "(?s)a.b",
            "a.b",
            "(?U)a+?",
            "(?is)A.B",
            "[\\s]+",
            "\\S+",
            "(?i)x-y|x_y",
        ] {
            same(src, &words);
        }
    }

    #[test]
    fn what_cannot_be_translated_is_refused_with_the_reason() {
        for (src, want) in [
            ("(?x)a b", "(?x) is not one re2 accepts"),
            ("a(?=b)", "look-around"),
            ("\\bword", "word boundaries"),
            ("\\p{L}", "Unicode classes"),
            ("[[:alpha:]]", "POSIX classes"),
            ("(?q)a", "not one re2 accepts"),
            ("(a", "does not close"),
        ] {
            let e = translate(src).expect_err(src);
            assert!(e.contains(want), "{src}: {e}");
        }
    }

    #[test]
    fn multiline_anchors_are_recorded() {
        let p = translate("(?m)^a$").unwrap();
        assert_eq!(p.text, "^a$");
        assert_eq!(p.multiline_anchors, [0, 2]);
        assert!(p.notes[0].contains("(?m)"), "{:?}", p.notes);
    }
}
