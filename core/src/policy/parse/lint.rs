//! Foot-gun lints of one built tool: warnings (the file still loads) that name the problem and
//! the fix. `cordon policy check --deny-warnings` turns them into a failing exit status for CI.
//!
//! - an interpreter's code flag followed by a placeholder (`sh -c {{x}}`, `python3 -c`,
//!   `node -e`, `perl -e`, ...): the value is code;
//! - a placeholder that starts an argv element, is not behind `--` (a literal one or
//!   `arg_separator`) and whose param admits a leading `-` (a string pattern that matches one of
//!   [`DASH_PROBES`], or a number with a negative `min`): the value can be an option;
//! - a placeholder that chooses the program a wrapper (`env`, `xargs`, `timeout`, `sudo`, ...) runs;
//! - `write` and `exec` of one tree: the tool can write a program and run it;
//! - `unix_sockets` on a tool run as root, or naming a container engine's socket;
//! - `connect_tcp` beside `hosts` on a port the tool does not bind: inside its own network
//!   namespace nothing listens there (hosts are reached through `hosts` only);
//! - request rules on an HTTPS port of a `hosts` entry: the proxy terminates the tool's TLS to it
//!   with cordon's CA, which the tool must trust (a client that pins certificates fails);
//! - a `danger = "high"` tool without `confirm` that `allow` opens to every user (a group every
//!   account is in);
//! - `cache` on a tool whose inputs the cache cannot see: it reads files no path-typed argument
//!   names (a `read` or `write` grant of a tree, a `working_dir`, a literal path in its argv),
//!   and the cache keys only on the state of its path arguments, working directory and
//!   executable (`daemon/src/cache.rs`), so a change there would be answered from the cache.
//!
//! Writes to `/` and system directories are checked where paths are read (`grants`); a path
//! beneath another tool's write root is checked across all files once the load has every tool
//! (`probe::exposure_warnings`).

use std::ops::Range;
use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::Parser;
use crate::policy::model::{AcceptedWarning, Confirm, Danger, ParamKind, Principal, RunAs, Segment, Tool};

/// Strings a pattern is tried on to decide whether it admits a leading `-`. Conservative, not a
/// proof: a pattern that admits only other dash-led strings (say `-Z9` alone) is not caught.
const DASH_PROBES: &[&str] =
    &["-", "--", "-x", "-rf", "-e", "-c", "-n", "-1", "-o", "-x1", "--x", "--help", "--output=x", "-a", "-R"];

/// Programs that run code given on their command line, and the flags that take it.
const INTERPRETERS: &[(&[&str], &[&str])] = &[
    (&["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox"], &["-c"]),
    (&["python", "python2", "python3", "pypy", "pypy3"], &["-c"]),
    (&["node", "nodejs", "bun"], &["-e", "--eval", "-p", "--print"]),
    (&["deno"], &["eval"]),
    (&["perl"], &["-e", "-E"]),
    (&["ruby", "irb"], &["-e"]),
    (&["php"], &["-r"]),
    (&["lua", "luajit"], &["-e"]),
    (&["Rscript"], &["-e"]),
    (&["osascript"], &["-e"]),
    // GNU sed's `e` command runs a shell command.
    (&["sed", "gsed"], &["-e", "--expression"]),
    (&["awk", "gawk", "mawk", "nawk"], &[]),
];

/// Programs that run another program named in their arguments.
const WRAPPERS: &[&str] = &[
    "env",
    "xargs",
    "nice",
    "ionice",
    "timeout",
    "sudo",
    "doas",
    "nohup",
    "stdbuf",
    "exec",
    "setsid",
    "chroot",
    "flock",
    "time",
    "strace",
    "ltrace",
    "taskset",
    "unshare",
    "nsenter",
    "runuser",
    "su",
    "chrt",
    "setpriv",
    "systemd-run",
    "firejail",
    "watch",
    "command",
    "builtin",
    "eatmydata",
    "fakeroot",
    "proot",
];

