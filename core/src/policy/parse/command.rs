//! The argv template: `command = [...]`, its literal program and its `{{param}}` placeholders.

use std::ops::Range;

use super::param::valid_param_name;
use super::{Parser, Value};
use crate::policy::model::{ArgTemplate, Segment};

impl Parser<'_> {
    /// `command`: the program (`command[0]`, literal) and the templates of the later elements.
    /// `declared` names every param table of the tool, valid or not.
    pub(super) fn command(
        &mut self,
        v: &Value<'_>,
        tool: &str,
        declared: &[String],
    ) -> Option<(String, Vec<ArgTemplate>)> {
        let items = self.array(v, "command", "an array of strings")?;
        if items.is_empty() {
            self.sink.error(v.span(), "`command` is empty; give at least the program, e.g. command = [\"ls\"]");
            return None;
        }
        let mut ok = true;
        let mut templates = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match self.template(item, i, tool, declared) {
                Some((template, all_declared)) => {
                    ok &= all_declared;
                    templates.push((template, item.span()));
                }
                None => ok = false,
            }
        }
        let mut iter = templates.into_iter();
        let (first, span) = iter.next()?;
        let program = first.to_string();
        ok &= self.program(&first, &program, span);
        if !ok {
            return None;
        }
        Some((program, iter.map(|(t, _)| t).collect()))
    }

    /// `command[i]` as a template, and whether each of its placeholders names a declared param.
    fn template(&mut self, item: &Value<'_>, i: usize, tool: &str, declared: &[String]) -> Option<(ArgTemplate, bool)> {
        let text = self.string(item, &format!("command[{i}]"))?;
        if text.contains('\0') {
            self.sink.error(item.span(), format!("command[{i}] contains a NUL byte"));
            return None;
        }
        let (segments, loose) = split_placeholders(&text);
        for l in loose {
            self.sink.warning(
                item.span(),
                format!(
                    "{l} in command[{i}] is not a placeholder (write {{{{{}}}}}); it is passed literally",
                    l.trim_matches(|c| c == '{' || c == '}' || c == ' ')
                ),
            );
        }
        let template = ArgTemplate { segments };
        let mut all_declared = true;
        for name in template.placeholders() {
            if !declared.iter().any(|p| p == name) {
                self.sink.error(item.span(), format!("placeholder {{{{{name}}}}} in command[{i}] has no param; define it under [tools.{tool}.params.{name}]"));
                all_declared = false;
            }
        }
        Some((template, all_declared))
    }

    /// Whether `command[0]` names a program: literal, not empty, absolute or a bare name.
    pub(super) fn program(&mut self, first: &ArgTemplate, program: &str, span: Range<usize>) -> bool {
        if first.has_placeholder() {
            self.sink
                .error(span, "command[0] must be a literal program; placeholders are only allowed in later elements");
            return false;
        }
        if program.is_empty() {
            self.sink.error(span, "command[0] is empty; name the program to run");
            return false;
        }
        if program.contains('/') && !program.starts_with('/') {
            self.sink.error(
                span,
                format!(
                    "command[0] {program:?} is a relative path; use an absolute path or a bare name looked up in PATH"
                ),
            );
            return false;
        }
        true
    }
}

/// Splits `text` into literal and `{{param}}` segments. Also returns brace groups that look like
/// a placeholder with stray spaces (`{{ name }}`), which stay literal but deserve a warning.
pub(super) fn split_placeholders(text: &str) -> (Vec<Segment>, Vec<String>) {
    let mut segments = Vec::new();
    let mut loose = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let name_len = after.bytes().take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_').count();
        let name = &after[..name_len];
        if name_len > 0 && name.as_bytes()[0].is_ascii_lowercase() && after[name_len..].starts_with("}}") {
            literal.push_str(&rest[..start]);
            if !literal.is_empty() {
                segments.push(Segment::Literal(std::mem::take(&mut literal)));
            }
            segments.push(Segment::Param(name.to_string()));
            rest = &after[name_len + 2..];
        } else {
            if let Some(end) = after.find("}}") {
                let inner = after[..end].trim();
                if !inner.is_empty() && inner.len() != end && valid_param_name(inner) {
                    loose.push(format!("{{{{{}}}}}", &after[..end]));
                }
            }
            literal.push_str(&rest[..start + 2]);
            rest = after;
        }
    }
    literal.push_str(rest);
    if !literal.is_empty() || segments.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    (segments, loose)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_split_once() {
        let (s, loose) = split_placeholders("--filter={{f}}x{{g}}");
        assert_eq!(
            s,
            vec![
                Segment::Literal("--filter=".into()),
                Segment::Param("f".into()),
                Segment::Literal("x".into()),
                Segment::Param("g".into())
            ]
        );
        assert!(loose.is_empty());
        let (s, _) = split_placeholders("{{.Names}}");
        assert_eq!(s, vec![Segment::Literal("{{.Names}}".into())]);
        let (s, loose) = split_placeholders("{{ name }}");
        assert_eq!(s, vec![Segment::Literal("{{ name }}".into())]);
        assert_eq!(loose, vec!["{{ name }}".to_string()]);
        let (s, _) = split_placeholders("");
        assert_eq!(s, vec![Segment::Literal(String::new())]);
    }
}
