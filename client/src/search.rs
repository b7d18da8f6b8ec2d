//! Tool search: ranks the tools a caller sees by a query, for registries too big to list into
//! a model's context. Used by `cordon tools --search` and the MCP built-in `search_tools`; both
//! rank what `ListTools` returned to that caller, so a search never shows more than a listing.
//!
//! The score is simple and explainable (case-insensitive; words are runs of letters and digits):
//! - the whole query equals the name: 1000; the name starts with it: 500; contains it: 300;
//! - then each query word, counted once per place: a word of the name 40 (a part of the name
//!   20), a word of the description 10, of a param's name 8, of a param's description 4.
//!
//! Params are read from the tool's input schema (what every caller, agents included, is shown).
//! Tools scoring 0 are left out; ties go by name, so the order is deterministic.

use serde::Serialize;
use serde_json::Value;

use crate::api::ToolInfo;

/// The most hits one search returns, and the default.
pub const MAX_LIMIT: usize = 50;
pub const DEFAULT_LIMIT: usize = 10;

/// One ranked tool.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub score: u32,
    /// `name:type` for each param, `?` after the name when it is optional.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<String>,
    pub input_schema: Value,
}

/// The lowercase words of `text`.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// One param as the tool's input schema describes it (the schema is what every caller gets,
/// agents included): name, description, type, required.
struct Param {
    name: String,
    description: String,
    kind: String,
    required: bool,
}

fn params(schema: &Value) -> Vec<Param> {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(props) = schema["properties"].as_object() else { return Vec::new() };
    props
        .iter()
        .map(|(name, p)| Param {
            name: name.clone(),
            description: p["description"].as_str().unwrap_or_default().to_string(),
            kind: p["type"].as_str().unwrap_or("any").to_string(),
            required: required.contains(&name.as_str()),
        })
        .collect()
}

/// `tool`'s score for `query` (see the module docs); 0: no match.
pub fn score(tool: &ToolInfo, query: &str) -> u32 {
    let schema: Value = serde_json::from_str(tool.input_schema.as_str()).unwrap_or(Value::Null);
    score_with(tool, &params(&schema), query)
}

fn score_with(tool: &ToolInfo, params: &[Param], query: &str) -> u32 {
    let q = query.trim().to_lowercase();
    if q.is_empty() {
        return 0;
    }
    let name = tool.name.to_lowercase();
    let mut s = if name == q {
        1000
    } else if name.starts_with(&q) {
        500
    } else if name.contains(&q) {
        300
    } else {
        0
    };
    let name_words = words(&tool.name);
    let description = words(&tool.description);
    let param_names: Vec<String> = params.iter().flat_map(|p| words(&p.name)).collect();
    let param_descriptions: Vec<String> = params.iter().flat_map(|p| words(&p.description)).collect();
    let mut seen = Vec::new();
    for w in words(&q) {
        if seen.contains(&w) {
            continue;
        }
        if name_words.contains(&w) {
            s += 40;
        } else if name.contains(&w) {
            s += 20;
        }
        if description.contains(&w) {
            s += 10;
        }
        if param_names.contains(&w) {
            s += 8;
        }
        if param_descriptions.contains(&w) {
            s += 4;
        }
        seen.push(w);
    }
    s
}

/// The `limit` best matches of `query` among `tools`, best first, ties by name.
pub fn rank<'a>(tools: impl Iterator<Item = &'a ToolInfo>, query: &str, limit: usize) -> (usize, Vec<Hit>) {
    let mut scored: Vec<(u32, &ToolInfo, Value, Vec<Param>)> = tools
        .filter_map(|t| {
            let schema: Value = serde_json::from_str(t.input_schema.as_str()).unwrap_or(Value::Null);
            let params = params(&schema);
            let s = score_with(t, &params, query);
            (s > 0).then_some((s, t, schema, params))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let total = scored.len();
    let hits = scored
        .into_iter()
        .take(limit)
        .map(|(score, t, input_schema, params)| Hit {
            name: t.name.clone(),
            description: t.description.clone(),
            score,
            params: params
                .iter()
                .map(|p| format!("{}{}:{}", p.name, if p.required { "" } else { "?" }, p.kind))
                .collect(),
            input_schema,
        })
        .collect();
    (total, hits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_proto::v1;

    fn tool(name: &str, description: &str, params: &[(&str, &str)]) -> ToolInfo {
        ToolInfo::from(v1::Tool {
            name: name.into(),
            description: description.into(),
            available: true,
            input_schema_json: serde_json::json!({
                "type": "object",
                "properties": params.iter().map(|(n, d)| ((*n).to_string(), serde_json::json!({ "type": "string", "description": d })))
                    .collect::<serde_json::Map<String, Value>>(),
                "required": params.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            })
            .to_string(),
            ..v1::Tool::default()
        })
    }

    #[test]
    fn exact_name_beats_prefix_beats_substring_beats_words_and_ties_go_by_name() {
        let tools = [
            tool("git_log_all", "every log", &[]),
            tool("git_log", "show the log", &[]),
            tool("show_git_log", "x", &[]),
            tool("zeta", "reads the git log", &[]),
            tool("alpha", "reads the git log", &[]),
            tool("grep", "search files", &[("pattern", "what to look for")]),
            tool("other", "nothing here", &[]),
        ];
        let (total, hits) = rank(tools.iter(), "GIT_log", 10);
        let names: Vec<&str> = hits.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["git_log", "git_log_all", "show_git_log", "alpha", "zeta"]);
        assert_eq!(total, 5);
        let (_, hits) = rank(tools.iter(), "pattern look", 10);
        assert_eq!(hits[0].name, "grep");
        assert_eq!(hits[0].score, 8 + 4);
        assert_eq!(hits[0].params, ["pattern:string"]);
        assert_eq!(rank(tools.iter(), "  ", 10).0, 0);
        assert_eq!(rank(tools.iter(), "log", 2).1.len(), 2);
    }
}
