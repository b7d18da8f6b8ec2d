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

/// Gandalf's argument variable at `chars[i]` (a `$`): `$SPELL_ARG_NAME` or `${SPELL_ARG_NAME}`,
/// as the param name (`name`) and the number of characters it takes. Its value is the argument
/// the agent passed, which cordon substitutes as the placeholder `{{name}}` (the same value, the
/// same word; the command itself runs without a shell).
fn spell_arg(chars: &[char], i: usize) -> Option<(String, usize)> {
    let braced = chars.get(i + 1) == Some(&'{');
    let start = i + 1 + usize::from(braced);
    let prefix: Vec<char> = "SPELL_ARG_".chars().collect();
    if chars.get(start..start + prefix.len())? != prefix.as_slice() {
        return None;
    }
    let name_start = start + prefix.len();
    let len =
        chars[name_start..].iter().take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || **c == '_').count();
    let name: String = chars[name_start..name_start + len].iter().collect::<String>().to_ascii_lowercase();
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return None;
    }
    let mut end = name_start + len;
    if braced {
        if chars.get(end) != Some(&'}') {
            return None;
        }
        end += 1;
    }
    Some((name, end - i))
}

/// The words of `command`, with single quotes, double quotes and backslashes removed as a shell
/// removes them; `$SPELL_ARG_NAME` and `${SPELL_ARG_NAME}` (outside single quotes) become the
/// placeholder `{{name}}`. Refuses unquoted `| & ; < > ( ) $ \` * ? [ ] { }`, a line break, `~` and `#` at
/// the start of a word, `$` and `` ` `` inside double quotes, and quotes that do not close.
pub(crate) fn split(command: &str) -> Result<Vec<String>, SplitError> {
    if let Some(at) = command.find("{{") {
        let column = command[..at].chars().count() + 1;
        return Err(SplitError {
            column,
            message: format!(
                "\"{{{{\" at column {column} is how cordon writes a param placeholder, so it cannot be a literal part \
                 of a command; remove it"
            ),
        });
    }
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
                        '$' => match spell_arg(&chars, i) {
                            Some((name, len)) => {
                                word.push_str(&format!("{{{{{name}}}}}"));
                                i += len - 1;
                            }
                            None => {
                                return Err(refuse(i, d, "a variable or command substitution (even inside \"...\")"));
                            }
                        },
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
            '$' if spell_arg(&chars, i).is_some() => {
                if let Some((name, len)) = spell_arg(&chars, i) {
                    word.push_str(&format!("{{{{{name}}}}}"));
                    in_word = true;
                    i += len - 1;
                }
            }
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
    fn spell_arguments_become_placeholders() {
        assert_eq!(
            ok("curl -sS \"https://api.weather.com/v1/current?q=$SPELL_ARG_LOCATION&units=${SPELL_ARG_UNITS}\""),
            ["curl", "-sS", "https://api.weather.com/v1/current?q={{location}}&units={{units}}"]
        );
        assert_eq!(ok("echo $SPELL_ARG_X x${SPELL_ARG_Y_2}"), ["echo", "{{x}}", "x{{y_2}}"]);
        assert_eq!(ok("echo '$SPELL_ARG_X'"), ["echo", "$SPELL_ARG_X"]);
        for bad in ["echo $SPELL_ARG_", "echo $SPELL_ARG_1A", "echo ${SPELL_ARG_X", "echo $SPELL_ARGX"] {
            assert!(err(bad).message.contains("variable or command substitution"), "{bad}");
        }
        assert!(err("echo \"{{x}}\"").message.contains("param placeholder"));
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
