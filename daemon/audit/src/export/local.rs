//! Syslog (RFC 5424 on `/dev/log`) and the journal's native protocol
//! (`/run/systemd/journal/socket`, systemd.journal-fields(7)): one datagram per record.
//!
//! Syslog: `<PRI>1 TIME HOST cordond PID DECISION [cordon@32473 seq=".." ...] LINE`, facility
//! authpriv (10), severity from the decision; the structured data repeats the chain fields. The
//! journal: `MESSAGE` is the line, with `PRIORITY`, `SYSLOG_IDENTIFIER=cordond`,
//! `SYSLOG_FACILITY=10` and `CORDON_SEQ`, `CORDON_DECISION`, `CORDON_TOOL`, `CORDON_INVOCATION`,
//! `CORDON_CALLER_UID`, `CORDON_POLICY`, `CORDON_CODE`, `CORDON_PREV`, `CORDON_HASH`,
//! `CORDON_CHAIN`.

use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use tokio::net::UnixDatagram;

use super::reader::Line;
use super::{Context, ExportError, severity};

/// authpriv: security and authorization messages (syslog.conf routes them to a protected file).
const FACILITY: u8 = 10;
/// The structured-data ID: `cordon@` and the documentation enterprise number of RFC 5612.
const SD_ID: &str = "cordon@32473";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Syslog,
    Journald,
}

#[derive(Debug)]
pub(super) struct Local {
    kind: Kind,
    path: PathBuf,
    /// Connected; dropped after an error and made again for the next batch (the daemon on the
    /// other side may have restarted and bound a new socket).
    socket: Option<UnixDatagram>,
    pid: u32,
}

impl Local {
    pub(super) fn syslog(path: &Path) -> Result<Local, ExportError> {
        Local::new(Kind::Syslog, path)
    }

    pub(super) fn journald(path: &Path) -> Result<Local, ExportError> {
        Local::new(Kind::Journald, path)
    }

    fn new(kind: Kind, path: &Path) -> Result<Local, ExportError> {
        let (flag, who) = match kind {
            Kind::Syslog => ("--audit-syslog", "no syslog daemon listens here (rsyslog, syslog-ng or journald's)"),
            Kind::Journald => ("--audit-journald", "systemd-journald does not run on this host"),
        };
        let fail = |why: String| ExportError::Socket { flag, why };
        let meta = std::fs::metadata(path).map_err(|e| {
            fail(format!(
                "{}: {e}: {who}; start it or drop {flag} (the audit log itself is kept either way)",
                path.display()
            ))
        })?;
        if !meta.file_type().is_socket() {
            return Err(fail(format!("{} is not a socket", path.display())));
        }
        let socket = connect(path).map_err(|e| fail(format!("{e}: {who}")))?;
        Ok(Local { kind, path: path.to_path_buf(), socket: Some(socket), pid: std::process::id() })
    }

    pub(super) fn name(&self) -> &'static str {
        match self.kind {
            Kind::Syslog => "syslog",
            Kind::Journald => "journald",
        }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) async fn send(&mut self, context: &Context, lines: &[Line]) -> Result<(), String> {
        let socket = match self.socket.take() {
            Some(s) => s,
            None => connect(&self.path)?,
        };
        for l in lines {
            let message = match self.kind {
                Kind::Syslog => syslog_message(context, self.pid, l, &l.text),
                Kind::Journald => journal_message(context, l, &l.text),
            };
            match socket.send(&message).await {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    // Too large for one datagram: the record's identity and chain fields go,
                    // the line stays in the local log.
                    let stub = format!(
                        r#"{{"seq":{},"decision":"{}","too_large":{},"detail":"this record is too large for a datagram; read it in the local audit log"}}"#,
                        l.seq,
                        l.decision(),
                        l.text.len()
                    );
                    let message = match self.kind {
                        Kind::Syslog => syslog_message(context, self.pid, l, &stub),
                        Kind::Journald => journal_message(context, l, &stub),
                    };
                    socket.send(&message).await.map_err(|e| format!("{}: {e}", self.path.display()))?;
                }
                Err(e) => return Err(format!("{}: {e}", self.path.display())),
            }
        }
        self.socket = Some(socket);
        Ok(())
    }
}

