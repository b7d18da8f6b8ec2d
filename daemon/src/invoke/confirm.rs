//! Confirmations: a tool with `confirm = "agent"` or `"human"` does not run on the first call.
//! The daemon keeps the exact resolved invocation and hands out a token; the invocation runs
//! only when the token is redeemed (and, for "human", once a person approved it).
//!
//! Tokens are 32 bytes from the OS, single use, and expire (60 s for "agent"). They are stored
//! only as their SHA-256, and each record is bound to a hash of (tool, resolved argv, caller
//! uid) that redemption recomputes, so a token is useless to another user and cannot stand for a
//! different invocation. Removal under one lock makes a concurrent double redeem run once.
//!
//! Architecture invariant: a confirmed invocation runs exactly the plan that was described to
//! the confirmer, from the registry generation it was resolved in; any change refuses it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, watch};

use crate::caller::Caller;
use cordon_core::argv::Plan;
use cordon_core::code::ErrorCode;
use cordon_core::policy::{Confirm, Tool};
use cordon_sandbox::Identity;

/// How long an agent token stays valid.
pub(crate) const AGENT_TTL: Duration = Duration::from_secs(60);
/// How long a human approval may take.
pub(crate) const HUMAN_TTL: Duration = Duration::from_secs(300);
/// How long an expired confirmation is remembered (to answer "expired", not "unknown").
pub(crate) const EXPIRED_KEPT: Duration = Duration::from_secs(60);

/// How many confirmations one caller (uid) may have outstanding at once, and how many bytes of
/// invocations (argv, displayed argv, description) they may hold; and the same for everyone.
/// Each one keeps its whole invocation in memory for up to its TTL, so without these an agent
/// could grow cordond's memory without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub per_caller: usize,
    pub per_caller_bytes: usize,
    pub total: usize,
    pub total_bytes: usize,
    /// `--human-approval-via-elicitation`: a `confirm = "human"` call may be approved through MCP
    /// elicitation, i.e. by the front-end, which runs as the agent's uid. Off: only an admin's
    /// `cordon approve` approves it.
    pub elicitation_approves: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_caller: 32,
            per_caller_bytes: 32 * 1024 * 1024,
            total: 1024,
            total_bytes: 256 * 1024 * 1024,
            elicitation_approves: false,
        }
    }
}

/// Everything needed to run the invocation once confirmed.
#[derive(Debug, Clone)]
pub(crate) struct Parked {
    pub tool: Arc<Tool>,
    pub generation: u64,
    pub plan: Plan,
    pub identity: Option<Identity>,
    pub dedicated_uid: bool,
    pub caller: Caller,
    /// The path arguments (param name, absolute path), for the hints of a failed run.
    pub paths: Vec<(String, std::path::PathBuf)>,
    /// Learn mode: the extra trees, pinned (empty: a normal call; see [`super::Invoker::prepare_learn`]).
    pub learn: Vec<cordon_core::policy::Pin>,
    /// The call's raw arguments for its records: secret values redacted, clipped.
    pub arguments: serde_json::Value,
}

/// What the caller is told when a confirmation is required.
#[derive(Debug, Clone)]
pub(crate) struct Ticket {
    pub token: String,
    pub mode: Confirm,
    pub approval_id: String,
    pub description: String,
    pub expires_in: Duration,
    pub argv: Vec<String>,
    /// For "human": whether an approval through MCP elicitation counts (else only `cordon approve`).
    pub elicitation_approves: bool,
}

/// A pending human approval, for `cordon pending`.
#[derive(Debug, Clone)]
pub(crate) struct PendingInfo {
    pub approval_id: String,
    pub tool: String,
    pub argv: Vec<String>,
    pub description: String,
    pub caller: Caller,
    pub expires_in: Duration,
    pub waiting: bool,
}

