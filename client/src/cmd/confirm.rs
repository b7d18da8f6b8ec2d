//! `cordon confirm TOKEN`: redeems a confirmation token and prints the result like `run`
//! (live, Ctrl-C cancels).

use super::run::{conclude, follow_confirm};
use crate::api::{Client, ToolInfo};
use crate::endpoint::Endpoint;
use crate::error::CliError;
use crate::live::Live;

/// Redeems a confirmation token and prints the result like `run` (live, Ctrl-C cancels).
pub(super) async fn run(endpoint: &Endpoint, token: &str, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    // The tool's name is known once cordond accepted the call.
    let mut live = Live::new("", !as_json)?;
    let result = match follow_confirm(&mut client, &mut live, token).await? {
        Ok(result) => result,
        Err(code) => return Ok(code),
    };
    let info = match live.tool() {
        "" => ToolInfo::minimal(String::new()),
        name => client.get_tool(name).await.unwrap_or_else(|_| ToolInfo::minimal(name.to_string())),
    };
    Ok(conclude(&mut live, &info, &result, as_json).await)
}
