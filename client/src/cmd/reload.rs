//! `cordon reload`: cordond re-reads its policy directory.

use serde_json::json;

use super::output::print_json;
use crate::api::Client;
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};
use crate::term::{errln, outln};

pub(super) async fn run(endpoint: &Endpoint, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let report = client.reload().await?;
    if as_json {
        print_json(&json!(report));
    } else {
        for d in &report.diagnostics {
            errln!("{d}");
        }
        let generation = report.generation.unwrap_or(0);
        if report.ok {
            outln!("reloaded: generation {generation}, {} tool(s)", report.tools);
        } else {
            outln!("reload rejected; generation {generation} ({} tool(s)) stays in force", report.tools);
        }
    }
    Ok(if report.ok { exit::OK } else { exit::DATA })
}
