//! The same invalid calls through the real `cordon mcp` (a stock rmcp client, both protocol
//! styles) and through `cordon run --json`: the agent on MCP gets exactly the code, field and
//! message the CLI shows (the daemon's wording, ranges and "did you mean" hints included).

use cordon_tests::Daemon;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _};
use rmcp::transport::{ConfigureCommandExt as _, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt as _, service::RunningService};
use serde_json::{Value, json};

const TOOLS: &str = r#"
version = 1

[tools.pick]
description = "echo checked arguments"
reason = "tests"
command = ["/usr/bin/printf", "%s %s %s %s %s", "{{name}}", "{{count}}", "{{ratio}}", "{{mode}}", "{{file}}"]
working_dir = "/tmp"

[tools.pick.params]
name = { type = "string", pattern = "\\w+", min_length = 2, max_length = 8, required = true, description = "who" }
count = { type = "integer", min = 1, max = 9, default = 1 }
ratio = { type = "number", min = 0.5, max = 2.5, default = 1.0 }
mode = { type = "enum", values = ["fast", "slow"], default = "fast" }
file = { type = "path", max_length = 40, default = "x" }
"#;

/// Invalid calls: each names what the daemon says about it.
fn cases() -> Vec<(Value, &'static str)> {
    vec![
        (json!({}), "missing required field \"name\""),
        (json!({ "name": 5 }), "must be a string matching \\w+"),
        (json!({ "name": "a" }), "the minimum is 2"),
        (json!({ "name": "a-b" }), "does not match the pattern \\w+"),
        (json!({ "name": "ab", "count": 10 }), "above the maximum 9"),
        (json!({ "name": "ab", "count": 0 }), "below the minimum 1"),
        (json!({ "name": "ab", "ratio": 3 }), "above the maximum 2.5"),
        (json!({ "name": "ab", "mode": "fats" }), "not one of the valid values: \"fast\", \"slow\""),
        (json!({ "name": "ab", "file": "../../etc" }), "climb above /tmp"),
        (json!({ "name": "ab", "nmae": "x" }), "did you mean \"name\"?"),
        (json!({ "name": "ab", "a": 1, "b": 2 }), "unknown fields"),
    ]
}

async fn session(d: &Daemon, modern: bool) -> RunningService<RoleClient, ClientConfig> {
    let command = tokio::process::Command::new(cordon_tests::bin("cordon")).configure(|c| {
        c.arg("--socket").arg(&d.socket).arg("mcp");
    });
    let (transport, _) = TokioChildProcess::builder(command).spawn().unwrap();
    let version = if modern { ProtocolVersion::V_2026_07_28 } else { ProtocolVersion::V_2025_11_25 };
    let client = ClientConfig::default().with_protocol_version(version);
    if modern {
        let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        client.serve_with_lifecycle(transport, lifecycle).await.unwrap()
    } else {
        client.serve(transport).await.unwrap()
    }
}

fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text()).map(|t| t.text.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_and_the_cli_give_the_same_code_field_and_message() {
    let d = Daemon::start(&[("tools.toml", TOOLS)]);
    for modern in [false, true] {
        let client = session(&d, modern).await;
        for (arguments, fragment) in cases() {
            let Value::Object(object) = arguments.clone() else { unreachable!() };
            let r = client
                .call_tool(CallToolRequestParams::new("pick").with_arguments(object))
                .await
                .unwrap_or_else(|e| panic!("tools/call pick {arguments}: {e}"));
            let (_, cli) = tokio::task::block_in_place(|| d.run_json("pick", &arguments));
            let cli = &cli["error"];
            let message = cli["message"].as_str().unwrap_or_else(|| panic!("the CLI refuses {arguments}: {cli}"));
            assert!(message.contains(fragment), "the daemon's message for {arguments}: {message}");
            assert_eq!(r.is_error, Some(true), "{arguments}: {r:#?}");
            let mcp = &r.structured_content.as_ref().unwrap_or_else(|| panic!("structured error: {r:#?}"))["error"];
            assert_eq!(mcp["code"], cli["code"], "code for {arguments}");
            assert_eq!(mcp["message"], cli["message"], "message for {arguments}");
            assert_eq!(mcp["field"], cli.get("field").cloned().unwrap_or(Value::Null), "field for {arguments}");
            assert!(
                text(&r).starts_with(&format!("{}: {message}", cli["code"].as_str().unwrap())),
                "the text leads with the same code and message: {}",
                text(&r)
            );
        }
        // A valid call still runs, with the defaults the daemon applies.
        let ok = json!({ "name": "ab" });
        let Value::Object(object) = ok else { unreachable!() };
        let r = client.call_tool(CallToolRequestParams::new("pick").with_arguments(object)).await.unwrap();
        assert_eq!(r.is_error, Some(false), "{r:#?}");
        assert!(text(&r).starts_with("ab 1 1 fast /tmp/x"), "{}", text(&r));
        client.cancel().await.unwrap();
    }
}
