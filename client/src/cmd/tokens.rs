//! `cordon token issue|list|revoke`: bearer tokens for agents that reach cordond through
//! `cordon mcp --http` (admins only; cordond keeps only each secret's hash).

use std::time::Duration;

use serde_json::json;

use super::output::print_json;
use crate::api::{Client, TokenInfo};
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};
use crate::term::outln;

pub(super) async fn issue(
    endpoint: &Endpoint,
    account: &str,
    groups: Vec<String>,
    expires: Option<Duration>,
    label: &str,
    as_json: bool,
) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let (info, token) = client.issue_token(account, groups, expires, label).await?;
    if as_json {
        print_json(&json!({ "token": token, "info": info }));
        return Ok(exit::OK);
    }
    // The token alone on stdout (for `$(cordon token issue ...)`); what it is on stderr.
    cordon_core::stdout_ln!("{token}");
    cordon_core::stderr_ln!(
        "token {} for account {} ({}){}: shown only now; cordond keeps its hash. Revoke it with `cordon token revoke {}`",
        info.id,
        info.account,
        info.label,
        info.expires.map(|e| format!(", expires at unix time {e}")).unwrap_or_default(),
        info.id
    );
    Ok(exit::OK)
}

pub(super) async fn list(endpoint: &Endpoint, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let tokens = client.list_tokens().await?;
    if as_json {
        print_json(&json!({ "tokens": tokens }));
        return Ok(exit::OK);
    }
    if tokens.is_empty() {
        outln!("no tokens (`cordon token issue ACCOUNT --label WHAT` issues one)");
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    for t in &tokens {
        outln!("{}  {:<10} {:<16} {}", t.id, state(t, now), t.account, t.label);
    }
    Ok(exit::OK)
}

fn state(t: &TokenInfo, now: u64) -> &'static str {
    match (t.revoked, t.expires) {
        (Some(_), _) => "revoked",
        (None, Some(at)) if at <= now => "expired",
        _ => "valid",
    }
}

pub(super) async fn revoke(endpoint: &Endpoint, id: &str, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let t = client.revoke_token(id).await?;
    if as_json {
        print_json(&json!({ "revoked": t }));
    } else {
        outln!("token {} ({}, {}) revoked", t.id, t.account, t.label);
    }
    Ok(exit::OK)
}
