//! The approvals store: each MCP server's recorded tool list (the last one an instance listed)
//! and the list an admin approved (`cordon server approve`), kept beside the audit log in
//! `servers.json` (root-owned, mode 0600) so that approvals survive restarts.
//!
//! The file is read once at start, checked like every root file cordond reads (owner and mode of
//! it and of every directory above it: nobody but cordond's user may have written it). A file
//! that cannot be trusted, read or parsed is not used: every server awaits approval again, the
//! log says why and `status` carries the reason ([`Approvals::problem`]). Every change is written
//! whole to a new file (write, fsync, rename over the old one, fsync of the directory): a crash
//! leaves the old file or the new one, never half of one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use cordon_core::mcp_server::{RemoteTool, list_digest};
use cordon_core::policy::{Subject, Trust, trust};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The file's name, in the audit log's directory.
pub(crate) const FILE_NAME: &str = "servers.json";
/// The largest file read.
pub(crate) const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// What the trust checks call it.
const SUBJECT: Subject = Subject { name: "server approvals file" };

/// The approvals file beside the audit log `audit`.
pub(crate) fn default_path(audit: &Path) -> PathBuf {
    audit.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).join(FILE_NAME)
}

/// A tool list as an instance of the server listed it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Recorded {
    /// [`list_digest`] of `tools`.
    pub(crate) digest: String,
    pub(crate) tools: Vec<RemoteTool>,
    /// Seconds since the epoch.
    pub(crate) at: u64,
}

/// What an admin approved: a recorded list, by its digest, and each tool's digest in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Approved {
    pub(crate) digest: String,
    pub(crate) tools: BTreeMap<String, String>,
    /// The admin's uid.
    pub(crate) by: u32,
    pub(crate) at: u64,
}

/// One server's entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Entry {
    pub(crate) recorded: Option<Recorded>,
    pub(crate) approved: Option<Approved>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    #[serde(default)]
    recorded: Option<FileRecorded>,
    #[serde(default)]
    approved: Option<Approved>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRecorded {
    digest: String,
    tools: Vec<Value>,
    at: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: u32,
    servers: BTreeMap<String, FileEntry>,
}

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the server approvals file {}: {source}", .path.display())]
pub(crate) struct WriteError {
    path: PathBuf,
    source: std::io::Error,
}

/// The store: the file's contents in memory, written through on every change.
#[derive(Debug)]
pub(crate) struct Approvals {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    servers: BTreeMap<String, Entry>,
    /// Why the file was not used at start (every server then awaits approval again).
    problem: Option<String>,
}

