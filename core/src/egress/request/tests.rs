use proptest::prelude::*;

use super::*;

fn rules(methods: &[&str], paths: &[&str]) -> RequestRules {
    RequestRules {
        methods: methods.iter().map(|m| (*m).to_string()).collect(),
        paths: paths.iter().map(|p| (*p).to_string()).collect(),
    }
}

fn why(r: &RequestRules, method: &str, target: &str) -> RequestWhy {
    match r.check(method, target) {
        Ok(()) => panic!("{method} {target} was allowed"),
        Err(e) => e.why,
    }
}

#[test]
fn methods_are_compared_exactly_and_paths_beneath_their_prefix() {
    let r = rules(READ_ONLY_METHODS, &["/repos/ORG/", "/user"]);
    for (m, t) in [
        ("GET", "/repos/ORG/x"),
        ("GET", "/repos/ORG/"),
        ("HEAD", "/repos/ORG/x/y/z.json?ref=main&q=../../x"),
        ("OPTIONS", "/user"),
        ("GET", "/user/repos"),
        ("GET", "/user?x=/../../admin"),
    ] {
        assert_eq!(r.check(m, t), Ok(()), "{m} {t}");
    }
    assert_eq!(why(&r, "POST", "/repos/ORG/x"), RequestWhy::Method { allowed: r.methods.clone() });
    assert!(matches!(why(&r, "get", "/repos/ORG/x"), RequestWhy::Method { .. }), "lower case is another method");
    assert!(matches!(why(&r, "Get", "/repos/ORG/x"), RequestWhy::Method { .. }));
    for t in ["/repos/ORGX/x", "/repos/ORG", "/repos/org/x", "/userx", "/users", "/", "/repos/", "/repos/%4FRG/x"] {
        assert!(matches!(why(&r, "GET", t), RequestWhy::Path { .. }), "{t}");
    }
    let e = r.check("GET", "/repos/OTHER/x?token=secret").unwrap_err();
    assert_eq!(e.path, "/repos/OTHER/x", "the refusal keeps no query");
}

#[test]
fn a_prefix_without_a_slash_ends_at_a_segment_boundary() {
    let r = rules(&[], &["/repos/ORG"]);
    assert_eq!(r.check("GET", "/repos/ORG"), Ok(()));
    assert_eq!(r.check("DELETE", "/repos/ORG/x"), Ok(()), "no methods: any method");
    assert_eq!(r.check("GET", "/repos/ORG?x"), Ok(()));
    for t in ["/repos/ORGX", "/repos/ORG.git", "/repos/ORG-x/y", "/repos/ORG;x/y", "/repos/OR"] {
        assert!(matches!(why(&r, "GET", t), RequestWhy::Path { .. } | RequestWhy::Ambiguous(_)), "{t}");
        assert!(r.check("GET", t).is_err(), "{t}");
    }
}

#[test]
fn the_attack_paths_are_refused_as_ambiguous() {
    let r = rules(&["GET"], &["/repos/ORG/"]);
    for t in [
        "/repos/ORG/../other",
        "/repos/ORG/..",
        "/repos/ORG/./x",
        "/repos/ORG/%2e%2e/other",
        "/repos/ORG/%2E%2E/other",
        "/repos/ORG/.%2e/other",
        "/repos/ORG/%2e/x",
        "/repos/ORG%2fx",
        "/repos/ORG/x%2F..%2F..%2Fother",
        "/repos/ORG/%5c..%5cother",
        "/repos/ORG/..\\other",
        "/repos/ORG\\..\\other",
        "//repos/ORG/",
        "/repos//ORG/",
        "/repos/ORG//x",
        "/repos/ORG/..;/other",
        "/repos/ORG/..;x=1/other",
        "/repos/ORG/..%3b/other",
        "/repos/ORG/;x/../other",
        "/repos/ORG/.../other",
        "/repos/ORG/..%20/other",
        "/repos/ORG/%252e%252e/other",
        "/repos/ORG/x%00",
        "/repos/ORG/x\0",
        "/repos/ORG/x y",
        "/repos/ORG/x\ty",
        "/repos/ORG/x#frag",
        "/repos/ORG/%zz",
        "/repos/ORG/%2",
        "/repos/ORG/é",
        "/repos/ORG/%c0%ae%c0%ae/other",
        "/repos/ORG/%c0%af",
        "/repos/ORG/%e0%80%ae",
        "/repos/ORG/%ff",
        "/repos/ORG/%EF%BC%8E%EF%BC%8E/other",
        "/repos/ORG/%E2%80%A5/other",
        "/repos/ORG/x%EF%BC%8Fy",
    ] {
        assert!(matches!(why(&r, "GET", t), RequestWhy::Ambiguous(_)), "{t:?}: {:?}", r.check("GET", t));
    }
}

