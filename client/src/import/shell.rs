//! Splits a Gandalf `command` string into words the way a POSIX shell would, and refuses every
//! part a shell would interpret beyond quoting: cordon runs argv without a shell, so a pipe, a
//! redirection, an expansion or a glob would silently become a literal argument instead.

/// Why a command string cannot become an argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SplitError {
    /// 1-based column (in characters) of the offending character.
    pub(crate) column: usize,
    pub(crate) message: String,
}

/// What a shell would do with an unquoted character, if anything.
fn unquoted_meaning(c: char, word_start: bool) -> Option<&'static str> {
    Some(match c {
        '|' => "a pipe",
        '&' => "a background job or `&&`",
        ';' => "a command separator",
        '<' | '>' => "a redirection",
        '(' | ')' => "a subshell",
        '$' => "a variable or command substitution",
        '`' => "a command substitution",
        '*' | '?' | '[' | ']' => "a glob",
        '{' | '}' => "a brace expansion",
        '\n' | '\r' => "a command separator (a line break)",
        '~' if word_start => "a home-directory expansion",
        '#' if word_start => "a comment",
        _ => return None,
    })
}

/// The words of `command`, with single quotes, double quotes and backslashes removed as a shell
/// removes them. Refuses unquoted `| & ; < > ( ) $ \` * ? [ ] { }`, a line break, `~` and `#` at
/// the start of a word, `$` and `` ` `` inside double quotes, and quotes that do not close.
pub(crate) fn split(command: &str) -> Result<Vec<String>, SplitError> {
    let chars: Vec<char> = command.chars().collect();
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut i = 0;
    let refuse = |i: usize, c: char, what: &str| SplitError {
        column: i + 1,
        message: format!(
            "'{}' at column {} is {what} to a shell; cordon runs commands without a shell, so it cannot be \
             translated: run a script that does it (e.g. \"sh /path/to/script.sh\", the script fixed by the admin)",
            c.escape_default(),
            i + 1
        ),
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                let close = chars[i + 1..].iter().position(|&d| d == '\'').ok_or_else(|| SplitError {
                    column: i + 1,
                    message: format!(
                        "the single quote at column {} does not close; add the closing ' (or quote the text with \" \")",
                        i + 1
                    ),
                })?;
                word.extend(&chars[i + 1..i + 1 + close]);
                in_word = true;
                i += close + 1;
            }
            '"' => {
                let start = i;
                i += 1;
                loop {
                    let Some(&d) = chars.get(i) else {
                        return Err(SplitError {
                            column: start + 1,
                            message: format!(
                                "the double quote at column {} does not close; add the closing \"",
                                start + 1
                            ),
                        });
                    };
                    match d {
                        '"' => break,
                        '$' => return Err(refuse(i, d, "a variable or command substitution (even inside \"...\")")),
                        '`' => return Err(refuse(i, d, "a command substitution (even inside \"...\")")),
                        '\\' => match chars.get(i + 1) {
                            Some(&e @ ('"' | '\\' | '$' | '`')) => {
                                word.push(e);
                                i += 1;
                            }
                            Some('\n') => i += 1,
                            _ => word.push('\\'),
                        },
                        _ => word.push(d),
                    }
                    i += 1;
                }
                in_word = true;
            }
            '\\' => match chars.get(i + 1) {
                Some('\n') => i += 1,
                Some(&e) => {
                    word.push(e);
                    in_word = true;
                    i += 1;
                }
                None => {
                    return Err(SplitError {
                        column: i + 1,
                        message: format!(
                            "the backslash at column {} escapes nothing (it ends the command); remove it",
                            i + 1
                        ),
                    });
                }
            },
            _ => {
                if let Some(what) = unquoted_meaning(c, !in_word) {
                    return Err(refuse(i, c, what));
                }
                word.push(c);
                in_word = true;
            }
        }
        i += 1;
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Vec<String> {
        split(s).unwrap_or_else(|e| panic!("{s}: {}", e.message))
    }

    fn err(s: &str) -> SplitError {
        split(s).expect_err(s)
    }

    #[test]
    fn splits_like_a_shell() {
        assert_eq!(
            ok("curl -X GET https://api.weather.com/v1/current"),
            ["curl", "-X", "GET", "https://api.weather.com/v1/current"]
        );
        assert_eq!(ok("  python3   /home/user/tools/process.py "), ["python3", "/home/user/tools/process.py"]);
        assert_eq!(
            ok(r#"echo 'a | b' "c d" e\ f "" '' "x\"y" 'it''s'"#),
            ["echo", "a | b", "c d", "e f", "", "", "x\"y", "its"]
        );
        assert_eq!(ok(r#"echo a=b,c:d@e%f+g/h.i-j"#), ["echo", "a=b,c:d@e%f+g/h.i-j"]);
        // Quoted metacharacters are literal (single quotes: even $).
        assert_eq!(ok("echo '$HOME' \"a;b|c*d\" x~y a#b"), ["echo", "$HOME", "a;b|c*d", "x~y", "a#b"]);
        assert!(ok("").is_empty());
    }

    #[test]
    fn refuses_what_a_shell_would_interpret_naming_the_character() {
        for (cmd, ch, col) in [
            ("ls | wc -l", "|", 4),
            ("make && make install", "&", 6),
            ("a; b", ";", 2),
            ("echo hi > out.txt", ">", 9),
            ("cat < in", "<", 5),
            ("echo $HOME", "$", 6),
            ("echo `id`", "`", 6),
            ("ls *.txt", "*", 4),
            ("ls file?", "?", 8),
            ("ls [ab]", "[", 4),
            ("echo {a,b}", "{", 6),
            ("cd ~", "~", 4),
            ("echo hi # comment", "#", 9),
            ("echo \"$(id)\"", "$", 7),
            ("(echo)", "(", 1),
            ("echo a\nrm b", "\\n", 7),
        ] {
            let e = err(cmd);
            assert_eq!(e.column, col, "{cmd}: {}", e.message);
            assert!(e.message.contains(&format!("'{ch}' at column {col}")), "{cmd}: {}", e.message);
            assert!(e.message.contains("without a shell"), "{}", e.message);
        }
    }

    #[test]
    fn quotes_that_do_not_close_are_named() {
        let e = err("echo 'abc");
        assert_eq!(e.column, 6);
        assert!(e.message.contains("single quote at column 6 does not close"), "{}", e.message);
        let e = err("echo \"abc");
        assert!(e.message.contains("double quote at column 6 does not close"), "{}", e.message);
        assert!(err("echo a\\").message.contains("escapes nothing"));
    }
}