impl Approvals {
    /// Reads the store at `path` (none there: empty). A file that cannot be trusted, read or
    /// parsed is ignored, with a log line and [`Approvals::problem`] saying why.
    pub(crate) fn open(path: PathBuf) -> Approvals {
        let state = match read(&path) {
            Ok(servers) => State { servers, problem: None },
            Err(why) => {
                let why = format!(
                    "the server approvals file {} is not used ({why}); every MCP server awaits approval again: \
                     review each with `cordon server list --tools` and approve it with `cordon server approve`",
                    path.display()
                );
                tracing::error!("{why}");
                State { servers: BTreeMap::new(), problem: Some(why) }
            }
        };
        Approvals { path, state: Mutex::new(state) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why the file read at start was not used, if it was not.
    pub(crate) fn problem(&self) -> Option<String> {
        self.lock().problem.clone()
    }

    /// The server's entry (empty when it has none).
    pub(crate) fn entry(&self, server: &str) -> Entry {
        self.lock().servers.get(server).cloned().unwrap_or_default()
    }

    /// Records the list an instance of `server` listed; returns the list recorded before (None:
    /// none, or the same). Written to disk when it changed.
    pub(crate) fn record(
        &self,
        server: &str,
        tools: Vec<RemoteTool>,
        now: u64,
    ) -> Result<Option<Option<Recorded>>, WriteError> {
        let digest = list_digest(&tools);
        let mut state = self.lock();
        let before = state.servers.get(server).and_then(|e| e.recorded.clone());
        if before.as_ref().is_some_and(|r| r.digest == digest) {
            return Ok(None);
        }
        let mut next = state.servers.clone();
        next.entry(server.to_string()).or_default().recorded = Some(Recorded { digest, tools, at: now });
        write(&self.path, &next)?;
        state.servers = next;
        Ok(Some(before))
    }

    /// Approves the recorded list of `server` if its digest is `digest`; returns what was
    /// approved, or why not.
    pub(crate) fn approve(&self, server: &str, digest: &str, by: u32, now: u64) -> Result<Approved, ApproveError> {
        let mut state = self.lock();
        let recorded = state.servers.get(server).and_then(|e| e.recorded.clone());
        let Some(recorded) = recorded else {
            return Err(ApproveError::NothingRecorded);
        };
        if recorded.digest != digest {
            return Err(ApproveError::Mismatch { recorded: recorded.digest });
        }
        let approved = Approved {
            digest: recorded.digest.clone(),
            tools: recorded.tools.iter().map(|t| (t.name.clone(), t.digest())).collect(),
            by,
            at: now,
        };
        let mut next = state.servers.clone();
        next.entry(server.to_string()).or_default().approved = Some(approved.clone());
        write(&self.path, &next).map_err(ApproveError::Write)?;
        state.servers = next;
        state.problem = None;
        Ok(approved)
    }
}

/// Why an approval was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApproveError {
    #[error("no tool list is recorded for it yet")]
    NothingRecorded,
    #[error("the recorded tool list is {recorded}, not the one named")]
    Mismatch { recorded: String },
    #[error(transparent)]
    Write(WriteError),
    /// Approved, but its audit record is not on disk.
    #[error("approved, but the server_approved record could not be written to the audit log: {0}")]
    Audit(String),
}

/// A tool as the file keeps it (the fields of `tools/list`).
pub(crate) fn tool_json(t: &RemoteTool) -> Value {
    json!({
        "name": t.name,
        "title": t.title,
        "description": t.description,
        "inputSchema": t.input_schema,
        "outputSchema": t.output_schema,
        "annotations": t.annotations,
    })
}

fn tool_from_json(v: &Value) -> Result<RemoteTool, String> {
    let text = |key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let present = |key: &str| v.get(key).filter(|v| !v.is_null()).cloned();
    let name = text("name").ok_or("a tool without a name")?;
    let input_schema = present("inputSchema").filter(Value::is_object).ok_or("a tool without an input schema")?;
    Ok(RemoteTool {
        name,
        title: text("title"),
        description: text("description").unwrap_or_default(),
        input_schema,
        output_schema: present("outputSchema"),
        annotations: present("annotations"),
    })
}

/// The entries in the file at `path` (none there: empty), or why it cannot be used.
fn read(path: &Path) -> Result<BTreeMap<String, Entry>, String> {
    let trust = Trust::current();
    let (parent, name, checked) = match trust::walk(path, trust, SUBJECT) {
        Ok(trust::Walked::File { parent, name, path }) => (parent, name, path),
        Ok(trust::Walked::Dir(_)) => return Err("it is a directory".into()),
        Err(trust::TrustError::Missing { .. }) => return Ok(BTreeMap::new()),
        Err(e) => return Err(e.to_string()),
    };
    let bytes =
        trust::read_regular(&parent, &name, &checked, trust, SUBJECT, MAX_FILE_BYTES).map_err(|e| e.to_string())?;
    parse(&bytes)
}

/// The entries in a file's bytes, or what is wrong with them (every recorded digest is checked
/// against its tools: a list edited by hand is not a list any instance recorded).
pub(crate) fn parse(bytes: &[u8]) -> Result<BTreeMap<String, Entry>, String> {
    let file: File = serde_json::from_slice(bytes).map_err(|e| format!("not a server approvals file ({e})"))?;
    if file.version != 1 {
        return Err(format!("version {} is not one this cordond reads (1)", file.version));
    }
    let mut out = BTreeMap::new();
    for (name, e) in file.servers {
        let recorded = match e.recorded {
            Some(r) => {
                let tools = r.tools.iter().map(tool_from_json).collect::<Result<Vec<_>, _>>()?;
                if list_digest(&tools) != r.digest {
                    return Err(format!("the recorded tool list of server {name:?} does not have its digest"));
                }
                Some(Recorded { digest: r.digest, tools, at: r.at })
            }
            None => None,
        };
        out.insert(name, Entry { recorded, approved: e.approved });
    }
    Ok(out)
}

fn render(servers: &BTreeMap<String, Entry>) -> Result<Vec<u8>, serde_json::Error> {
    let file = File {
        version: 1,
        servers: servers
            .iter()
            .map(|(name, e)| {
                let recorded = e.recorded.as_ref().map(|r| FileRecorded {
                    digest: r.digest.clone(),
                    tools: r.tools.iter().map(tool_json).collect(),
                    at: r.at,
                });
                (name.clone(), FileEntry { recorded, approved: e.approved.clone() })
            })
            .collect(),
    };
    serde_json::to_vec_pretty(&file)
}

/// Writes the store to a new file beside it (mode 0600), syncs it and renames it over the old
/// one, then syncs the directory. A store larger than [`MAX_FILE_BYTES`] is not written: the
/// next start could not read it and every server's approval would be lost (a server that lists
/// huge tools must not cost the others theirs); the old file stays.
fn write(path: &Path, servers: &BTreeMap<String, Entry>) -> Result<(), WriteError> {
    let fail = |source: std::io::Error| WriteError { path: path.to_path_buf(), source };
    let text = render(servers).map_err(|e| fail(std::io::Error::other(e.to_string())))?;
    let size = text.len() as u64 + 1;
    if size > MAX_FILE_BYTES {
        return Err(fail(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!(
                "it would be {size} bytes, more than the {MAX_FILE_BYTES} cordond reads back at start; the change \
                 is not recorded (a server lists tool definitions too large to keep)"
            ),
        )));
    }
    crate::tokens::write_private(path, FILE_NAME, &text).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    fn tool(name: &str, description: &str) -> RemoteTool {
        RemoteTool {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
        }
    }

