//! Bearer tokens for `cordon mcp --http`: `IssueToken`, `ListTokens`, `RevokeToken`.

use std::time::Duration;

use cordon_proto::v1;
use serde::Serialize;

use super::client::Client;
use crate::error::CliError;

impl Client {
    /// Issues a token (admins): its description and the whole token, shown only now.
    pub async fn issue_token(
        &mut self,
        account: &str,
        groups: Vec<String>,
        expires_in: Option<Duration>,
        label: &str,
    ) -> Result<(TokenInfo, String), CliError> {
        let r = self
            .inner
            .issue_token(v1::IssueTokenRequest {
                account: account.into(),
                groups,
                expires_in_secs: expires_in.map_or(0, |d| d.as_secs().max(1)),
                label: label.into(),
            })
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        let info =
            r.token.map(TokenInfo::from).ok_or_else(|| CliError::Protocol("IssueToken answered no token".into()))?;
        Ok((info, r.secret))
    }

    pub async fn list_tokens(&mut self) -> Result<Vec<TokenInfo>, CliError> {
        let r = self.inner.list_tokens(v1::ListTokensRequest {}).await.map_err(|s| self.fail(s))?.into_inner();
        Ok(r.tokens.into_iter().map(TokenInfo::from).collect())
    }

    pub async fn revoke_token(&mut self, id: &str) -> Result<TokenInfo, CliError> {
        let r = self
            .inner
            .revoke_token(v1::RevokeTokenRequest { id: id.into() })
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        r.token.map(TokenInfo::from).ok_or_else(|| CliError::Protocol("RevokeToken answered no token".into()))
    }
}

/// A bearer token as cordond lists it (never its secret).
#[derive(Debug, Clone, Serialize)]
pub struct TokenInfo {
    pub id: String,
    pub account: String,
    pub uid: u32,
    pub groups: Vec<String>,
    pub label: String,
    /// Unix seconds.
    pub created: u64,
    /// Unix seconds; `None`: never.
    pub expires: Option<u64>,
    /// Unix seconds; `None`: not revoked.
    pub revoked: Option<u64>,
    pub issued_by: String,
}

impl From<v1::TokenInfo> for TokenInfo {
    fn from(t: v1::TokenInfo) -> TokenInfo {
        TokenInfo {
            id: t.id,
            account: t.account,
            uid: t.uid,
            groups: t.groups,
            label: t.label,
            created: t.created,
            expires: (t.expires > 0).then_some(t.expires),
            revoked: (t.revoked > 0).then_some(t.revoked),
            issued_by: t.issued_by,
        }
    }
}
