//! What may be asked of a host: [`RequestRules`] (methods, path prefixes) checked against each
//! request the proxy sees (plain HTTP, and terminated TLS), and the checks of a policy's
//! `methods` and `paths` entries.
//!
//! Matching fails closed. A request target must be in origin-form (`/path?query`); with path
//! rules its path (the query is not matched) must be unambiguous: printable ASCII, no empty
//! segments (`//`), no dot segments (`.`, `..`, nor any segment of only dots, also behind a
//! `;` path parameter), no backslash, no fragment, and no percent-encoding that a server might
//! decode into a separator or a dot (`%2e`, `%2f`, `%5c`, `%25`, `%00`, controls, bytes that are
//! not UTF-8 such as an overlong `%c0%ae`, characters NFKC makes a dot or slash). A prefix
//! ending in `/` allows every path beneath it; one without allows itself and what is beneath it
//! at a segment boundary (`/repos/ORG` allows `/repos/ORG` and `/repos/ORG/x`, never
//! `/repos/ORGX`). Prefixes are compared byte for byte: `/repos/%4FRG/` is refused under
//! `/repos/ORG/` although a server reads it as the same path (refused, never the other way).

use std::fmt;

use super::RequestRules;

/// The methods `read_only = true` allows.
pub const READ_ONLY_METHODS: &[&str] = &["GET", "HEAD", "OPTIONS"];
/// At most this many `methods` per `hosts` entry.
pub const MAX_METHODS: usize = 32;
/// At most this many `paths` per `hosts` entry.
pub const MAX_PATHS: usize = 64;
/// Longest `paths` entry, in bytes.
pub const MAX_PREFIX_LEN: usize = 1024;
/// Longest method, in bytes.
const MAX_METHOD_LEN: usize = 32;
/// How much of a refused request's method or path its refusal keeps (for records and messages).
const CLIP: usize = 256;

/// Why a request was refused by its host's rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestRefusal {
    /// The request's method as sent (at most 256 bytes of it).
    pub method: String,
    /// The request's target without its query (at most 256 bytes of it, controls escaped).
    pub path: String,
    pub why: RequestWhy,
}

/// What about the request its host's rules refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestWhy {
    /// The method is not among `methods` (these, upper case).
    Method { allowed: Vec<String> },
    /// The path is beneath none of `paths` (these).
    Path { allowed: Vec<String> },
    /// The target cannot be matched without guessing how the server reads it (why).
    Ambiguous(String),
}

impl RequestRules {
    /// Whether a request with this method and target (the request line's second word, as
    /// sent) may be made: `Ok`, or what refused it. Methods are compared exactly (upper case);
    /// the target must be in origin-form (`OPTIONS *` only without path rules), and with path
    /// rules its path (the query is not matched) must be unambiguous and beneath a prefix.
    pub fn check(&self, method: &str, target: &str) -> Result<(), RequestRefusal> {
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        let refuse = |why: RequestWhy| Err(RequestRefusal { method: clip(method), path: clip(path), why });
        if let Err(why) = method_token(method) {
            return refuse(RequestWhy::Ambiguous(why));
        }
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == method) {
            return refuse(RequestWhy::Method { allowed: self.methods.clone() });
        }
        if target == "*" && method == "OPTIONS" && self.paths.is_empty() {
            return Ok(());
        }
        if !target.starts_with('/') {
            let why = if target == "*" {
                "the asterisk-form target `*` (OPTIONS *) names no path, and this host allows only some paths".into()
            } else if target.contains("://") {
                "the target is in absolute-form (scheme://host/...); a request to a host with rules names its path \
                 in origin-form (/path)"
                    .into()
            } else {
                "the target does not start with `/` (origin-form)".into()
            };
            return refuse(RequestWhy::Ambiguous(why));
        }
        if self.paths.is_empty() {
            return Ok(());
        }
        if let Err(why) = unambiguous(path) {
            return refuse(RequestWhy::Ambiguous(why));
        }
        if self.paths.iter().any(|p| beneath(path, p)) {
            Ok(())
        } else {
            refuse(RequestWhy::Path { allowed: self.paths.clone() })
        }
    }

    /// The rules in a line: `methods GET, HEAD; paths /repos/ORG/`, or `any request`.
    pub fn summary(&self) -> String {
        let methods = (!self.methods.is_empty()).then(|| format!("methods {}", self.methods.join(", ")));
        let paths = (!self.paths.is_empty()).then(|| format!("paths {}", self.paths.join(", ")));
        match (methods, paths) {
            (Some(m), Some(p)) => format!("{m}; {p}"),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => "any request".into(),
        }
    }
}

