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
const VERSION: &str = "c3";

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

impl Cursors {
    /// An opaque cursor for the page at `offset` of the list `list`.
    fn encode(&self, list: ListVersion, offset: usize) -> Option<String> {
        let key = self.key.as_ref()?;
        let ListVersion { generation, servers } = list;
        let text = format!("{VERSION}:{generation}:{servers}:{offset}");
        let tag = hmac::sign(key, text.as_bytes());
        let hex = data_encoding::HEXLOWER;
        Some(format!("{}.{}", hex.encode(text.as_bytes()), hex.encode(tag.as_ref())))
    }

    /// The (list, offset) of a cursor this session made; `None`: not one of ours.
    fn decode(&self, cursor: &str) -> Option<(ListVersion, usize)> {
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
        parts.next().is_none().then_some((ListVersion { generation, servers }, offset))
    }

    /// The range of `total` items the page at `cursor` covers, and the cursor of the next page.
    /// `builtins` items lead the list and all go on the first page.
    pub(super) fn page(
        &self,
        cursor: Option<&str>,
        list: ListVersion,
        total: usize,
        builtins: usize,
        page_size: usize,
    ) -> Result<(std::ops::Range<usize>, Option<String>), McpError> {
        let start = match cursor {
            None => 0,
            Some(c) => match self.decode(c) {
                Some((old, _)) if old.generation != list.generation => {
                    let (g, generation) = (old.generation, list.generation);
                    return Err(McpError::invalid_params(
                        format!(
                            "this cursor belongs to an older tool list (generation {g}; the tools changed since, now generation {generation}); call tools/list again without a cursor to list from the start"
                        ),
                        None,
                    ));
                }
                Some((old, _)) if old != list => {
                    return Err(McpError::invalid_params(
                        "this cursor belongs to an older tool list (the MCP servers' tools changed since); call tools/list again without a cursor to list from the start",
                        None,
                    ));
                }
                Some((_, offset)) if offset > 0 && offset < total => offset,
                _ => {
                    return Err(McpError::invalid_params(
                        "malformed cursor: pass back the nextCursor of the previous tools/list answer unchanged, or call tools/list without a cursor to list from the start",
                        None,
                    ));
                }
            },
        };
        let size = if start == 0 { page_size.max(builtins) } else { page_size };
        let end = start.saturating_add(size).min(total);
        if end >= total {
            return Ok((start..end, None));
        }
        match self.encode(list, end) {
            Some(next) => Ok((start..end, Some(next))),
            None => Err(McpError::internal_error(
                "cannot page the tool list: this server has no key for its cursors (no system randomness)",
                None,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn v(generation: u64) -> ListVersion {
        ListVersion { generation, servers: 0 }
    }

    #[test]
    fn pages_cover_everything_once_with_the_builtins_on_the_first() {
        let cursors = Cursors::default();
        let (total, builtins, size) = (23, 3, 2);
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut first = true;
        loop {
            let (range, next) = cursors.page(cursor.as_deref(), v(7), total, builtins, size).unwrap();
            if first {
                assert_eq!(range, 0..3, "all built-ins on the first page");
                first = false;
            }
            seen.extend(range);
            match next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, (0..total).collect::<Vec<_>>());
    }

    #[test]
    fn stale_and_malformed_cursors_are_invalid_params() {
        let cursors = Cursors::default();
        let encode = |list, offset| cursors.encode(list, offset).unwrap();
        let page =
            |cursor: Option<&str>, list, total, builtins, size| cursors.page(cursor, list, total, builtins, size);
        let stale = encode(v(6), 4);
        let e = page(Some(&stale), v(7), 20, 3, 4).unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("older tool list"), "{}", e.message);
        // The servers' tools changed within one generation: the cursor is stale too.
        let servers_moved = encode(ListVersion { generation: 7, servers: 1 }, 4);
        let e = page(Some(&servers_moved), ListVersion { generation: 7, servers: 2 }, 20, 3, 4).unwrap_err();
        assert!(e.message.contains("MCP servers' tools changed"), "{}", e.message);
        // Formats of before (no key, no servers' version) are not ours any more.
        let old_format = data_encoding::HEXLOWER.encode(b"c1:7:4");
        let unkeyed = data_encoding::HEXLOWER.encode(b"c2:7:0:4");
        // Another session's cursor for the same list, and this session's with another offset
        // under the same tag, are forgeries.
        let other = Cursors::default().encode(v(7), 4).unwrap();
        let good = encode(v(7), 4);
        let (_, tag) = good.split_once('.').unwrap();
        let moved = format!("{}.{tag}", data_encoding::HEXLOWER.encode(b"c3:7:0:8"));
        let truncated = &good[..good.len() - 2];
        for bad in [
            "",
            "zz",
            "abc",
            &encode(v(7), 0),
            &encode(v(7), 99),
            "63313a373a34ff",
            &old_format,
            &unkeyed,
            &other,
            &moved,
            truncated,
        ] {
            let e = page(Some(bad), v(7), 20, 3, 4).unwrap_err();
            assert!(e.message.starts_with("malformed cursor"), "{bad}: {}", e.message);
        }
        assert_eq!(cursors.decode(&good), Some((v(7), 4)));
    }
}
