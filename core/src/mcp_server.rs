//! The tools of an MCP server a policy declares, as cordon sees them: what the server said
//! ([`RemoteTool`], untrusted input, bounded), the digests approvals are made of, the tool cordon
//! lists and validates ([`ServerTool`]: the server's schema narrowed by the policy's
//! [`ArgRule`]s), and what the server answers a call with ([`check_result`], [`parse_progress`]).
//! cordond and `cordon mcp` validate a call with the same [`ServerTool::validate`]: the front-end
//! rebuilds the tool from the daemon's answer with [`ServerTool::from_wire`].
//!
//! Everything a server sends is untrusted: names, descriptions, schemas and results are bounded
//! and checked here, a schema is compiled without ever fetching a `$ref` (a reference outside the
//! schema makes the tool invalid), and its patterns run on the linear-time `regex` engine.
//!
//! # Layout
//! - this file, in order: the limits; [`RemoteTool`] ([`RemoteTool::parse`], [`parse_list`]) and
//!   the digests ([`RemoteTool::digest`], [`list_digest`]); [`ServerTool`] (compiling the
//!   server's schema, the narrowed schema cordon advertises, [`ServerTool::validate`], the wire
//!   form [`ServerTool::wire_rules`] / [`ServerTool::from_wire`]); results ([`check_result`]) and
//!   progress ([`parse_progress`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::policy::{ArgCheck, ArgRule, McpServer, Pattern, SERVER_TOOL_SEPARATOR};
use crate::validate::{ErrorCode, ValidationError, normalize_path};

/// Longest tool name, on the server and as cordon lists it (`SERVER__TOOL`).
pub const MAX_TOOL_NAME: usize = 128;
/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 1_024;
/// Longest description, in bytes: a longer one refuses the tool (it is never cut: what an admin
/// approves is what the agent reads).
pub const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;
/// Longest input or output schema, as JSON text.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Deepest nesting of arrays and objects in a schema.
pub const MAX_SCHEMA_DEPTH: usize = 32;
/// Longest `annotations` object, as JSON text.
pub const MAX_ANNOTATIONS_BYTES: usize = 4 * 1024;
/// Most tools one server may list; the rest are refused.
pub const MAX_TOOLS_PER_SERVER: usize = 1_000;
/// Largest arguments object of a call, as JSON text.
pub const MAX_ARGUMENTS_BYTES: usize = 1024 * 1024;
/// Most content items in a call's result.
pub const MAX_CONTENT_ITEMS: usize = 1_000;
/// A progress message is cut to this many characters.
pub const MAX_PROGRESS_MESSAGE_CHARS: usize = 1_000;
/// Longest message of a validation error (a schema error quotes the value).
const MAX_MESSAGE_CHARS: usize = 1_000;
/// Size limits of a pattern of a server's schema (compiled by the `regex` crate).
const SCHEMA_REGEX_SIZE_LIMIT: usize = 1 << 20;
const SCHEMA_REGEX_DFA_LIMIT: usize = 2 << 20;

/// One tool as a server's `tools/list` described it: untrusted, so bounded and checked when
/// parsed ([`RemoteTool::parse`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTool {
    /// The tool's name on the server (MCP: 1 to 128 of `[A-Za-z0-9_.-]`).
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    /// A JSON object (a JSON Schema whose `type` is `object`).
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    /// The server's `annotations` object as sent (hints only; never trusted for a decision).
    pub annotations: Option<Value>,
}

impl RemoteTool {
    /// One entry of a server's `tools/list` answer, checked: `name` 1 to 128 of
    /// `[A-Za-z0-9_.-]`; `title` (optional) and `description` (optional, at most 16 KiB) without
    /// control, bidirectional or invisible characters (they can hide text from an admin reviewing
    /// the list: the tool is refused, never cleaned); `inputSchema` a JSON object whose `type` is
    /// `"object"`, at most 64 KiB and 32 levels deep; `outputSchema` (optional) likewise;
    /// `annotations` (optional) an object of at most 4 KiB. Other fields are ignored. The error
    /// says why the tool is refused.
    pub fn parse(v: &Value) -> Result<RemoteTool, String> {
        let Value::Object(entry) = v else {
            return Err("the entry is not a JSON object".into());
        };
        let name = match entry.get("name") {
            Some(Value::String(name)) => name,
            Some(_) => return Err("`name` is not a string".into()),
            None => return Err("the tool has no `name`".into()),
        };
        check_tool_name(name)?;
        let title = match entry.get("title") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => {
                let n = t.chars().count();
                if n > MAX_TITLE_CHARS {
                    return Err(format!("`title` is {n} characters long; at most {MAX_TITLE_CHARS} are accepted"));
                }
                check_shown_text("title", t)?;
                Some(t.clone())
            }
            Some(_) => return Err("`title` is not a string".into()),
        };
        let description = match entry.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(d)) => {
                if d.len() > MAX_DESCRIPTION_BYTES {
                    return Err(format!(
                        "`description` is {} bytes long; at most {MAX_DESCRIPTION_BYTES} are accepted (the tool is refused, not cut)",
                        d.len()
                    ));
                }
                check_shown_text("description", d)?;
                d.clone()
            }
            Some(_) => return Err("`description` is not a string".into()),
        };
        let input_schema = match entry.get("inputSchema") {
            Some(s) => {
                check_schema("inputSchema", s)?;
                s.clone()
            }
            None => return Err("the tool has no `inputSchema` (MCP requires one)".into()),
        };
        let output_schema = match entry.get("outputSchema") {
            None | Some(Value::Null) => None,
            Some(s) => {
                check_schema("outputSchema", s)?;
                Some(s.clone())
            }
        };
        let annotations = match entry.get("annotations") {
            None | Some(Value::Null) => None,
            Some(a @ Value::Object(_)) => {
                let n = a.to_string().len();
                if n > MAX_ANNOTATIONS_BYTES {
                    return Err(format!(
                        "`annotations` is {n} bytes long; at most {MAX_ANNOTATIONS_BYTES} are accepted"
                    ));
                }
                Some(a.clone())
            }
            Some(_) => return Err("`annotations` is not a JSON object".into()),
        };
        Ok(RemoteTool { name: name.clone(), title, description, input_schema, output_schema, annotations })
    }

    /// `sha256:HEX` of the tool's definition: its canonical JSON (name, title, description,
    /// schemas, annotations; object keys sorted). A change to any of them changes the digest.
    pub fn digest(&self) -> String {
        let canonical = serde_json::json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": self.annotations,
        });
        sha256_tagged(canonical_json(&canonical).as_bytes())
    }
}

