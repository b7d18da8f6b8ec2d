//! Bearer tokens on the wire: a request's `authorization` metadata turned into its caller, and
//! the admin RPCs `IssueToken`, `ListTokens`, `RevokeToken` (see [`crate::tokens`]).
//!
//! A request without the metadata is its connection's peer, as ever. A request with it is the
//! token's account, and only once the token is verified; anything wrong with it (several
//! values, not the Bearer scheme, malformed, unknown, revoked, expired, an account that is gone
//! or became an admin) refuses the request with `TOKEN_REFUSED`, audited. The peer itself must
//! have been accepted first: a sandboxed tool's connection is refused before its token is read.
//!
//! Any local account can send refused tokens as fast as it likes, so their records are coalesced
//! per peer uid ([`TOKEN_REFUSALS_PER_INTERVAL`] a minute, then one summary): one account's
//! guesses cannot fill the log or hide another account's refusals.

use cordon_proto::v1;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::service::CordonService;
use super::status;
use crate::audit::{Decision, Record};
use crate::caller::Caller;
use crate::tokens::{IssueRequest, Refusal, Stored, Tokens};
use cordon_core::code::ErrorCode;
use cordon_core::token;

/// Refused-token records per peer uid per [`TOKEN_REFUSALS_INTERVAL`]; the rest are counted.
/// Above the HTTP front-end's own budget of refused tokens per source (30 a minute), so that
/// two sources refused through one front-end are still recorded one by one.
pub(crate) const TOKEN_REFUSALS_PER_INTERVAL: u32 = 64;
pub(crate) const TOKEN_REFUSALS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// The per-peer windows of refused-token records.
pub(crate) type TokenRefusals = crate::audit::Coalesce<u32>;

pub(crate) fn refusals() -> std::sync::Arc<TokenRefusals> {
    std::sync::Arc::new(TokenRefusals::new(TOKEN_REFUSALS_PER_INTERVAL, TOKEN_REFUSALS_INTERVAL))
}

/// The gRPC metadata key the front-end passes the agent's token in.
const AUTHORIZATION: &str = "authorization";

/// The token a request carries: `None` when it carries none.
fn bearer(metadata: &MetadataMap) -> Option<Result<token::Bearer, Refusal>> {
    let mut values = metadata.get_all(AUTHORIZATION).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return Some(Err(Refusal::Malformed(token::TokenError::Shape)));
    }
    Some(match token::from_authorization(first.as_bytes()) {
        Some(parsed) => parsed.map_err(Refusal::Malformed),
        None => Err(Refusal::Malformed(token::TokenError::Prefix)),
    })
}

impl CordonService {
    /// The caller of a request whose connection's peer is `peer`: the token's account when the
    /// request carries a token that verifies, the peer when it carries none. Refusals are
    /// audited under `operation`.
    pub(super) fn with_token(&self, metadata: &MetadataMap, peer: Caller, operation: &str) -> Result<Caller, Status> {
        let Some(given) = bearer(metadata) else { return Ok(peer) };
        let verified = given.and_then(|b| {
            let mapped = self.daemon.tokens.verify(&b, crate::tokens::now())?;
            let caller = mapped.caller(&peer);
            Tokens::check_role(&mapped, &caller, &self.daemon.authz)?;
            Ok(caller)
        });
        match verified {
            Ok(caller) => Ok(caller),
            Err(refusal) => {
                let status = status::token_refused(&refusal);
                let summary_peer = peer.clone();
                let per = self.daemon.token_refusals.interval().as_secs();
                let recorded = self.daemon.token_refusals.per_interval();
                self.daemon.token_refusals.record(
                    &self.daemon.audit,
                    peer.uid,
                    || {
                        let mut record = Record::new(Decision::Unauthenticated)
                            .caller(&peer)
                            .with("operation", operation)
                            .error(ErrorCode::TokenRefused, status.message());
                        if let Some(id) = refused_id(&refusal) {
                            record = record.with("token", id);
                        }
                        record
                    },
                    move |n| {
                        Record::new(Decision::Unauthenticated)
                            .caller(&summary_peer)
                            .with("operation", "token")
                            .with("coalesced", n)
                            .with("interval_s", per)
                            .error(
                                ErrorCode::TokenRefused,
                                &format!(
                                    "{n} more bearer tokens from this peer refused in {per} s, beyond the {recorded} \
                                     recorded one by one"
                                ),
                            )
                    },
                );
                Err(status)
            }
        }
    }

