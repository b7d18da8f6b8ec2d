//! What the tools of one load share, and what a load takes over from the one before it:
//! compiled patterns by source, and JSON Schemas by text. A registry of 10,000 tools that use a
//! handful of patterns holds a handful of compiled regexes, and an edited file's tools keep the
//! previous generation's where their patterns and schemas did not change.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::model::{JsonText, ParamKind, Pattern, Tool};
use super::pattern::PatternError;

/// Patterns by source and JSON texts, for one load.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    patterns: HashMap<String, Pattern>,
    texts: HashSet<Arc<str>>,
}

impl Interner {
    /// Seeded with what `tools` (the previous generation's) hold.
    pub(crate) fn after<'a>(tools: impl IntoIterator<Item = &'a Tool>) -> Interner {
        let mut out = Interner::default();
        for tool in tools {
            out.texts.insert(tool.input_schema.shared().clone());
            for param in &tool.params {
                if let ParamKind::String { pattern: Some(p), .. } = &param.kind {
                    out.patterns.entry(p.source().to_string()).or_insert_with(|| p.clone());
                }
            }
        }
        out
    }

    /// [`Pattern::compile`], once per distinct source (a pattern that does not compile is
    /// compiled again each time, so each use gets its diagnostic).
    pub(crate) fn pattern(&mut self, source: &str) -> Result<Pattern, PatternError> {
        if let Some(p) = self.patterns.get(source) {
            return Ok(p.clone());
        }
        let p = Pattern::compile(source)?;
        self.patterns.insert(source.to_string(), p.clone());
        Ok(p)
    }

    /// `value` as compact JSON text, one allocation per distinct text.
    pub(crate) fn json(&mut self, value: &serde_json::Value) -> JsonText {
        let text = value.to_string();
        if let Some(shared) = self.texts.get(text.as_str()) {
            return JsonText::from_shared(shared.clone());
        }
        let shared: Arc<str> = Arc::from(text);
        self.texts.insert(shared.clone());
        JsonText::from_shared(shared)
    }
}