/// The tools of a `tools/list` answer (its `result`): the tools accepted, and the tools refused
/// with why (`(name, reason)`; a name that is not printable is shown escaped, and an entry without
/// a name is named by its position, `#3`). At most [`MAX_TOOLS_PER_SERVER`] entries are read (one
/// refusal names the rest); every tool whose name is listed twice is refused.
pub fn parse_list(result: &Value) -> (Vec<RemoteTool>, Vec<(String, String)>) {
    let mut refused = Vec::new();
    let Some(Value::Array(entries)) = result.get("tools") else {
        refused.push((String::new(), "the answer to tools/list has no `tools` array".to_string()));
        return (Vec::new(), refused);
    };
    let mut accepted = Vec::new();
    for (i, entry) in entries.iter().enumerate().take(MAX_TOOLS_PER_SERVER) {
        match RemoteTool::parse(entry) {
            Ok(tool) => accepted.push(tool),
            Err(why) => refused.push((shown_name(entry, i), why)),
        }
    }
    if entries.len() > MAX_TOOLS_PER_SERVER {
        refused.push((
            format!("#{}..#{}", MAX_TOOLS_PER_SERVER, entries.len() - 1),
            format!(
                "the server lists {} tools; at most {MAX_TOOLS_PER_SERVER} are read, the rest are refused",
                entries.len()
            ),
        ));
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for t in &accepted {
        *seen.entry(t.name.clone()).or_default() += 1;
    }
    let duplicated: BTreeSet<String> = seen.into_iter().filter(|(_, n)| *n > 1).map(|(name, _)| name).collect();
    if !duplicated.is_empty() {
        accepted.retain(|t| {
            if duplicated.contains(&t.name) {
                refused.push((
                    t.name.clone(),
                    "the server lists two tools of this name; both are refused (which one would a call reach?)".into(),
                ));
                false
            } else {
                true
            }
        });
    }
    (accepted, refused)
}

/// The name of a refused entry, for people: printable, at most 128 characters.
fn shown_name(entry: &Value, i: usize) -> String {
    match entry.get("name") {
        Some(Value::String(name)) => {
            let cut: String = name.chars().take(MAX_TOOL_NAME).collect();
            let cut = crate::display::escape_line(&cut).into_owned();
            if name.chars().count() > MAX_TOOL_NAME { format!("{cut}...") } else { cut }
        }
        _ => format!("#{i}"),
    }
}

fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_TOOL_NAME {
        return Err(format!(
            "`name` is {} characters long; a tool's name is 1 to {MAX_TOOL_NAME} characters",
            name.chars().count()
        ));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))) {
        return Err(format!(
            "`name` contains {}; a tool's name is made of A-Z, a-z, 0-9, `_`, `.` and `-`",
            char_shown(c)
        ));
    }
    Ok(())
}

/// Refuses text an admin reads that could hide part of itself: controls (but newline and tab),
/// bidirectional controls, invisible characters and Unicode tag characters.
fn check_shown_text(what: &str, text: &str) -> Result<(), String> {
    let hidden =
        |c: char| (crate::display::is_unsafe(c) && c != '\n' && c != '\t') || ('\u{e0000}'..='\u{e007f}').contains(&c);
    if let Some(c) = text.chars().find(|c| hidden(*c)) {
        return Err(format!(
            "`{what}` contains {}, a control, bidirectional or invisible character that can hide text from an admin reviewing the tool list; the tool is refused",
            char_shown(c)
        ));
    }
    Ok(())
}

fn char_shown(c: char) -> String {
    if c.is_ascii_graphic() || c == ' ' { format!("{c:?}") } else { format!("U+{:04X}", u32::from(c)) }
}

