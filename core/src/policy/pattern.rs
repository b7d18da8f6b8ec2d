//! Param patterns in the subset of regex syntax that the daemon's engine (Rust `regex`) and JSON
//! Schema validators (ECMA-262 regexes) read the same way.
//!
//! The shorthand classes differ between engines (`\d` is Unicode in Rust, ASCII in ECMA; `\s`
//! differs between ECMA implementations), so they are rewritten to explicit ASCII classes, and
//! the rewritten text is what both the daemon and the published JSON Schema use. Syntax that only
//! one side understands (inline flags, named groups, `\p{..}`, `\A`, `\b`, POSIX classes) is
//! rejected with a message saying what to write instead.

use super::{Pattern, REGEX_MAX_LEN, REGEX_NEST_LIMIT, REGEX_SIZE_LIMIT};

/// Why a pattern source does not compile. The messages are the policy parser's diagnostics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("pattern is {len} bytes long; the limit is {REGEX_MAX_LEN}")]
    TooLong { len: usize },
    #[error("unsupported pattern {pattern:?}: {reason}")]
    Unsupported {
        pattern: String,
        #[source]
        reason: PortabilityError,
    },
    #[error(
        "pattern compiles to more than {limit} bytes; simplify it (bounded repetitions like {{1,1000}} are expensive)"
    )]
    TooBig { limit: usize },
    #[error("invalid pattern {pattern:?}: {detail}")]
    Invalid { pattern: String, detail: String },
}

impl Pattern {
    /// Compiles a pattern as written in a policy: the one way a [`Pattern`] is made, for the
    /// policy parser and for the front-end rebuilding a param from the daemon's answer alike.
    pub fn compile(source: &str) -> Result<Pattern, PatternError> {
        if source.len() > REGEX_MAX_LEN {
            return Err(PatternError::TooLong { len: source.len() });
        }
        let portable =
            portable(source).map_err(|reason| PatternError::Unsupported { pattern: source.to_string(), reason })?;
        match regex::RegexBuilder::new(&format!("^(?:{portable})$"))
            .size_limit(REGEX_SIZE_LIMIT)
            .nest_limit(REGEX_NEST_LIMIT)
            .build()
        {
            Ok(regex) => Ok(Pattern::from_parts(source.to_string(), portable, regex)),
            Err(regex::Error::CompiledTooBig(limit)) => Err(PatternError::TooBig { limit }),
            Err(e) => {
                // regex's message is a multi-line drawing; its last line says what is wrong.
                let detail =
                    e.to_string().lines().last().unwrap_or("").trim().trim_start_matches("error: ").to_string();
                Err(PatternError::Invalid { pattern: source.to_string(), detail })
            }
        }
    }
}

const DIGIT: &str = "0-9";
const WORD: &str = "0-9A-Za-z_";
const SPACE: &str = "\\t\\n\\x0B\\f\\r ";

/// What a pattern uses that not every engine reads alike, and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortabilityError {
    #[error("pattern ends with a lone backslash")]
    LoneBackslash,
    #[error("\\{0} inside [...] is not supported; write the negated class explicitly")]
    NegatedClassInClass(char),
    #[error("\\x needs exactly two hex digits, e.g. \\x41")]
    BadHexEscape,
    #[error(
        "\\{0} is not supported; patterns use the syntax Rust and JSON Schema validators \
         read alike (escapes: \\d \\w \\s \\D \\W \\S \\t \\n \\r \\f \\v \\xHH and escaped punctuation)"
    )]
    UnsupportedEscape(char),
    #[error("an empty class `[]` or `[^]` is read differently by different engines; escape the ]")]
    EmptyClass,
    #[error("nested classes and POSIX classes like [[:alpha:]] are not supported; list the characters")]
    NestedClass,
    #[error("`[` inside a class must be escaped as \\[")]
    BracketInClass,
    #[error("only non-capturing groups `(?:...)` are supported; inline flags, named groups and look-around are not")]
    SpecialGroup,
    #[error("unclosed character class `[`")]
    UnclosedClass,
}

