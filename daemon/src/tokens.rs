//! Bearer tokens for agents (`cordon token issue|list|revoke`): what cordond keeps of them and
//! how it checks one.
//!
//! A front-end that serves agents over HTTP (`cordon mcp --http`) runs as one local user, so its
//! own peer credentials say nothing about which agent is calling. An admin issues each agent a
//! token mapped to one account (and optionally exactly some groups); the front-end passes the
//! token along in every request's metadata and cordond, not the front-end, decides who it is.
//!
//! The file (`tokens.json` beside the audit log, mode 0600) holds each token's public id, the
//! SHA-256 of its secret, the account and what the admin said about it; never a secret. It is
//! read like a policy file (owner and mode checked on every directory from `/`, regular file
//! only, bounded size) at start and on each reload, and written whole to a new file that is
//! renamed over the old one (a reader never sees half a table).
//!
//! Architecture invariant: a token never maps to an admin (root, cordond's user, the admin
//! group), neither when issued nor when used; what fails to resolve (an account deleted since,
//! a group gone, an unreadable file) refuses the token.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use cordon_core::policy::{Subject, Trust, trust};
use cordon_core::token::{self, Bearer};
use serde::{Deserialize, Serialize};

use crate::authz::{Authorizer, Role};
use crate::caller::{Caller, Via};

/// The file's name, in the audit log's directory.
pub(crate) const FILE_NAME: &str = "tokens.json";
/// The largest token file read.
pub(crate) const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Tokens that may be valid at once (not revoked, not expired).
pub(crate) const MAX_LIVE: usize = 1000;
/// Revoked and expired tokens are listed for this long, then forgotten at the next issue.
pub(crate) const KEEP_DEAD_SECS: u64 = 30 * 24 * 3600;
/// The longest label.
pub(crate) const MAX_LABEL: usize = 200;
/// The most groups a token may name.
pub(crate) const MAX_GROUPS: usize = 64;

/// The token file beside the audit log `audit`.
pub(crate) fn default_path(audit: &Path) -> PathBuf {
    audit.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).join(FILE_NAME)
}

/// One token as the file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Stored {
    pub id: String,
    /// SHA-256 of the secret, hex.
    pub sha256: String,
    pub account: String,
    /// The account's uid when the token was issued: an account deleted and made again under the
    /// same name is not the account the admin meant.
    pub uid: u32,
    /// Group names; empty: the account's own groups.
    #[serde(default)]
    pub groups: Vec<String>,
    pub label: String,
    /// Unix seconds.
    pub created: u64,
    #[serde(default)]
    pub expires: Option<u64>,
    #[serde(default)]
    pub revoked: Option<u64>,
    pub issued_by: String,
}

impl Stored {
    fn dead(&self, now: u64) -> Option<u64> {
        match (self.revoked, self.expires) {
            (Some(at), _) => Some(at),
            (None, Some(at)) if at <= now => Some(at),
            _ => None,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: u32,
    tokens: Vec<Stored>,
}

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Untrusted(#[from] trust::TrustError),
    #[error("token file {}: {why}; fix or remove it (every token in it is then gone: issue new ones)", .path.display())]
    Corrupt { path: PathBuf, why: String },
    #[error("cannot write the token file {}: {source}", .path.display())]
    Write { path: PathBuf, source: std::io::Error },
}

/// Why a token is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("the bearer token is malformed: {0}")]
    Malformed(#[from] token::TokenError),
    #[error("unknown bearer token {0}; ask an admin for one (`cordon token issue`)")]
    Unknown(String),
    #[error("bearer token {id} was revoked; ask an admin for a new one (`cordon token issue`)")]
    Revoked { id: String },
    #[error("bearer token {id} expired; ask an admin for a new one (`cordon token issue`)")]
    Expired { id: String },
    #[error("bearer token {id} maps to account {account:?}, which {why}; an admin must revoke it and issue a new one")]
    Account { id: String, account: String, why: String },
    #[error(
        "bearer token {id} maps to an account that is an admin now; tokens act only as agent callers: an admin \
         must revoke it"
    )]
    Admin { id: String },
}

/// Why a token cannot be issued or revoked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IssueError {
    #[error("{0}")]
    Invalid(String),
    #[error("no such token {0:?}; `cordon token list` shows the ids")]
    NoSuchToken(String),
    #[error("{MAX_LIVE} tokens are valid already; revoke some first (`cordon token list`)")]
    TooMany,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A verified token: who the caller is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapped {
    pub id: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Option<Arc<[u32]>>,
}

