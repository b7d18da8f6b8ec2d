//! `tools/list` while the daemon's tools arrive: a page is answered once the daemon's pages that
//! cover it are here (and one tool more, to know whether another page follows), not after the
//! whole catalog; the bridge then fetches one daemon page ahead.
//!
//! The paged list is the built-in tools, the daemon's in its order, then, only when the first
//! page could not know it yet, `confirm`: it is listed when a tool asks for an agent's
//! confirmation, which the first page knows only of the tools fetched by then. The cursor
//! carries whether the first page listed it, so every page agrees on where each tool is and
//! each is listed exactly once. A list that fits one answer (no `--page-size`, at most
//! [`DEFAULT_PAGE`] tools) waits for the whole catalog, as before.

use rmcp::ErrorData as McpError;
use rmcp::model::Tool;

use super::builtin;
use super::catalog::{Catalogs, Source};
use super::pages::{Cursors, DEFAULT_PAGE, Start, malformed};

/// One `tools/list` answer.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) tools: Vec<Tool>,
    pub(super) next: Option<String>,
    /// The catalog is not complete: how many daemon tools the next page will want (to fetch
    /// ahead).
    pub(super) ahead: Option<usize>,
}

/// How often a listing starts over when the catalog it began with was replaced meanwhile.
const TRIES: usize = 3;

/// The page at `cursor` of this session's tool list (`page_size`: `--page-size`).
pub(super) async fn list(
    catalogs: &Catalogs,
    source: &impl Source,
    cursors: &Cursors,
    cursor: Option<&str>,
    page_size: Option<usize>,
) -> Result<Answer, McpError> {
    let unreachable = |e: crate::error::CliError| match cursor {
        None => {
            tracing::warn!(error = %e, "cordond unreachable; listing built-in tools only");
            Ok(Answer { tools: builtin::tools(None), next: None, ahead: None })
        }
        Some(_) => Err(McpError::internal_error(
            format!("cannot list the tools: {e}; call tools/list again without a cursor once cordond is back"),
            None,
        )),
    };
    let mut tries = 0;
    loop {
        tries += 1;
        let loading = match catalogs.load(source, 1).await {
            Ok(l) => l,
            Err(e) => return unreachable(e),
        };
        let (list, confirms_now) = loading.read(|c, _| (c.list_version(), c.agent_confirms()));
        let start = cursors.start(cursor, list)?;
        let size = match page_size {
            Some(n) => n,
            // A cursor is checked (and refused when stale or not this session's) at any size.
            None if cursor.is_some() => DEFAULT_PAGE,
            None => {
                // One answer when the whole list fits in one: the daemon's tools, then the
                // built-ins.
                let whole = match catalogs.load(source, DEFAULT_PAGE + 1).await {
                    Ok(l) => l.done(),
                    Err(e) => return unreachable(e),
                };
                if let Some(c) = whole {
                    let builtins = builtin::tools(Some(c.agent_confirms()));
                    if c.len() + builtins.len() <= DEFAULT_PAGE {
                        let mut tools: Vec<Tool> = c.mcp_tools().collect();
                        tools.extend(builtins);
                        tracing::debug!(generation = c.generation, tools = tools.len(), "tools/list");
                        return Ok(Answer { tools, next: None, ahead: None });
                    }
                }
                DEFAULT_PAGE
            }
        };
        let start = start.unwrap_or(Start { offset: 0, confirm_first: confirms_now });
        let first = builtin::tools(Some(start.confirm_first));
        let nb = first.len();
        let end = start.offset.saturating_add(if start.offset == 0 { size.max(nb) } else { size });
        // One daemon tool past the page: whether another page follows.
        let want = end.saturating_sub(nb).saturating_add(1);
        let loaded = match catalogs.load(source, want).await {
            Ok(l) => l,
            Err(e) if tries < TRIES => {
                tracing::debug!(error = %e, "the tool list moved while it was listed; again");
                continue;
            }
            Err(e) => return unreachable(e),
        };
        if !std::sync::Arc::ptr_eq(&loaded, &loading) {
            // Another catalog replaced it meanwhile (the registry moved): start over with that
            // one, where a cursor of the old list is refused as stale.
            if tries < TRIES {
                continue;
            }
            return Err(McpError::internal_error(
                "the tool list kept changing while it was listed; call tools/list again without a cursor",
                None,
            ));
        }
        let (entries, late, total) = loaded.read(|c, done| {
            // `confirm` after the daemon's tools, when the first page did not list it.
            let late: Vec<Tool> = match done {
                true => builtin::tools(Some(c.agent_confirms()))
                    .into_iter()
                    .filter(|t| !first.iter().any(|f| f.name == t.name))
                    .collect(),
                false => Vec::new(),
            };
            let total = done.then(|| nb + c.len() + late.len());
            let daemon_end = end.saturating_sub(nb).min(c.len());
            (c.entries(start.offset.saturating_sub(nb), daemon_end).to_vec(), late, total)
        });
        if total.is_some_and(|t| start.offset > 0 && start.offset >= t) {
            return Err(malformed());
        }
        let end = total.map_or(end, |t| end.min(t));
        let mut tools: Vec<Tool> =
            first.into_iter().skip(start.offset).take(end.saturating_sub(start.offset)).collect();
        tools.extend(entries.iter().map(|e| e.mcp_tool()));
        if let Some(t) = total {
            let late_start = t - late.len();
            tools.extend(
                late.into_iter()
                    .enumerate()
                    .filter(|(i, _)| (start.offset..end).contains(&(late_start + i)))
                    .map(|(_, t)| t),
            );
        }
        let next = match total {
            Some(t) if end >= t => None,
            _ => Some(cursors.next(list, Start { offset: end, confirm_first: start.confirm_first })?),
        };
        let ahead = total.is_none().then(|| want.saturating_add(super::catalog::FETCH_PAGE as usize));
        tracing::debug!(generation = list.generation, tools = tools.len(), next = ?next, "tools/list page");
        return Ok(Answer { tools, next, ahead });
    }
}
