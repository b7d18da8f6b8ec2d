//! The entries of `network.hosts`: a `"host:port"` string, or a table that names the host and
//! what may be asked of it (`methods`, `paths`, `read_only`) and the CA its upstream must chain
//! to when the proxy terminates TLS for it (`upstream_ca`).

use toml::de::{DeTable, DeValue};

use super::{Parser, Value};
use crate::egress::{
    HostHttp, HostPattern, HostRule, MAX_METHODS, MAX_PATHS, READ_ONLY_METHODS, RequestRules, check_method,
    check_prefix, parse_rule,
};
use crate::policy::keys::HOST_KEYS;

/// The `hosts` entries, parsed: the rules (each once) and the tables' request rules and
/// `upstream_ca`. `None` when any entry is wrong (each reported at its position).
pub(super) struct Hosts {
    pub(super) rules: Vec<HostRule>,
    pub(super) http: Vec<HostHttp>,
}

impl Parser<'_> {
    pub(super) fn host_entries(&mut self, items: &[Value<'_>]) -> Option<Hosts> {
        let mut out = Hosts { rules: Vec::new(), http: Vec::new() };
        let mut ok = true;
        for item in items {
            let entry = match item.get_ref() {
                DeValue::String(text) => self.host_rule(item, text).map(|rule| (rule, None, text.to_string())),
                DeValue::Table(t) => self.host_table(item, t).map(|(rule, http, text)| (rule, Some(http), text)),
                other => {
                    self.type_error(
                        item.span(),
                        "hosts",
                        "\"host:port\" or a table { host = \"host:port\", methods = [...], paths = [...] }",
                        other,
                    );
                    None
                }
            };
            let Some((rule, http, text)) = entry else {
                ok = false;
                continue;
            };
            if out.rules.contains(&rule) {
                self.sink.error(item.span(), format!("{text:?} is listed twice in hosts"));
                ok = false;
                continue;
            }
            out.rules.push(rule);
            out.http.extend(http);
        }
        ok.then_some(out)
    }

    fn host_rule(&mut self, v: &Value<'_>, text: &str) -> Option<HostRule> {
        parse_rule(text).map_err(|e| self.sink.error(v.span(), format!("invalid hosts entry {e}"))).ok()
    }

    /// `{ host = "host:port", methods = [...], paths = [...], read_only = bool, upstream_ca = "/abs" }`.
    fn host_table(&mut self, v: &Value<'_>, t: &DeTable<'_>) -> Option<(HostRule, HostHttp, String)> {
        self.unknown_keys(t, HOST_KEYS, "in a hosts entry");
        let Some(host) = t.get("host") else {
            let what = if t.is_empty() { "an empty table" } else { "a table without `host`" };
            self.sink.error(
                v.span(),
                format!(
                    "{what} in hosts; a table names its host and what may be asked of it, e.g. \
                     {{ host = \"api.github.com:443\", read_only = true }}"
                ),
            );
            return None;
        };
        let text = self.string_hint(host, "hosts host", "\"host:port\"")?;
        let rule = self.host_rule(host, &text)?;
        if t.len() == 1 {
            self.sink.error(
                v.span(),
                format!(
                    "this hosts entry names only its host; write it as the string {:?}, or add methods, paths, \
                     read_only or upstream_ca",
                    rule.to_string()
                ),
            );
            return None;
        }
        let methods = t.get("methods").map(|m| self.methods(m));
        let paths = t.get("paths").map(|p| self.prefixes(p));
        let read_only = t.get("read_only").map(|r| (r, self.boolean(r, "read_only")));
        let upstream_ca = t.get("upstream_ca").map(|c| self.abs_path(c, "upstream_ca"));
        let mut ok = true;
        let mut methods = match methods {
            None => Vec::new(),
            Some(Some(m)) => m,
            Some(None) => {
                ok = false;
                Vec::new()
            }
        };
        let paths = match paths {
            None => Vec::new(),
            Some(Some(p)) => p,
            Some(None) => {
                ok = false;
                Vec::new()
            }
        };
        let mut ruled = !methods.is_empty() || !paths.is_empty();
        match read_only {
            Some((_, None)) => ok = false,
            Some((r, Some(true))) => {
                ruled = true;
                let unsafe_methods: Vec<&String> =
                    methods.iter().filter(|m| !READ_ONLY_METHODS.contains(&m.as_str())).collect();
                if !unsafe_methods.is_empty() {
                    let listed: Vec<String> = unsafe_methods.iter().map(|m| format!("{m:?}")).collect();
                    self.sink.error(
                        r.span(),
                        format!(
                            "read_only = true allows only {}, but methods lists {}; remove read_only to allow \
                             exactly the methods listed, or remove those methods",
                            READ_ONLY_METHODS.join(", "),
                            listed.join(", ")
                        ),
                    );
                    ok = false;
                } else if methods.is_empty() {
                    methods = READ_ONLY_METHODS.iter().map(|m| (*m).to_string()).collect();
                }
            }
            Some((_, Some(false))) | None => {}
        }
        let upstream_ca = match upstream_ca {
            None => None,
            Some(Some(p)) => Some(p),
            Some(None) => {
                ok = false;
                None
            }
        };
        if !ok {
            return None;
        }
        let requests = ruled.then_some(RequestRules { methods, paths });
        if requests.is_some()
            && let Some(why) = address_rules(&rule)
        {
            self.sink.warning(host.span(), why);
        }
        Some((rule.clone(), HostHttp { rule, requests, upstream_ca }, text))
    }

    fn methods(&mut self, v: &Value<'_>) -> Option<Vec<String>> {
        let items = self.array(v, "methods", "an array of HTTP methods, e.g. [\"GET\", \"HEAD\"]")?;
        if items.is_empty() {
            self.sink.error(
                v.span(),
                "methods = [] allows no request; leave methods out to allow any method, or list them (e.g. [\"GET\"])",
            );
            return None;
        }
        if items.len() > MAX_METHODS {
            self.sink.error(v.span(), format!("methods has {} entries; at most {MAX_METHODS}", items.len()));
            return None;
        }
        let mut out: Vec<String> = Vec::new();
        let mut ok = true;
        for item in items {
            let Some(m) = self.string_hint(item, "methods", "an HTTP method such as \"GET\"") else {
                ok = false;
                continue;
            };
            if let Err(e) = check_method(&m) {
                self.sink.error(item.span(), e);
                ok = false;
            } else if out.contains(&m) {
                self.sink.error(item.span(), format!("method {m:?} is listed twice; list it once"));
                ok = false;
            } else {
                out.push(m);
            }
        }
        ok.then_some(out)
    }

    fn prefixes(&mut self, v: &Value<'_>) -> Option<Vec<String>> {
        let items = self.array(v, "paths", "an array of path prefixes, e.g. [\"/repos/ORG/\"]")?;
        if items.is_empty() {
            self.sink.error(
                v.span(),
                "paths = [] allows no request; leave paths out to allow any path, or list prefixes (e.g. \
                 [\"/repos/ORG/\"])",
            );
            return None;
        }
        if items.len() > MAX_PATHS {
            self.sink.error(v.span(), format!("paths has {} entries; at most {MAX_PATHS}", items.len()));
            return None;
        }
        let mut out: Vec<String> = Vec::new();
        let mut ok = true;
        for item in items {
            let Some(p) = self.string_hint(item, "paths", "a path prefix such as \"/repos/ORG/\"") else {
                ok = false;
                continue;
            };
            if let Err(e) = check_prefix(&p) {
                self.sink.error(item.span(), e);
                ok = false;
            } else if out.contains(&p) {
                self.sink.error(item.span(), format!("path {p:?} is listed twice; list it once"));
                ok = false;
            } else {
                out.push(p);
            }
        }
        ok.then_some(out)
    }
}

/// What request rules on an address or range rule mean, for a warning: such a tunnel carries
/// nothing but HTTP requests (plain, or TLS the proxy terminates with a certificate for the
/// address), so another protocol to that address is cut.
fn address_rules(rule: &HostRule) -> Option<String> {
    let what = match rule.host {
        HostPattern::Addr(_) => "an address",
        HostPattern::Net { .. } => "an address range",
        _ => return None,
    };
    Some(format!(
        "request rules on {what} ({rule}) hold for every connection to it: the proxy reads each request, so only HTTP \
         (or TLS, which it then terminates) gets through, and \
         any other protocol to it is cut; this makes sense for an HTTP service known by address, else grant a name"
    ))
}
