//! Pagination of `tools/list`: pages of at most N tools (`cordon mcp --page-size N`; without
//! it, lists longer than [`DEFAULT_PAGE`] tools are paged at that size and shorter ones are one
//! answer), the built-in tools first (all on the first page, which is longer when they
//! outnumber N). The cursor is opaque to clients: it names the registry generation it was made
//! for (and the version of the MCP servers' exposed tools, which change without a reload when
//! an admin approves a server) and where the next page starts, so a cursor from before a change
//! is refused (the list it walked is gone) instead of silently skipping or repeating tools. It
//! carries an HMAC under a key of this session's own: a cursor another session made, or one
//! edited by hand, is refused as malformed.
//!
//! Stock clients differ: the Python SDK's `list_tools()` returns one page and leaves following
//! `nextCursor` to its caller, while hosts such as Claude Code follow it (the MCP spec: the page
//! size is the server's, and clients must not assume one). Lists up to [`DEFAULT_PAGE`] tools
//! stay one answer for the former; a longer one would be one multi-megabyte line.

use ring::hmac;
use rmcp::ErrorData as McpError;

/// The cursor's format version (the first field of the encoded text).
const VERSION: &str = "c4";

/// Without `--page-size`: lists of more tools than this are answered in pages of this many
/// (about 0.9 KB of JSON a tool: a page is under 1 MB).
pub(super) const DEFAULT_PAGE: usize = 1000;

/// Which list a cursor walks: the registry generation and the servers' version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ListVersion {
    pub(super) generation: u64,
    pub(super) servers: u64,
}

/// This session's cursors: made and checked under a key only this process knows.
pub(super) struct Cursors {
    /// `None`: the system gave no random key; no cursor is made or accepted (fail closed).
    key: Option<hmac::Key>,
}

impl std::fmt::Debug for Cursors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursors").field("key", &self.key.as_ref().map(|_| "..")).finish()
    }
}

impl Default for Cursors {
    fn default() -> Cursors {
        let mut secret = [0u8; 32];
        let key = match getrandom::fill(&mut secret) {
            Ok(()) => Some(hmac::Key::new(hmac::HMAC_SHA256, &secret)),
            Err(e) => {
                tracing::warn!(error = %e, "no random key for tools/list cursors; paged lists are refused");
                None
            }
        };
        Cursors { key }
    }
}

/// Where a page starts: its offset in the list, and whether the first page listed `confirm`
/// among the built-in tools (see [`super::listing`]: otherwise it comes last, when a tool asks
/// for an agent's confirmation after all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Start {
    pub(super) offset: usize,
    pub(super) confirm_first: bool,
}

/// A refusal of a cursor this session did not make (or made for another place).
pub(super) fn malformed() -> McpError {
    McpError::invalid_params(
        "malformed cursor: pass back the nextCursor of the previous tools/list answer unchanged, or call tools/list without a cursor to list from the start",
        None,
    )
}

impl Cursors {
    /// An opaque cursor for the page at `start` of the list `list`.
    fn encode(&self, list: ListVersion, start: Start) -> Option<String> {
        let key = self.key.as_ref()?;
        let ListVersion { generation, servers } = list;
        let Start { offset, confirm_first } = start;
        let text = format!("{VERSION}:{generation}:{servers}:{offset}:{}", u8::from(confirm_first));
        let tag = hmac::sign(key, text.as_bytes());
        let hex = data_encoding::HEXLOWER;
        Some(format!("{}.{}", hex.encode(text.as_bytes()), hex.encode(tag.as_ref())))
    }

