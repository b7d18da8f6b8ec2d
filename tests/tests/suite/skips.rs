//! A test that returns early, or leaves a part out, says so with `skip!` and a reason from the
//! fixed list (`cordon_tests::Skip`), so that a run shows what it did not check and CI fails the
//! skips it should not have. This scan of the workspace's test code finds the early returns and
//! the root-dependent branches that do not.
//!
//! It reads source text, not syntax trees: inside each `#[test]` function (and `#[tokio::test]`,
//! and proptest's `#[test]`) it flags
//! - a `return` (outside a closure, an `async` block or a nested `fn`) with no `skip!` (or a call
//!   of a function of the same file that calls `skip!`, or the inline `SKIPPED`/`CORDON_CI` form
//!   of the crates that cannot use the harness) in its block before it or the three lines above;
//! - an `is_root()` test with no `skip!`/`require_root!` in the lines that follow (up to 12).
//!
//! A line that is none of these but legitimate (a bless mode that writes instead of comparing, a
//! branch that checks something else instead) carries `// not a skip: <why>` on it or just above.
//! What it cannot see: an early return hidden in a macro, a helper (in another file) that returns
//! a default instead of running, or a condition that quietly makes a loop empty.

use std::path::{Path, PathBuf};

/// Where test code lives: the suite, the library tests, and the crates' inline test modules.
const ROOTS: &[&str] = &[
    "tests/tests",
    "tests/src",
    "core/tests",
    "core/src",
    "daemon/tests",
    "daemon/src",
    "daemon/sandbox/src",
    "client/src",
    "client/tests",
    "limit/src",
    "daemon/audit",
    "daemon/egress",
];

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return }; // not a skip: a root a crate does not have
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Where a line starts or ends: in code, in a string, or in a raw string with so many `#`.
#[derive(Clone, Copy, PartialEq)]
enum Lit {
    Code,
    Str,
    Raw(usize),
}

/// The line with string literals and a trailing `//` comment blanked (char literals are rare
/// enough in test code not to matter; a `{` inside one would unbalance the count).
fn code(line: &str, state: &mut Lit) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match *state {
            Lit::Str => {
                if c == '\\' {
                    i += 1;
                } else if c == '"' {
                    *state = Lit::Code;
                    out.push('"');
                }
            }
            Lit::Raw(n) => {
                if c == '"' && chars[i + 1..].iter().take(n).filter(|h| **h == '#').count() == n {
                    *state = Lit::Code;
                    out.push('"');
                    i += n;
                }
            }
            Lit::Code => {
                if c == '/' && chars.get(i + 1) == Some(&'/') {
                    break;
                }
                if c == '\'' {
                    // A char literal ('{', '"', '\'') or a lifetime ('a): skip a literal whole.
                    if chars.get(i + 2) == Some(&'\'') {
                        i += 3;
                        continue;
                    }
                    if chars.get(i + 1) == Some(&'\\') && chars.get(i + 3) == Some(&'\'') {
                        i += 4;
                        continue;
                    }
                }
                if c == 'r' && !chars[..i].last().is_some_and(|p| p.is_alphanumeric() || *p == '_') {
                    let hashes = chars[i + 1..].iter().take_while(|h| **h == '#').count();
                    if chars.get(i + 1 + hashes) == Some(&'"') {
                        *state = Lit::Raw(hashes);
                        out.push('"');
                        i += 2 + hashes;
                        continue;
                    }
                }
                if c == '"' {
                    *state = Lit::Str;
                }
                out.push(c);
            }
        }
        i += 1;
    }
    out
}