/// A schema as MCP requires it (an object whose `type` is `"object"`), bounded.
fn check_schema(what: &str, s: &Value) -> Result<(), String> {
    let Value::Object(map) = s else {
        return Err(format!("`{what}` is not a JSON object; MCP requires a JSON Schema of type \"object\""));
    };
    let n = s.to_string().len();
    if n > MAX_SCHEMA_BYTES {
        return Err(format!("`{what}` is {n} bytes long; at most {MAX_SCHEMA_BYTES} are accepted"));
    }
    let depth = json_depth(s);
    if depth > MAX_SCHEMA_DEPTH {
        return Err(format!("`{what}` nests {depth} levels deep; at most {MAX_SCHEMA_DEPTH} are accepted"));
    }
    if map.get("type") != Some(&Value::from("object")) {
        return Err(format!("`{what}` does not say \"type\": \"object\" (MCP requires it)"));
    }
    Ok(())
}

/// How deep arrays and objects nest (a scalar is 0, `{}` is 1). Iterative: a value is already
/// parsed, but its depth is not trusted.
fn json_depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(items) => {
                deepest = deepest.max(d);
                stack.extend(items.iter().map(|i| (i, d + 1)));
            }
            Value::Object(map) => {
                deepest = deepest.max(d);
                stack.extend(map.values().map(|i| (i, d + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// `sha256:HEX` of a whole tool list: over the lines `NAME DIGEST\n` in byte order of the names,
/// so the same tools give the same digest whatever order the server listed them in.
pub fn list_digest(tools: &[RemoteTool]) -> String {
    let by_name: BTreeMap<&str, String> = tools.iter().map(|t| (t.name.as_str(), t.digest())).collect();
    let mut text = String::new();
    for (name, digest) in by_name {
        text.push_str(name);
        text.push(' ');
        text.push_str(&digest);
        text.push('\n');
    }
    sha256_tagged(text.as_bytes())
}

fn sha256_tagged(bytes: &[u8]) -> String {
    format!("sha256:{}", data_encoding::HEXLOWER.encode(&Sha256::digest(bytes)))
}

/// JSON text with object keys sorted at every level (serde_json's default map is ordered).
pub fn canonical_json(v: &Value) -> String {
    // serde_json::Map without `preserve_order` is a BTreeMap: serialising sorts the keys.
    v.to_string()
}

/// A server's tool as cordon lists it: exposed by the policy and approved. Cheap to clone: the
/// compiled schema and the narrowed one are shared.
#[derive(Debug, Clone)]
pub struct ServerTool {
    /// `SERVER__TOOL`.
    pub exposed_name: String,
    pub server: String,
    pub remote: RemoteTool,
    pub rules: Vec<ArgRule>,
    compiled: Arc<Compiled>,
}

#[derive(Debug)]
struct Compiled {
    /// The server's own input schema, compiled (no `$ref` fetched, patterns in linear time).
    validator: jsonschema::Validator,
    /// The server's schema with the policy's rules folded in: what cordon advertises.
    advertised: Value,
    /// The server's description with a sentence saying what the policy narrows.
    advertised_description: String,
}

impl ServerTool {
    /// The tool `remote` of `server` with the policy's rules for it, its schema compiled once.
    /// Refused (with why) when `SERVER__TOOL` is longer than 128 characters, when the schema
    /// refers to anything outside itself (cordon fetches no `$ref`), or when it does not compile.
    pub fn new(server: &McpServer, remote: RemoteTool) -> Result<ServerTool, String> {
        let rules = server.rules.get(&remote.name).cloned().unwrap_or_default();
        ServerTool::with_rules(&server.name, remote, rules)
    }

    /// [`ServerTool::new`] with the rules given rather than taken from a loaded server (the
    /// front-end's [`ServerTool::from_wire`], tests).
    pub fn with_rules(server: &str, remote: RemoteTool, rules: Vec<ArgRule>) -> Result<ServerTool, String> {
        let exposed_name = format!("{server}{SERVER_TOOL_SEPARATOR}{}", remote.name);
        if exposed_name.len() > MAX_TOOL_NAME {
            return Err(format!(
                "`{exposed_name}` is {} characters long; a listed tool's name (SERVER__TOOL) is at most {MAX_TOOL_NAME}",
                exposed_name.len()
            ));
        }
        check_tool_name(&remote.name)?;
        check_schema("inputSchema", &remote.input_schema)?;
        let validator = compile_schema(&remote.input_schema)?;
        let (advertised, sentences) = narrow(&remote.input_schema, &rules);
        let advertised_description = if sentences.is_empty() {
            remote.description.clone()
        } else {
            let said = format!("cordon's policy narrows this tool: {}.", sentences.join("; "));
            if remote.description.is_empty() { said } else { format!("{}\n\n{said}", remote.description) }
        };
        let compiled = Arc::new(Compiled { validator, advertised, advertised_description });
        Ok(ServerTool { exposed_name, server: server.to_string(), remote, rules, compiled })
    }

    /// The input schema cordon lists for this tool: the server's, narrowed by the policy's rules
    /// where JSON Schema can say them. Advice for the agent: [`ServerTool::validate`] decides.
    pub fn advertised_schema(&self) -> &Value {
        &self.compiled.advertised
    }

    /// The description cordon lists: the server's, and a sentence naming the policy's rules.
    pub fn advertised_description(&self) -> &str {
        &self.compiled.advertised_description
    }

    /// Validates a call's arguments: a JSON object of at most 1 MiB, within the server's input
    /// schema (its first error), then within each of the policy's rules in order. Returns the
    /// arguments to send the server (a path an `under` rule checked is sent as checked:
    /// absolute and normalised).
    pub fn validate(&self, args: &Value) -> Result<Value, ValidationError> {
        let size = args.to_string().len();
        if size > MAX_ARGUMENTS_BYTES {
            return Err(invalid(
                ErrorCode::InvalidFieldValue,
                None,
                format!("the arguments are {size} bytes of JSON; at most {MAX_ARGUMENTS_BYTES} are accepted"),
            ));
        }
        let Value::Object(_) = args else {
            return Err(invalid(
                ErrorCode::InvalidFieldType,
                None,
                "the arguments must be a JSON object, such as {\"name\": \"value\"}".into(),
            ));
        };
        if let Err(e) = self.compiled.validator.validate(args) {
            return Err(schema_error(&e));
        }
        let mut out = args.clone();
        for rule in &self.rules {
            check_rule(rule, &mut out)?;
        }
        Ok(out)
    }

    /// The policy's rules and the server's schema as the daemon sends them to the front-end
    /// (`Tool.server_rules_json`): `{"server_schema": <the server's input schema>,
    /// "server_description": "...", "rules": [{"argument": "path", "under": ["/srv/docs"]},
    /// {"argument": "repo", "pattern": "SOURCE"}, {"argument": "n", "max_length": 8},
    /// {"argument": "mode", "one_of": [...]}, {"argument": "n", "min": 1, "max": 9},
    /// {"argument": "x", "absent": true}, {"argument": "x", "required": true}]}` (a pattern by
    /// its source, as the policy wrote it).
    pub fn wire_rules(&self) -> String {
        let rules: Vec<Value> = self.rules.iter().map(rule_to_wire).collect();
        json!({
            "server_schema": self.remote.input_schema,
            "server_description": self.remote.description,
            "rules": rules,
        })
        .to_string()
    }

    /// The tool as the front-end rebuilds it from the daemon's `Tool`: its name, server, name on
    /// the server, listed description and `input_schema_json` (the narrowed schema), and
    /// `server_rules_json` ([`ServerTool::wire_rules`], which carries the server's own schema and
    /// description). The schema is compiled and narrowed again by this same code; an
    /// `input_schema_json` that is not what the rules make (a daemon of another version) is
    /// refused rather than trusted (empty: not compared). `description` is used when the rules
    /// JSON carries no `server_description`.
    pub fn from_wire(
        exposed_name: &str,
        server: &str,
        remote_name: &str,
        description: &str,
        input_schema_json: &str,
        rules_json: &str,
    ) -> Result<ServerTool, String> {
        let wire: Value =
            serde_json::from_str(rules_json).map_err(|e| format!("the server rules JSON does not parse: {e}"))?;
        let Value::Object(wire) = wire else {
            return Err("the server rules JSON is not an object".into());
        };
        let advertised: Option<Value> = if input_schema_json.trim().is_empty() {
            None
        } else {
            Some(serde_json::from_str(input_schema_json).map_err(|e| format!("the input schema does not parse: {e}"))?)
        };
        let input_schema = match wire.get("server_schema") {
            Some(s) => s.clone(),
            None => advertised.clone().ok_or("the server rules JSON has no `server_schema`")?,
        };
        let description = match wire.get("server_description") {
            Some(Value::String(d)) => d.clone(),
            Some(_) => return Err("`server_description` is not a string".into()),
            None => description.to_string(),
        };
        let rules = match wire.get("rules") {
            None => Vec::new(),
            Some(Value::Array(rules)) => rules.iter().map(rule_from_wire).collect::<Result<_, _>>()?,
            Some(_) => return Err("`rules` is not an array".into()),
        };
        let mut entry = Map::new();
        entry.insert("name".into(), remote_name.into());
        entry.insert("description".into(), description.into());
        entry.insert("inputSchema".into(), input_schema);
        let remote = RemoteTool::parse(&Value::Object(entry))?;
        let tool = ServerTool::with_rules(server, remote, rules)?;
        if tool.exposed_name != exposed_name {
            return Err(format!(
                "the tool is named `{exposed_name}`, not `{}` as its server and name make",
                tool.exposed_name
            ));
        }
        if let Some(advertised) = advertised
            && advertised != tool.compiled.advertised
        {
            return Err(format!(
                "the schema listed for `{exposed_name}` is not the one its rules make (cordond and cordon mcp of different versions?)"
            ));
        }
        Ok(tool)
    }
}

fn invalid(code: ErrorCode, field: Option<&str>, message: String) -> ValidationError {
    ValidationError { code, field: field.map(str::to_string), message }
}

/// A retriever that fetches nothing: a `$ref` outside the schema is an error, never a request.
struct NoRetrieval;

impl jsonschema::Retrieve for NoRetrieval {
    fn retrieve(&self, uri: &jsonschema::Uri<String>) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("cordon fetches no schema ({})", uri.as_str()).into())
    }
}

/// Compiles a server's schema: no reference outside it, patterns on the linear-time `regex`
/// engine (a pattern only a backtracking engine runs makes the tool invalid), formats not
/// asserted (annotations, as in JSON Schema 2020-12, whatever draft the schema names).
fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    if let Some(r) = external_ref(schema) {
        return Err(format!(
            "the input schema refers to {r:?}, outside itself; cordon fetches no schema, so the tool is invalid"
        ));
    }
    jsonschema::options()
        .with_retriever(NoRetrieval)
        .with_pattern_options(
            jsonschema::PatternOptions::regex()
                .size_limit(SCHEMA_REGEX_SIZE_LIMIT)
                .dfa_size_limit(SCHEMA_REGEX_DFA_LIMIT),
        )
        .should_validate_formats(false)
        .build(schema)
        .map_err(|e| format!("the input schema does not compile: {}", cut(&e.to_string(), MAX_MESSAGE_CHARS)))
}

/// The first `$ref` (or `$dynamicRef`, `$recursiveRef`) that is not a fragment of the schema
/// itself (`#...`).
fn external_ref(schema: &Value) -> Option<String> {
    let mut stack = vec![schema];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                for key in ["$ref", "$dynamicRef", "$recursiveRef"] {
                    if let Some(Value::String(r)) = map.get(key)
                        && !r.starts_with('#')
                    {
                        return Some(cut(r, 200));
                    }
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    None
}

fn cut(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(chars).collect();
        s.push_str("...");
        s
    }
}

/// A schema error as a validation error: the top-level property is the field, the message
/// names the JSON pointer.
fn schema_error(e: &jsonschema::ValidationError<'_>) -> ValidationError {
    use jsonschema::error::ValidationErrorKind as K;
    let pointer = e.instance_path.as_str();
    let top = pointer.split('/').nth(1).map(unescape_pointer);
    let (code, field) = match &e.kind {
        K::Required { property } if top.is_none() => {
            (ErrorCode::MissingRequiredField, property.as_str().map(str::to_string))
        }
        K::Required { .. } => (ErrorCode::MissingRequiredField, top),
        K::AdditionalProperties { unexpected } | K::UnevaluatedProperties { unexpected } if top.is_none() => {
            (ErrorCode::UnknownFields, unexpected.first().cloned())
        }
        K::AdditionalProperties { .. } | K::UnevaluatedProperties { .. } => (ErrorCode::UnknownFields, top),
        K::Type { .. } => (ErrorCode::InvalidFieldType, top),
        _ => (ErrorCode::InvalidFieldValue, top),
    };
    let at = if pointer.is_empty() { "the arguments".to_string() } else { format!("at {pointer}") };
    let message = cut(&format!("{at}: {e}"), MAX_MESSAGE_CHARS);
    ValidationError { code, field, message }
}

fn unescape_pointer(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// Checks one rule, rewriting the argument where the rule normalises it (`under`).
fn check_rule(rule: &ArgRule, args: &mut Value) -> Result<(), ValidationError> {
    let name = rule.argument.as_str();
    let field = Some(name);
    let value = args.get(name);
    match (&rule.check, value) {
        (ArgCheck::Required, None) => {
            Err(invalid(ErrorCode::MissingRequiredField, field, format!("`{name}` is required by the policy; give it")))
        }
        (ArgCheck::Absent, Some(_)) => Err(invalid(
            ErrorCode::UnknownFields,
            field,
            format!("`{name}` is not allowed by the policy; leave it out (the server's default applies)"),
        )),
        (check, None) if confines(check) => Err(invalid(
            ErrorCode::MissingRequiredField,
            field,
            format!(
                "`{name}` is required: the policy checks its value, and the value the server would pick when it is \
                 left out is not checked; give it"
            ),
        )),
        (ArgCheck::Required | ArgCheck::Absent, _) | (_, None) => Ok(()),
        (ArgCheck::Under(dirs), Some(v)) => {
            let Value::String(raw) = v else {
                return Err(invalid(ErrorCode::InvalidFieldType, field, format!("`{name}` must be a string (a path)")));
            };
            let checked = check_under(name, raw, dirs)?;
            if let Some(slot) = args.get_mut(name) {
                *slot = Value::String(checked);
            }
            Ok(())
        }
        (ArgCheck::Pattern(p), Some(v)) => match v {
            Value::String(s) if p.is_match(s) => Ok(()),
            Value::String(s) => Err(invalid(
                ErrorCode::InvalidFieldValue,
                field,
                format!("`{name}` must match the pattern {}; {} does not", p.source(), shown_value(s)),
            )),
            _ => Err(invalid(ErrorCode::InvalidFieldType, field, format!("`{name}` must be a string"))),
        },
        (ArgCheck::MaxLength(max), Some(v)) => match v {
            Value::String(s) => {
                let n = s.chars().count() as u64;
                if n > *max {
                    Err(invalid(
                        ErrorCode::InvalidFieldValue,
                        field,
                        format!("`{name}` is {n} characters long; the policy allows at most {max}"),
                    ))
                } else {
                    Ok(())
                }
            }
            _ => Err(invalid(ErrorCode::InvalidFieldType, field, format!("`{name}` must be a string"))),
        },
        (ArgCheck::OneOf(values), Some(v)) => {
            if values.contains(v) {
                Ok(())
            } else {
                let allowed: Vec<String> = values.iter().map(Value::to_string).collect();
                Err(invalid(
                    ErrorCode::InvalidFieldValue,
                    field,
                    format!("`{name}` must be one of {}; {} is not", allowed.join(", "), shown_value(&v.to_string())),
                ))
            }
        }
        (ArgCheck::Range { min, max }, Some(v)) => {
            let Some(x) = v.as_f64() else {
                return Err(invalid(ErrorCode::InvalidFieldType, field, format!("`{name}` must be a number")));
            };
            if let Some(m) = min
                && x < *m
            {
                return Err(invalid(
                    ErrorCode::InvalidFieldValue,
                    field,
                    format!("`{name}` is {v}; the policy's minimum is {}", Value::from(*m)),
                ));
            }
            if let Some(m) = max
                && x > *m
            {
                return Err(invalid(
                    ErrorCode::InvalidFieldValue,
                    field,
                    format!("`{name}` is {v}; the policy's maximum is {}", Value::from(*m)),
                ));
            }
            Ok(())
        }
    }
}

fn shown_value(s: &str) -> String {
    crate::display::escape_line(&format!("{:?}", cut(s, 200))).into_owned()
}

fn dirs_shown(dirs: &[PathBuf]) -> String {
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(" or ")
}

/// A path beneath one of `dirs`: made absolute against the first, normalised without touching
/// the filesystem (a `..` above `/` refused). Returns the normalised path.
fn check_under(name: &str, raw: &str, dirs: &[PathBuf]) -> Result<String, ValidationError> {
    let field = Some(name);
    if raw.contains('\0') {
        return Err(invalid(
            ErrorCode::InvalidFieldValue,
            field,
            format!("`{name}` contains a NUL byte, which is never allowed"),
        ));
    }
    let base = dirs.first().map(PathBuf::as_path);
    let path = normalize_path(raw, base)
        .map_err(|why| invalid(ErrorCode::InvalidFieldValue, field, format!("`{name}` {why}")))?;
    let beneath = dirs.iter().any(|d| match normalize_path(&d.to_string_lossy(), None) {
        Ok(d) => path.starts_with(&d),
        Err(_) => false,
    });
    if !beneath {
        return Err(invalid(
            ErrorCode::InvalidFieldValue,
            field,
            format!("`{name}` must be beneath {}; {} is not", dirs_shown(dirs), shown_value(&path.to_string_lossy())),
        ));
    }
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| invalid(ErrorCode::InvalidFieldValue, field, format!("`{name}` is not UTF-8")))
}

/// The server's schema with the rules folded in where JSON Schema can say them, and the
/// sentences that say the rules in the description.
fn narrow(schema: &Value, rules: &[ArgRule]) -> (Value, Vec<String>) {
    let mut out = schema.clone();
    let mut sentences = Vec::new();
    let Value::Object(root) = &mut out else {
        return (out, sentences);
    };
    for rule in rules {
        let name = rule.argument.as_str();
        match &rule.check {
            ArgCheck::Absent => {
                if let Some(Value::Object(props)) = root.get_mut("properties") {
                    props.remove(name);
                }
                if let Some(Value::Array(req)) = root.get_mut("required") {
                    req.retain(|r| r.as_str() != Some(name));
                }
                sentences.push(format!("`{name}` must be left out"));
                continue;
            }
            ArgCheck::Required => {
                require(root, name);
                sentences.push(format!("`{name}` is required"));
                continue;
            }
            check if confines(check) => require(root, name),
            _ => {}
        }
        let props = root.entry("properties").or_insert_with(|| Value::Object(Map::new()));
        if !props.is_object() {
            *props = Value::Object(Map::new());
        }
        let Some(props) = props.as_object_mut() else { continue };
        let prop = props.entry(name.to_string()).or_insert_with(|| Value::Object(Map::new()));
        if !prop.is_object() {
            // `true` (anything): the rule's keywords say more.
            *prop = Value::Object(Map::new());
        }
        let Some(prop) = prop.as_object_mut() else { continue };
        match &rule.check {
            ArgCheck::Under(dirs) => {
                let said = format!("must be beneath {}", dirs_shown(dirs));
                let description = match prop.get("description") {
                    Some(Value::String(d)) if !d.is_empty() => format!("{d} ({said})"),
                    _ => said.clone(),
                };
                prop.insert("description".into(), description.into());
                sentences.push(format!("`{name}` {said}"));
            }
            ArgCheck::Pattern(p) => {
                let ours = Value::from(format!("^(?:{})$", p.portable()));
                if let Some(old) = prop.insert("pattern".into(), ours) {
                    let all = prop.entry("allOf").or_insert_with(|| Value::Array(Vec::new()));
                    if let Value::Array(all) = all {
                        all.push(json!({ "pattern": old }));
                    }
                }
                sentences.push(format!("`{name}` must match {}", p.source()));
            }
            ArgCheck::MaxLength(max) => {
                let m = match prop.get("maxLength").and_then(Value::as_u64) {
                    Some(old) => old.min(*max),
                    None => *max,
                };
                prop.insert("maxLength".into(), m.into());
                sentences.push(format!("`{name}` is at most {max} characters"));
            }
            ArgCheck::OneOf(values) => {
                let allowed: Vec<Value> = match prop.get("enum") {
                    Some(Value::Array(old)) => values.iter().filter(|v| old.contains(v)).cloned().collect(),
                    _ => values.clone(),
                };
                let shown: Vec<String> = values.iter().map(Value::to_string).collect();
                prop.insert("enum".into(), Value::Array(allowed));
                sentences.push(format!("`{name}` is one of {}", shown.join(", ")));
            }
            ArgCheck::Range { min, max } => {
                if let Some(m) = min {
                    let m = prop.get("minimum").and_then(Value::as_f64).map_or(*m, |old| old.max(*m));
                    prop.insert("minimum".into(), Value::from(m));
                }
                if let Some(m) = max {
                    let m = prop.get("maximum").and_then(Value::as_f64).map_or(*m, |old| old.min(*m));
                    prop.insert("maximum".into(), Value::from(m));
                }
                let said = match (min, max) {
                    (Some(a), Some(b)) => format!("`{name}` is from {} to {}", Value::from(*a), Value::from(*b)),
                    (Some(a), None) => format!("`{name}` is at least {}", Value::from(*a)),
                    (None, Some(b)) => format!("`{name}` is at most {}", Value::from(*b)),
                    (None, None) => format!("`{name}` is a number"),
                };
                sentences.push(said);
            }
            ArgCheck::Absent | ArgCheck::Required => {}
        }
    }
    (out, sentences)
}

/// Adds `name` to the schema's `required`.
fn require(root: &mut Map<String, Value>, name: &str) {
    match root.get_mut("required") {
        Some(Value::Array(req)) => {
            if !req.iter().any(|r| r.as_str() == Some(name)) {
                req.push(name.into());
            }
        }
        _ => {
            root.insert("required".into(), json!([name]));
        }
    }
}

/// Whether a check confines an argument to a place or a name the policy chose (`under`,
/// `pattern`): such an argument must be given, since the value a server uses when it is left out
/// (its working directory, a default repository) is one cordon never sees nor checks. (`one_of`
/// and the bounds stay optional: a flag's or a number's default is the server's to document.)
fn confines(check: &ArgCheck) -> bool {
    matches!(check, ArgCheck::Under(_) | ArgCheck::Pattern(_))
}

fn rule_to_wire(rule: &ArgRule) -> Value {
    let mut m = Map::new();
    m.insert("argument".into(), rule.argument.clone().into());
    match &rule.check {
        ArgCheck::Under(dirs) => {
            m.insert("under".into(), dirs.iter().map(|d| Value::from(d.to_string_lossy().as_ref())).collect());
        }
        ArgCheck::Pattern(p) => {
            m.insert("pattern".into(), p.source().into());
        }
        ArgCheck::MaxLength(n) => {
            m.insert("max_length".into(), (*n).into());
        }
        ArgCheck::OneOf(values) => {
            m.insert("one_of".into(), Value::Array(values.clone()));
        }
        ArgCheck::Range { min, max } => {
            m.insert("min".into(), min.map_or(Value::Null, Value::from));
            m.insert("max".into(), max.map_or(Value::Null, Value::from));
        }
        ArgCheck::Absent => {
            m.insert("absent".into(), true.into());
        }
        ArgCheck::Required => {
            m.insert("required".into(), true.into());
        }
    }
    Value::Object(m)
}

fn rule_from_wire(v: &Value) -> Result<ArgRule, String> {
    let Value::Object(m) = v else {
        return Err("a rule is not a JSON object".into());
    };
    let argument = m.get("argument").and_then(Value::as_str).ok_or("a rule has no `argument`")?.to_string();
    let keys: Vec<&str> = m.keys().map(String::as_str).filter(|k| *k != "argument").collect();
    let bad = || format!("the rule on `{argument}` is not one cordon knows ({})", keys.join(", "));
    let check = match keys.as_slice() {
        ["under"] => {
            let dirs = m.get("under").and_then(Value::as_array).ok_or_else(bad)?;
            ArgCheck::Under(
                dirs.iter().map(|d| d.as_str().map(PathBuf::from).ok_or_else(bad)).collect::<Result<_, _>>()?,
            )
        }
        ["pattern"] => {
            let source = m.get("pattern").and_then(Value::as_str).ok_or_else(bad)?;
            ArgCheck::Pattern(Pattern::compile(source).map_err(|e| format!("the rule on `{argument}`: {e}"))?)
        }
        ["max_length"] => ArgCheck::MaxLength(m.get("max_length").and_then(Value::as_u64).ok_or_else(bad)?),
        ["one_of"] => ArgCheck::OneOf(m.get("one_of").and_then(Value::as_array).ok_or_else(bad)?.clone()),
        ["max", "min"] => {
            let bound = |k: &str| match m.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v.as_f64().map(Some).ok_or_else(bad),
            };
            ArgCheck::Range { min: bound("min")?, max: bound("max")? }
        }
        ["absent"] if m.get("absent") == Some(&Value::Bool(true)) => ArgCheck::Absent,
        ["required"] if m.get("required") == Some(&Value::Bool(true)) => ArgCheck::Required,
        _ => return Err(bad()),
    };
    Ok(ArgRule { argument, check })
}