#[test]
fn only_origin_form_targets_are_matched() {
    let r = rules(&["GET", "OPTIONS"], &["/repos/ORG/"]);
    for t in [
        "http://api.github.com/repos/ORG/x",
        "https://api.github.com/repos/ORG/x",
        "api.github.com:443",
        "*",
        "",
        "repos/ORG/x",
        "?x",
    ] {
        assert!(matches!(why(&r, "GET", t), RequestWhy::Ambiguous(_)), "{t:?}");
    }
    assert!(matches!(why(&r, "OPTIONS", "*"), RequestWhy::Ambiguous(_)), "OPTIONS * names no path");
    let any_path = rules(&["GET", "OPTIONS"], &[]);
    assert_eq!(any_path.check("OPTIONS", "*"), Ok(()));
    assert_eq!(any_path.check("GET", "/a/../b"), Ok(()), "no paths: any path");
    assert!(any_path.check("GET", "http://other.example/").is_err(), "absolute-form even without paths");
    assert!(any_path.check("GET", "*").is_err());
}

#[test]
fn a_method_that_is_no_token_is_refused_whatever_the_rules() {
    let r = rules(&[], &[]);
    for m in ["", "G ET", "GET\r\n", "G\0", "GÉT", &"A".repeat(33)] {
        assert!(matches!(why(&r, m, "/"), RequestWhy::Ambiguous(_)), "{m:?}");
    }
    assert_eq!(r.check("PROPFIND", "/x"), Ok(()));
    let paths = rules(&[], &["/files/"]);
    assert_eq!(paths.check("GET", "/files/caf%C3%A9.txt"), Ok(()), "UTF-8 escapes of other characters are fine");
}

#[test]
fn refusals_say_what_would_allow_the_request() {
    let r = rules(READ_ONLY_METHODS, &["/repos/ORG/"]);
    let e = r.check("POST", "/repos/ORG/x").unwrap_err();
    let text = e.explain("api.github.com", 443);
    assert!(text.starts_with("POST /repos/ORG/x to api.github.com:443 was refused"), "{text}");
    assert!(text.contains("GET, HEAD, OPTIONS") && text.contains("adding \"POST\" to that entry's methods"), "{text}");
    assert_eq!(e.key(), Some("methods"));
    let e = r.check("GET", "/orgs/ORG").unwrap_err();
    let text = e.explain("api.github.com", 443);
    assert!(text.contains("\"/repos/ORG/\"") && text.contains("adding \"/orgs/ORG\""), "{text}");
    assert_eq!(e.key(), Some("paths"));
    let e = r.check("GET", "/repos/ORG/../x").unwrap_err();
    assert!(e.explain("h", 80).contains("before anything went upstream"));
    assert_eq!(e.key(), None);
    let long = format!("/{}", "a".repeat(1000));
    assert!(r.check("GET", &long).unwrap_err().path.len() < 300, "clipped");
    assert_eq!(r.check("GET", "/x\u{1b}[2J").unwrap_err().path, "/x\\u{1b}[2J", "controls escaped");
}

#[test]
fn policy_entries_are_checked_with_what_to_write() {
    for m in ["GET", "POST", "PROPFIND", "M-SEARCH"] {
        assert_eq!(check_method(m), Ok(()), "{m}");
    }
    assert!(check_method("get").unwrap_err().contains("write \"GET\""));
    assert!(check_method("Post").unwrap_err().contains("write \"POST\""));
    assert!(check_method("GE T").unwrap_err().contains("not an HTTP method"));
    assert!(check_method("").unwrap_err().contains("empty"));
    assert!(check_method("CONNECT").unwrap_err().contains("tunnel"));
    for p in ["/", "/repos/ORG/", "/repos/ORG", "/a-b_c~d/e.json", "/v1/x:y@z", "/a.b/c..d/"] {
        assert_eq!(check_prefix(p), Ok(()), "{p}");
    }
    for (p, says) in [
        ("repos/ORG/", "does not start with `/`"),
        ("/repos?x=1", "without the query string"),
        ("/repos/%2e%2e/", "percent-encoding"),
        ("/repos/ORG/../x", "dot segment"),
        ("/repos/./x", "dot segment"),
        ("/repos/..", "dot segment"),
        ("/repos//x", "empty segment"),
        ("/repos\\x", "'\\\\'"),
        ("/repos/x#y", "'#'"),
        ("/repos;v=1/", "';'"),
        ("/repos x", "' '"),
    ] {
        let e = check_prefix(p).unwrap_err();
        assert!(e.contains(says), "{p}: {e}");
    }
    assert!(check_prefix(&format!("/{}", "a".repeat(MAX_PREFIX_LEN))).unwrap_err().contains("longer"));
}