/// Where `w` occurs in `l` as a whole word.
fn word(l: &str, w: &str) -> Option<usize> {
    l.match_indices(w).map(|(a, _)| a).find(|&a| {
        let before = l[..a].chars().last();
        let after = l[a + w.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Whether the text before a `{` opens a closure, an `async` block or a nested `fn`, where a
/// `return` leaves that and not the test.
fn opens_nested(before: &str) -> bool {
    let t = before.trim_end();
    t.ends_with('|')
        || t.ends_with("async")
        || t.ends_with("async move")
        || t.ends_with("move")
        || (t.contains("| ->") || t.contains("|->"))
        || t.trim_start().starts_with("fn ")
        || t.contains(" fn ")
        || t.trim_start().starts_with("async fn ")
}

fn is_test_attr(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("#[test]") || t.starts_with("#[tokio::test")
}

/// Names of the file's functions whose body calls `skip!` (helpers such as `have(program)`).
fn skipping_helpers(lines: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(name) = fn_name(&lines[i]) {
            let end = body_end(lines, i);
            if lines[i..=end].iter().any(|l| l.contains("skip!(")) {
                names.push(name);
            }
        }
        i += 1;
    }
    names
}

fn fn_name(line: &str) -> Option<String> {
    let at = line.find("fn ")?;
    if at > 0 && !line[..at].ends_with(' ') {
        return None;
    }
    let rest = &line[at + 3..];
    let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    (!name.is_empty()).then_some(name)
}

/// The index of the line that closes the item starting at `start` (brace-counted).
fn body_end(lines: &[String], start: usize) -> usize {
    let mut depth = 0i64;
    let mut opened = false;
    for (k, l) in lines.iter().enumerate().skip(start) {
        for c in l.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth -= 1,
                ';' if !opened => return k,
                _ => {}
            }
        }
        if opened && depth <= 0 {
            return k;
        }
    }
    lines.len() - 1
}

/// The findings in one file: `path:line: text`.
fn scan(path: &Path, text: &str) -> Vec<String> {
    let raw: Vec<&str> = text.lines().collect();
    let mut state = Lit::Code;
    let lines: Vec<String> = raw.iter().map(|l| code(l, &mut state)).collect();
    let helpers = skipping_helpers(&lines);
    let says_skip = |k: usize| {
        let l = &lines[k];
        raw[k].contains("not a skip:")
            || raw[k].contains("SKIPPED ")
            || l.contains("skip!(")
            || l.contains("skip_or_fail(")
            || raw[k].contains("CORDON_CI")
            || helpers.iter().any(|h| l.contains(&format!("{h}(")))
    };
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !is_test_attr(raw[i]) {
            i += 1;
            continue;
        }
        let Some(start) = (i..lines.len()).find(|&k| fn_name(&lines[k]).is_some()) else { break };
        let end = body_end(&lines, start);
        // The open blocks: whether each is a closure, async block or nested fn (where a `return`
        // leaves that, not the test), and the line it opened on.
        let mut stack: Vec<(bool, usize)> = Vec::new();
        for k in start..=end {
            let l = &lines[k];
            let at = word(l, "return");
            // At the `return`: whether it is nested, and where its block opened.
            let mut at_return = None;
            for (b, c) in l.char_indices() {
                if at == Some(b) {
                    let nested = stack.iter().skip(1).any(|(n, _)| *n);
                    at_return = Some((nested, stack.last().map_or(k, |(_, line)| *line)));
                }
                if c == '{' {
                    stack.push((k > start && opens_nested(&l[..b]), k));
                } else if c == '}' {
                    stack.pop();
                }
            }
            // A `return` is said when its block (from the line that opened it) or the three
            // lines before it call `skip!`.
            if let Some((nested, opened)) = at_return {
                let from = opened.min(k.saturating_sub(3));
                let ok = nested || (from..=k).any(says_skip);
                if !ok {
                    found.push(format!("{}:{}: {}", path.display(), k + 1, raw[k].trim()));
                }
            }
            if l.contains("is_root()") && !l.trim_start().starts_with("fn ") {
                let last = (k + 12).min(end);
                let ok = (k.saturating_sub(1)..=last).any(|j| says_skip(j) || lines[j].contains("require_root!"));
                if !ok {
                    found.push(format!("{}:{}: {}", path.display(), k + 1, raw[k].trim()));
                }
            }
        }
        i = end + 1;
    }
    found
}

#[test]
fn every_early_return_in_a_test_says_why_with_a_named_skip() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut all = Vec::new();
    for r in ROOTS {
        files(&root.join(r), &mut all);
    }
    all.sort();
    assert!(all.len() > 100, "the scan found too few files under {}: {}", root.display(), all.len());
    let mut found = Vec::new();
    for p in &all {
        let text = std::fs::read_to_string(p).unwrap();
        let rel = p.strip_prefix(&root).unwrap_or(p);
        found.extend(scan(rel, &text));
    }
    assert!(
        found.is_empty(),
        "{} early returns or root-dependent branches in tests say nothing: add `cordon_tests::skip!(Skip::…, \"what is \
         not checked\")` before the return (or `// not a skip: why` where it is none):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_scan_flags_a_silent_return_and_accepts_a_named_skip() {
    let silent = "#[test]\nfn t() {\n    if !is_root() {\n        return;\n    }\n    run();\n}\n";
    assert_eq!(scan(Path::new("x.rs"), silent).len(), 2, "{:?}", scan(Path::new("x.rs"), silent));
    let said =
        "#[test]\nfn t() {\n    if !is_root() {\n        skip!(Skip::NotRoot, \"x\");\n        return;\n    }\n}\n";
    assert!(scan(Path::new("x.rs"), said).is_empty(), "{:?}", scan(Path::new("x.rs"), said));
    let helper = "fn have(p: &str) -> bool {\n    skip!(Skip::MissingTool(p));\n    false\n}\n#[test]\nfn t() {\n    \
                  if !have(\"x\") {\n        return;\n    }\n}\n";
    assert!(scan(Path::new("x.rs"), helper).is_empty(), "{:?}", scan(Path::new("x.rs"), helper));
    let closure = "#[test]\nfn t() {\n    let f = |x: u8| {\n        if x == 0 {\n            return 1;\n        }\n        \
                   x\n    };\n    std::thread::spawn(move || {\n        return;\n    });\n}\n";
    assert!(scan(Path::new("x.rs"), closure).is_empty(), "{:?}", scan(Path::new("x.rs"), closure));
    let marked =
        "#[test]\nfn t() {\n    if bless() {\n        write();\n        return; // not a skip: bless mode\n    }\n}\n";
    assert!(scan(Path::new("x.rs"), marked).is_empty());
}
