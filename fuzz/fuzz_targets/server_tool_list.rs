//! An MCP server's `tools/list` answer and a call of its tools (core/src/mcp_server.rs): the
//! input is one JSON object, the answer's `result` (`{"tools": [...]}`) with the call's
//! `arguments` beside it. Every tool is parsed, built with a rule of every kind on the arguments
//! the real servers take (`path`, `repo_path`, `url`, ...), and the arguments validated as
//! cordond would; then rebuilt from its wire form as `cordon mcp` would, which must give the
//! same verdict and message.
use std::path::PathBuf;

use cordon_core::mcp_server::{ServerTool, parse_list};
use cordon_core::policy::{ArgCheck, ArgRule, Pattern};
use serde_json::{Value, json};

fn rules() -> Vec<ArgRule> {
    let pattern = |p: &str| match Pattern::compile(p) {
        Ok(p) => p,
        Err(e) => panic!("the fuzz target's pattern {p:?} does not compile: {e}"),
    };
    let rule = |argument: &str, check| ArgRule { argument: argument.into(), check };
    vec![
        rule("path", ArgCheck::Under(vec![PathBuf::from("/srv/docs"), PathBuf::from("/tmp")])),
        rule("source", ArgCheck::Under(vec![PathBuf::from("/srv/docs")])),
        rule("repo_path", ArgCheck::Pattern(pattern("/srv/repos/[a-z0-9-]+"))),
        rule("url", ArgCheck::Pattern(pattern("http://127\\.0\\.0\\.1:[0-9]+/.*"))),
        rule("message", ArgCheck::MaxLength(64)),
        rule("raw", ArgCheck::OneOf(vec![json!(false)])),
        rule("max_count", ArgCheck::Range { min: Some(1.0), max: Some(50.0) }),
        rule("head", ArgCheck::Absent),
        rule("max_length", ArgCheck::Required),
    ]
}

fn main() {
    let rules = rules();
    afl::fuzz!(|data: &[u8]| {
        let Ok(input) = serde_json::from_slice::<Value>(data) else { return };
        let args = input.get("arguments").cloned().unwrap_or(Value::Null);
        let (tools, _refused) = parse_list(&input);
        for tool in tools {
            let Ok(server_tool) = ServerTool::with_rules("fuzz", tool, rules.clone()) else { continue };
            let verdict = server_tool.validate(&args);
            let advertised = server_tool.advertised_schema().to_string();
            let front = ServerTool::from_wire(
                &server_tool.exposed_name,
                "fuzz",
                &server_tool.remote.name,
                server_tool.advertised_description(),
                &advertised,
                &server_tool.wire_rules(),
            );
            match front {
                Ok(front) => assert_eq!(front.validate(&args), verdict, "the front-end and cordond disagree"),
                Err(e) => panic!("a tool cordond built does not rebuild from its wire form: {e}"),
            }
        }
    });
}