/// Sockets whose owner is root on the host: whoever talks to them can start a privileged
/// container with the host's root mounted.
const ENGINE_SOCKETS: &[&str] = &["docker.sock", "podman.sock", "containerd.sock", "crio.sock", "cri-dockerd.sock"];

/// Groups every account is in on common systems, so `allow` with them admits every user (and
/// `cordon`, cordond's default socket group: every caller that can connect is in it).
const EVERYONE_GROUPS: &[&str] = &["users", "everyone", "staff", "domain users", "cordon"];

/// The lints' names, for `accept_warnings`.
pub(super) const LINTS: &[&str] = &[
    "interpreter-code",
    "leading-dash",
    "program-choice",
    "write-exec",
    "root-socket",
    "engine-socket",
    "open-high-danger",
    "connect-inside-netns",
    "cache-inputs",
    "tls-termination",
    "replaceable",
    "beneath-write-root",
    "server-exposed-whole",
    "server-shared-writes",
];

/// The warnings the load raises about the paths a tool relies on (`probe::exposure_warnings`):
/// accepting one needs a reason, kept with the tool and shown by `cordon tool NAME`.
pub(crate) const EXPOSURE_LINTS: &[&str] = &["replaceable", "beneath-write-root"];

impl Parser<'_> {
    /// `accept_warnings = ["write-exec", { lint = "replaceable", reason = "..." }, ...]`: lints an
    /// admin reviewed and accepts for this tool (the exposure lints only with a reason).
    pub(super) fn accepted_lints(&mut self, table: &DeTable<'_>) -> Vec<AcceptedWarning> {
        let Some(v) = table.get("accept_warnings") else { return Vec::new() };
        let Some(items) = self.array(v, "accept_warnings", "an array of lint names") else { return Vec::new() };
        let mut out = Vec::new();
        for item in items {
            let (name, reason) = match item.get_ref() {
                DeValue::Table(t) => {
                    let (mut lint, mut reason) = (None, None);
                    for (k, v) in t {
                        match k.get_ref().as_ref() {
                            "lint" => lint = self.string(v, "accept_warnings lint"),
                            "reason" => reason = self.string(v, "accept_warnings reason"),
                            other => self.sink.error(
                                k.span(),
                                format!(
                                    "unknown key {other:?} in an accept_warnings entry; it takes `lint` and `reason`"
                                ),
                            ),
                        }
                    }
                    let Some(lint) = lint else {
                        self.sink.error(
                            item.span(),
                            "an accept_warnings entry needs `lint`, e.g. { lint = \"replaceable\", reason = \"...\" }",
                        );
                        continue;
                    };
                    match reason.map(|r| r.trim().to_string()) {
                        Some(r) if !r.is_empty() => (lint, Some(r)),
                        _ => {
                            self.sink.error(
                                item.span(),
                                format!("accept_warnings entry for {lint:?} needs a non-empty `reason`: why the risk is accepted"),
                            );
                            continue;
                        }
                    }
                }
                _ => match self.string_hint(item, "accept_warnings", "a lint name or { lint, reason }") {
                    Some(name) => (name, None),
                    None => continue,
                },
            };
            if !LINTS.contains(&name.as_str()) {
                self.sink.error(
                    item.span(),
                    format!(
                        "unknown lint {name:?} in accept_warnings{}; the lints are {}",
                        crate::policy::diag::did_you_mean(&name, LINTS.iter().copied()),
                        LINTS.join(", ")
                    ),
                );
            } else if reason.is_none() && EXPOSURE_LINTS.contains(&name.as_str()) {
                self.sink.error(
                    item.span(),
                    format!(
                        "accepting {name:?} needs a reason: accept_warnings = [{{ lint = \"{name}\", reason = \"why \
                         the risk is accepted\" }}]"
                    ),
                );
            } else {
                out.push(AcceptedWarning { lint: name, reason });
            }
        }
        out
    }

    /// Warns about the foot-guns of `tool` (see the module documentation), except the lints
    /// named in `accepted`.
    pub(super) fn lint(
        &mut self,
        tool: &Tool,
        table: &DeTable<'_>,
        name_span: &Range<usize>,
        accepted: &[AcceptedWarning],
    ) {
        let mut found: Vec<(Range<usize>, &str, String)> = Vec::new();
        self.collect_lints(tool, table, name_span, &mut found);
        for (span, lint, message) in found {
            if !accepted.iter().any(|a| a.lint == lint) {
                self.sink.warning(
                    span,
                    format!("{message} [{lint}: if reviewed and intended, accept_warnings = [\"{lint}\"] silences it]"),
                );
            }
        }
    }

    fn collect_lints(
        &mut self,
        tool: &Tool,
        table: &DeTable<'_>,
        name_span: &Range<usize>,
        found: &mut Vec<(Range<usize>, &'static str, String)>,
    ) {
        let spans = command_spans(table);
        let at = |i: usize| spans.get(i).cloned().unwrap_or_else(|| name_span.clone());
        // The template as one list: index 0 is the program.
        let program = base_name(&tool.program);
        let start = skip_wrappers(tool, program);
        for (i, message) in interpreter_code(tool, start) {
            found.push((at(i), "interpreter-code", message));
        }
        for (i, message) in leading_dash(tool) {
            found.push((at(i), "leading-dash", message));
        }
        for (i, message) in program_choosing(tool) {
            found.push((at(i), "program-choice", message));
        }
        let key_span = |k: &str| table.get(k).map_or_else(|| name_span.clone(), |v| v.span());
        for message in write_exec_overlap(tool) {
            found.push((key_span("exec"), "write-exec", message));
        }
        for (lint, message) in socket_warnings(tool) {
            found.push((key_span("unix_sockets"), lint, message));
        }
        if let Some(message) = connect_inside_netns(tool) {
            found.push((key_span("network"), "connect-inside-netns", message));
        }
        if let Some(message) = tls_termination(tool) {
            found.push((key_span("network"), "tls-termination", message));
        }
        if let Some(message) = open_high_danger(tool) {
            found.push((key_span("allow"), "open-high-danger", message));
        }
        if let Some(message) = cache_inputs(tool) {
            found.push((key_span("cache"), "cache-inputs", message));
        }
    }
}

