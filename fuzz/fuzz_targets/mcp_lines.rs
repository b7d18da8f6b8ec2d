//! `cordon mcp` over stdio (client/src/mcp/lines.rs): the line reader (with a small line limit,
//! so over-long lines and the id recovery are reached), the verdict on each line, rmcp's typed
//! parse of what passes, and for `tools/call` what the bridge does before it calls cordond:
//! the tool looked up by name and its arguments validated (fuzz/policies/arguments.toml).
use std::path::PathBuf;

use cordon_client::mcp::lines::LineTransport;
use cordon_core::policy::diag::did_you_mean;
use cordon_core::policy::{Host, load_sources};
use cordon_core::validate::validate;
use rmcp::model::{ClientRequest, JsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::Value;

const POLICY: &str = include_str!("../policies/arguments.toml");

fn main() {
    let sources = [(PathBuf::from("arguments.toml"), POLICY.to_string())];
    let set = match load_sources(&sources, &Host::new(true, 7)) {
        Ok(set) => set,
        Err(e) => panic!("fuzz/policies/arguments.toml does not load: {e}"),
    };
    // A panic aborts the process (the fuzzer's crash): nothing observes state after one.
    let tools = std::panic::AssertUnwindSafe(set.tools);
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(r) => std::panic::AssertUnwindSafe(r),
        Err(e) => panic!("no runtime: {e}"),
    };
    afl::fuzz!(|data: &[u8]| {
        runtime.block_on(async {
            let mut transport = LineTransport::with_max_line(data, tokio::io::sink(), 1024);
            while let Some(message) = transport.receive().await {
                let JsonRpcMessage::Request(request) = message else { continue };
                let ClientRequest::CallToolRequest(call) = request.request else { continue };
                let name = call.params.name.as_ref();
                let arguments = Value::Object(call.params.arguments.clone().unwrap_or_default());
                match tools.iter().find(|t| t.name == name) {
                    Some(tool) => {
                        let _ = std::hint::black_box(validate(tool, &arguments));
                    }
                    None => {
                        let _ = std::hint::black_box(did_you_mean(name, tools.iter().map(|t| t.name.as_str())));
                    }
                }
            }
        });
    });
}
