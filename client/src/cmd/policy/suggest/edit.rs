//! The change itself: grants added to the tool's table of its policy file with toml_edit
//! (comments and layout kept), a comment for each, and the unified diff of the file.
//!
//! Paths and hosts go into their arrays, one per line after a `# suggested: ...` comment. Ports
//! go into `network` (its `connect_tcp`/`bind_tcp`); when that is an inline table, the comments
//! go above the `network` line (an inline table stays on one line). A tool without a `network`
//! of its own takes its file's `[defaults]` one, since a tool's `network` replaces the default.

use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, Value};

use super::choose::Grant;

/// A comment as TOML takes it: one line, no control characters (a newline in a record's argv
/// must not end the comment and start a grant), no bidi controls.
pub(crate) fn comment_text(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}');
        if c.is_control() || bidi {
            out.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// The tool's table in `doc`: `[tools.NAME]`.
fn tool_table<'a>(doc: &'a mut DocumentMut, name: &str) -> Result<&'a mut Table, String> {
    doc.get_mut("tools")
        .and_then(Item::as_table_mut)
        .and_then(|t| t.get_mut(name))
        .and_then(Item::as_table_mut)
        .ok_or_else(|| {
            format!(
                "the tool {name:?} is not written as a [tools.{name}] table in its file; suggest edits only that form \
                 (write it so, or add the grants by hand)"
            )
        })
}

/// Adds `grants` (each with its comment) to the table of the tool `name` in `text`.
pub(crate) fn apply(text: &str, name: &str, grants: &[(Grant, String)]) -> Result<String, String> {
    let mut doc: DocumentMut =
        text.parse().map_err(|e: toml_edit::TomlError| format!("the file does not parse: {e}"))?;
    let defaults_network = doc.get("defaults").and_then(|d| d.get("network")).cloned();
    let table = tool_table(&mut doc, name)?;
    for (grant, comment) in grants {
        let comment = comment_text(comment);
        match grant {
            Grant::Read(p) | Grant::Write(p) | Grant::Exec(p) => {
                push(table, grant.key(), Value::from(p.display().to_string()), &comment)?;
            }
            Grant::ConnectTcp(_) | Grant::BindTcp(_) | Grant::Host(_) | Grant::TcpSockets => {
                network(table, defaults_network.as_ref(), grant, &comment)?;
            }
        }
    }
    Ok(doc.to_string())
}

/// Pushes `value` into the array `key` of `table` (made when absent), after a comment line.
fn push(table: &mut Table, key: &str, value: Value, comment: &str) -> Result<(), String> {
    let item = table.entry(key).or_insert_with(|| Item::Value(Value::Array(Array::new())));
    let Some(array) = item.as_array_mut() else {
        return Err(format!("`{key}` of the tool is not an array; add the grant by hand"));
    };
    push_commented(array, value, comment);
    Ok(())
}

fn push_commented(array: &mut Array, value: Value, comment: &str) {
    if let Some(last) = array.iter_mut().last() {
        // The element after which the new one comes keeps its own line ending.
        let suffix = last.decor().suffix().and_then(|s| s.as_str()).unwrap_or("").trim_end().to_string();
        last.decor_mut().set_suffix(suffix);
    }
    array.push_formatted(value.decorated(format!("\n  # suggested: {comment}\n  "), ""));
    array.set_trailing_comma(true);
    array.set_trailing("\n");
}

/// Adds a port or a host to the tool's `network`.
fn network(table: &mut Table, defaults: Option<&Item>, grant: &Grant, comment: &str) -> Result<(), String> {
    let own = table.get("network");
    if !own.is_some_and(Item::is_table_like) {
        // A tool's `network` replaces its file's default: without one of its own, start from
        // the default's table; after its own `"none"`, from nothing.
        let base = match (own, defaults) {
            (None, Some(Item::Value(Value::InlineTable(t)))) => t.clone(),
            (None, Some(Item::Table(t))) => t.clone().into_inline_table(),
            _ => InlineTable::new(),
        };
        table.insert("network", Item::Value(Value::InlineTable(base)));
    }
    let (array_key, value) = match grant {
        Grant::ConnectTcp(n) => ("connect_tcp", Some(Value::from(i64::from(*n)))),
        Grant::BindTcp(n) => ("bind_tcp", Some(Value::from(i64::from(*n)))),
        Grant::Host(h) => ("hosts", Some(Value::from(h.as_str()))),
        _ => ("connect_tcp", None),
    };
    let inline = matches!(table.get("network"), Some(Item::Value(Value::InlineTable(_))));
    let Some(net) = table.get_mut("network").and_then(Item::as_table_like_mut) else {
        return Err("the tool's `network` is not a table; add the grant by hand".into());
    };
    let entry = net.entry(array_key).or_insert(Item::Value(Value::Array(Array::new())));
    let Some(array) = entry.as_array_mut() else {
        return Err(format!("network.{array_key} of the tool is not an array; add the grant by hand"));
    };
    match (value, inline) {
        (Some(v), true) => array.push(v),
        (Some(v), false) => push_commented(array, v, comment),
        (None, _) => {}
    }
    if (inline || value_is_none(grant))
        && let Some(mut key) = table.key_mut("network")
    {
        let decor = key.leaf_decor_mut();
        let before = decor.prefix().and_then(|p| p.as_str()).unwrap_or("").to_string();
        decor.set_prefix(format!("{before}# suggested: {comment}\n"));
    }
    Ok(())
}