/// Short options that take the rest of their bundle (or the next element) as their own value, so
/// a code letter after them in the bundle is part of that value (`perl -Mre`, `python3 -Wd`).
const VALUE_LETTERS: &[(&str, &str)] =
    &[("python", "WXm"), ("perl", "MmIiCdDx0"), ("ruby", "IrEKTWxC0"), ("node", "r")];

/// Elements (template index, program = 0) that are code for an interpreter and hold a
/// placeholder. `start` is the index of the program after any wrappers.
///
/// A code flag counts bundled with other short flags (`python3 -Ic`, `perl -le`), with its code
/// attached (`python3 -c{{x}}`, `node --eval={{x}}`: that element is the code), and, for a
/// shell, `-c` makes the first operand after the options (and after a `--`) the code
/// (`sh -c -e -- {{x}}`).
fn interpreter_code(tool: &Tool, start: usize) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let Some(program) = element_text(tool, start) else { return out };
    let program = base_name(&program).to_string();
    let Some(kind) = INTERPRETERS.iter().position(|(names, _)| names.iter().any(|n| is_named(&program, n))) else {
        return out;
    };
    let (names, flags) = INTERPRETERS[kind];
    let family = names[0];
    // Shells take the code flag in a group too (`sh -ec '...'`), and the code as an operand.
    let is_shell = kind == 0;
    let short: String =
        flags.iter().filter_map(|f| f.strip_prefix('-').filter(|l| l.len() == 1 && !l.starts_with('-'))).collect();
    let long: Vec<&str> = flags.iter().copied().filter(|f| f.starts_with("--")).collect();
    let value_letters = VALUE_LETTERS.iter().find(|(n, _)| *n == family).map_or("", |(_, l)| *l);
    let mut shell_code_pending = false;
    let mut awk_program_seen = false;
    let mut i = start + 1;
    while let Some(el) = tool.args.get(i - 1) {
        let text = el.to_string();
        let literal = !el.has_placeholder();
        if shell_code_pending {
            if literal && text == "--" {
                i += 1;
                continue;
            }
            if literal && text.starts_with('-') {
                // `-o NAME` / `-O NAME` take the next element.
                if !text.starts_with("--") && text.ends_with(['o', 'O']) {
                    i += 1;
                }
                i += 1;
                continue;
            }
            // The first operand is the code.
            if !literal {
                out.push((i, code_message(tool, &program, Some("-c"), el)));
            }
            shell_code_pending = false;
            i += 1;
            continue;
        }
        if flags.is_empty() {
            // awk: the first operand is the program.
            if !awk_program_seen && !text.starts_with('-') {
                awk_program_seen = true;
                if !literal {
                    out.push((i, code_message(tool, &program, None, el)));
                }
            }
            i += 1;
            continue;
        }
        // The code is the next element (`Some(flag)`), or this one (attached).
        let mut next_is_code: Option<String> = None;
        if flags.contains(&text.as_str()) && literal {
            next_is_code = Some(text.clone());
        } else if let Some((name, _)) = text.split_once('=').filter(|(n, _)| long.contains(n)) {
            if !literal {
                out.push((i, code_message(tool, &program, Some(name), el)));
            }
        } else if let Some(bundle) = head(el).strip_prefix('-').filter(|b| !b.starts_with('-') && !b.is_empty()) {
            if is_shell {
                if literal && bundle.contains('c') {
                    shell_code_pending = true;
                }
            } else {
                for (at, letter) in bundle.char_indices() {
                    if value_letters.contains(letter) {
                        break;
                    }
                    if short.contains(letter) {
                        let flag = format!("-{letter}");
                        // `1 +`: the dash.
                        if 1 + at + letter.len_utf8() == text.len() {
                            next_is_code = Some(flag);
                            break;
                        } else if !literal {
                            // The rest of the element is the code.
                            out.push((i, code_message(tool, &program, Some(&flag), el)));
                            break;
                        }
                        // Literal code attached (`-cprint(1)`), or a bundle whose code flag
                        // comes later (node's `-pe`): read on.
                    }
                }
            }
        }
        if let Some(flag) = next_is_code {
            if is_shell {
                shell_code_pending = true;
            } else {
                if let Some(next) = tool.args.get(i).filter(|n| n.has_placeholder()) {
                    out.push((i + 1, code_message(tool, &program, Some(&flag), next)));
                }
                i += 1;
            }
        }
        i += 1;
    }
    out
}