/// A server's answer to `tools/call` (a CallToolResult), untrusted: `content` an array of at
/// most 1,000 items, each `text`, `image`, `audio`, `resource_link` or `resource` with its
/// required fields of the right types (`data` and `blob` valid base64); `structuredContent` an
/// object if present; `isError` a boolean if present. Every other field is dropped. The cleaned
/// result, as JSON text, is at most `max_bytes` (the launcher's `max_output`). The error says
/// what is wrong (the call fails SERVER_FAILED).
pub fn check_result(v: &Value, max_bytes: u64) -> Result<Value, String> {
    let Value::Object(result) = v else {
        return Err("the result is not a JSON object".into());
    };
    let Some(content) = result.get("content") else {
        return Err("the result has no `content` array".into());
    };
    let Value::Array(items) = content else {
        return Err("the result's `content` is not an array".into());
    };
    if items.len() > MAX_CONTENT_ITEMS {
        return Err(format!("the result has {} content items; at most {MAX_CONTENT_ITEMS} are accepted", items.len()));
    }
    let mut out = Map::new();
    let cleaned: Vec<Value> = items
        .iter()
        .enumerate()
        .map(|(i, item)| check_content(item).map_err(|why| format!("content[{i}] {why}")))
        .collect::<Result<_, _>>()?;
    out.insert("content".into(), Value::Array(cleaned));
    match result.get("structuredContent") {
        None | Some(Value::Null) => {}
        Some(s @ Value::Object(_)) => {
            out.insert("structuredContent".into(), s.clone());
        }
        Some(_) => return Err("the result's `structuredContent` is not a JSON object".into()),
    }
    match result.get("isError") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => {
            out.insert("isError".into(), (*b).into());
        }
        Some(_) => return Err("the result's `isError` is not a boolean".into()),
    }
    let out = Value::Object(out);
    let size = out.to_string().len() as u64;
    if size > max_bytes {
        return Err(format!("the result is {size} bytes of JSON; the server's max_output is {max_bytes}"));
    }
    Ok(out)
}

