//! Tool definitions written for other systems that people put where cordon looks for policies:
//! a CtxNest `ctxnest.json`, a Gandalf `registry.json`, or an agent host's MCP servers
//! (`{"mcpServers": {...}}` of Claude Desktop, Claude Code, Cursor, Windsurf, `.mcp.json`). cordond never reads them; the loader and
//! `cordon policy check` recognize them to say how to convert them (`cordon import`).

use std::path::Path;

/// A tool-definition format cordon can import.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// CtxNest Hands: `{"version": "1", "tools": {...}}`.
    CtxNest,
    /// Gandalf spells: `{"spells": {...}, ...}`.
    Gandalf,
    /// An agent host's MCP servers: `{"mcpServers": {"NAME": {"command", "args", "env"}}}` (or
    /// Codex's TOML `[mcp_servers.NAME]`, which `cordon import` reads as the same).
    McpServers,
}

impl Foreign {
    /// The name `cordon import` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Foreign::CtxNest => "ctxnest",
            Foreign::Gandalf => "gandalf",
            Foreign::McpServers => "mcp",
        }
    }

    /// "a CtxNest config", "a Gandalf spell registry".
    pub fn describe(self) -> &'static str {
        match self {
            Foreign::CtxNest => "a CtxNest config (ctxnest.json)",
            Foreign::Gandalf => "a Gandalf spell registry (registry.json)",
            Foreign::McpServers => "an agent host's MCP servers (an \"mcpServers\" object)",
        }
    }

    /// Which format a parsed JSON document is, if any: a Gandalf registry has a `spells`
    /// object; a CtxNest config has a `tools` object and a `version`; a host's MCP config has an
    /// `mcpServers` object.
    pub fn of_json(doc: &serde_json::Value) -> Option<Foreign> {
        let obj = doc.as_object()?;
        if obj.get("mcpServers").is_some_and(serde_json::Value::is_object) {
            return Some(Foreign::McpServers);
        }
        if obj.get("spells").is_some_and(serde_json::Value::is_object) {
            return Some(Foreign::Gandalf);
        }
        if obj.get("tools").is_some_and(serde_json::Value::is_object) && obj.contains_key("version") {
            return Some(Foreign::CtxNest);
        }
        None
    }

    /// Which format `text` is, if it is JSON of either.
    pub fn sniff(text: &str) -> Option<Foreign> {
        serde_json::from_str::<serde_json::Value>(text).ok().as_ref().and_then(Foreign::of_json)
    }
}

/// What to do with `path`, a file cordond does not read: for an importable config, the exact
/// `cordon import` command; for other JSON, that only TOML is read.
pub fn hint(path: &Path, text: &str) -> String {
    let shown = path.display();
    match Foreign::sniff(text) {
        Some(format) => format!(
            "{shown} looks like {}, which cordond does not read: convert it with \
             `cordon import {} {shown} -o {}`, review it, and put the .toml file in the policy directory",
            format.describe(),
            format.as_str(),
            path.with_extension("toml").display()
        ),
        None => format!(
            "{shown} is not a policy file: cordond reads only TOML files named *.toml (a CtxNest ctxnest.json, a \
             Gandalf registry.json or a host's mcpServers config can be converted with `cordon import`)"
        ),
    }
}

/// Whether `text` looks like JSON rather than TOML (its first non-blank character opens a JSON
/// object or array).
pub fn looks_like_json(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object() || v.is_array())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognizes_both_formats_and_nothing_else() {
        assert_eq!(Foreign::sniff(r#"{"version": "1", "tools": {}}"#), Some(Foreign::CtxNest));
        assert_eq!(Foreign::sniff(r#"{"cursor": [], "spells": {}}"#), Some(Foreign::Gandalf));
        assert_eq!(Foreign::sniff(r#"{"tools": {}}"#), None);
        assert_eq!(Foreign::sniff("version = 1"), None);
        assert_eq!(Foreign::sniff(r#"{"mcpServers": {"git": {"command": "uvx"}}}"#), Some(Foreign::McpServers));
        assert_eq!(Foreign::sniff(r#"{"mcpServers": []}"#), None);
        let h = hint(Path::new("/p/claude_desktop_config.json"), r#"{"mcpServers": {}}"#);
        assert!(h.contains("cordon import mcp /p/claude_desktop_config.json -o /p/claude_desktop_config.toml"), "{h}");
        let h = hint(Path::new("/p/ctxnest.json"), r#"{"version": "1", "tools": {}}"#);
        assert!(h.contains("cordon import ctxnest /p/ctxnest.json -o /p/ctxnest.toml"), "{h}");
        let h = hint(Path::new("/p/other.json"), "{}");
        assert!(h.contains("only TOML files named *.toml"), "{h}");
    }
}