/// Rewrites `source` into its portable form, or says what is not supported.
pub(crate) fn portable(source: &str) -> Result<String, PortabilityError> {
    let mut out = String::with_capacity(source.len() + 16);
    let mut chars = source.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(e) = chars.next() else {
                    return Err(PortabilityError::LoneBackslash);
                };
                let class = match e {
                    'd' | 'D' => Some(DIGIT),
                    'w' | 'W' => Some(WORD),
                    's' | 'S' => Some(SPACE),
                    _ => None,
                };
                match (class, in_class, e.is_ascii_uppercase()) {
                    (Some(set), false, false) => out.push_str(&format!("[{set}]")),
                    (Some(set), false, true) => out.push_str(&format!("[^{set}]")),
                    (Some(set), true, false) => out.push_str(set),
                    (Some(_), true, true) => {
                        return Err(PortabilityError::NegatedClassInClass(e));
                    }
                    (None, _, _) => match e {
                        't' | 'n' | 'r' | 'f' | 'v' => out.extend(['\\', e]),
                        'x' => {
                            let hex: String = chars.by_ref().take(2).collect();
                            if hex.len() != 2 || !hex.chars().all(|h| h.is_ascii_hexdigit()) {
                                return Err(PortabilityError::BadHexEscape);
                            }
                            out.push_str("\\x");
                            out.push_str(&hex);
                        }
                        p if p.is_ascii_punctuation() => out.extend(['\\', p]),
                        other => {
                            return Err(PortabilityError::UnsupportedEscape(other));
                        }
                    },
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push(c);
                // A leading ^ or ] belongs to the class syntax, not to its end.
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    return Err(PortabilityError::EmptyClass);
                }
                if chars.peek() == Some(&'[') || chars.peek() == Some(&':') {
                    return Err(PortabilityError::NestedClass);
                }
            }
            '[' if in_class => {
                return Err(PortabilityError::BracketInClass);
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '(' if !in_class && chars.peek() == Some(&'?') => {
                chars.next();
                if chars.peek() == Some(&':') {
                    chars.next();
                    out.push_str("(?:");
                } else {
                    return Err(PortabilityError::SpecialGroup);
                }
            }
            // ECMA's `.` also stops at \r, U+2028 and U+2029; Rust's only at \n. Spell it out (the
            // two separators as literal characters, which both engines read alike).
            '.' if !in_class => out.push_str("[^\\n\\r\u{2028}\u{2029}]"),
            _ => out.push(c),
        }
    }
    if in_class {
        return Err(PortabilityError::UnclosedClass);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{Pattern, PatternError, portable};

    #[test]
    fn shorthand_classes_become_ascii() {
        assert_eq!(portable(r"\d+").unwrap(), "[0-9]+");
        assert_eq!(portable(r"[\w.-]+").unwrap(), "[0-9A-Za-z_.-]+");
        assert_eq!(portable(r"\S+").unwrap(), r"[^\t\n\x0B\f\r ]+");
        assert_eq!(portable(r"[^\n]+").unwrap(), r"[^\n]+");
        assert_eq!(portable(r"a\.b\x41(?:c|d)").unwrap(), r"a\.b\x41(?:c|d)");
        assert_eq!(portable("a.c").unwrap(), "a[^\\n\\r\u{2028}\u{2029}]c");
        assert_eq!(portable("[.]").unwrap(), "[.]");
    }

    #[test]
    fn engine_specific_syntax_is_refused() {
        for bad in [r"(?i)abc", r"(?P<n>x)", r"\p{L}", r"\Aabc", r"\bword", r"[[:alpha:]]", r"[\D]", r"ab\", r"[ab"] {
            assert!(portable(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn compile_gives_the_parser_its_pattern_or_its_diagnostic() {
        let p = Pattern::compile(r"\d+").unwrap();
        assert_eq!((p.source(), p.portable()), (r"\d+", "[0-9]+"));
        assert!(p.is_match("123") && !p.is_match("12a"));
        assert!(matches!(Pattern::compile(&"a".repeat(1025)), Err(PatternError::TooLong { len: 1025 })));
        assert!(matches!(Pattern::compile(r"(?i)a"), Err(PatternError::Unsupported { .. })));
        assert!(matches!(Pattern::compile("a{1000}{1000}"), Err(PatternError::TooBig { .. })));
        let e = Pattern::compile("(a").unwrap_err();
        assert!(e.to_string().starts_with("invalid pattern \"(a\": "), "{e}");
    }
}