/// `path` (no query) is `prefix` or beneath it, at a segment boundary unless the prefix ends in `/`.
fn beneath(path: &str, prefix: &str) -> bool {
    if prefix.ends_with('/') {
        return path.starts_with(prefix);
    }
    path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/'))
}

/// An HTTP method as RFC 9110 spells one: a token (letters, digits, ``!#$%&'*+-.^_`|~``).
fn method_token(method: &str) -> Result<(), String> {
    if method.is_empty() {
        return Err("the method is empty".into());
    }
    if method.len() > MAX_METHOD_LEN {
        return Err(format!("the method is longer than {MAX_METHOD_LEN} bytes"));
    }
    if let Some(c) = method.chars().find(|c| !is_tchar(*c)) {
        return Err(format!("the method has {c:?}, which is not an HTTP token character"));
    }
    Ok(())
}

fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// Characters NFKC normalisation turns into `.`, `..`, `/` or `\\` (a server that normalises a
/// decoded path would read them so).
const NORMALISED_SEPARATORS: &[char] =
    &['\u{2024}', '\u{2025}', '\u{2026}', '\u{FE52}', '\u{FF0E}', '\u{FF0F}', '\u{FF3C}', '\u{FE68}'];

/// Why the server might read `path` (origin-form, no query) otherwise than byte for byte.
fn unambiguous(path: &str) -> Result<(), String> {
    let bytes = path.as_bytes();
    if let Some(b) = bytes.iter().find(|b| !(0x21..=0x7e).contains(*b)) {
        return Err(match b {
            0 => "the path has a NUL byte".into(),
            b' ' => "the path has a space".into(),
            b if *b >= 0x80 => "the path has a byte that is not ASCII (send it percent-encoded)".into(),
            b => format!("the path has the control byte 0x{b:02x}"),
        });
    }
    if path.contains('\\') {
        return Err("the path has a backslash, which some servers read as `/`".into());
    }
    if path.contains('#') {
        return Err("the path has a fragment (`#`), which is never sent to a server".into());
    }
    if path.contains("//") {
        return Err("the path has an empty segment (`//`), which servers merge or read differently".into());
    }
    let mut i = 0;
    while let Some(at) = path[i..].find('%').map(|a| a + i) {
        let decoded = bytes.get(at + 1..at + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        let Some(d) = decoded.filter(|_| bytes[at + 1].is_ascii_hexdigit() && bytes[at + 2].is_ascii_hexdigit()) else {
            return Err("the path has a `%` not followed by two hex digits".into());
        };
        let what = match d {
            b'.' => Some("dot (%2e)"),
            b'/' => Some("slash (%2f)"),
            b'\\' => Some("backslash (%5c)"),
            b'%' => Some("percent sign (%25), which a server that decodes twice reads as another escape"),
            0 => Some("NUL byte (%00)"),
            d if d < 0x20 || d == 0x7f => Some("control byte"),
            _ => None,
        };
        if let Some(what) = what {
            return Err(format!("the path has a percent-encoded {what}"));
        }
        i = at + 3;
    }
    // Escaped bytes a server decodes must be UTF-8 (an overlong `%c0%ae` is `.` to some), and
    // not a character that Unicode normalisation (NFKC) makes a dot, slash or backslash.
    let Ok(decoded) = String::from_utf8(percent_decode(path)) else {
        return Err(
            "the path has percent-encoded bytes that are not UTF-8 (an overlong form of `.` or `/`, say)".into()
        );
    };
    if let Some(c) = decoded.chars().find(|c| NORMALISED_SEPARATORS.contains(c)) {
        return Err(format!(
            "the path has {c:?} (U+{:04X}), which Unicode normalisation makes a dot, slash or backslash",
            u32::from(c)
        ));
    }
    for segment in path.split('/').skip(1) {
        // A server may cut a `;` parameter off a segment (`..;x` is `..` to some) or drop
        // trailing dots and spaces (`...` is `..` to some).
        let decoded = percent_decode(segment);
        let head = decoded.split(|b| *b == b';').next().unwrap_or_default();
        let dots = !head.is_empty() && head.iter().all(|b| *b == b'.' || *b == b' ');
        if dots || (head.is_empty() && decoded.contains(&b';')) {
            return Err(format!(
                "the path has the segment {segment:?}, which a server reads as a dot segment (a step to the same or \
                 the parent directory) or an empty one"
            ));
        }
    }
    Ok(())
}

/// Every `%XX` of `s` decoded (the caller checked each is well formed).
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex =
            b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(d)) => {
                out.push(d);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// At most [`CLIP`] bytes of the tool's text, controls and non-ASCII escaped.
fn clip(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if out.len() >= CLIP {
            out.push('…');
            break;
        }
        if c.is_ascii_graphic() {
            out.push(c);
        } else {
            out.extend(c.escape_default());
        }
    }
    out
}