    fn store() -> (tempfile::TempDir, Approvals) {
        let dir = tempfile::tempdir().unwrap();
        let a = Approvals::open(dir.path().join(FILE_NAME));
        (dir, a)
    }

    #[test]
    fn approvals_are_written_atomically_0600_and_read_back() {
        let (dir, a) = store();
        assert_eq!(a.problem(), None, "no file: nothing wrong, nothing approved");
        let list = vec![tool("read", "reads"), tool("list", "lists")];
        assert_eq!(a.record("fs", list.clone(), 1).unwrap(), Some(None), "first list recorded");
        assert_eq!(a.record("fs", list.clone(), 2).unwrap(), None, "the same list again changes nothing");
        let digest = list_digest(&list);
        assert!(matches!(a.approve("fs", "sha256:00", 0, 3), Err(ApproveError::Mismatch { .. })));
        assert!(matches!(a.approve("git", &digest, 0, 3), Err(ApproveError::NothingRecorded)));
        let approved = a.approve("fs", &digest, 0, 3).unwrap();
        assert_eq!(approved.tools.len(), 2);
        let path = dir.path().join(FILE_NAME);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(leftovers, [std::ffi::OsString::from(FILE_NAME)], "no temporary file is left behind");
        let again = Approvals::open(path);
        assert_eq!(again.problem(), None);
        assert_eq!(again.entry("fs"), a.entry("fs"), "a restart keeps the recorded list and the approval");
    }