    pub(super) async fn tokens_issue(
        &self,
        request: Request<v1::IssueTokenRequest>,
    ) -> Result<Response<v1::IssueTokenResponse>, Status> {
        let caller = self.caller(&request, "issue_token")?;
        self.require_admin(&caller, "issue_token", "issuing tokens")?;
        let r = request.into_inner();
        let req = IssueRequest {
            account: r.account,
            groups: r.groups,
            expires_in_secs: (r.expires_in_secs > 0).then_some(r.expires_in_secs),
            label: r.label,
        };
        let tokens = self.daemon.tokens.clone();
        let authz = self.daemon.authz.clone();
        let by = caller.clone();
        // File I/O (write, fsync, rename) off the async threads.
        let issued = tokio::task::spawn_blocking(move || tokens.issue(&req, &by, &authz, crate::tokens::now()))
            .await
            .map_err(|e| status::task_failed("issuing the token", &e))?;
        let (stored, bearer) = issued.map_err(|e| status::token_admin(&e))?;
        self.audit(
            Record::new(Decision::TokenIssued)
                .caller(&caller)
                .with("token", stored.id.as_str())
                .with("account", stored.account.as_str())
                .with("uid", stored.uid)
                .with("groups", stored.groups.clone())
                .with("label", stored.label.as_str())
                .with("expires", stored.expires),
        );
        tracing::info!(token = %stored.id, account = %stored.account, by = %caller, "token issued");
        Ok(Response::new(v1::IssueTokenResponse { token: Some(info(&stored)), secret: bearer.expose() }))
    }

    pub(super) async fn tokens_list(
        &self,
        request: Request<v1::ListTokensRequest>,
    ) -> Result<Response<v1::ListTokensResponse>, Status> {
        let caller = self.caller(&request, "list_tokens")?;
        self.require_admin(&caller, "list_tokens", "listing tokens")?;
        let tokens = self.daemon.tokens.list();
        Ok(Response::new(v1::ListTokensResponse { tokens: tokens.iter().map(info).collect() }))
    }

    pub(super) async fn tokens_revoke(
        &self,
        request: Request<v1::RevokeTokenRequest>,
    ) -> Result<Response<v1::RevokeTokenResponse>, Status> {
        let caller = self.caller(&request, "revoke_token")?;
        self.require_admin(&caller, "revoke_token", "revoking tokens")?;
        let id = request.into_inner().id;
        let tokens = self.daemon.tokens.clone();
        let revoked = tokio::task::spawn_blocking(move || tokens.revoke(&id, crate::tokens::now()))
            .await
            .map_err(|e| status::task_failed("revoking the token", &e))?
            .map_err(|e| status::token_admin(&e))?;
        self.audit(
            Record::new(Decision::TokenRevoked)
                .caller(&caller)
                .with("token", revoked.id.as_str())
                .with("account", revoked.account.as_str())
                .with("label", revoked.label.as_str()),
        );
        tracing::info!(token = %revoked.id, by = %caller, "token revoked");
        Ok(Response::new(v1::RevokeTokenResponse { token: Some(info(&revoked)) }))
    }
}

/// The id a refusal is about, when the token named one cordond knows the shape of.
fn refused_id(r: &Refusal) -> Option<&str> {
    match r {
        Refusal::Unknown(id)
        | Refusal::Revoked { id }
        | Refusal::Expired { id }
        | Refusal::Account { id, .. }
        | Refusal::Admin { id } => Some(id),
        Refusal::Malformed(_) => None,
    }
}

fn info(t: &Stored) -> v1::TokenInfo {
    v1::TokenInfo {
        id: t.id.clone(),
        account: t.account.clone(),
        uid: t.uid,
        groups: t.groups.clone(),
        label: t.label.clone(),
        created: t.created,
        expires: t.expires.unwrap_or(0),
        revoked: t.revoked.unwrap_or(0),
        issued_by: t.issued_by.clone(),
    }
}