fn value_is_none(grant: &Grant) -> bool {
    matches!(grant, Grant::TcpSockets)
}

/// The unified diff (3 lines of context) of `old` to `new`, labelled `a/LABEL` and `b/LABEL`;
/// empty when they are the same.
pub(crate) fn unified(old: &str, new: &str, label: &str) -> String {
    if old == new {
        return String::new();
    }
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let ops = line_ops(&a, &b);
    const CONTEXT: usize = 3;
    let mut out = format!("--- a/{label}\n+++ b/{label}\n");
    // Positions of the changes in `ops`, grouped into hunks whose context meets.
    let changed: Vec<usize> =
        ops.iter().enumerate().filter(|(_, o)| !matches!(o, Op::Same(..))).map(|(i, _)| i).collect();
    let mut i = 0;
    while i < changed.len() {
        let start = changed[i].saturating_sub(CONTEXT);
        let mut end = changed[i];
        while i + 1 < changed.len() && changed[i + 1] <= end + 2 * CONTEXT + 1 {
            i += 1;
            end = changed[i];
        }
        let end = (end + CONTEXT + 1).min(ops.len());
        let hunk = &ops[start..end];
        let (a0, b0) = position(&ops[..start]);
        let a_len = hunk.iter().filter(|o| !matches!(o, Op::Add(_))).count();
        let b_len = hunk.iter().filter(|o| !matches!(o, Op::Del(_))).count();
        let at = |first: usize, len: usize| if len == 0 { first } else { first + 1 };
        out.push_str(&format!("@@ -{},{a_len} +{},{b_len} @@\n", at(a0, a_len), at(b0, b_len)));
        for op in hunk {
            match op {
                Op::Same(j) => out.push_str(&format!(" {}\n", a[*j])),
                Op::Del(j) => out.push_str(&format!("-{}\n", a[*j])),
                Op::Add(j) => out.push_str(&format!("+{}\n", b[*j])),
            }
        }
        i += 1;
    }
    out
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// A line of `a` (and the same of `b`).
    Same(usize),
    Del(usize),
    Add(usize),
}

/// Lines of `a` and `b` before `ops`.
fn position(ops: &[Op]) -> (usize, usize) {
    let a = ops.iter().filter(|o| !matches!(o, Op::Add(_))).count();
    let b = ops.iter().filter(|o| !matches!(o, Op::Del(_))).count();
    (a, b)
}