    #[test]
    fn a_corrupt_or_edited_file_is_not_used_and_everything_awaits_approval() {
        let (dir, a) = store();
        let list = vec![tool("read", "reads")];
        a.record("fs", list.clone(), 1).unwrap();
        a.approve("fs", &list_digest(&list), 0, 2).unwrap();
        let path = dir.path().join(FILE_NAME);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, &text[..text.len() / 2]).unwrap();
        let torn = Approvals::open(path.clone());
        assert!(torn.problem().unwrap().contains("not a server approvals file"), "{:?}", torn.problem());
        assert_eq!(torn.entry("fs"), Entry::default());
        // A description changed by hand (the recorded digest no longer matches its tools).
        std::fs::write(&path, text.replace("\"reads\"", "\"reads everything\"")).unwrap();
        let edited = Approvals::open(path);
        assert!(edited.problem().unwrap().contains("does not have its digest"), "{:?}", edited.problem());
        assert_eq!(edited.entry("fs"), Entry::default());
    }

    /// Red team: a server whose recorded list would make the file larger than cordond reads
    /// back at start. Before: written, and at the next start the whole store was "not used" (every
    /// server's approval lost). Now: the change is refused and the file as it was is read back.
    #[test]
    fn a_list_too_large_to_read_back_is_not_written() {
        let (dir, a) = store();
        let small = vec![tool("read", "reads")];
        a.record("fs", small.clone(), 1).unwrap();
        a.approve("fs", &list_digest(&small), 0, 2).unwrap();
        let huge: Vec<RemoteTool> = (0..2100).map(|i| tool(&format!("t{i}"), &"d".repeat(16 * 1024))).collect();
        let e = a.record("evil", huge, 3).unwrap_err();
        assert_eq!(e.source.kind(), std::io::ErrorKind::FileTooLarge, "{e}");
        assert!(e.to_string().contains("the change is not recorded"), "{e}");
        assert_eq!(a.entry("evil"), Entry::default(), "nothing recorded in memory either");
        let again = Approvals::open(dir.path().join(FILE_NAME));
        assert_eq!(again.problem(), None);
        assert_eq!(again.entry("fs"), a.entry("fs"), "the other server's approval survives a restart");
    }

    /// Red team: the store replaced by a symlink to a file in a directory others can write (where
    /// anyone could swap it) is not used at start: the trust walk follows the link and checks the
    /// directories of its target (everything awaits approval again, and says why).
    #[test]
    fn a_store_symlinked_into_a_writable_directory_is_not_used() {
        let (dir, a) = store();
        let list = vec![tool("read", "reads")];
        a.record("fs", list.clone(), 1).unwrap();
        a.approve("fs", &list_digest(&list), 0, 2).unwrap();
        let path = dir.path().join(FILE_NAME);
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let elsewhere = open.join("elsewhere.json");
        std::fs::rename(&path, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let linked = Approvals::open(path);
        assert!(linked.problem().is_some(), "a symlinked store is not used");
        assert_eq!(linked.entry("fs"), Entry::default());
    }

    #[test]
    fn a_file_someone_else_could_write_is_not_trusted() {
        let (dir, a) = store();
        let list = vec![tool("read", "reads")];
        a.record("fs", list.clone(), 1).unwrap();
        a.approve("fs", &list_digest(&list), 0, 2).unwrap();
        let path = dir.path().join(FILE_NAME);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o622)).unwrap();
        let writable = Approvals::open(path.clone());
        assert!(writable.problem().is_some(), "a group- or world-writable file is not used");
        assert_eq!(writable.entry("fs"), Entry::default());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().uid(), 65534);
            let foreign = Approvals::open(path.clone());
            assert!(foreign.problem().is_some(), "a file another account owns is not used");
            assert_eq!(foreign.entry("fs"), Entry::default());
            // An approval writes a fresh file cordond owns.
            foreign.record("fs", list.clone(), 3).unwrap();
            foreign.approve("fs", &list_digest(&list), 0, 4).unwrap();
            assert_eq!(std::fs::metadata(&path).unwrap().uid(), 0);
            assert_eq!(Approvals::open(path).problem(), None);
        } else {
            // not a skip: the ownership half needs root to chown; the mode half above ran.
        }
    }
}