/// The literal text an element starts with (empty when it starts with a placeholder).
fn head(el: &crate::policy::model::ArgTemplate) -> &str {
    match el.segments.first() {
        Some(Segment::Literal(text)) => text,
        _ => "",
    }
}

fn code_message(tool: &Tool, program: &str, flag: Option<&str>, el: &crate::policy::model::ArgTemplate) -> String {
    let names: Vec<String> = el.placeholders().map(|p| format!("{{{{{p}}}}}")).collect();
    let runs = match flag {
        Some(f) => format!("`{program} {f}`"),
        None => format!("`{program}`"),
    };
    format!(
        "tool {:?}: {} is substituted into the code {runs} runs, so a value can run any command; pass the value as \
         a separate argument the code reads (e.g. command = [\"sh\", \"-c\", \"grep -- \\\"$1\\\" file\", \"sh\", \
         \"{{{{x}}}}\"], or sys.argv / process.argv / @ARGV) or run the program without an interpreter",
        tool.name,
        names.join(", ")
    )
}

/// Byte spans of `command`'s elements, if it is an array.
fn command_spans(table: &DeTable<'_>) -> Vec<Range<usize>> {
    match table.get("command").map(|v| v.get_ref()) {
        Some(DeValue::Array(items)) => items.iter().map(|i| i.span()).collect(),
        _ => Vec::new(),
    }
}

