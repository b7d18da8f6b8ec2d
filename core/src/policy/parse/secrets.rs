//! Secrets a tool never sees: the file's `[secrets.NAME]` declarations (where the value comes
//! from, the hosts it may go to, where in a request it goes) and a tool's `secrets` table, which
//! names the environment variable that gets each one's placeholder.
//!
//! An entry is `VAR = "NAME"` (VAR holds the placeholder) or `VAR = { secret = "NAME", file =
//! true }` (VAR names a file of the call's private temp space holding it, for tools that read a
//! token from a file; such a tool needs `temp`).
//!
//! A declaration serves the tools of its own file only: the file is what an admin reviews, and
//! a tool's secret must be readable next to it (no action at a distance across files). The
//! checks that need the tool: it has `network.hosts`, each host of the secret is among them, no
//! variable is set twice (by `env`, `args_env_prefix`, cordon's own proxy and trust variables).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::common::Merged;
use super::{Parser, Value};
use crate::egress::{PROXY_ENV, parse_rule};
use crate::policy::diag::did_you_mean;
use crate::policy::keys::{SECRET_KEYS, SOURCE_KEYS, TOOL_SECRET_KEYS};
use crate::policy::model::{BASE_ENV, Param};
use crate::secret::{Placement, SecretDecl, SecretSource, TRUST_ENV, ToolSecret};

/// A file's declarations by name, with where each name is written; and which tools used them.
#[derive(Debug, Default)]
pub(super) struct FileSecrets {
    pub(super) decls: BTreeMap<String, (SecretDecl, Range<usize>)>,
    /// Names a tool of the file uses (the rest get a warning at the end of the file).
    pub(super) used: BTreeSet<String>,
    /// Names declared but invalid: a tool that uses one is not told again that it is unknown.
    pub(super) broken: BTreeSet<String>,
}

/// Request headers a secret may not go in: the proxy and HTTP framing own them.
const FORBIDDEN_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "proxy-authorization",
    "proxy-connection",
    "expect",
];