/// A change to the pending human approvals, for `cordon pending --watch`.
#[derive(Debug, Clone)]
pub(crate) enum PendingChange {
    /// A new approval is waiting for a person.
    Added(PendingInfo),
    /// It is no longer pending: `reason` is "approved", "denied", "expired" or "withdrawn" (the
    /// caller stopped waiting).
    Gone { approval_id: String, tool: String, reason: &'static str },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Undecided,
    Approved,
    Denied,
}

#[derive(Debug)]
struct Record {
    parked: Parked,
    mode: Confirm,
    binding: [u8; 32],
    approval_id: String,
    description: String,
    expires: Instant,
    decision: watch::Sender<Decision>,
    /// A redeemer is waiting on this record (human mode).
    claimed: bool,
    /// `sweep` reported its expiry.
    expiry_reported: bool,
    /// Memory it holds, for the limits.
    bytes: usize,
}

impl Record {
    /// Counts against the limits: not yet expired, or someone waits on it.
    fn live(&self, now: Instant) -> bool {
        self.claimed || self.expires > now
    }
}

/// A confirmation that expired before it was redeemed.
#[derive(Debug, Clone)]
pub(crate) struct Expired {
    pub approval_id: String,
    pub tool: String,
    pub caller: Caller,
    pub mode: Confirm,
}

/// How a redeemed confirmation was granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// `confirm = "agent"`: the token itself.
    AgentToken,
    /// The agent host's user approved through MCP elicitation.
    Elicitation,
    /// An admin approved (`cordon approve`).
    Admin,
}

impl Via {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Via::AgentToken => "agent_token",
            Via::Elicitation => "elicitation",
            Via::Admin => "admin",
        }
    }
}

/// A redeemed confirmation: the invocation to run, and how it was confirmed.
#[derive(Debug)]
pub(crate) struct Redeemed {
    pub parked: Parked,
    pub approval_id: String,
    pub via: Via,
}

/// Who asked for an approval that was decided.
#[derive(Debug, Clone)]
pub(crate) struct Decided {
    pub tool: String,
    pub caller: Caller,
}

/// Why a token was not honoured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConfirmError {
    #[error("unknown, used or expired confirmation token; call the tool again to get a new one")]
    UnknownToken,
    #[error("this confirmation token was issued to another user")]
    Foreign,
    #[error("the confirmation expired; call the tool again to get a new token")]
    Expired,
    #[error("this confirmation is already being redeemed")]
    AlreadyClaimed,
    #[error("the human approval was denied")]
    Denied,
    #[error("no approval came in time ({} s); call the tool again", .0.as_secs())]
    TimedOut(Duration),
    #[error("the policies were reloaded since the confirmation was requested; call the tool again")]
    Stale,
    #[error("no pending approval {0:?}; `cordon pending` lists them")]
    UnknownApproval(String),
    #[error("cannot draw a token from the OS random source: {0}")]
    Random(getrandom::Error),
    #[error(
        "too many confirmations outstanding ({0}); redeem, approve or deny the pending ones, or wait until they expire, then call again"
    )]
    TooMany(String),
    #[error(
        "approval through MCP elicitation is not accepted by this cordond (the front-end runs as the agent's user, so the agent could answer it); an admin approves with `cordon approve ID`"
    )]
    ElicitationNotAccepted,
}

impl ConfirmError {
    /// The stable code clients see (and the audit records).
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            ConfirmError::UnknownToken => ErrorCode::ConfirmationInvalid,
            ConfirmError::Expired => ErrorCode::ConfirmationExpired,
            ConfirmError::Stale => ErrorCode::PolicyChanged,
            ConfirmError::AlreadyClaimed => ErrorCode::ConfirmationInUse,
            ConfirmError::Foreign => ErrorCode::ConfirmationForeign,
            ConfirmError::Denied => ErrorCode::ApprovalDenied,
            ConfirmError::TimedOut(_) => ErrorCode::ApprovalTimeout,
            ConfirmError::UnknownApproval(_) => ErrorCode::UnknownApproval,
            ConfirmError::Random(_) => ErrorCode::Internal,
            ConfirmError::TooMany(_) => ErrorCode::TooManyConfirmations,
            ConfirmError::ElicitationNotAccepted => ErrorCode::ElicitationNotAccepted,
        }
    }
}