/// The path a server reads from a request path, by the most lenient rules servers are known for:
/// percent-decoding (once, or `twice`), backslashes as slashes, `;` parameters cut off each
/// segment, empty segments merged, trailing dots and spaces dropped, dot segments removed.
fn server_path(path: &str, twice: bool) -> Option<String> {
    let mut bytes = percent_decode(path);
    if twice {
        bytes = percent_decode(std::str::from_utf8(&bytes).ok()?);
    }
    let text = String::from_utf8(bytes)
        .ok()?
        .replace(['\u{FF0E}', '\u{2024}', '\u{FE52}'], ".")
        .replace('\u{2025}', "..")
        .replace('\u{2026}', "...")
        .replace(['\\', '\u{FF0F}', '\u{FF3C}', '\u{FE68}'], "/");
    let mut out: Vec<String> = Vec::new();
    for segment in text.split('/') {
        let segment = segment.split(';').next().unwrap_or_default();
        let trimmed = segment.trim_end_matches(['.', ' ']);
        match segment {
            "" => {}
            _ if trimmed.is_empty() && segment.len() >= 2 => {
                out.pop();
            }
            _ if trimmed.is_empty() => {}
            s => out.push(s.to_string()),
        }
    }
    let trailing = text.ends_with('/') && !out.is_empty();
    Some(format!("/{}{}", out.join("/"), if trailing { "/" } else { "" }))
}

/// Pieces request paths are made of, attacks included.
const PIECES: &[&str] = &[
    "/",
    "/",
    "/",
    "repos",
    "ORG",
    "ORGX",
    "other",
    "x",
    ".",
    "..",
    "...",
    "%2e",
    "%2E",
    "%2f",
    "%2F",
    "%5c",
    "%5C",
    "\\",
    ";",
    ";x",
    "%3b",
    "%25",
    "%252e",
    "%41",
    "%00",
    " ",
    "%20",
    "?",
    "?a=/../",
    "#",
    "a.b",
    "%",
    "%c0%ae",
    "%EF%BC%8E",
    "%E2%80%A5",
    "%C3%A9",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, rng_seed: proptest::test_runner::RngSeed::Fixed(30), failure_persistence: None, ..ProptestConfig::default() })]

    /// A path `check` allows, read by a lenient server, stays beneath an allowed prefix.
    #[test]
    fn an_allowed_path_stays_beneath_its_prefix_on_the_server(
        picks in proptest::collection::vec(0..PIECES.len(), 1..12),
        lead in 0usize..3,
    ) {
        let prefixes = ["/repos/ORG/", "/repos/ORG"];
        let lead = ["/repos/ORG/", "/repos/ORG", "/"][lead];
        let target: String = std::iter::once(lead).chain(picks.iter().map(|i| PIECES[*i])).collect();
        let r = rules(&["GET"], &prefixes);
        if r.check("GET", &target).is_ok() {
            let path = target.split('?').next().unwrap_or_default();
            for twice in [false, true] {
                let seen = server_path(path, twice).expect("an allowed path decodes to UTF-8");
                prop_assert!(
                    prefixes.iter().any(|p| beneath(&seen, p)),
                    "{target:?} allowed, but a server reads {seen:?}"
                );
            }
        }
    }

    /// Whatever the bytes, `check` answers without panicking, and never allows what is not
    /// in origin-form.
    #[test]
    fn check_is_total(method in "[A-Za-z\\-\\x00 ]{0,8}", target in "\\PC{0,40}") {
        let r = rules(&["GET"], &["/a/"]);
        if r.check(&method, &target).is_ok() {
            prop_assert!(target.starts_with("/a/"));
            prop_assert_eq!(method.as_str(), "GET");
        }
    }
}