/// Whether `name` is a secret name: `^[a-z][a-z0-9_-]*$`, at most 64 characters.
fn valid_secret_name(name: &str) -> bool {
    name.len() <= 64
        && name.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// An HTTP header field name (RFC 9110 `token`).
fn valid_header(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl Parser<'_> {
    /// The file's `secrets` table.
    pub(super) fn secret_decls(&mut self, doc: &DeTable<'_>) -> FileSecrets {
        let mut out = FileSecrets::default();
        let Some(v) = doc.get("secrets") else { return out };
        let Some(table) = self.table(v, "secrets") else { return out };
        for (k, v) in table {
            let name = k.get_ref().to_string();
            match self.secret_decl(&name, k.span(), v) {
                Some(decl) => {
                    out.decls.insert(name, (decl, k.span()));
                }
                None => {
                    out.broken.insert(name);
                }
            }
        }
        out
    }

    /// One `[secrets.NAME]` table.
    fn secret_decl(&mut self, name: &str, name_span: Range<usize>, v: &Value<'_>) -> Option<SecretDecl> {
        let errors_before = self.error_count();
        let ctx = format!("[secrets.{name}]");
        if !valid_secret_name(name) {
            self.sink.error(
                name_span.clone(),
                format!(
                    "invalid secret name {name:?}: names match ^[a-z][a-z0-9_-]*$ (at most 64 characters), e.g. \
                     [secrets.github]"
                ),
            );
        }
        let t = self.table(v, &ctx)?;
        self.unknown_keys(t, SECRET_KEYS, &format!("in {ctx}"));
        let source = match t.get("source") {
            Some(v) => self.secret_source(v, &ctx),
            None => {
                self.sink.error(
                    name_span.clone(),
                    format!(
                        "{ctx} is missing `source`: write source = {{ file = \"/etc/cordon/secrets/{name}\" }} (a \
                         root-owned file, mode 0600) or source = {{ credential = \"{name}\" }} (a systemd credential)"
                    ),
                );
                None
            }
        };
        let hosts = match t.get("hosts") {
            Some(v) => self.secret_hosts(v, &ctx),
            None => {
                self.sink.error(
                    name_span.clone(),
                    format!(
                        "{ctx} is missing `hosts`: the hosts its value may be sent to, e.g. hosts = \
                         [\"api.github.com:443\"]"
                    ),
                );
                None
            }
        };
        let place = self.secret_place(t, &ctx, &name_span);
        if self.error_count() > errors_before {
            return None;
        }
        Some(SecretDecl { name: name.to_string(), source: source?, hosts: hosts?, place: place? })
    }

    /// `source = { file = "/abs" }` or `{ credential = "NAME" }`.
    fn secret_source(&mut self, v: &Value<'_>, ctx: &str) -> Option<SecretSource> {
        let t = self.table(v, &format!("{ctx} source"))?;
        self.unknown_keys(t, SOURCE_KEYS, &format!("in {ctx} source"));
        match (t.get("file"), t.get("credential")) {
            (Some(f), None) => {
                let path = self.abs_path(f, "source.file")?;
                if path == Path::new("/") {
                    self.sink.error(f.span(), "source.file must name a file");
                    return None;
                }
                Some(SecretSource::File(path))
            }
            (None, Some(c)) => {
                let name = self.string(c, "source.credential")?;
                let ok = !name.is_empty()
                    && name != "."
                    && name != ".."
                    && name.len() <= 255
                    && name.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
                if !ok {
                    self.sink.error(
                        c.span(),
                        format!(
                            "invalid credential name {name:?}: the name given to LoadCredential= (printable, no `/`), \
                             e.g. credential = \"github-token\""
                        ),
                    );
                    return None;
                }
                Some(SecretSource::Credential(name))
            }
            (Some(_), Some(_)) => {
                self.sink.error(v.span(), format!("{ctx} source names both a file and a credential; keep one"));
                None
            }
            (None, None) => {
                self.sink.error(
                    v.span(),
                    format!(
                        "{ctx} source needs `file` (an absolute path) or `credential` (a systemd credential's name)"
                    ),
                );
                None
            }
        }
    }

    /// `hosts = ["host:port", ...]`, as `network.hosts` writes them.
    fn secret_hosts(&mut self, v: &Value<'_>, ctx: &str) -> Option<Vec<crate::egress::HostRule>> {
        let items = self.array(v, &format!("{ctx} hosts"), "an array of \"host:port\" strings")?;
        if items.is_empty() {
            self.sink.error(
                v.span(),
                format!(
                    "{ctx} hosts = [] sends the secret nowhere; list the hosts it is for, e.g. [\"api.github.com:443\"]"
                ),
            );
            return None;
        }
        let mut rules = Vec::new();
        let mut ok = true;
        for item in items {
            let Some(text) = self.string(item, "hosts") else {
                ok = false;
                continue;
            };
            match parse_rule(&text) {
                Ok(r) if rules.contains(&r) => {
                    self.sink.error(item.span(), format!("{text:?} is listed twice in {ctx} hosts"));
                    ok = false;
                }
                Ok(r) => {
                    if r.port == 80 {
                        self.sink.warning(
                            item.span(),
                            format!(
                                "{ctx} is sent to {r}: port 80 is usually plain HTTP, where the value crosses the \
                                 network unencrypted; bind it to the host's HTTPS port (443)"
                            ),
                        );
                    }
                    rules.push(r)
                }
                Err(e) => {
                    self.sink.error(item.span(), format!("invalid hosts entry {e}"));
                    ok = false;
                }
            }
        }
        ok.then_some(rules)
    }

    /// Exactly one of `header = "Name"`, `basic = "user" | "password"`, `query = "param"`.
    fn secret_place(&mut self, t: &DeTable<'_>, ctx: &str, name_span: &Range<usize>) -> Option<Placement> {
        let given: Vec<&str> = ["header", "basic", "query"].into_iter().filter(|k| t.contains_key(*k)).collect();
        match given.as_slice() {
            [] => {
                self.sink.error(
                    name_span.clone(),
                    format!(
                        "{ctx} says nowhere for the secret to go: write header = \"Authorization\" (its value \
                         holds the placeholder, e.g. `Bearer PLACEHOLDER`), basic = \"user\" or \"password\" (HTTP \
                         basic auth), or query = \"api_key\" (a query parameter)"
                    ),
                );
                return None;
            }
            [_] => {}
            more => {
                let v = t.get(more[1]).map(|v| v.span()).unwrap_or(name_span.clone());
                self.sink.error(v, format!("{ctx} sets {}; a secret goes in one place", more.join(" and ")));
                return None;
            }
        }
        if let Some(v) = t.get("header") {
            let h = self.string(v, "header")?;
            if !valid_header(&h) {
                self.sink.error(
                    v.span(),
                    format!(
                        "invalid header name {h:?}: a header name is a token (letters, digits, -), e.g. \"X-Api-Key\""
                    ),
                );
                return None;
            }
            let lower = h.to_ascii_lowercase();
            if FORBIDDEN_HEADERS.contains(&lower.as_str()) {
                self.sink.error(
                    v.span(),
                    format!("header {h:?} frames the request or speaks to the proxy; a secret cannot go in it"),
                );
                return None;
            }
            return Some(Placement::Header(lower));
        }
        if let Some(v) = t.get("basic") {
            return match self.string(v, "basic")?.as_str() {
                "user" => Some(Placement::BasicUser),
                "password" => Some(Placement::BasicPassword),
                other => {
                    self.sink.error(v.span(), format!("invalid basic {other:?}; expected \"user\" or \"password\""));
                    None
                }
            };
        }
        let v = t.get("query")?;
        let q = self.string(v, "query")?;
        if q.is_empty() || !q.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b)) {
            self.sink.error(
                v.span(),
                format!("invalid query parameter {q:?}: letters, digits and -._~ only, e.g. query = \"api_key\""),
            );
            return None;
        }
        Some(Placement::Query(q))
    }

    /// A tool's `secrets = { VAR = "name" }`, checked against the file's declarations and the
    /// tool's own environment and hosts.
    pub(super) fn tool_secrets(
        &mut self,
        v: &Value<'_>,
        ctx: &str,
        merged: &Merged,
        params: &[Param],
        file: &mut FileSecrets,
    ) -> Vec<ToolSecret> {
        let mut out = Vec::new();
        let Some(t) = self.table(v, &format!("{ctx} secrets")) else { return out };
        let egress = merged.sandbox.network.egress();
        if egress.is_none() {
            self.sink.error(
                v.span(),
                format!(
                    "{ctx} has secrets but no network.hosts: a secret reaches its hosts only through cordond's egress \
                     proxy; add network = {{ hosts = [...] }} with the secret's hosts"
                ),
            );
        }
        let mut seen_names = BTreeSet::new();
        for (k, val) in t {
            let var = k.get_ref().to_string();
            let Some((name, in_file)) = self.tool_secret_entry(val, &var) else { continue };
            if in_file && !merged.sandbox.temp.enabled() {
                self.sink.error(
                    val.span(),
                    format!(
                        "{ctx} puts secret {name:?} in a file, which lives in the call's private temp space, and the \
                         tool has temp = false; remove temp = false, or give the placeholder in the variable itself \
                         ({var} = \"{name}\")"
                    ),
                );
                continue;
            }
            if !self.env_key(&var, k.span()) {
                continue;
            }
            let exported = merged.args_env_prefix.as_ref().is_some_and(|(prefix, _)| {
                params.iter().any(|p| format!("{prefix}{}", p.name.to_ascii_uppercase()) == var)
            });
            if merged.env.contains_key(&var) {
                self.sink.error(
                    k.span(),
                    format!("{var} is set by `env` too; a variable holds either a value or a secret's placeholder"),
                );
                continue;
            }
            if exported {
                self.sink.error(k.span(), format!("args_env_prefix turns a param into {var} too; rename one"));
                continue;
            }
            if BASE_ENV.contains(&var.as_str())
                || PROXY_ENV.contains(&var.as_str())
                || TRUST_ENV.contains(&var.as_str())
            {
                self.sink.error(k.span(), format!("{var} is one of the variables cordon sets itself; choose another"));
                continue;
            }
            let Some((decl, _)) = file.decls.get(&name) else {
                if !file.broken.contains(&name) {
                    let hint = did_you_mean(&name, file.decls.keys().map(String::as_str));
                    self.sink.error(
                        val.span(),
                        format!(
                            "unknown secret {name:?}: declare it in this file as [secrets.{name}] (a secret serves \
                             the tools of its own file){hint}"
                        ),
                    );
                }
                continue;
            };
            file.used.insert(name.clone());
            if !seen_names.insert(name.clone()) {
                self.sink.error(
                    val.span(),
                    format!("secret {name:?} is given to two variables; one placeholder per secret"),
                );
                continue;
            }
            if let Some(egress) = egress {
                for rule in &decl.hosts {
                    if !egress.hosts.contains(rule) {
                        self.sink.error(
                            val.span(),
                            format!(
                                "secret {name:?} is bound to {rule}, which is not in the tool's network.hosts; add \
                                 \"{rule}\" to network.hosts (or bind the secret to the tool's hosts)"
                            ),
                        );
                    }
                }
            }
            out.push(ToolSecret { env: var, decl: decl.clone(), file: in_file });
        }
        out
    }

    /// One entry's value: `"NAME"`, or `{ secret = "NAME", file = BOOL }`; the name and whether
    /// the placeholder goes in a file.
    fn tool_secret_entry(&mut self, val: &Value<'_>, var: &str) -> Option<(String, bool)> {
        if !matches!(val.get_ref(), DeValue::Table(_)) {
            return self
                .string_hint(
                    val,
                    &format!("secrets.{var}"),
                    "a secret's name (\"NAME\") or a table ({ secret = \"NAME\", file = true })",
                )
                .map(|n| (n, false));
        }
        let ctx = format!("secrets.{var}");
        let t = self.table(val, &ctx)?;
        self.unknown_keys(t, TOOL_SECRET_KEYS, &format!("in {ctx}"));
        let name = match t.get("secret") {
            Some(v) => self.string(v, &format!("{ctx}.secret"))?,
            None => {
                self.sink.error(
                    val.span(),
                    format!(
                        "{ctx} is missing `secret`: the name of the secret, e.g. {{ secret = \"github\", file = true }}"
                    ),
                );
                return None;
            }
        };
        let file = match t.get("file") {
            Some(v) => self.boolean(v, &format!("{ctx}.file"))?,
            None => false,
        };
        Some((name, file))
    }

    /// A tool whose connections the proxy terminates gets the trust variables from cordon.
    pub(super) fn check_trust_env(&mut self, merged: &Merged, ctx: &str) {
        for (k, (_, span)) in &merged.env {
            if TRUST_ENV.contains(&k.as_str()) {
                self.sink.error(
                    span.clone(),
                    format!(
                        "{ctx} env sets {k}, which cordon sets for a tool whose connections its proxy terminates (to \
                         the trust bundle of the system's roots and cordond's CA); remove it"
                    ),
                );
            }
        }
    }

    /// Declarations no tool of the file uses.
    pub(super) fn unused_secrets(&mut self, file: &FileSecrets) {
        for (name, (_, span)) in &file.decls {
            if !file.used.contains(name) {
                self.sink.warning(
                    span.clone(),
                    format!("secret {name:?} is declared but no tool of this file uses it; remove it or use it"),
                );
            }
        }
    }
}