fn check_content(item: &Value) -> Result<Value, String> {
    let Value::Object(item) = item else {
        return Err("is not a JSON object".into());
    };
    let mut out = Map::new();
    let ty = string_field(item, "type")?;
    out.insert("type".into(), ty.into());
    match ty {
        "text" => copy_string(item, &mut out, "text")?,
        "image" | "audio" => {
            copy_base64(item, &mut out, "data")?;
            copy_string(item, &mut out, "mimeType")?;
        }
        "resource_link" => {
            copy_string(item, &mut out, "uri")?;
            copy_string(item, &mut out, "name")?;
            for key in ["title", "description", "mimeType"] {
                copy_optional_string(item, &mut out, key)?;
            }
            match item.get("size") {
                None | Some(Value::Null) => {}
                Some(n @ Value::Number(_)) => {
                    out.insert("size".into(), n.clone());
                }
                Some(_) => return Err("has a `size` that is not a number".into()),
            }
        }
        "resource" => {
            let Some(Value::Object(res)) = item.get("resource") else {
                return Err("(resource) has no `resource` object".into());
            };
            let mut r = Map::new();
            copy_string(res, &mut r, "uri").map_err(|e| format!("resource {e}"))?;
            copy_optional_string(res, &mut r, "mimeType").map_err(|e| format!("resource {e}"))?;
            match (res.get("text"), res.get("blob")) {
                (Some(_), None) => copy_string(res, &mut r, "text").map_err(|e| format!("resource {e}"))?,
                (None, Some(_)) => copy_base64(res, &mut r, "blob").map_err(|e| format!("resource {e}"))?,
                _ => return Err("(resource) must have exactly one of `text` and `blob`".into()),
            }
            out.insert("resource".into(), Value::Object(r));
        }
        other => {
            return Err(format!(
                "has type {}; cordon passes text, image, audio, resource_link and resource",
                shown_value(other)
            ));
        }
    }
    match item.get("annotations") {
        None | Some(Value::Null) => {}
        Some(a @ Value::Object(_)) => {
            out.insert("annotations".into(), a.clone());
        }
        Some(_) => return Err("has `annotations` that is not a JSON object".into()),
    }
    Ok(Value::Object(out))
}