impl RequestRefusal {
    /// The refusal's words for the tool and the admin: what was asked, why it was refused, and
    /// what in the `hosts` entry of `host:port` would allow it (never that it should).
    pub fn explain(&self, host: &str, port: u16) -> String {
        let (method, path) = (&self.method, &self.path);
        let asked = format!("{method} {path} to {host}:{port}");
        match &self.why {
            RequestWhy::Method { allowed } => format!(
                "{asked} was refused: the method {method} is not among the methods its network.hosts entry allows \
                 ({}); only if the tool should send {method} there at all, adding \"{method}\" to that entry's \
                 methods (without read_only = true) would allow it",
                allowed.join(", ")
            ),
            RequestWhy::Path { allowed } => format!(
                "{asked} was refused: the path is beneath none of the paths its network.hosts entry allows ({}); \
                 only if the tool should ask for it at all, adding {path:?} (or a prefix of it ending at a `/`) to \
                 that entry's paths would allow it",
                allowed.iter().map(|p| format!("{p:?}")).collect::<Vec<_>>().join(", ")
            ),
            RequestWhy::Ambiguous(why) => format!(
                "{asked} was refused before anything went upstream: {why}. A host with request rules is asked only \
                 with a plain method and an origin-form path without dot segments, empty segments, backslashes or \
                 percent-encoded dots, slashes, backslashes or percent signs: send the path in its plain form"
            ),
        }
    }

    /// The policy key that decides: `methods` or `paths` (an ambiguous target: none).
    pub fn key(&self) -> Option<&'static str> {
        match self.why {
            RequestWhy::Method { .. } => Some("methods"),
            RequestWhy::Path { .. } => Some("paths"),
            RequestWhy::Ambiguous(_) => None,
        }
    }
}

impl fmt::Display for RequestRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why {
            RequestWhy::Method { .. } => write!(f, "method {} not allowed", self.method),
            RequestWhy::Path { .. } => write!(f, "path {} not allowed", self.path),
            RequestWhy::Ambiguous(why) => f.write_str(why),
        }
    }
}

/// Checks one `methods` entry of a policy: an HTTP token in upper case, not `CONNECT`. The error
/// says what to write instead.
pub fn check_method(method: &str) -> Result<(), String> {
    method_token(method).map_err(|e| format!("{method:?} is not an HTTP method: {e}"))?;
    if method.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err(format!(
            "method {method:?} is not upper case; methods are matched exactly, and clients send them upper case: \
             write \"{}\"",
            method.to_ascii_uppercase()
        ));
    }
    if method == "CONNECT" {
        return Err(
            "\"CONNECT\" opens a tunnel, which request rules cannot see into; list the methods of the requests \
             themselves (GET, POST, ...)"
                .into(),
        );
    }
    Ok(())
}

/// Checks one `paths` entry of a policy: starts with `/`, at most [`MAX_PREFIX_LEN`] bytes, only
/// characters a path may carry unencoded (letters, digits, `-._~!$&'()*+,=:@/`), no `%`, `?`,
/// `#`, `;`, empty or dot segments. The error says what to write instead.
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err(format!(
            "path {prefix:?} does not start with `/`; write the path as the request sends it, e.g. \"/{}\"",
            prefix.trim_start_matches('/')
        ));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(format!("path {prefix:?} is longer than {MAX_PREFIX_LEN} bytes"));
    }
    if prefix.contains('?') {
        return Err(format!(
            "path {prefix:?} has a `?`: paths are matched without the query string; write the path only (\"{}\")",
            prefix.split('?').next().unwrap_or_default()
        ));
    }
    if prefix.contains('%') {
        return Err(format!(
            "path {prefix:?} has percent-encoding; a prefix is matched byte for byte against paths that may not carry \
             an encoded dot, slash or backslash: write it with plain characters"
        ));
    }
    if let Some(c) = prefix.chars().find(|c| !(c.is_ascii_alphanumeric() || "-._~!$&'()*+,=:@/".contains(*c))) {
        return Err(format!(
            "path {prefix:?} has {c:?}, which a request path carries only percent-encoded (or, for `;`, as a \
             parameter servers cut off); write a prefix of plain characters"
        ));
    }
    if prefix.contains("//") {
        return Err(format!("path {prefix:?} has an empty segment (`//`); write it with single slashes"));
    }
    if prefix.split('/').any(|s| !s.is_empty() && s.bytes().all(|b| b == b'.')) {
        return Err(format!(
            "path {prefix:?} has a dot segment (`.` or `..`); write the path it stands for, without them"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
