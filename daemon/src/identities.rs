//! `cordond --tls-identities FILE`: which client certificates are whom.
//!
//! A client certificate that the configured CA signed proves a name, not an account. This file
//! maps one name of a certificate (its subject's common name, a DNS name or a URI of its subject
//! alternative names) to one local account and, optionally, exactly the groups that caller has:
//!
//! ```toml
//! [[identity]]
//! match = { uri = "spiffe://example.org/agent/alice" }
//! user = "alice"
//! groups = ["cordon"]
//! ```
//!
//! What a mapping may not be (checked at load; every problem is reported with its line):
//!
//! - root (uid 0) or cordond's own account: those are admins by uid, whatever the groups, and a
//!   stolen client key must never be root;
//! - an admin by its groups (the admin group among `groups`, or among the account's own groups when
//!   `groups` is absent), unless the entry says `admin = true`: remote administration is a
//!   deliberate choice, written next to the certificate that gets it;
//! - ambiguous: two entries with the same match, a match with no name or with more than one kind,
//!   a name with a wildcard (`*`) or control characters.
//!
//! A certificate that matches no entry, or more than one (its common name one entry, a DNS name
//! another), is refused: the TLS handshake fails and nothing is served.
//!
//! Architecture invariant: a mapped caller's groups are always explicit (`Caller::groups` is
//! `Some`): the ones the entry names, else the account's groups as they were at load (or the
//! last reload), so that the admin check made here is the one authorization sees.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cordon_core::policy::{Subject, Trust, TrustError};
use nix::unistd::{Gid, Group, Uid, User};
use serde::Deserialize;

use crate::caller::{Caller, Via};

/// The largest identities file read.
pub(crate) const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The longest name a match may hold (a DNS name is at most 253 bytes; URIs get some room).
pub(crate) const MAX_NAME_BYTES: usize = 1024;

/// One name of a certificate that a mapping matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Match {
    /// The subject's common name (a certificate with more than one has none that matches).
    CommonName(String),
    /// A `dNSName` of the subject alternative names (compared without ASCII case).
    Dns(String),
    /// A `uniformResourceIdentifier` of the subject alternative names (compared exactly).
    Uri(String),
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Match::CommonName(n) => write!(f, "common_name={n}"),
            Match::Dns(n) => write!(f, "dns={n}"),
            Match::Uri(n) => write!(f, "uri={n}"),
        }
    }
}

/// One mapped identity: the account a certificate becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// What matched, as audit records name it (`uri=spiffe://...`).
    pub label: Arc<str>,
    pub user: String,
    pub uid: u32,
    /// The account's primary group.
    pub gid: u32,
    /// Exactly the caller's groups (see the module's invariant).
    pub groups: Arc<[u32]>,
}

impl Identity {
    /// Whether the entry matches a `dNSName` of the subject alternative names: the one kind of
    /// name that rustls checks against the name constraints of the CAs above it.
    pub fn by_dns(&self) -> bool {
        self.label.starts_with("dns=")
    }

    /// The caller a connection with this identity makes requests as.
    pub fn caller(&self) -> Caller {
        Caller {
            uid: self.uid,
            gid: self.gid,
            pid: None,
            via: Via::Certificate(self.label.clone()),
            groups: Some(self.groups.clone()),
        }
    }
}

/// The loaded mapping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identities {
    entries: Vec<Identity>,
    by_match: HashMap<Match, usize>,
}

/// The names a client certificate carries (what mappings can match).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CertNames {
    /// The subject as text (`CN=ci-runner-1, O=Example`), for audit records.
    pub subject: String,
    pub common_names: Vec<String>,
    pub dns: Vec<String>,
    pub uris: Vec<String>,
}