fn string_field<'a>(m: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    match m.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("has a `{key}` that is not a string")),
        None => Err(format!("has no `{key}`")),
    }
}

fn copy_string(from: &Map<String, Value>, to: &mut Map<String, Value>, key: &str) -> Result<(), String> {
    let s = string_field(from, key)?;
    to.insert(key.into(), s.into());
    Ok(())
}

fn copy_optional_string(from: &Map<String, Value>, to: &mut Map<String, Value>, key: &str) -> Result<(), String> {
    match from.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) => {
            to.insert(key.into(), s.as_str().into());
            Ok(())
        }
        Some(_) => Err(format!("has a `{key}` that is not a string")),
    }
}

fn copy_base64(from: &Map<String, Value>, to: &mut Map<String, Value>, key: &str) -> Result<(), String> {
    let s = string_field(from, key)?;
    if data_encoding::BASE64.decode_len(s.len()).is_err() || data_encoding::BASE64.decode(s.as_bytes()).is_err() {
        return Err(format!("has a `{key}` that is not base64"));
    }
    to.insert(key.into(), s.into());
    Ok(())
}

/// The params of a `notifications/progress` a server sent: `(progress, total, message)`, the
/// message cut at 1,000 characters. `None` when `progress` is not a finite number (or `total`
/// is present and is not one).
pub fn parse_progress(params: &Value) -> Option<(f64, Option<f64>, String)> {
    let progress = params.get("progress")?.as_f64().filter(|x| x.is_finite())?;
    let total = match params.get("total") {
        None | Some(Value::Null) => None,
        Some(t) => Some(t.as_f64().filter(|x| x.is_finite())?),
    };
    let message = match params.get("message") {
        Some(Value::String(m)) => m.chars().take(MAX_PROGRESS_MESSAGE_CHARS).collect(),
        _ => String::new(),
    };
    Some((progress, total, message))
}
