//! Diagnostics with `file:line:col` positions.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// How bad a diagnostic is: errors reject the file, warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// One problem found in a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub file: PathBuf,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    pub message: String,
}

impl Diagnostic {
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// `file:line:col: message` for errors, `file:line:col: warning: message` for warnings.
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file.display(), self.line, self.column)?;
        if self.severity == Severity::Warning {
            f.write_str("warning: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Maps byte offsets of one file to line and column.
#[derive(Debug)]
pub(crate) struct LineIndex<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, line_starts }
    }

    /// 1-based (line, column) of a byte offset; columns count characters.
    pub(crate) fn position(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset).saturating_sub(1);
        let start = self.line_starts.get(line).copied().unwrap_or(0);
        let column = self.text.get(start..offset).map_or(offset - start, |s| s.chars().count());
        (to_u32(line + 1), to_u32(column + 1))
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Collects the diagnostics of one file.
#[derive(Debug)]
pub(crate) struct Sink<'a> {
    file: &'a Path,
    index: LineIndex<'a>,
    pub(crate) diagnostics: Vec<Diagnostic>,
}

impl<'a> Sink<'a> {
    pub(crate) fn new(file: &'a Path, text: &'a str) -> Self {
        Sink { file, index: LineIndex::new(text), diagnostics: Vec::new() }
    }

    pub(crate) fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.push(Severity::Error, span, message.into());
    }

    pub(crate) fn warning(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.push(Severity::Warning, span, message.into());
    }

    pub(crate) fn line_of(&self, span: &Range<usize>) -> u32 {
        self.index.position(span.start).0
    }

    /// 1-based (line, column) of the start of `span`.
    pub(crate) fn position(&self, span: &Range<usize>) -> (u32, u32) {
        self.index.position(span.start)
    }

    /// An error at a position found earlier with [`Sink::position`].
    pub(crate) fn error_at(&mut self, line: u32, column: u32, message: impl Into<String>) {
        let file = self.file.to_path_buf();
        self.diagnostics.push(Diagnostic { severity: Severity::Error, file, line, column, message: message.into() });
    }

    fn push(&mut self, severity: Severity, span: Range<usize>, message: String) {
        let (line, column) = self.index.position(span.start);
        self.diagnostics.push(Diagnostic { severity, file: self.file.to_path_buf(), line, column, message });
    }
}

/// Candidates close to `wanted` (distance at most a third of its length, at least 1; or a prefix
/// match), best first, at most three.
pub fn suggestions<'c>(wanted: &str, candidates: impl IntoIterator<Item = &'c str>) -> Vec<&'c str> {
    let limit = (wanted.chars().count() / 3).max(1);
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter_map(|c| {
            // Edit distance counting a swap of two neighbours as one edit (optimal string alignment).
            let d = strsim::osa_distance(wanted, c);
            let related = d <= limit || (wanted.len() >= 3 && (c.starts_with(wanted) || wanted.starts_with(c)));
            related.then_some((d, c))
        })
        .collect();
    scored.sort();
    scored.into_iter().take(3).map(|(_, c)| c).collect()
}

/// `; did you mean "x"?` or `; did you mean "x" or "y"?`, or nothing.
pub fn did_you_mean<'c>(wanted: &str, candidates: impl IntoIterator<Item = &'c str>) -> String {
    let found = suggestions(wanted, candidates);
    match found.as_slice() {
        [] => String::new(),
        [one] => format!("; did you mean \"{one}\"?"),
        many => {
            let quoted: Vec<String> = many.iter().map(|c| format!("\"{c}\"")).collect();
            format!("; did you mean {}?", quoted.join(" or "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters() {
        let idx = LineIndex::new("ab\nçd = 1\n");
        assert_eq!(idx.position(0), (1, 1));
        assert_eq!(idx.position(3), (2, 1));
        // 'ç' is two bytes but one column.
        assert_eq!(idx.position(6), (2, 3));
    }

    #[test]
    fn suggestions_rank_by_distance() {
        assert_eq!(suggestions("comand", ["command", "confirm", "env"]), vec!["command"]);
        assert_eq!(did_you_mean("zzz", ["command"]), "");
        assert_eq!(did_you_mean("nmae", ["name", "count"]), "; did you mean \"name\"?");
        assert_eq!(did_you_mean("lst-files", ["list-files", "grep"]), "; did you mean \"list-files\"?");
    }
}