impl CertNames {
    /// The names of a DER certificate; `None` when it cannot be parsed.
    pub fn of(der: &[u8]) -> Option<CertNames> {
        use x509_parser::extensions::GeneralName;
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let mut names = CertNames { subject: subject.to_string(), ..CertNames::default() };
        for cn in subject.iter_common_name() {
            // A common name that is not text matches nothing, but still counts (two CNs: none).
            names.common_names.push(cn.as_str().map(str::to_string).unwrap_or_default());
        }
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => names.dns.push(d.to_ascii_lowercase()),
                    GeneralName::URI(u) => names.uris.push((*u).to_string()),
                    _ => {}
                }
            }
        }
        Some(names)
    }
}

/// Why a verified certificate maps to no account.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmapped {
    #[error("no identity in the mapping matches it (names: {0})")]
    NoMatch(String),
    #[error("it matches more than one identity ({0}); a certificate must match exactly one")]
    Ambiguous(String),
}

impl Identities {
    /// The identity `names` maps to: exactly one entry must match.
    pub fn lookup(&self, names: &CertNames) -> Result<&Identity, Unmapped> {
        let mut candidates: Vec<Match> = Vec::new();
        // More than one common name: none of them is the certificate's name.
        if let [cn] = names.common_names.as_slice() {
            candidates.push(Match::CommonName(cn.clone()));
        }
        candidates.extend(names.dns.iter().map(|d| Match::Dns(d.clone())));
        candidates.extend(names.uris.iter().map(|u| Match::Uri(u.clone())));
        let mut hits: Vec<usize> = candidates.iter().filter_map(|m| self.by_match.get(m).copied()).collect();
        hits.sort_unstable();
        hits.dedup();
        match hits.as_slice() {
            [one] => Ok(&self.entries[*one]),
            [] => Err(Unmapped::NoMatch(describe(&candidates))),
            many => Err(Unmapped::Ambiguous(
                many.iter().map(|i| self.entries[*i].label.to_string()).collect::<Vec<_>>().join(", "),
            )),
        }
    }