/// The edit from `a` to `b`: the common head and tail, and a longest common subsequence of the
/// rest (the rest replaced whole when it is too large to compare: policy files are small).
fn line_ops(a: &[&str], b: &[&str]) -> Vec<Op> {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..].iter().rev().zip(b[head..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut ops: Vec<Op> = (0..head).map(Op::Same).collect();
    if ma.len().saturating_mul(mb.len()) > 4_000_000 {
        ops.extend((0..ma.len()).map(|i| Op::Del(head + i)));
        ops.extend((0..mb.len()).map(|j| Op::Add(head + j)));
    } else {
        // lcs[i][j]: the longest common subsequence of ma[i..] and mb[j..].
        let w = mb.len() + 1;
        let mut lcs = vec![0u32; (ma.len() + 1) * w];
        for i in (0..ma.len()).rev() {
            for j in (0..mb.len()).rev() {
                lcs[i * w + j] = if ma[i] == mb[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < ma.len() || j < mb.len() {
            if i < ma.len() && j < mb.len() && ma[i] == mb[j] {
                ops.push(Op::Same(head + i));
                i += 1;
                j += 1;
            } else if i < ma.len() && (j == mb.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
                // Deletions before additions, as diff(1) writes a changed line.
                ops.push(Op::Del(head + i));
                i += 1;
            } else {
                ops.push(Op::Add(head + j));
                j += 1;
            }
        }
    }
    ops.extend((0..tail).map(|k| Op::Same(a.len() - tail + k)));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"version = 1

# The project's tools.
[defaults]
timeout = "10s"

[tools.cat]
description = "cat" # kept
command = ["cat", "/srv/a"]
read = ["/srv/b"]

[tools.cat.params.x]
type = "string"
"#;

    #[test]
    fn a_path_is_added_with_its_comment_and_everything_else_is_kept() {
        let new = apply(POLICY, "cat", &[(Grant::Read("/srv/a".into()), "read_file denied once".into())]).unwrap();
        let diff = unified(POLICY, &new, "p.toml");
        assert_eq!(
            diff,
            "--- a/p.toml\n+++ b/p.toml\n@@ -7,7 +7,10 @@\n [tools.cat]\n description = \"cat\" # kept\n command = [\"cat\", \"/srv/a\"]\n\
             -read = [\"/srv/b\"]\n+read = [\"/srv/b\",\n+  # suggested: read_file denied once\n+  \"/srv/a\",\n+]\n \n \
             [tools.cat.params.x]\n type = \"string\"\n"
        );
        let parsed: toml::Table = new.parse().unwrap();
        assert_eq!(parsed["tools"]["cat"]["read"], toml::Value::Array(vec!["/srv/b".into(), "/srv/a".into()]));
    }

    #[test]
    fn a_new_key_a_port_and_a_default_network_are_written_as_toml() {
        let with_default = POLICY.replace("timeout = \"10s\"", "timeout = \"10s\"\nnetwork = { connect_tcp = [80] }");
        let new = apply(
            &with_default,
            "cat",
            &[
                (Grant::Write("/srv/out".into()), "w".into()),
                (Grant::ConnectTcp(5432), "c".into()),
                (Grant::Host("h.example:443".into()), "h".into()),
            ],
        )
        .unwrap();
        let parsed: toml::Table = new.parse().unwrap();
        let cat = &parsed["tools"]["cat"];
        assert_eq!(cat["write"], toml::Value::Array(vec!["/srv/out".into()]));
        assert_eq!(cat["network"]["connect_tcp"], toml::Value::Array(vec![80.into(), 5432.into()]));
        assert_eq!(cat["network"]["hosts"], toml::Value::Array(vec!["h.example:443".into()]));
        assert!(new.contains("# suggested: c\n# suggested: h\nnetwork = {"), "{new}");
        let sockets = apply(POLICY, "cat", &[(Grant::TcpSockets, "s".into())]).unwrap();
        assert!(sockets.contains("# suggested: s\nnetwork = { connect_tcp = [] }"), "{sockets}");
        // A tool's own "none" does not take the default's hosts.
        let none = with_default.replace("read = [\"/srv/b\"]", "read = [\"/srv/b\"]\nnetwork = \"none\"");
        let sockets = apply(&none, "cat", &[(Grant::TcpSockets, "s".into())]).unwrap();
        assert!(sockets.contains("# suggested: s\nnetwork = { connect_tcp = [] }"), "{sockets}");
    }

    #[test]
    fn a_comment_cannot_end_its_line() {
        let new =
            apply(POLICY, "cat", &[(Grant::Read("/srv/a".into()), "x\nwrite = [\"/\"]\r\u{202e}".into())]).unwrap();
        let parsed: toml::Table = new.parse().unwrap();
        assert!(parsed["tools"]["cat"].get("write").is_none(), "{new}");
        assert!(new.contains(r#"# suggested: x\u{000a}write = ["/"]\u{000d}\u{202e}"#), "{new}");
    }

    #[test]
    fn diffs_of_changes_far_apart_are_two_hunks() {
        let old: String = (1..=20).map(|i| format!("l{i}\n")).collect();
        let new = old.replace("l2\n", "l2\nx\n").replace("l19\n", "y\n");
        assert_eq!(
            unified(&old, &new, "f"),
            "--- a/f\n+++ b/f\n@@ -1,5 +1,6 @@\n l1\n l2\n+x\n l3\n l4\n l5\n@@ -16,5 +17,5 @@\n l16\n l17\n l18\n-l19\n+y\n l20\n"
        );
        assert_eq!(unified(&old, &old, "f"), "");
    }
}