/// The text of template element `i` (0: the program) when it is a literal.
fn element_text(tool: &Tool, i: usize) -> Option<String> {
    if i == 0 {
        return Some(tool.program.clone());
    }
    let el = tool.args.get(i - 1)?;
    (!el.has_placeholder()).then(|| el.to_string())
}

fn base_name(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// `python3.12` is `python3`, `perl5.36` is `perl`.
fn is_named(program: &str, name: &str) -> bool {
    program == name
        || program
            .strip_prefix(name)
            .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// Whether a literal wrapper argument is one of its options or option values, not the program:
/// `-n`, `--signal=KILL`, `VAR=value` (env), a number or duration (`nice -n 5`, `timeout 10s`).
fn wrapper_operand(text: &str) -> bool {
    text.starts_with('-') || text.contains('=') || text.chars().next().is_some_and(|c| c.is_ascii_digit())
}

/// Index of the program after any wrappers at the front (0 when command[0] is no wrapper).
fn skip_wrappers(tool: &Tool, program: &str) -> usize {
    if !WRAPPERS.contains(&program) {
        return 0;
    }
    let mut i = 1;
    while let Some(text) = element_text(tool, i) {
        if wrapper_operand(&text) {
            i += 1;
            continue;
        }
        if WRAPPERS.contains(&base_name(&text)) {
            i += 1;
            continue;
        }
        return i;
    }
    // A placeholder (or the end): no literal program found.
    i
}

/// Placeholders a wrapper may take as the program to run.
fn program_choosing(tool: &Tool) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut wrapper = base_name(&tool.program).to_string();
    if !WRAPPERS.contains(&wrapper.as_str()) {
        return out;
    }
    for (k, el) in tool.args.iter().enumerate() {
        let i = k + 1;
        if el.has_placeholder() {
            let names: Vec<String> = el.placeholders().map(|p| format!("{{{{{p}}}}}")).collect();
            out.push((
                i,
                format!(
                    "tool {:?}: {} follows `{wrapper}` where it may name the program `{wrapper}` runs (or its options), \
                     so a value can run any program; name the program literally (command = [\"{wrapper}\", ..., \
                     \"/usr/bin/prog\", \"{{{{x}}}}\"]) or use an enum param of the programs allowed",
                    tool.name,
                    names.join(", ")
                ),
            ));
            return out;
        }
        let text = el.to_string();
        if wrapper_operand(&text) {
            continue;
        }
        if WRAPPERS.contains(&base_name(&text)) {
            wrapper = base_name(&text).to_string();
            continue;
        }
        return out;
    }
    out
}

/// Programs whose `-e PATTERN` / `--regexp PATTERN` takes the next argument as the pattern even
/// when it starts with `-` (the documented way to search for one).
const PATTERN_OPTION_PROGRAMS: &[&str] = &["grep", "egrep", "fgrep", "rg", "ag", "ack", "git"];

/// Placeholders a value can turn into an option.
fn leading_dash(tool: &Tool) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut separated = tool.arg_separator;
    let searcher = PATTERN_OPTION_PROGRAMS.contains(&base_name(&tool.program));
    for (k, el) in tool.args.iter().enumerate() {
        if !el.has_placeholder() && el.to_string() == "--" {
            separated = true;
        }
        if separated {
            break;
        }
        let after_pattern_option = k > 0 && {
            let prev = &tool.args[k - 1];
            !prev.has_placeholder() && matches!(prev.to_string().as_str(), "-e" | "--regexp")
        };
        if searcher && after_pattern_option {
            continue;
        }
        let Some(Segment::Param(name)) = el.segments.first() else { continue };
        let Some(param) = tool.param(name) else { continue };
        let why = match &param.kind {
            ParamKind::String { pattern: Some(p), .. } => {
                DASH_PROBES.iter().find(|s| p.is_match(s)).map(|s| format!("its pattern {:?} admits {s:?}", p.source()))
            }
            ParamKind::Integer { min: Some(m), .. } if *m < 0 => Some(format!("its min {m} admits negative numbers")),
            ParamKind::Number { min: Some(m), .. } if *m < 0.0 => Some(format!("its min {m} admits negative numbers")),
            _ => None,
        };
        if let Some(why) = why {
            out.push((
                k + 1,
                format!(
                    "tool {:?}: {{{{{name}}}}} can start with \"-\" ({why}) and is not behind `--`, so a value can be \
                     read as an option; make the pattern refuse a leading dash (e.g. start it with [^-]), set \
                     arg_separator = true or put \"--\" before it, or join it to its option (\"--flag={{{{{name}}}}}\")",
                    tool.name
                ),
            ));
        }
    }
    out
}