    /// The identity mapped under `label` now (see [`Identity::label`]), if any: what a
    /// connection mapped at an earlier handshake is checked against on each request, so that a
    /// reload that removes or changes its entry ends what the connection may do.
    pub fn by_label(&self, label: &str) -> Option<&Identity> {
        self.entries.iter().find(|e| &*e.label == label)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn describe(candidates: &[Match]) -> String {
    if candidates.is_empty() {
        return "none".into();
    }
    let mut text = candidates.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    if text.len() > 512 {
        let mut end = 512;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// Why the identities file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum IdentitiesError {
    #[error(transparent)]
    Untrusted(#[from] TrustError),
    /// Every problem, one per line, each `file:line:col: message`.
    #[error("{}: {} problem(s); cordond maps no client certificate until they are fixed:\n{}", .path.display(), .problems.len(), .problems.join("\n"))]
    Invalid { path: PathBuf, problems: Vec<String> },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    identity: Vec<toml::Spanned<RawIdentity>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    #[serde(rename = "match")]
    matches: toml::Spanned<RawMatch>,
    user: toml::Spanned<String>,
    groups: Option<toml::Spanned<Vec<String>>>,
    #[serde(default)]
    admin: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    common_name: Option<String>,
    dns: Option<String>,
    uri: Option<String>,
}

/// The accounts and groups a mapping is checked against: the host's, or a test's.
pub trait Accounts {
    /// (uid, primary gid) of a user.
    fn user(&self, name: &str) -> Option<(u32, u32)>;
    fn group(&self, name: &str) -> Option<u32>;
    /// The user's groups in the group database (its primary group included).
    fn groups_of(&self, name: &str, gid: u32) -> Vec<u32>;
}

/// The host's user and group databases.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostAccounts;

impl Accounts for HostAccounts {
    fn user(&self, name: &str) -> Option<(u32, u32)> {
        User::from_name(name).ok().flatten().map(|u| (u.uid.as_raw(), u.gid.as_raw()))
    }

    fn group(&self, name: &str) -> Option<u32> {
        Group::from_name(name).ok().flatten().map(|g| g.gid.as_raw())
    }

    fn groups_of(&self, name: &str, gid: u32) -> Vec<u32> {
        let Ok(cname) = std::ffi::CString::new(name) else { return vec![gid] };
        match nix::unistd::getgrouplist(&cname, Gid::from_raw(gid)) {
            Ok(list) => list.into_iter().map(Gid::as_raw).collect(),
            Err(_) => vec![gid],
        }
    }
}

/// What a mapping is checked against besides the accounts.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// cordond's own uid (never a remote identity, as root is not).
    pub daemon_uid: u32,
    /// The admin group, if there is one.
    pub admin_gid: Option<u32>,
}

impl Rules {
    pub fn current(admin_gid: Option<u32>) -> Rules {
        Rules { daemon_uid: Uid::effective().as_raw(), admin_gid }
    }
}

/// Reads `path` as cordond reads policy files (owner and mode checked on the whole path) and
/// parses it.
pub(crate) fn load(path: &Path, trust: Trust, rules: Rules) -> Result<Identities, IdentitiesError> {
    let bytes =
        cordon_core::policy::trust::read_trusted_file(path, trust, Subject::TLS_IDENTITIES, MAX_FILE_BYTES, false)?;
    let text = String::from_utf8(bytes).map_err(|_| IdentitiesError::Invalid {
        path: path.into(),
        problems: vec![format!("{}: not UTF-8 text", path.display())],
    })?;
    parse(path, &text, rules, &HostAccounts)
}

/// Parses and checks a mapping; every problem is reported, each with its line and column.
pub fn parse(path: &Path, text: &str, rules: Rules, accounts: &dyn Accounts) -> Result<Identities, IdentitiesError> {
    let at = |offset: usize| -> String {
        let before = &text[..offset.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        format!("{}:{line}:{col}", path.display())
    };
    let raw: RawFile = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            let place = e.span().map_or_else(|| path.display().to_string(), |s| at(s.start));
            let message = e.message().to_string();
            return Err(IdentitiesError::Invalid { path: path.into(), problems: vec![format!("{place}: {message}")] });
        }
    };
    let mut problems = Vec::new();
    if raw.identity.is_empty() {
        problems.push(format!(
            "{}: maps no identity, so every client certificate would be refused: add [[identity]] entries (match, user) \
             or leave out --listen-tls",
            path.display()
        ));
    }
    let mut out = Identities::default();
    let mut seen: HashMap<Match, String> = HashMap::new();
    for entry in &raw.identity {
        let place = at(entry.span().start);
        let entry = entry.get_ref();
        let match_place = at(entry.matches.span().start);
        let m = entry.matches.get_ref();
        let given: Vec<Match> = [
            m.common_name.clone().map(Match::CommonName),
            m.dns.clone().map(|d| Match::Dns(d.to_ascii_lowercase())),
            m.uri.clone().map(Match::Uri),
        ]
        .into_iter()
        .flatten()
        .collect();
        let matched = match given.as_slice() {
            [] => {
                problems.push(format!(
                    "{match_place}: empty match: write one of {{ common_name = \"NAME\" }}, {{ dns = \"HOST\" }}, {{ uri = \"URI\" }}"
                ));
                None
            }
            [one] => match check_name(one) {
                Ok(()) => Some(one.clone()),
                Err(why) => {
                    problems.push(format!("{match_place}: {why}"));
                    None
                }
            },
            _ => {
                problems.push(format!(
                    "{match_place}: a match names exactly one of common_name, dns, uri (write one [[identity]] per name)"
                ));
                None
            }
        };
        if let Some(matched) = &matched {
            if let Some(first) = seen.get(matched) {
                problems.push(format!("{match_place}: duplicate match {matched} (first at {first}); keep one"));
            } else {
                seen.insert(matched.clone(), match_place.clone());
            }
        }
        let user_place = at(entry.user.span().start);
        let user = entry.user.get_ref();
        let account = match accounts.user(user) {
            None => {
                problems.push(format!("{user_place}: no such user {user:?}: create the account or map another"));
                None
            }
            Some((0, _)) => {
                problems.push(format!(
                    "{user_place}: {user:?} is root; a remote identity never is (a stolen client key must not be root): \
                     map it to an unprivileged account"
                ));
                None
            }
            Some((uid, _)) if uid == rules.daemon_uid => {
                problems.push(format!(
                    "{user_place}: {user:?} is cordond's own account, an admin by uid; a remote identity never is: map it \
                     to another account"
                ));
                None
            }
            Some(found) => Some(found),
        };
        let groups: Option<Vec<u32>> = match &entry.groups {
            Some(names) => {
                let gplace = at(names.span().start);
                let mut ids = Vec::new();
                let mut ok = true;
                for name in names.get_ref() {
                    match accounts.group(name) {
                        Some(gid) if !ids.contains(&gid) => ids.push(gid),
                        Some(_) => {
                            problems.push(format!("{gplace}: group {name:?} is named twice; keep one"));
                            ok = false;
                        }
                        None => {
                            problems
                                .push(format!("{gplace}: no such group {name:?}: create it or remove it from groups"));
                            ok = false;
                        }
                    }
                }
                ok.then_some(ids)
            }
            None => account.map(|(_, gid)| accounts.groups_of(user, gid)),
        };
        let (Some(matched), Some((uid, gid)), Some(mut groups)) = (matched, account, groups) else { continue };
        if !groups.contains(&gid) {
            groups.insert(0, gid);
        }
        let admin = rules.admin_gid.is_some_and(|a| groups.contains(&a));
        match (admin, entry.admin) {
            (true, false) => {
                problems.push(format!(
                    "{place}: {user:?} would be an admin (the admin group is among its groups{}); a remote admin must be \
                     chosen: write admin = true in this entry, or give it groups without the admin group",
                    if entry.groups.is_some() { "" } else { " in the group database" }
                ));
                continue;
            }
            (false, true) => {
                problems.push(format!(
                    "{place}: admin = true, but {user:?} is not in the admin group with these groups: add the admin group \
                     to groups, or remove admin = true"
                ));
                continue;
            }
            _ => {}
        }
        let label: Arc<str> = matched.to_string().into();
        out.by_match.insert(matched, out.entries.len());
        out.entries.push(Identity { label, user: user.clone(), uid, gid, groups: groups.into() });
    }
    if problems.is_empty() { Ok(out) } else { Err(IdentitiesError::Invalid { path: path.into(), problems }) }
}

/// A name a mapping can hold: not empty, no wildcard, no control characters, bounded.
fn check_name(m: &Match) -> Result<(), String> {
    let (key, name) = match m {
        Match::CommonName(n) => ("common_name", n),
        Match::Dns(n) => ("dns", n),
        Match::Uri(n) => ("uri", n),
    };
    if name.trim().is_empty() {
        return Err(format!("{key} is empty: write the name the certificate carries"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!("{key} is {} bytes; at most {MAX_NAME_BYTES}", name.len()));
    }
    if name.chars().any(char::is_control) {
        return Err(format!("{key} {name:?} holds control characters"));
    }
    if name.contains('*') {
        return Err(format!(
            "{key} {name:?} holds a wildcard; mappings match one exact name (write one [[identity]] per client)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// alice 1000/1000 in cordon (2000) and cordon-admin (3000); bob 1001/1001; root; cordond's
    /// user "daemon" 500.
    struct Fake;

    impl Accounts for Fake {
        fn user(&self, name: &str) -> Option<(u32, u32)> {
            match name {
                "alice" => Some((1000, 1000)),
                "bob" => Some((1001, 1001)),
                "root" => Some((0, 0)),
                "daemon" => Some((500, 500)),
                _ => None,
            }
        }

        fn group(&self, name: &str) -> Option<u32> {
            match name {
                "cordon" => Some(2000),
                "cordon-admin" => Some(3000),
                "ci" => Some(4000),
                _ => None,
            }
        }

        fn groups_of(&self, name: &str, gid: u32) -> Vec<u32> {
            match name {
                "alice" => vec![gid, 2000, 3000],
                _ => vec![gid],
            }
        }
    }

    const RULES: Rules = Rules { daemon_uid: 500, admin_gid: Some(3000) };

    fn parse_text(text: &str) -> Result<Identities, Vec<String>> {
        match parse(Path::new("ids.toml"), text, RULES, &Fake) {
            Ok(ids) => Ok(ids),
            Err(IdentitiesError::Invalid { problems, .. }) => Err(problems),
            Err(e) => panic!("{e}"),
        }
    }

    fn names(cn: &[&str], dns: &[&str], uris: &[&str]) -> CertNames {
        let owned = |v: &[&str]| v.iter().map(ToString::to_string).collect();
        CertNames { subject: String::new(), common_names: owned(cn), dns: owned(dns), uris: owned(uris) }
    }

    #[test]
    fn each_kind_of_match_maps_to_its_account_with_exactly_its_groups() {
        let ids = parse_text(
            r#"
[[identity]]
match = { common_name = "ci-runner-1" }
user = "bob"
groups = ["ci"]

[[identity]]
match = { dns = "Build-1.example.com" }
user = "bob"

[[identity]]
match = { uri = "spiffe://example.org/agent/alice" }
user = "alice"
groups = ["cordon"]
"#,
        )
        .unwrap();
        assert_eq!(ids.len(), 3);
        let ci = ids.lookup(&names(&["ci-runner-1"], &[], &[])).unwrap();
        assert_eq!(
            (ci.uid, ci.gid, &*ci.groups, &*ci.label),
            (1001, 1001, &[1001, 4000][..], "common_name=ci-runner-1")
        );
        let build = ids.lookup(&names(&["x"], &["build-1.example.com"], &[])).unwrap();
        assert_eq!((build.uid, &*build.groups, &*build.label), (1001, &[1001][..], "dns=build-1.example.com"));
        // alice's database groups include the admin group; the mapping's groups replace them.
        let alice = ids.lookup(&names(&[], &[], &["spiffe://example.org/agent/alice"])).unwrap();
        assert_eq!(&*alice.groups, &[1000, 2000]);
        let caller = alice.caller();
        assert_eq!(caller.pid, None);
        assert_eq!(caller.via, Via::Certificate("uri=spiffe://example.org/agent/alice".into()));
    }

    #[test]
    fn unknown_ambiguous_and_multi_cn_certificates_map_to_nothing() {
        let ids = parse_text(
            r#"
[[identity]]
match = { common_name = "a" }
user = "bob"

[[identity]]
match = { dns = "b.example" }
user = "bob"
"#,
        )
        .unwrap();
        assert_eq!(
            ids.lookup(&names(&["zz"], &["c.example"], &[])),
            Err(Unmapped::NoMatch("common_name=zz, dns=c.example".into()))
        );
        assert_eq!(ids.lookup(&names(&[], &[], &[])), Err(Unmapped::NoMatch("none".into())));
        assert_eq!(
            ids.lookup(&names(&["a"], &["b.example"], &[])),
            Err(Unmapped::Ambiguous("common_name=a, dns=b.example".into()))
        );
        // Two common names: neither is the certificate's name.
        assert_eq!(ids.lookup(&names(&["a", "q"], &[], &[])), Err(Unmapped::NoMatch("none".into())));
        // A URI is compared exactly; a common name is not a DNS name.
        assert!(ids.lookup(&names(&[], &["a"], &[])).is_err());
    }

    #[test]
    fn every_problem_is_reported_with_its_line() {
        let problems = parse_text(
            r#"[[identity]]
match = {}
user = "bob"

[[identity]]
match = { common_name = "x", dns = "y" }
user = "bob"

[[identity]]
match = { common_name = "dup" }
user = "nobody-here"

[[identity]]
match = { common_name = "dup" }
user = "bob"
groups = ["ci", "nogroup"]

[[identity]]
match = { dns = "*.example.com" }
user = "bob"

[[identity]]
match = { uri = "" }
user = "bob"
"#,
        )
        .unwrap_err();
        assert_eq!(
            problems,
            vec![
                "ids.toml:2:9: empty match: write one of { common_name = \"NAME\" }, { dns = \"HOST\" }, { uri = \"URI\" }",
                "ids.toml:6:9: a match names exactly one of common_name, dns, uri (write one [[identity]] per name)",
                "ids.toml:11:8: no such user \"nobody-here\": create the account or map another",
                "ids.toml:14:9: duplicate match common_name=dup (first at ids.toml:10:9); keep one",
                "ids.toml:16:10: no such group \"nogroup\": create it or remove it from groups",
                "ids.toml:19:9: dns \"*.example.com\" holds a wildcard; mappings match one exact name (write one [[identity]] per client)",
                "ids.toml:23:9: uri is empty: write the name the certificate carries",
            ]
        );
    }

    #[test]
    fn root_the_daemons_account_and_unchosen_admins_are_refused() {
        let problems = parse_text(
            r#"[[identity]]
match = { common_name = "r" }
user = "root"

[[identity]]
match = { common_name = "d" }
user = "daemon"

[[identity]]
match = { common_name = "a" }
user = "alice"

[[identity]]
match = { common_name = "g" }
user = "bob"
groups = ["cordon-admin"]

[[identity]]
match = { common_name = "n" }
user = "bob"
admin = true
"#,
        )
        .unwrap_err();
        assert_eq!(problems.len(), 5, "{problems:#?}");
        assert!(
            problems[0].starts_with("ids.toml:3:8: \"root\" is root; a remote identity never is"),
            "{}",
            problems[0]
        );
        assert!(problems[1].starts_with("ids.toml:7:8: \"daemon\" is cordond's own account"), "{}", problems[1]);
        assert!(
            problems[2]
                .contains("\"alice\" would be an admin (the admin group is among its groups in the group database)")
        );
        assert!(problems[3].contains("\"bob\" would be an admin (the admin group is among its groups)"));
        assert!(problems[4].contains("admin = true, but \"bob\" is not in the admin group"));
        // Chosen: a remote admin through the admin group.
        let ids = parse_text(
            "[[identity]]\nmatch = { common_name = \"g\" }\nuser = \"bob\"\ngroups = [\"cordon-admin\"]\nadmin = true\n",
        )
        .unwrap();
        assert_eq!(&*ids.lookup(&names(&["g"], &[], &[])).unwrap().groups, &[1001, 3000]);
    }

    #[test]
    fn unknown_keys_an_empty_file_and_bad_toml_are_refused() {
        assert_eq!(
            parse_text("[[identity]]\nmatch = { common_name = \"a\" }\nuser = \"bob\"\nuid = 0\n").unwrap_err().len(),
            1
        );
        let e = parse_text("[[identity]]\nmatch = { cn = \"a\" }\nuser = \"bob\"\n").unwrap_err();
        assert!(e[0].starts_with("ids.toml:2:"), "{e:?}");
        assert!(e[0].contains("unknown field `cn`"), "{e:?}");
        let e = parse_text("").unwrap_err();
        assert!(e[0].contains("maps no identity"), "{e:?}");
        let e = parse_text("[[identity]\n").unwrap_err();
        assert!(e[0].starts_with("ids.toml:1:"), "{e:?}");
    }
}