/// The store of pending confirmations.
#[derive(Debug)]
pub(crate) struct Confirmations {
    records: Mutex<HashMap<[u8; 32], Record>>,
    agent_ttl: Duration,
    human_ttl: Duration,
    limits: Limits,
    changes: broadcast::Sender<PendingChange>,
}

impl Default for Confirmations {
    fn default() -> Self {
        Confirmations::new(AGENT_TTL, HUMAN_TTL)
    }
}

fn binding(tool: &str, argv: &[String], uid: u32) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tool.as_bytes());
    for a in argv {
        h.update([0]);
        h.update(a.as_bytes());
    }
    h.update([0xff]);
    h.update(uid.to_le_bytes());
    h.finalize().into()
}

fn token_key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn random_hex(bytes: usize) -> Result<String, ConfirmError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(ConfirmError::Random)?;
    Ok(data_encoding::HEXLOWER.encode(&buf))
}

/// A plain description of the exact invocation, for the person or agent who confirms it: one
/// line, with control and bidi characters of arguments made visible (see [`cordon_core::display`]),
/// so that what is approved is what runs.
pub(crate) fn describe(parked: &Parked) -> String {
    let argv: Vec<String> = parked.plan.display_argv.iter().map(|a| shell_quote(a)).collect();
    let who = match &parked.identity {
        Some(id) => format!("uid {} gid {}", id.uid, id.gid),
        None => "cordond's own user".to_string(),
    };
    let text = format!(
        "tool {:?} will run `{}` as {who} in {} (timeout {}, danger: {})",
        parked.tool.name,
        argv.join(" "),
        parked.plan.cwd.display(),
        cordon_core::policy::units::format_duration(parked.tool.timeout),
        match parked.tool.danger {
            cordon_core::policy::Danger::Safe => "safe",
            cordon_core::policy::Danger::Moderate => "moderate",
            cordon_core::policy::Danger::High => "high",
        }
    );
    cordon_core::display::escape_line(&text).into_owned()
}

/// Quotes an argument the way a POSIX shell reader expects, for display only.
fn shell_quote(a: &str) -> String {
    let plain = !a.is_empty() && a.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain { a.to_string() } else { format!("'{}'", a.replace('\'', "'\\''")) }
}

impl Confirmations {
    pub(crate) fn new(agent_ttl: Duration, human_ttl: Duration) -> Confirmations {
        Confirmations {
            records: Mutex::new(HashMap::new()),
            agent_ttl,
            human_ttl,
            limits: Limits::default(),
            changes: broadcast::channel(256).0,
        }
    }

    /// Changes to the pending human approvals from now on (a receiver that falls behind hears
    /// `Lagged` and should take a fresh [`Confirmations::pending`]).
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<PendingChange> {
        self.changes.subscribe()
    }

    fn gone(&self, r: &Record, reason: &'static str) {
        if r.mode == Confirm::Human {
            // Nobody listening is fine.
            let _ = self.changes.send(PendingChange::Gone {
                approval_id: r.approval_id.clone(),
                tool: r.parked.tool.name.clone(),
                reason,
            });
        }
    }

    pub(crate) fn with_limits(mut self, limits: Limits) -> Confirmations {
        self.limits = limits;
        self
    }