/// `write` and `exec` of one tree (either beneath the other), and `command[0]` beneath a write root.
fn write_exec_overlap(tool: &Tool) -> Vec<String> {
    let mut out = Vec::new();
    let sb = &tool.sandbox;
    for w in &sb.write {
        for x in &sb.exec {
            if x.starts_with(w) || w.starts_with(x) {
                out.push(format!(
                    "tool {:?}: write {} and exec {} are one tree, so the tool can write a program and then run \
                     it; grant exec only to directories the tool cannot write",
                    tool.name,
                    w.display(),
                    x.display()
                ));
            }
        }
        let program = Path::new(&tool.program);
        if program.is_absolute() && program.starts_with(w) {
            out.push(format!(
                "tool {:?}: command[0] {} lies beneath its own write root {}, so the tool can replace the program \
                 it runs; install the program outside the trees the tool may write",
                tool.name,
                program.display(),
                w.display()
            ));
        }
    }
    out
}

/// `connect_tcp` ports beside `hosts` that the tool does not bind itself: with `hosts` the tool
/// has a network namespace of its own, where such a port reaches nothing.
/// `cache` on a tool that reads what no path-typed argument names: the grants of trees, the
/// working directory's contents, literal paths in its argv. A cached answer is keyed on the
/// state of the path arguments (every node on their way), the working directory node and the
/// executable; a file only reachable otherwise can change, or stop being readable by the caller,
/// while the cache still answers.
fn cache_inputs(tool: &Tool) -> Option<String> {
    tool.cache?;
    let sandbox = &tool.sandbox;
    let mut unseen: Vec<String> = Vec::new();
    for (key, paths) in [("read", &sandbox.read), ("write", &sandbox.write)] {
        for p in paths {
            unseen.push(format!("{key} {}", p.display()));
        }
    }
    if let Some(dir) = &tool.working_dir {
        unseen.push(format!("the contents of working_dir {}", dir.display()));
    }
    for arg in &tool.args {
        for segment in &arg.segments {
            let Segment::Literal(text) = segment else { continue };
            if let Some(at) = literal_path(text) {
                unseen.push(format!("the literal path {at:?} in command"));
            }
        }
    }
    if unseen.is_empty() {
        return None;
    }
    Some(format!(
        "tool {:?} has `cache`, but it can read files no path-typed argument names ({}); a cached answer is keyed on \
         the state of its path arguments, its working directory and its executable only, so a change to those \
         other files (or to who may read them) is answered from the cache until the ttl ends: remove `cache`, or \
         pass every file the tool reads as a `type = \"path\"` param and grant no more than it needs",
        tool.name,
        unseen.join(", ")
    ))
}