/// Connects to the socket at `path` once it is known to be root's (or cordond's user's) behind
/// directories only they can write: any other account could read every record shipped there and
/// drop what it likes (a user's socket given as `--audit-syslog=PATH`, or one swapped into a
/// directory it can write). Checked at startup and at every reconnection.
fn connect(path: &Path) -> Result<UnixDatagram, String> {
    use cordon_core::policy::trust::{Subject, Trust, Walked, walk};
    let resolved = match walk(path, Trust::current(), Subject::LOG_SOCKET) {
        Ok(Walked::File { path, .. }) => path,
        Ok(Walked::Dir(_)) => return Err(format!("{} is not a socket", path.display())),
        Err(e) => return Err(e.to_string()),
    };
    let meta = std::fs::symlink_metadata(&resolved).map_err(|e| format!("{}: {e}", resolved.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.file_type().is_socket() {
        return Err(format!("{} is not a socket", resolved.display()));
    }
    if meta.uid() != 0 && meta.uid() != me {
        return Err(format!(
            "log socket {} belongs to uid {}, not to root or cordond's uid {me}: that account would receive every \
             audit record shipped there and choose what reaches the log; give the socket of the host's syslog \
             daemon or journald (root's)",
            resolved.display(),
            meta.uid()
        ));
    }
    let connect = || -> std::io::Result<UnixDatagram> {
        let socket = UnixDatagram::unbound()?;
        socket.connect(&resolved)?;
        Ok(socket)
    };
    connect().map_err(|e| format!("cannot connect to {}: {e}", resolved.display()))
}

/// An RFC 5424 PARAM-VALUE: `"`, `\` and `]` escaped, and control characters (C0, DEL, C1)
/// written as `\u{..}` text. The values come from the record (a tool name is whatever a caller
/// asked for): a raw newline there would end the message for every relay that frames syslog by
/// lines (RFC 6587 non-transparent framing) and start a forged one in the SIEM. The body needs
/// none of this: it is the log line, JSON with its control characters escaped, kept byte for byte
/// (its `hash` is over those bytes).
fn sd_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if c.is_control() {
            out.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
            continue;
        }
        if matches!(c, '"' | '\\' | ']') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Printable US-ASCII without spaces, at most `max` bytes, `-` when empty (RFC 5424 header fields).
fn header_field(v: &str, max: usize) -> String {
    let s: String = v.chars().filter(|c| c.is_ascii_graphic()).take(max).collect();
    if s.is_empty() { "-".into() } else { s }
}

pub(super) fn syslog_message(context: &Context, pid: u32, l: &Line, body: &str) -> Vec<u8> {
    let decision = l.decision();
    let pri = FACILITY * 8 + severity(decision).1;
    let time = l.text_field("time").unwrap_or("-");
    let mut sd = format!("[{SD_ID} seq=\"{}\" decision=\"{}\"", l.seq, sd_value(decision));
    for (name, field) in [("tool", "tool"), ("id", "id"), ("policy", "policy"), ("code", "code"), ("prev", "prev")] {
        if let Some(v) = l.text_field(field) {
            sd.push_str(&format!(" {name}=\"{}\"", sd_value(v)));
        }
    }
    if let Some(uid) = l.caller_uid() {
        sd.push_str(&format!(" uid=\"{uid}\""));
    }
    sd.push_str(&format!(" hash=\"{}\"", cordon_core::audit::chain::hex(&l.hash)));
    if let Some((id, _)) = &context.chain {
        sd.push_str(&format!(" chain=\"{id}\""));
    }
    sd.push(']');
    format!(
        "<{pri}>1 {} {} cordond {pid} {} {sd} {body}",
        header_field(time, 64),
        header_field(&context.host, 255),
        header_field(decision, 32)
    )
    .into_bytes()
}

/// One field of the native protocol: `KEY=value\n`, or, when the value holds a newline,
/// `KEY\n` + its length (64-bit little-endian) + the value + `\n`.
fn field(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    if value.contains('\n') {
        out.push(b'\n');
        out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        out.push(b'=');
    }
    out.extend_from_slice(value.as_bytes());
    out.push(b'\n');
}

pub(super) fn journal_message(context: &Context, l: &Line, body: &str) -> Vec<u8> {
    let decision = l.decision();
    let mut out = Vec::with_capacity(body.len() + 512);
    field(&mut out, "MESSAGE", body);
    field(&mut out, "PRIORITY", &severity(decision).1.to_string());
    field(&mut out, "SYSLOG_IDENTIFIER", "cordond");
    field(&mut out, "SYSLOG_FACILITY", &FACILITY.to_string());
    field(&mut out, "CORDON_SEQ", &l.seq.to_string());
    field(&mut out, "CORDON_DECISION", decision);
    for (key, name) in [
        ("CORDON_TOOL", "tool"),
        ("CORDON_INVOCATION", "id"),
        ("CORDON_POLICY", "policy"),
        ("CORDON_CODE", "code"),
        ("CORDON_PREV", "prev"),
        ("CORDON_TIME", "time"),
    ] {
        if let Some(v) = l.text_field(name) {
            field(&mut out, key, v);
        }
    }
    if let Some(uid) = l.caller_uid() {
        field(&mut out, "CORDON_CALLER_UID", &uid.to_string());
    }
    field(&mut out, "CORDON_HASH", &cordon_core::audit::chain::hex(&l.hash));
    if let Some((id, _)) = &context.chain {
        field(&mut out, "CORDON_CHAIN", id);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Line {
        Line {
            seq: 3,
            text: text.into(),
            hash: cordon_core::audit::chain::line_hash(text.as_bytes()),
            value: serde_json::from_str(text).unwrap(),
        }
    }

    fn context() -> Context {
        Context { host: "build-1".into(), audit_path: "/a".into(), chain: None }
    }

    #[test]
    fn syslog_lines_are_rfc5424_with_escaped_structured_data() {
        let text = r#"{"seq":3,"time":"2026-11-22T04:25:00.123456Z","decision":"denied","tool":"a\"]b","prev":"00"}"#;
        let l = line(text);
        let m = String::from_utf8(syslog_message(&context(), 42, &l, text)).unwrap();
        let hash = cordon_core::audit::chain::hex(&l.hash);
        assert_eq!(
            m,
            format!(
                "<84>1 2026-11-22T04:25:00.123456Z build-1 cordond 42 denied [cordon@32473 seq=\"3\" decision=\"denied\" tool=\"a\\\"\\]b\" prev=\"00\" hash=\"{hash}\"] {text}"
            )
        );
    }

    /// Attack: a caller names a tool `x\n<84>1 ... forged`; the refusal's record carries that
    /// name, and the syslog message repeats it in its structured data. No control character may
    /// reach the datagram: a relay that frames by lines would read a second, forged message.
    #[test]
    fn a_tool_name_with_newlines_cannot_forge_a_syslog_message() {
        let forged =
            "x\n<84>1 2026-11-22T04:25:00Z build-1 cordond 1 finished [cordon@32473 seq=\"9\"] {}\r\u{85}\u{7f}";
        let text = serde_json::json!({ "seq": 3, "time": "t", "decision": "invalid", "tool": forged, "prev": "00" })
            .to_string();
        assert!(!text.contains('\n'), "{text}");
        let l = line(&text);
        let m = String::from_utf8(syslog_message(&context(), 42, &l, &text)).unwrap();
        assert!(!m.chars().any(|c| c.is_control() && c != '\u{85}' && c != '\u{7f}'), "{m:?}");
        let sd_end = m.find(&format!(" {text}")).unwrap();
        assert!(!m[..sd_end].chars().any(char::is_control), "{m:?}");
        assert!(
            m.contains(
                "tool=\"x\\u{000a}<84>1 2026-11-22T04:25:00Z build-1 cordond 1 finished [cordon@32473 seq=\\\"9\\\"\\] {}\\u{000d}\\u{0085}\\u{007f}\""
            ),
            "{m}"
        );
        // The body is the log line, byte for byte.
        assert!(m.ends_with(&format!(" {text}")), "{m}");
    }

    #[test]
    fn journal_fields_with_newlines_are_length_framed() {
        let text = r#"{"seq":3,"time":"t","decision":"invalid","tool":"x\ny","prev":"00"}"#;
        let m = journal_message(&context(), &line(text), text);
        let s = String::from_utf8_lossy(&m);
        assert!(s.starts_with(&format!("MESSAGE={text}\nPRIORITY=4\nSYSLOG_IDENTIFIER=cordond\n")), "{s}");
        let framed = [b"CORDON_TOOL\n".as_slice(), &3u64.to_le_bytes(), b"x\ny\n"].concat();
        assert!(m.windows(framed.len()).any(|w| w == framed.as_slice()), "{s}");
    }

    /// Attack: `--audit-syslog=PATH` names a socket another account bound (or one in a directory
    /// it can write, where it can swap the socket later): it would read every audit record and
    /// drop what it likes. Refused, at startup and when reconnecting.
    #[tokio::test]
    async fn a_log_socket_another_account_controls_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        if !nix::unistd::geteuid().is_root() {
            // cordon_tests::Skip::NotRoot: CI runs as root, so it fails there.
            assert!(
                std::env::var_os("CORDON_CI").is_none(),
                "SKIPPED a_log_socket_another_account_controls_is_refused [not root] (CORDON_CI is set: CI runs as root)"
            );
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "SKIPPED a_log_socket_another_account_controls_is_refused [not root]");
            return;
        }
        let nobody = Some(nix::unistd::Uid::from_raw(65534));
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().join("log");
        let _bound = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        assert!(Local::syslog(&path).is_ok());
        nix::unistd::chown(&path, nobody, None).unwrap();
        let e = Local::syslog(&path).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "--audit-syslog: log socket {} belongs to uid 65534, not to root or cordond's uid 0: that account would \
                 receive every audit record shipped there and choose what reaches the log; give the socket of the \
                 host's syslog daemon or journald (root's): no syslog daemon listens here (rsyslog, syslog-ng or \
                 journald's)",
                path.display()
            )
        );
        // Root's socket in a directory another account owns: it can swap the socket.
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        let inner = theirs.join("log");
        let _bound2 = std::os::unix::net::UnixDatagram::bind(&inner).unwrap();
        assert!(Local::journald(&inner).is_ok());
        nix::unistd::chown(&theirs, nobody, None).unwrap();
        let e = Local::journald(&inner).unwrap_err().to_string();
        assert!(e.starts_with("--audit-journald: "), "{e}");
        assert!(e.contains("owned by"), "{e}");
        // Reconnecting (after an error) checks again.
        let again = dir.path().join("again");
        let _bound3 = std::os::unix::net::UnixDatagram::bind(&again).unwrap();
        let mut local = Local::syslog(&again).unwrap();
        local.socket = None;
        nix::unistd::chown(&again, nobody, None).unwrap();
        let text = r#"{"seq":3,"time":"t","decision":"finished","prev":"00"}"#;
        let e = local.send(&context(), &[line(text)]).await.unwrap_err();
        assert!(e.contains("belongs to uid 65534"), "{e}");
    }

    #[tokio::test]
    async fn a_missing_socket_is_refused_at_startup() {
        let e = Local::journald(Path::new("/nonexistent/journal/socket")).unwrap_err().to_string();
        assert!(e.starts_with("--audit-journald: /nonexistent/journal/socket: No such file or directory"), "{e}");
        assert!(e.contains("systemd-journald does not run on this host"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = Local::syslog(dir.path()).unwrap_err().to_string();
        assert!(e.ends_with("is not a socket"), "{e}");
    }
}