    /// The tool and approval id behind a token, if `uid` owns it (for audit records).
    pub(crate) fn peek(&self, token: &str, uid: u32) -> Option<(String, String)> {
        self.lock()
            .get(&token_key(token))
            .filter(|r| r.parked.caller.uid == uid)
            .map(|r| (r.parked.tool.name.clone(), r.approval_id.clone()))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 32], Record>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns the confirmations that expired unredeemed since the last sweep (so each expiry is
    /// recorded once). They are kept [`EXPIRED_KEPT`] longer, so that a late redemption is told
    /// "expired" rather than "unknown", then dropped.
    pub(crate) fn sweep(&self) -> Vec<Expired> {
        let now = Instant::now();
        let mut expired = Vec::new();
        self.lock().retain(|_, r| {
            if r.claimed || r.expires > now {
                return true;
            }
            if !r.expiry_reported {
                r.expiry_reported = true;
                if *r.decision.borrow() == Decision::Undecided {
                    self.gone(r, "expired");
                }
                expired.push(Expired {
                    approval_id: r.approval_id.clone(),
                    tool: r.parked.tool.name.clone(),
                    caller: r.parked.caller.clone(),
                    mode: r.mode,
                });
            }
            r.expires + EXPIRED_KEPT > now
        });
        expired
    }

    /// Parks an invocation and returns the ticket to hand out.
    pub(crate) fn park(&self, parked: Parked) -> Result<Ticket, ConfirmError> {
        let mode = parked.tool.confirm;
        let token = random_hex(32)?;
        let approval_id = random_hex(6)?;
        let ttl = if mode == Confirm::Human { self.human_ttl } else { self.agent_ttl };
        let description = describe(&parked);
        let argv = parked.plan.display_argv.clone();
        let strings = |v: &[String]| v.iter().map(|a| a.len() + std::mem::size_of::<String>()).sum::<usize>();
        let bytes = strings(&parked.plan.argv) + strings(&parked.plan.display_argv) + description.len() + 512;
        let uid = parked.caller.uid;
        let record = Record {
            binding: binding(&parked.tool.name, &parked.plan.argv, parked.caller.uid),
            parked,
            mode,
            approval_id: approval_id.clone(),
            description: description.clone(),
            expires: Instant::now() + ttl,
            decision: watch::channel(Decision::Undecided).0,
            claimed: false,
            expiry_reported: false,
            bytes,
        };
        let mut map = self.lock();
        let now = Instant::now();
        let (mut own, mut own_bytes, mut all, mut all_bytes) = (0, 0, 0, 0);
        for r in map.values().filter(|r| r.live(now)) {
            all += 1;
            all_bytes += r.bytes;
            if r.parked.caller.uid == uid {
                own += 1;
                own_bytes += r.bytes;
            }
        }
        let l = &self.limits;
        let mib = |b: usize| b / (1024 * 1024);
        let refusal = if own >= l.per_caller {
            Some(format!("this caller already has {own}, the limit is {}", l.per_caller))
        } else if own_bytes + bytes > l.per_caller_bytes {
            Some(format!("this caller's pending invocations would hold more than {} MiB", mib(l.per_caller_bytes)))
        } else if all >= l.total {
            Some(format!("{all} for all callers, the limit is {}", l.total))
        } else if all_bytes + bytes > l.total_bytes {
            Some(format!("pending invocations of all callers would hold more than {} MiB", mib(l.total_bytes)))
        } else {
            None
        };
        if let Some(why) = refusal {
            return Err(ConfirmError::TooMany(why));
        }
        if mode == Confirm::Human {
            let _ = self.changes.send(PendingChange::Added(PendingInfo {
                approval_id: approval_id.clone(),
                tool: record.parked.tool.name.clone(),
                argv: argv.clone(),
                description: description.clone(),
                caller: record.parked.caller.clone(),
                expires_in: ttl,
                waiting: false,
            }));
        }
        map.insert(token_key(&token), record);
        let elicitation_approves = mode == Confirm::Human && l.elicitation_approves;
        Ok(Ticket { token, mode, approval_id, description, expires_in: ttl, argv, elicitation_approves })
    }

    /// Redeems a token. Agent tokens (and, when the admin opted in, human tokens approved through
    /// elicitation) are used up at once; other human tokens wait for an admin's decision until
    /// they expire. Claiming an elicitation approval without the opt-in is refused, and the token
    /// stays pending. The caller checks that the registry still holds the redeemed plan's tool.
    pub(crate) async fn redeem(
        &self,
        token: &str,
        caller: Caller,
        approved_by_elicitation: bool,
    ) -> Result<Redeemed, ConfirmError> {
        if approved_by_elicitation && !self.limits.elicitation_approves {
            return Err(ConfirmError::ElicitationNotAccepted);
        }
        let key = token_key(token);
        let mut decision = {
            let mut map = self.lock();
            let record = map.get_mut(&key).ok_or(ConfirmError::UnknownToken)?;
            if binding(&record.parked.tool.name, &record.parked.plan.argv, caller.uid) != record.binding {
                return Err(ConfirmError::Foreign);
            }
            if record.claimed {
                return Err(ConfirmError::AlreadyClaimed);
            }
            let via = if record.mode != Confirm::Human {
                Some(Via::AgentToken)
            } else if *record.decision.borrow() == Decision::Approved {
                Some(Via::Admin)
            } else if approved_by_elicitation {
                Some(Via::Elicitation)
            } else {
                None
            };
            if let Some(via) = via {
                let record = map.remove(&key).ok_or(ConfirmError::UnknownToken)?;
                if via == Via::Elicitation {
                    self.gone(&record, "approved");
                }
                return finish(record, via);
            }
            record.claimed = true;
            record.decision.subscribe()
        };
        // However this wait ends (decision, expiry, or the caller going away), the record goes.
        let claim = Claim { store: self, key };
        let deadline = {
            let map = self.lock();
            map.get(&key).map(|r| r.expires).ok_or(ConfirmError::UnknownToken)?
        };
        let outcome = tokio::time::timeout_at(deadline.into(), decision.wait_for(|d| *d != Decision::Undecided)).await;
        let record = claim.take().ok_or(ConfirmError::UnknownToken)?;
        match outcome {
            Ok(Ok(d)) if *d == Decision::Approved => finish(record, Via::Admin),
            Ok(_) => Err(ConfirmError::Denied),
            Err(_) => {
                self.gone(&record, "expired");
                Err(ConfirmError::TimedOut(self.human_ttl))
            }
        }
    }

    pub(crate) fn pending(&self) -> Vec<PendingInfo> {
        let now = Instant::now();
        let mut list: Vec<PendingInfo> = self
            .lock()
            .values()
            .filter(|r| r.mode == Confirm::Human && *r.decision.borrow() == Decision::Undecided)
            .filter(|r| r.expires > now || r.claimed)
            .map(|r| PendingInfo {
                approval_id: r.approval_id.clone(),
                tool: r.parked.tool.name.clone(),
                argv: r.parked.plan.display_argv.clone(),
                description: r.description.clone(),
                caller: r.parked.caller.clone(),
                expires_in: r.expires.saturating_duration_since(now),
                waiting: r.claimed,
            })
            .collect();
        list.sort_by_key(|p| p.expires_in);
        list
    }

    /// The uid that asked for a pending approval.
    pub(crate) fn approval_owner(&self, approval_id: &str) -> Option<u32> {
        self.lock().values().find(|r| r.approval_id == approval_id).map(|r| r.parked.caller.uid)
    }

    pub(crate) fn approve(&self, approval_id: &str) -> Result<Decided, ConfirmError> {
        self.decide(approval_id, Decision::Approved)
    }

    pub(crate) fn deny(&self, approval_id: &str) -> Result<Decided, ConfirmError> {
        self.decide(approval_id, Decision::Denied)
    }

    fn decide(&self, approval_id: &str, decision: Decision) -> Result<Decided, ConfirmError> {
        let now = Instant::now();
        let mut map = self.lock();
        let (key, record) = map
            .iter()
            .find(|(_, r)| r.approval_id == approval_id && r.mode == Confirm::Human && (r.expires > now || r.claimed))
            .map(|(k, r)| (*k, r))
            .ok_or_else(|| ConfirmError::UnknownApproval(approval_id.to_string()))?;
        if *record.decision.borrow() != Decision::Undecided {
            return Err(ConfirmError::UnknownApproval(approval_id.to_string()));
        }
        record.decision.send_replace(decision);
        self.gone(record, if decision == Decision::Approved { "approved" } else { "denied" });
        let decided = Decided { tool: record.parked.tool.name.clone(), caller: record.parked.caller.clone() };
        // A denied approval nobody waits on is gone at once; an approved one stays until redeemed.
        if decision == Decision::Denied && !record.claimed {
            map.remove(&key);
        }
        Ok(decided)
    }
}

/// A waiting redeemer's hold on its record: dropping it removes the record.
struct Claim<'a> {
    store: &'a Confirmations,
    key: [u8; 32],
}