/// The absolute path a literal argv element names: the element itself (`/etc/x`) or an
/// option's value (`--config=/etc/x`).
fn literal_path(text: &str) -> Option<&str> {
    if text.starts_with('/') {
        return Some(text);
    }
    let (_, value) = text.split_once('=')?;
    value.starts_with('/').then_some(value)
}

fn connect_inside_netns(tool: &Tool) -> Option<String> {
    let crate::policy::Network::Tcp { connect, bind, egress: Some(_) } = &tool.sandbox.network else { return None };
    let lonely: Vec<String> = connect.iter().filter(|p| !bind.contains(p)).map(u16::to_string).collect();
    (!lonely.is_empty()).then(|| {
        format!(
            "connect_tcp = [{}] beside hosts: a tool with hosts runs in a network namespace of its own, where \
             connect_tcp reaches only servers the tool starts itself (bind_tcp); a host elsewhere is reached only \
             through hosts, e.g. hosts = [\"api.example.com:{}\"]",
            lonely.join(", "),
            lonely[0]
        )
    })
}

/// Request rules on an HTTPS port (443, 8443): the proxy must read each request, so it
/// terminates the tool's TLS to that host with cordon's CA, which the tool must trust.
fn tls_termination(tool: &Tool) -> Option<String> {
    let egress = tool.sandbox.network.egress()?;
    let ruled: Vec<String> = egress
        .http
        .iter()
        .filter(|h| h.requests.is_some() && matches!(h.rule.port, 443 | 8443))
        .map(|h| h.rule.to_string())
        .collect();
    (!ruled.is_empty()).then(|| {
        format!(
            "request rules on {}: to check each request the egress proxy terminates the tool's TLS to {} with \
             cordon's own CA (and verifies the upstream itself); the tool must trust that CA, which cordon offers \
             through SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS and the like, and a client that pins \
             certificates or ignores those variables fails",
            ruled.join(", "),
            if ruled.len() == 1 { "it" } else { "them" }
        )
    })
}

fn socket_warnings(tool: &Tool) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let sockets = &tool.sandbox.unix_sockets;
    if sockets.is_empty() {
        return out;
    }
    let root = tool.sandbox.run_as.as_ref().is_some_and(|r| match r {
        RunAs::Account { user: Principal::Name(n), .. } => n == "root",
        RunAs::Account { user: Principal::Id(id), .. } => *id == 0,
        RunAs::OwnerOfWorkingDir => false,
    });
    if root {
        out.push((
            "root-socket",
            format!(
                "tool {:?} runs as root and may connect to Unix sockets ({}): services behind them see a root peer and \
             grant it everything; run the tool as a dedicated user (run_as = \"name\") the service admits",
                tool.name,
                list(sockets)
            ),
        ));
    }
    for s in sockets {
        let name = s.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if ENGINE_SOCKETS.contains(&name.as_str()) {
            out.push(("engine-socket", format!(
                "tool {:?}: unix_sockets {} is a container engine's socket; whoever talks to it is root on the host \
                 (it can start a privileged container with / mounted); remove it and give the tool a narrower \
                 command (e.g. a fixed `docker ps` tool run by an account in the engine's group)",
                tool.name,
                s.display()
            )));
        }
    }
    out
}

fn open_high_danger(tool: &Tool) -> Option<String> {
    if tool.danger != Danger::High || tool.confirm != Confirm::None {
        return None;
    }
    let allow = tool.allow.as_ref()?;
    let broad = allow.groups.iter().find(|g| match g {
        Principal::Name(n) => EVERYONE_GROUPS.contains(&n.as_str()),
        Principal::Id(id) => *id == 100,
    })?;
    Some(format!(
        "tool {:?} has danger = \"high\" and no confirmation, and allow admits group {broad:?}, which every user is \
         in: any agent can run it unchecked; set confirm = \"human\" (or \"agent\"), or allow named users or a \
         smaller group",
        tool.name
    ))
}

fn list(paths: &[std::path::PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}
