//! Pagination of `tools/list` (`cordon mcp --page-size N`): pages of at most N tools, the
//! built-in tools first (all on the first page, which is longer when they outnumber N). The
//! cursor is opaque to clients: it names the registry generation it was made for (and the
//! version of the MCP servers' exposed tools, which change without a reload when an admin
//! approves a server) and where the next page starts, so a cursor from before a change is
//! refused (the list it walked is gone) instead of silently skipping or repeating tools.
//!
//! Without `--page-size` the whole list is one answer: stock clients such as the Python SDK's
//! `list_tools()` return one page and leave following `nextCursor` to their caller.

use rmcp::ErrorData as McpError;

/// The cursor's format version (the first field of the encoded text).
const VERSION: &str = "c2";

/// Which list a cursor walks: the registry generation and the servers' version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ListVersion {
    pub(super) generation: u64,
    pub(super) servers: u64,
}

/// An opaque cursor for the page at `offset` of the list `list`.
pub(super) fn encode(list: ListVersion, offset: usize) -> String {
    let ListVersion { generation, servers } = list;
    data_encoding::HEXLOWER.encode(format!("{VERSION}:{generation}:{servers}:{offset}").as_bytes())
}

/// The (list, offset) of a cursor this front-end made; `None`: not one of ours.
fn decode(cursor: &str) -> Option<(ListVersion, usize)> {
    if cursor.is_empty() || !cursor.len().is_multiple_of(2) || cursor.len() > 128 {
        return None;
    }
    let bytes = data_encoding::HEXLOWER_PERMISSIVE.decode(cursor.as_bytes()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
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
    cursor: Option<&str>,
    list: ListVersion,
    total: usize,
    builtins: usize,
    page_size: usize,
) -> Result<(std::ops::Range<usize>, Option<String>), McpError> {
    let start = match cursor {
        None => 0,
        Some(c) => match decode(c) {
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
    let next = (end < total).then(|| encode(list, end));
    Ok((start..end, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn v(generation: u64) -> ListVersion {
        ListVersion { generation, servers: 0 }
    }

    #[test]
    fn pages_cover_everything_once_with_the_builtins_on_the_first() {
        let (total, builtins, size) = (23, 3, 2);
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut first = true;
        loop {
            let (range, next) = page(cursor.as_deref(), v(7), total, builtins, size).unwrap();
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
        let stale = encode(v(6), 4);
        let e = page(Some(&stale), v(7), 20, 3, 4).unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("older tool list"), "{}", e.message);
        // The servers' tools changed within one generation: the cursor is stale too.
        let servers_moved = encode(ListVersion { generation: 7, servers: 1 }, 4);
        let e = page(Some(&servers_moved), ListVersion { generation: 7, servers: 2 }, 20, 3, 4).unwrap_err();
        assert!(e.message.contains("MCP servers' tools changed"), "{}", e.message);
        // A cursor of the old format (before the servers' version) is not one of ours any more.
        let old_format = data_encoding::HEXLOWER.encode(b"c1:7:4");
        for bad in ["", "zz", "abc", &encode(v(7), 0), &encode(v(7), 99), "63313a373a34ff", &old_format] {
            let e = page(Some(bad), v(7), 20, 3, 4).unwrap_err();
            assert!(e.message.starts_with("malformed cursor"), "{bad}: {}", e.message);
        }
        assert_eq!(decode(&encode(v(7), 4)), Some((v(7), 4)));
    }
}