    /// The (list, start) of a cursor this session made; `None`: not one of ours.
    fn decode(&self, cursor: &str) -> Option<(ListVersion, Start)> {
        let key = self.key.as_ref()?;
        if cursor.len() > 256 {
            return None;
        }
        let (text, tag) = cursor.split_once('.')?;
        let hex = data_encoding::HEXLOWER;
        let (text, tag) = (hex.decode(text.as_bytes()).ok()?, hex.decode(tag.as_bytes()).ok()?);
        hmac::verify(key, &text, &tag).ok()?;
        let text = String::from_utf8(text).ok()?;
        let mut parts = text.split(':');
        if parts.next()? != VERSION {
            return None;
        }
        let generation = parts.next()?.parse().ok()?;
        let servers = parts.next()?.parse().ok()?;
        let offset = parts.next()?.parse().ok()?;
        let confirm_first = match parts.next()? {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        parts.next().is_none().then_some((ListVersion { generation, servers }, Start { offset, confirm_first }))
    }

    /// Where the page at `cursor` starts in the list `list` (`None`: the first page). A cursor
    /// of another list (the registry or the servers' tools changed since) or not this
    /// session's is refused with a message saying to list from the start. The caller refuses an
    /// offset past the end (as malformed) once it knows where the list ends.
    pub(super) fn start(&self, cursor: Option<&str>, list: ListVersion) -> Result<Option<Start>, McpError> {
        let Some(c) = cursor else { return Ok(None) };
        match self.decode(c) {
            Some((old, _)) if old.generation != list.generation => {
                let (g, generation) = (old.generation, list.generation);
                Err(McpError::invalid_params(
                    format!(
                        "this cursor belongs to an older tool list (generation {g}; the tools changed since, now generation {generation}); call tools/list again without a cursor to list from the start"
                    ),
                    None,
                ))
            }
            Some((old, _)) if old != list => Err(McpError::invalid_params(
                "this cursor belongs to an older tool list (the MCP servers' tools changed since); call tools/list again without a cursor to list from the start",
                None,
            )),
            Some((_, start)) if start.offset > 0 => Ok(Some(start)),
            _ => Err(malformed()),
        }
    }

    /// The cursor of the page at `start` of the list `list`.
    pub(super) fn next(&self, list: ListVersion, start: Start) -> Result<String, McpError> {
        self.encode(list, start).ok_or_else(|| {
            McpError::internal_error(
                "cannot page the tool list: this server has no key for its cursors (no system randomness)",
                None,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn v(generation: u64) -> ListVersion {
        ListVersion { generation, servers: 0 }
    }

    const fn at(offset: usize) -> Start {
        Start { offset, confirm_first: false }
    }

    #[test]
    fn cursors_say_where_the_page_starts() {
        let cursors = Cursors::default();
        assert_eq!(cursors.start(None, v(7)).unwrap(), None);
        for start in [at(4), Start { offset: 9, confirm_first: true }] {
            let c = cursors.next(v(7), start).unwrap();
            assert_eq!(cursors.start(Some(&c), v(7)).unwrap(), Some(start));
        }
    }

    #[test]
    fn stale_and_malformed_cursors_are_invalid_params() {
        let cursors = Cursors::default();
        let encode = |list, offset| cursors.encode(list, at(offset)).unwrap();
        let stale = encode(v(6), 4);
        let e = cursors.start(Some(&stale), v(7)).unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("older tool list"), "{}", e.message);
        // The servers' tools changed within one generation: the cursor is stale too.
        let servers_moved = encode(ListVersion { generation: 7, servers: 1 }, 4);
        let e = cursors.start(Some(&servers_moved), ListVersion { generation: 7, servers: 2 }).unwrap_err();
        assert!(e.message.contains("MCP servers' tools changed"), "{}", e.message);
        // Formats of before (no key, no servers' version, no built-ins' place) are not ours any
        // more, even under this session's key.
        let old_format = data_encoding::HEXLOWER.encode(b"c1:7:4");
        let unkeyed = data_encoding::HEXLOWER.encode(b"c2:7:0:4");
        let signed = |text: &str| {
            let tag = hmac::sign(cursors.key.as_ref().unwrap(), text.as_bytes());
            let hex = data_encoding::HEXLOWER;
            format!("{}.{}", hex.encode(text.as_bytes()), hex.encode(tag.as_ref()))
        };
        let (c3, bad_bit, extra) = (signed("c3:7:0:4"), signed("c4:7:0:4:2"), signed("c4:7:0:4:0:1"));
        // Another session's cursor for the same list, and this session's with another offset
        // under the same tag, are forgeries.
        let other = Cursors::default().encode(v(7), at(4)).unwrap();
        let good = encode(v(7), 4);
        let (_, tag) = good.split_once('.').unwrap();
        let moved = format!("{}.{tag}", data_encoding::HEXLOWER.encode(b"c4:7:0:8:0"));
        let truncated = &good[..good.len() - 2];
        for bad in [
            "",
            "zz",
            "abc",
            &encode(v(7), 0),
            "63313a373a34ff",
            &old_format,
            &unkeyed,
            &c3,
            &bad_bit,
            &extra,
            &other,
            &moved,
            truncated,
        ] {
            let e = cursors.start(Some(bad), v(7)).unwrap_err();
            assert!(e.message.starts_with("malformed cursor"), "{bad}: {}", e.message);
        }
        assert_eq!(cursors.decode(&good), Some((v(7), at(4))));
    }
}