impl Claim<'_> {
    fn take(self) -> Option<Record> {
        let record = self.store.lock().remove(&self.key);
        std::mem::forget(self);
        record
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let removed = self.store.lock().remove(&self.key);
        // The waiting caller went away before anyone decided.
        if let Some(r) = removed
            && *r.decision.borrow() == Decision::Undecided
        {
            self.store.gone(&r, "withdrawn");
        }
    }
}

fn finish(record: Record, via: Via) -> Result<Redeemed, ConfirmError> {
    if Instant::now() > record.expires {
        return Err(ConfirmError::Expired);
    }
    Ok(Redeemed { parked: record.parked, approval_id: record.approval_id, via })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_shows_arguments_unambiguously() {
        assert_eq!(shell_quote("plain-arg_1.txt"), "plain-arg_1.txt");
        assert_eq!(shell_quote("two words"), "'two words'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    fn parked(confirm: &str) -> Parked {
        let text = format!(
            "version = 1\n[tools.t]\ndescription = \"d\"\nreason = \"r\"\ncommand = [\"/bin/echo\", \"hi\"]\nconfirm = \"{confirm}\"\n"
        );
        let set =
            cordon_core::policy::load_sources(&[("t.toml".into(), text)], &cordon_core::policy::Host::new(false, 7))
                .unwrap_or_else(|e| panic!("{e}"));
        let tool = set.tools.into_iter().next().unwrap();
        let plan = Plan {
            executable: "/bin/echo".into(),
            argv: vec!["/bin/echo".into(), "hi".into()],
            display_argv: vec!["/bin/echo".into(), "hi".into()],
            env: Vec::new(),
            cwd: "/".into(),
        };
        Parked {
            tool,
            generation: 1,
            plan,
            identity: None,
            dedicated_uid: false,
            caller: Caller::socket(1000, 1000, None),
            paths: Vec::new(),
            learn: Vec::new(),
            arguments: serde_json::Value::from("{}"),
        }
    }

    #[test]
    fn the_description_shows_control_and_bidi_characters_of_arguments() {
        let mut p = parked("human");
        let evil = "x\x1b[2K\rsafe \u{202e}gpj.exe";
        p.plan.display_argv = vec!["/bin/echo".into(), evil.into()];
        let text = describe(&p);
        assert!(!text.chars().any(cordon_core::display::is_unsafe), "{text:?}");
        assert!(text.contains("'x\\u{1b}[2K\\rsafe <U+202E>gpj.exe'"), "{text}");
    }

    #[tokio::test]
    async fn a_token_is_refused_to_another_user_and_stays_usable_for_its_owner() {
        let store = Confirmations::default();
        let ticket = store.park(parked("agent")).unwrap();
        let stranger = Caller::socket(1001, 1001, None);
        assert_eq!(store.redeem(&ticket.token, stranger, false).await.unwrap_err(), ConfirmError::Foreign);
        let owner = Caller::socket(1000, 1000, None);
        assert!(store.redeem(&ticket.token, owner.clone(), false).await.is_ok());
        assert_eq!(store.redeem(&ticket.token, owner, false).await.unwrap_err(), ConfirmError::UnknownToken);
    }

    #[tokio::test]
    async fn a_waiter_that_goes_away_leaves_nothing_behind() {
        let store = Arc::new(Confirmations::new(AGENT_TTL, Duration::from_secs(30)));
        let ticket = store.park(parked("human")).unwrap();
        let owner = Caller::socket(1000, 1000, None);
        let waiting = {
            let store = store.clone();
            let token = ticket.token.clone();
            tokio::spawn(async move { store.redeem(&token, owner, false).await })
        };
        for _ in 0..100 {
            if store.pending().first().is_some_and(|p| p.waiting) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(store.pending()[0].waiting);
        waiting.abort();
        let _ = waiting.await;
        assert!(store.pending().is_empty());
        assert_eq!(
            store.approve(&ticket.approval_id).unwrap_err(),
            ConfirmError::UnknownApproval(ticket.approval_id.clone())
        );
    }

    #[tokio::test]
    async fn an_expiry_is_reported_once_and_a_late_redeem_hears_expired() {
        let store = Confirmations::new(Duration::from_millis(1), HUMAN_TTL);
        let ticket = store.park(parked("agent")).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let expired = store.sweep();
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].approval_id, ticket.approval_id);
        assert!(store.sweep().is_empty(), "reported twice");
        let owner = Caller::socket(1000, 1000, None);
        assert_eq!(store.redeem(&ticket.token, owner, false).await.unwrap_err(), ConfirmError::Expired);
    }

    #[tokio::test]
    async fn outstanding_confirmations_are_capped_per_caller_and_in_total() {
        let limits = Limits { per_caller: 2, total: 3, ..Limits::default() };
        let store = Confirmations::default().with_limits(limits);
        let first = store.park(parked("agent")).unwrap();
        store.park(parked("agent")).unwrap();
        assert!(matches!(store.park(parked("agent")), Err(ConfirmError::TooMany(_))));
        // Another caller has its own allowance, up to the total.
        let mut other = parked("agent");
        other.caller = Caller::socket(1001, 1001, None);
        store.park(other.clone()).unwrap();
        assert!(matches!(store.park(other.clone()), Err(ConfirmError::TooMany(m)) if m.contains("all callers")));
        // Redeeming one frees a place.
        let owner = Caller::socket(1000, 1000, None);
        store.redeem(&first.token, owner, false).await.unwrap();
        store.park(parked("agent")).unwrap();
        // Bytes count too.
        let store = Confirmations::default().with_limits(Limits { per_caller_bytes: 600, ..Limits::default() });
        assert!(matches!(store.park(parked("agent")), Err(ConfirmError::TooMany(m)) if m.contains("MiB")));
    }

    #[tokio::test]
    async fn an_elicitation_claim_is_refused_without_the_opt_in_and_leaves_the_token() {
        let store = Confirmations::default();
        let ticket = store.park(parked("human")).unwrap();
        assert!(!ticket.elicitation_approves);
        let owner = Caller::socket(1000, 1000, None);
        assert_eq!(
            store.redeem(&ticket.token, owner.clone(), true).await.unwrap_err(),
            ConfirmError::ElicitationNotAccepted
        );
        assert_eq!(store.pending().len(), 1);
        let store = Confirmations::default().with_limits(Limits { elicitation_approves: true, ..Limits::default() });
        let ticket = store.park(parked("human")).unwrap();
        assert!(ticket.elicitation_approves);
        assert_eq!(store.redeem(&ticket.token, owner, true).await.unwrap().via, Via::Elicitation);
    }

    #[test]
    fn bindings_depend_on_tool_argv_and_uid() {
        let argv = vec!["a".to_string(), "b".to_string()];
        let b = binding("t", &argv, 1);
        assert_ne!(b, binding("u", &argv, 1));
        assert_ne!(b, binding("t", &argv, 2));
        assert_ne!(b, binding("t", &["a".to_string(), "c".to_string()], 1));
        // Element boundaries count: ["ab"] is not ["a", "b"].
        assert_ne!(b, binding("t", &["ab".to_string()], 1));
    }
}