impl Mapped {
    /// The caller this token makes of a connection's peer (its pid stays: the front-end's).
    pub(crate) fn caller(&self, peer: &Caller) -> Caller {
        Caller {
            uid: self.uid,
            gid: self.gid,
            pid: peer.pid,
            via: Via::Token(self.id.as_str().into()),
            groups: self.groups.clone(),
        }
    }
}

/// What an admin asks for.
#[derive(Debug, Clone)]
pub(crate) struct IssueRequest {
    pub account: String,
    pub groups: Vec<String>,
    pub expires_in_secs: Option<u64>,
    pub label: String,
}

/// The table, in memory, and where it lives.
#[derive(Debug)]
pub(crate) struct Tokens {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    tokens: Vec<Stored>,
    /// Issues and revokes so far: a reload puts the file it read in force only if none came
    /// between its read and its install (see [`Tokens::install`]).
    writes: u64,
}

/// Unix seconds now.
pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(bytes)
}

impl Tokens {
    /// Reads the table at `path` (none there: empty). A file that cannot be trusted or read is
    /// an error: cordond does not start on it.
    pub(crate) fn open(path: PathBuf) -> Result<Tokens, StoreError> {
        let tokens = read(&path)?;
        Ok(Tokens { path, state: Mutex::new(State { tokens, writes: 0 }) })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the file for a reload without putting it in force ([`Tokens::install`] does): a
    /// reload that cannot read every file it reads changes nothing.
    pub(crate) fn read_for_reload(&self) -> Result<ReadTokens, StoreError> {
        let writes = self.lock().writes;
        read(&self.path).map(|tokens| ReadTokens { tokens, writes })
    }

    /// Puts what [`Tokens::read_for_reload`] read in force; returns how many tokens are in
    /// force. An issue or a revoke writes the file and the table under the same lock, so when
    /// one came after the read, the table in memory is newer than what was read and stays: a
    /// reload never puts back a table read before a revoke (a revoked token valid again).
    pub(crate) fn install(&self, read: ReadTokens) -> usize {
        let mut state = self.lock();
        if state.writes == read.writes {
            state.tokens = read.tokens;
        }
        state.tokens.len()
    }

    /// Checks a token: known, secret's hash equal (constant time), not revoked, not expired,
    /// its account and groups resolvable as issued. Whether the account is an admin now is the
    /// caller's to check ([`Tokens::check_role`]).
    pub(crate) fn verify(&self, bearer: &Bearer, now: u64) -> Result<Mapped, Refusal> {
        let stored = {
            let state = self.lock();
            let tokens = &state.tokens;
            let given = bearer.hash();
            // Every entry with the id is compared; the hash comparison looks at every byte.
            let found = tokens.iter().find(|t| t.id == bearer.id).cloned();
            match found {
                Some(t) if stored_hash(&t).is_some_and(|h| token::hashes_equal(&h, &given)) => t,
                _ => return Err(Refusal::Unknown(bearer.id.clone())),
            }
        };
        if stored.revoked.is_some() {
            return Err(Refusal::Revoked { id: stored.id });
        }
        if stored.expires.is_some_and(|at| at <= now) {
            return Err(Refusal::Expired { id: stored.id });
        }
        let account = |why: String| Refusal::Account { id: stored.id.clone(), account: stored.account.clone(), why };
        let user = match nix::unistd::User::from_name(&stored.account) {
            Ok(Some(u)) => u,
            Ok(None) => return Err(account("no longer exists".into())),
            Err(e) => return Err(account(format!("cannot be looked up ({e})"))),
        };
        if user.uid.as_raw() != stored.uid {
            return Err(account(format!("has uid {} now, not {} as when the token was issued", user.uid, stored.uid)));
        }
        let groups = if stored.groups.is_empty() {
            None
        } else {
            let mut gids = Vec::with_capacity(stored.groups.len());
            for name in &stored.groups {
                match crate::authz::group_id(name) {
                    Some(g) => gids.push(g),
                    None => return Err(account(format!("was given group {name:?}, which no longer exists"))),
                }
            }
            Some(gids.into())
        };
        Ok(Mapped { id: stored.id, uid: stored.uid, gid: user.gid.as_raw(), groups })
    }

    /// Refuses a mapped token whose caller would be an admin.
    pub(crate) fn check_role(mapped: &Mapped, caller: &Caller, authz: &Authorizer) -> Result<(), Refusal> {
        match authz.role(caller) {
            Role::Agent => Ok(()),
            Role::Admin => Err(Refusal::Admin { id: mapped.id.clone() }),
        }
    }

    /// Issues a token: checks the request, draws id and secret, writes the file, then answers
    /// with the token (its secret exists only in the answer).
    pub(crate) fn issue(
        &self,
        req: &IssueRequest,
        by: &Caller,
        authz: &Authorizer,
        now: u64,
    ) -> Result<(Stored, Bearer), IssueError> {
        let invalid = |s: String| IssueError::Invalid(s);
        let label = req.label.trim();
        if label.is_empty() {
            return Err(invalid("a token needs a label saying what it is for (--label)".into()));
        }
        if label.chars().count() > MAX_LABEL || label.chars().any(char::is_control) {
            return Err(invalid(format!(
                "the label must be at most {MAX_LABEL} characters, without control characters"
            )));
        }
        let user = match nix::unistd::User::from_name(&req.account) {
            Ok(Some(u)) => u,
            _ => return Err(invalid(format!("no such account {:?}; name an existing local user", req.account))),
        };
        if req.groups.len() > MAX_GROUPS {
            return Err(invalid(format!("a token may name at most {MAX_GROUPS} groups")));
        }
        let mut gids = Vec::new();
        for g in &req.groups {
            match crate::authz::group_id(g) {
                Some(gid) => gids.push(gid),
                None => return Err(invalid(format!("no such group {g:?}"))),
            }
        }
        let mut groups = req.groups.clone();
        groups.sort();
        groups.dedup();
        let caller = Caller {
            uid: user.uid.as_raw(),
            gid: user.gid.as_raw(),
            pid: None,
            via: Via::Token("new".into()),
            groups: (!gids.is_empty()).then(|| gids.into()),
        };
        if authz.role(&caller) == Role::Admin {
            return Err(invalid(format!(
                "account {:?} (with these groups) is an admin (root, cordond's user or the admin group); tokens act \
                 only as agent callers: issue it for a non-admin account",
                req.account
            )));
        }
        let expires = match req.expires_in_secs {
            None | Some(0) => None,
            Some(s) => Some(now.checked_add(s).ok_or_else(|| invalid("the expiry is too far away".into()))?),
        };
        let mut raw = [0u8; 40];
        getrandom::fill(&mut raw).map_err(|e| {
            IssueError::Store(StoreError::Write {
                path: self.path.clone(),
                source: std::io::Error::other(e.to_string()),
            })
        })?;
        let bearer = Bearer::from_parts(&hex(&raw[..8]), &hex(&raw[8..]))
            .map_err(|e| IssueError::Invalid(format!("internal: drew a malformed token ({e})")))?;
        let stored = Stored {
            id: bearer.id.clone(),
            sha256: hex(&bearer.hash()),
            account: req.account.clone(),
            uid: user.uid.as_raw(),
            groups,
            label: label.to_string(),
            created: now,
            expires,
            revoked: None,
            issued_by: format!("uid {}", by.uid),
        };
        let mut state = self.lock();
        let mut next: Vec<Stored> = state
            .tokens
            .iter()
            .filter(|t| t.dead(now).is_none_or(|at| now.saturating_sub(at) < KEEP_DEAD_SECS))
            .cloned()
            .collect();
        if next.iter().filter(|t| t.dead(now).is_none()).count() >= MAX_LIVE {
            return Err(IssueError::TooMany);
        }
        if next.iter().any(|t| t.id == stored.id) {
            return Err(IssueError::Invalid("internal: a token id was drawn twice; issue again".into()));
        }
        next.push(stored.clone());
        write(&self.path, &next)?;
        *state = State { tokens: next, writes: state.writes + 1 };
        Ok((stored, bearer))
    }

    /// Revokes a token by id (revoking one twice keeps the first time).
    pub(crate) fn revoke(&self, id: &str, now: u64) -> Result<Stored, IssueError> {
        let mut state = self.lock();
        let mut next = state.tokens.clone();
        let Some(t) = next.iter_mut().find(|t| t.id == id) else {
            return Err(IssueError::NoSuchToken(id.to_string()));
        };
        if t.revoked.is_none() {
            t.revoked = Some(now);
        }
        let revoked = t.clone();
        write(&self.path, &next)?;
        *state = State { tokens: next, writes: state.writes + 1 };
        Ok(revoked)
    }

    /// Every token kept (revoked and expired ones for [`KEEP_DEAD_SECS`]), oldest first.
    pub(crate) fn list(&self) -> Vec<Stored> {
        self.lock().tokens.clone()
    }
}

fn stored_hash(t: &Stored) -> Option<[u8; 32]> {
    data_encoding::HEXLOWER_PERMISSIVE.decode(t.sha256.as_bytes()).ok()?.try_into().ok()
}

/// A token file read for a reload, not yet in force.
#[derive(Debug)]
pub(crate) struct ReadTokens {
    tokens: Vec<Stored>,
    /// [`State::writes`] when the file was read.
    writes: u64,
}

/// Reads the table (checked as a policy file is); none there: empty.
fn read(path: &Path) -> Result<Vec<Stored>, StoreError> {
    let subject = Subject::TOKEN_FILE;
    let trust = Trust::current();
    let (parent, name, checked) = match trust::walk(path, trust, subject) {
        Ok(trust::Walked::File { parent, name, path }) => (parent, name, path),
        Ok(trust::Walked::Dir(_)) => {
            return Err(StoreError::Corrupt { path: path.to_path_buf(), why: "it is a directory".into() });
        }
        Err(trust::TrustError::Missing { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let bytes = trust::read_regular(&parent, &name, &checked, trust, subject, MAX_FILE_BYTES)?;
    parse(&bytes).map_err(|why| StoreError::Corrupt { path: path.to_path_buf(), why })
}

/// The table in a token file's bytes, or what is wrong with them.
pub(crate) fn parse(bytes: &[u8]) -> Result<Vec<Stored>, String> {
    let file: File = serde_json::from_slice(bytes).map_err(|e| format!("not a token table ({e})"))?;
    if file.version != 1 {
        return Err(format!("version {} is not one this cordond reads (1)", file.version));
    }
    let mut seen = std::collections::HashSet::new();
    for t in &file.tokens {
        if Bearer::from_parts(&t.id, &"0".repeat(token::SECRET_HEX)).is_err() || stored_hash(t).is_none() {
            return Err(format!("token {:?} has a malformed id or hash", t.id));
        }
        if !seen.insert(t.id.as_str()) {
            return Err(format!("token {:?} is listed twice", t.id));
        }
    }
    Ok(file.tokens)
}

/// Writes the table to a new file beside it (mode 0600), syncs it and renames it over the old
/// one, then syncs the directory.
fn write(path: &Path, tokens: &[Stored]) -> Result<(), StoreError> {
    let fail = |source: std::io::Error| StoreError::Write { path: path.to_path_buf(), source };
    let text = serde_json::to_vec_pretty(&File { version: 1, tokens: tokens.to_vec() })
        .map_err(|e| fail(std::io::Error::other(e.to_string())))?;
    crate::tokens::write_private(path, FILE_NAME, &text).map_err(fail)
}

/// Writes `text` and a newline as `path`, a root file only its owner reads (mode 0600): a fresh
/// `.NAME.PID.tmp` beside it (`O_EXCL|O_NOFOLLOW`), synced, renamed over `path`, and the directory
/// synced, so a crash leaves the old file or the new one, never a torn one. The token store and
/// the MCP servers' approvals both keep their state this way.
pub(crate) fn write_private(path: &Path, name: &str, text: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(text)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Tokens) {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Tokens::open(dir.path().join(FILE_NAME)).unwrap();
        (dir, tokens)
    }

    /// A non-admin account every test host has.
    const NOBODY: &str = "nobody";

    fn authz() -> Authorizer {
        Authorizer::new(None)
    }

    fn root() -> Caller {
        Caller::socket(0, 0, None)
    }

    fn issue(t: &Tokens, expires: Option<u64>, now: u64) -> (Stored, Bearer) {
        let req = IssueRequest { account: NOBODY.into(), groups: vec![], expires_in_secs: expires, label: "ci".into() };
        t.issue(&req, &root(), &authz(), now).unwrap()
    }

    #[test]
    fn the_file_keeps_the_hash_never_the_secret_and_reads_back() {
        let (dir, t) = store();
        let (stored, bearer) = issue(&t, None, 1000);
        let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap();
        let secret = bearer.expose();
        let secret_part = &secret[secret.len() - token::SECRET_HEX..];
        assert!(!text.contains(secret_part), "the secret is in the file: {text}");
        assert!(text.contains(&hex(&bearer.hash())));
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(dir.path().join(FILE_NAME)).unwrap().permissions().mode() & 0o777, 0o600);
        let again = Tokens::open(dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(again.list(), vec![stored]);
        assert_eq!(again.verify(&bearer, 1001).unwrap().id, bearer.id);
    }

    #[test]
    fn unknown_wrong_secret_revoked_and_expired_tokens_are_refused() {
        let (_dir, t) = store();
        let (_, bearer) = issue(&t, Some(60), 1000);
        let mapped = t.verify(&bearer, 1059).unwrap();
        assert_eq!(mapped.uid, nix::unistd::User::from_name(NOBODY).unwrap().unwrap().uid.as_raw());
        assert_eq!(t.verify(&bearer, 1060), Err(Refusal::Expired { id: bearer.id.clone() }));
        // Same id, another secret: unknown, not "wrong secret" (nothing tells a guesser it was close).
        let forged = Bearer::from_parts(&bearer.id, &"a".repeat(64)).unwrap();
        assert_eq!(t.verify(&forged, 1000), Err(Refusal::Unknown(bearer.id.clone())));
        let stranger = Bearer::from_parts(&"f".repeat(16), &"a".repeat(64)).unwrap();
        assert_eq!(t.verify(&stranger, 1000), Err(Refusal::Unknown("f".repeat(16))));
        let (_, other) = issue(&t, None, 1000);
        t.revoke(&other.id, 1001).unwrap();
        assert_eq!(t.verify(&other, 1002), Err(Refusal::Revoked { id: other.id.clone() }));
        assert!(matches!(t.revoke("0000000000000000", 1), Err(IssueError::NoSuchToken(_))));
    }

    #[test]
    fn tokens_for_admins_unknown_accounts_or_without_label_are_not_issued() {
        let (_dir, t) = store();
        let req = |account: &str, label: &str| IssueRequest {
            account: account.into(),
            groups: vec![],
            expires_in_secs: None,
            label: label.into(),
        };
        let e = t.issue(&req("root", "x"), &root(), &authz(), 1).unwrap_err().to_string();
        assert!(e.contains("is an admin") && e.contains("non-admin account"), "{e}");
        let e = t.issue(&req("no-such-user-cordon", "x"), &root(), &authz(), 1).unwrap_err().to_string();
        assert!(e.contains("no such account"), "{e}");
        let e = t.issue(&req(NOBODY, " "), &root(), &authz(), 1).unwrap_err().to_string();
        assert!(e.contains("needs a label"), "{e}");
        let mut with_group = req(NOBODY, "x");
        with_group.groups = vec!["no-such-group-cordon".into()];
        let e = t.issue(&with_group, &root(), &authz(), 1).unwrap_err().to_string();
        assert!(e.contains("no such group"), "{e}");
        assert!(t.list().is_empty());
    }

    /// A reload that read the file before a revoke renamed the new one over it must not put the
    /// old table back after the revoke returned: the revoked token would be valid again (and
    /// listed as valid) until the next reload.
    #[test]
    fn a_reload_racing_a_revoke_never_brings_the_token_back() {
        let (_dir, t) = store();
        let t = Arc::new(t);
        for round in 0..20 {
            let (_, bearer) = issue(&t, None, 1000);
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let reloader = {
                let (t, stop) = (t.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        t.install(t.read_for_reload().unwrap());
                    }
                })
            };
            t.revoke(&bearer.id, 1001).unwrap();
            let accepted = (0..200).filter(|_| t.verify(&bearer, 1002).is_ok()).count();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            reloader.join().unwrap();
            assert_eq!(
                accepted, 0,
                "round {round}: the revoked token was accepted {accepted} times after revoke returned"
            );
            assert_eq!(t.verify(&bearer, 1002), Err(Refusal::Revoked { id: bearer.id.clone() }), "round {round}");
        }
    }

    #[test]
    fn a_tampered_file_fails_closed() {
        let (dir, t) = store();
        issue(&t, None, 1);
        let path = dir.path().join(FILE_NAME);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("\"label\"", "\"lable\"")).unwrap();
        // A reload reads it and is refused (the server then rejects the whole reload): the
        // table in force stays.
        let e = t.read_for_reload().unwrap_err().to_string();
        assert!(e.contains("not a token table"), "{e}");
        assert_eq!(t.list().len(), 1);
        // cordond does not start on it.
        let e = Tokens::open(path.clone()).unwrap_err().to_string();
        assert!(e.contains("not a token table"), "{e}");
        // A file others may write is refused like an untrusted policy file.
        std::fs::write(&path, text).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(Tokens::open(path.clone()), Err(StoreError::Untrusted(_))));
    }
}
