//! `read` and `write` entries in table form: `{ path = "/p", deny = [...], read_only = [...],
//! unprotect = [{ path = ".git/hooks", reason = "..." }] }` (see [`crate::policy::carve`] for
//! the model and why its rules are what they are; docs/carve-outs.md for the user's view).
//!
//! Every wrong input is an error at its own `file:line:col`: an absolute path, `..`, an
//! unsupported glob, an empty list, a path both denied and read-only, a lift without a reason or
//! of an entry that is not in the protected set, `unprotect` on a read grant. `read_only` on a
//! read grant is a warning (everything in it is read-only already).

use std::path::PathBuf;

use toml::de::DeValue;

use super::{Parser, Value};
use crate::policy::carve::{CarvePath, GrantCarve, Lift, MAX_CARVE_ENTRIES, Protected};
use crate::policy::keys::{GRANT_KEYS, LIFT_KEYS};
use crate::policy::model::reason_is_placeholder;

impl Parser<'_> {
    /// `read` or `write`: absolute paths, each as a string or as a table with carve-outs.
    pub(super) fn grant_list(&mut self, v: &Value<'_>, what: &str) -> (Option<Vec<PathBuf>>, Vec<GrantCarve>) {
        let Some(items) = self.array(v, what, "an array of absolute paths or { path = ..., deny = [...] } tables")
        else {
            return (None, Vec::new());
        };
        if !items.iter().any(|i| matches!(i.get_ref(), DeValue::Table(_))) {
            return (self.path_list(v, what), Vec::new());
        }
        let write = what == "write";
        let mut paths = Vec::new();
        let mut carve = Vec::new();
        let mut ok = true;
        for item in items {
            let entry = match item.get_ref() {
                DeValue::Table(_) => self.grant_table(item, what, write).map(|c| {
                    let root = c.root.clone();
                    carve.push(c);
                    root
                }),
                _ => self.abs_path(item, what).inspect(|p| {
                    if write {
                        self.kernel_grant(item.span(), what, p);
                    }
                }),
            };
            match entry {
                Some(p) => paths.push(p),
                None => ok = false,
            }
        }
        (ok.then_some(paths), carve)
    }

    fn grant_table(&mut self, item: &Value<'_>, what: &str, write: bool) -> Option<GrantCarve> {
        let t = self.table(item, what)?;
        self.unknown_keys(t, GRANT_KEYS, &format!("in a {what} entry"));
        let Some(path) = t.get("path") else {
            self.sink.error(
                item.span(),
                format!("a {what} entry in table form needs `path`, the grant's absolute path: {{ path = \"/srv/proj\", deny = [\".env\"] }}"),
            );
            return None;
        };
        let root = self.abs_path(path, what)?;
        if write {
            self.kernel_grant(path.span(), what, &root);
        }
        let deny = t.get("deny").and_then(|v| self.carve_paths(v, "deny"));
        let read_only = t.get("read_only").and_then(|v| self.carve_paths(v, "read_only"));
        if !write
            && let (Some(v), Some(ro)) = (t.get("read_only"), &read_only)
            && !ro.is_empty()
        {
            self.sink.warning(
                v.span(),
                format!(
                    "read_only inside a read grant changes nothing (everything in {:?} is read-only to the tool \
                     already); remove it, or use deny to hide a path",
                    root.display().to_string()
                ),
            );
        }
        let unprotect = match t.get("unprotect") {
            None => Some(Vec::new()),
            Some(v) if !write => {
                self.sink.error(
                    v.span(),
                    "unprotect lifts entries of the protected set of a git work tree, which only write grants have; \
                     remove it from this read grant",
                );
                None
            }
            Some(v) => self.lifts(v),
        };
        let (mut deny, mut read_only, unprotect) =
            (deny.unwrap_or_default(), read_only.unwrap_or_default(), unprotect?);
        if t.get("deny").is_some_and(|_| deny.is_empty()) || t.get("read_only").is_some_and(|_| read_only.is_empty()) {
            // An error was reported for the list already (or it was empty, also reported).
            return None;
        }
        if deny.is_empty() && read_only.is_empty() && unprotect.is_empty() {
            self.sink.error(
                item.span(),
                format!(
                    "this {what} entry carves nothing out; write the path as a plain string, or add deny, read_only \
                     or unprotect"
                ),
            );
            return None;
        }
        if deny.len() + read_only.len() > MAX_CARVE_ENTRIES {
            self.sink.error(
                item.span(),
                format!("a grant may carve out at most {MAX_CARVE_ENTRIES} paths; carve out a common parent"),
            );
            return None;
        }
        let mut ok = true;
        if let Some(v) = t.get("read_only") {
            for p in &read_only {
                if deny.iter().any(|d| d.text == p.text) {
                    self.sink.error(
                        v.span(),
                        format!("{:?} is both denied and read-only; keep it in one list (deny hides it)", p.text),
                    );
                    ok = false;
                }
            }
        }
        deny.sort_by(|a, b| a.text.cmp(&b.text));
        read_only.sort_by(|a, b| a.text.cmp(&b.text));
        ok.then_some(GrantCarve { root, write, deny, read_only, unprotect })
    }

    /// `deny` or `read_only`: a non-empty array of carve-out paths, each once.
    fn carve_paths(&mut self, v: &Value<'_>, what: &str) -> Option<Vec<CarvePath>> {
        let items = self.array(v, what, "an array of paths relative to the grant")?;
        if items.is_empty() {
            self.sink.error(
                v.span(),
                format!("{what} = [] carves nothing out; remove it, or list paths relative to the grant"),
            );
            return None;
        }
        let mut out: Vec<CarvePath> = Vec::new();
        let mut ok = true;
        for item in items {
            let Some(text) = self.string(item, what) else {
                ok = false;
                continue;
            };
            match CarvePath::parse(&text) {
                Ok(p) if out.iter().any(|q| q.text == p.text) => {
                    self.sink.error(item.span(), format!("{what} lists {text:?} twice; keep one"));
                    ok = false;
                }
                Ok(p) => out.push(p),
                Err(e) => {
                    self.sink.error(item.span(), format!("{what} entry {text:?} {e}"));
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// `unprotect`: `{ path = ENTRY, reason = "why" }` tables, each entry once.
    fn lifts(&mut self, v: &Value<'_>) -> Option<Vec<Lift>> {
        let names = Protected::ALL.map(Protected::as_str).join(", ");
        let items = self.array(v, "unprotect", "an array of { path = ENTRY, reason = \"why\" } tables")?;
        if items.is_empty() {
            self.sink.error(v.span(), "unprotect = [] lifts nothing; remove it");
            return None;
        }
        let mut out: Vec<Lift> = Vec::new();
        let mut ok = true;
        for item in items {
            if let DeValue::String(s) = item.get_ref() {
                self.sink.error(
                    item.span(),
                    format!(
                        "unprotect {s:?} has no reason; lifting a protected entry needs one: \
                         {{ path = {s:?}, reason = \"why the tool must change it\" }}"
                    ),
                );
                ok = false;
                continue;
            }
            let Some(t) = self.table(item, "unprotect") else {
                ok = false;
                continue;
            };
            self.unknown_keys(t, LIFT_KEYS, "in an unprotect entry");
            let entry = match t.get("path").map(|p| (p, self.string(p, "unprotect path"))) {
                None => {
                    self.sink.error(item.span(), format!("an unprotect entry needs `path`, one of {names}"));
                    None
                }
                Some((_, None)) => None,
                Some((p, Some(s))) => Protected::parse(&s).or_else(|| {
                    self.sink.error(
                        p.span(),
                        format!(
                            "{s:?} is not in the protected set of a git work tree; unprotect one of {names} (to carve \
                             out other paths use deny or read_only)"
                        ),
                    );
                    None
                }),
            };
            let reason = match t.get("reason") {
                None => {
                    self.sink.error(
                        item.span(),
                        "lifting a protected entry needs a reason: add reason = \"why the tool must change it\"",
                    );
                    None
                }
                Some(r) => self.string(r, "reason").and_then(|s| {
                    if s.trim().is_empty() || reason_is_placeholder(&s) {
                        self.sink.error(
                            r.span(),
                            "the reason is empty or a placeholder; say why the tool must change this entry",
                        );
                        None
                    } else {
                        Some(s)
                    }
                }),
            };
            match (entry, reason) {
                (Some(e), Some(_)) if out.iter().any(|l| l.entry == e) => {
                    self.sink.error(item.span(), format!("unprotect lifts {e} twice; keep one"));
                    ok = false;
                }
                (Some(entry), Some(reason)) => out.push(Lift { entry, reason }),
                _ => ok = false,
            }
        }
        ok.then_some(out)
    }
}
