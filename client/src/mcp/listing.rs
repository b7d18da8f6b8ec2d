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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use cordon_proto::v1;
    use serde_json::json;

    use super::*;
    use crate::api::ToolInfo;
    use crate::error::CliError;
    use crate::mcp::pages::ListVersion;

    /// A daemon's `ListTools` in pages of `per_page`, counting the requests; its tokens name
    /// the generation and refuse another's, as cordond's do.
    struct Fake {
        per_page: usize,
        registry: Mutex<(u64, Vec<ToolInfo>)>,
        requests: AtomicUsize,
    }

    impl Fake {
        fn new(generation: u64, tools: Vec<ToolInfo>, per_page: usize) -> Fake {
            Fake { per_page, registry: Mutex::new((generation, tools)), requests: AtomicUsize::new(0) }
        }

        fn requests(&self) -> usize {
            self.requests.load(Ordering::SeqCst)
        }
    }

    impl Source for Fake {
        async fn page(&self, _size: u32, token: String) -> Result<(u64, Vec<ToolInfo>, String), CliError> {
            self.requests.fetch_add(1, Ordering::SeqCst);
            let (generation, tools) = self.registry.lock().unwrap().clone();
            let start = match token.split_once(':') {
                None => 0,
                Some((g, _)) if g != generation.to_string() => {
                    return Err(CliError::Protocol("this page token belongs to another generation".into()));
                }
                Some((_, at)) => at.parse().unwrap(),
            };
            let end = (start + self.per_page).min(tools.len());
            let next = if end < tools.len() { format!("{generation}:{end}") } else { String::new() };
            Ok((generation, tools[start..end].to_vec(), next))
        }
    }

    /// A tool with one integer param `count` of 1 to 5.
    fn tool(name: &str, agent_confirms: bool) -> ToolInfo {
        let count = v1::Param {
            name: "count".into(),
            r#type: "integer".into(),
            required: true,
            rules: Some(v1::param::Rules::IntegerRules(v1::IntegerRules { min: Some(1), max: Some(5) })),
            ..v1::Param::default()
        };
        ToolInfo::from(v1::Tool {
            name: name.into(),
            description: format!("{name} does things"),
            available: true,
            params: vec![count],
            input_schema_json: r#"{"type":"object","properties":{"count":{"type":"integer","minimum":1,"maximum":5}},"required":["count"],"additionalProperties":false}"#.into(),
            confirm: if agent_confirms { v1::Confirm::Agent } else { v1::Confirm::None } as i32,
            ..v1::Tool::default()
        })
    }

    /// `n` tools `t-000`...; the one at `confirming` asks for an agent's confirmation.
    fn tools(n: usize, confirming: Option<usize>) -> Vec<ToolInfo> {
        (0..n).map(|i| tool(&format!("t-{i:03}"), confirming == Some(i))).collect()
    }

    /// Every page from the first, following the cursors: the names in order, and the pages.
    async fn walk(catalogs: &Catalogs, fake: &Fake, cursors: &Cursors, size: usize) -> (Vec<String>, usize) {
        let (mut names, mut pages, mut cursor) = (Vec::new(), 0, None::<String>);
        loop {
            let answer = list(catalogs, fake, cursors, cursor.as_deref(), Some(size)).await.unwrap();
            pages += 1;
            names.extend(answer.tools.iter().map(|t| t.name.to_string()));
            match answer.next {
                Some(next) => cursor = Some(next),
                None => return (names, pages),
            }
        }
    }

    fn builtin_names(agent_confirms: bool) -> Vec<String> {
        builtin::tools(Some(agent_confirms)).iter().map(|t| t.name.to_string()).collect()
    }

    #[tokio::test]
    async fn the_first_page_is_answered_from_the_daemon_pages_that_cover_it() {
        let (catalogs, cursors) = (Catalogs::default(), Cursors::default());
        let fake = Fake::new(1, tools(50, None), 10);
        let answer = list(&catalogs, &fake, &cursors, None, Some(20)).await.unwrap();
        let nb = builtin_names(false).len();
        assert_eq!(answer.tools.len(), 20);
        // 20 - nb daemon tools and one more (is there a next page?): two daemon pages of five.
        assert_eq!(fake.requests(), (20 - nb + 1).div_ceil(10));
        assert!(answer.next.is_some());
        assert!(answer.ahead.is_some(), "the catalog is not complete yet");
        // The next page fetches only what it covers, too.
        let second = list(&catalogs, &fake, &cursors, answer.next.as_deref(), Some(20)).await.unwrap();
        assert_eq!(second.tools.len(), 20);
        assert_eq!(fake.requests(), (40 - nb + 1).div_ceil(10));
        // Fetching ahead fetches up to what it is told, once.
        catalogs.read_ahead(&fake, 45).await;
        catalogs.read_ahead(&fake, 45).await;
        assert_eq!(fake.requests(), 5);
    }

    #[tokio::test]
    async fn the_pages_list_every_tool_exactly_once_with_the_builtins_first() {
        for (confirming, confirm_first) in [(None, false), (Some(3), true), (Some(47), false)] {
            let (catalogs, cursors) = (Catalogs::default(), Cursors::default());
            let fake = Fake::new(1, tools(50, confirming), 10);
            let (names, pages) = walk(&catalogs, &fake, &cursors, 7).await;
            let mut expected = builtin_names(confirm_first);
            expected.extend((0..50).map(|i| format!("t-{i:03}")));
            if confirming.is_some() && !confirm_first {
                // A tool beyond the first page asks for an agent's confirmation: `confirm` last.
                expected.push(builtin::CONFIRM_TOOL.to_string());
            }
            assert_eq!(names, expected, "{confirming:?}");
            assert_eq!(names.iter().collect::<HashSet<_>>().len(), names.len());
            assert!(pages > 7, "{pages}");
            // Walked again from a new start: the catalog is whole now, so the first page knows
            // whether `confirm` is listed, and lists it among the built-ins.
            let mut whole = builtin_names(confirming.is_some());
            whole.extend((0..50).map(|i| format!("t-{i:03}")));
            assert_eq!(walk(&catalogs, &fake, &cursors, 7).await.0, whole);
        }
    }

    #[tokio::test]
    async fn a_registry_change_between_pages_refuses_the_old_cursor() {
        let (catalogs, cursors) = (Catalogs::default(), Cursors::default());
        let fake = Fake::new(1, tools(50, None), 10);
        let first = list(&catalogs, &fake, &cursors, None, Some(20)).await.unwrap();
        *fake.registry.lock().unwrap() = (2, tools(30, None));
        // The daemon refuses the next page's token of generation 1: the catalog is fetched
        // again from the first page, and the cursor of generation 1 is refused.
        let e = list(&catalogs, &fake, &cursors, first.next.as_deref(), Some(20)).await.unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("older tool list (generation 1"), "{}", e.message);
        let (names, _) = walk(&catalogs, &fake, &cursors, 20).await;
        assert_eq!(names.len(), builtin_names(false).len() + 30);
        // After the watcher's invalidation too.
        let first = list(&catalogs, &fake, &cursors, None, Some(20)).await.unwrap();
        *fake.registry.lock().unwrap() = (3, tools(40, None));
        catalogs.invalidate();
        let e = list(&catalogs, &fake, &cursors, first.next.as_deref(), Some(20)).await.unwrap_err();
        assert!(e.message.contains("older tool list (generation 2"), "{}", e.message);
        // A cursor past the end of the list is not one this session made for it.
        let past = cursors.next(ListVersion { generation: 3, servers: 0 }, Start { offset: 500, confirm_first: false });
        let e = list(&catalogs, &fake, &cursors, Some(&past.unwrap()), Some(20)).await.unwrap_err();
        assert!(e.message.starts_with("malformed cursor"), "{}", e.message);
    }

    #[tokio::test]
    async fn a_call_of_a_tool_not_fetched_yet_fetches_it_and_checks_its_arguments() {
        let (catalogs, cursors) = (Catalogs::default(), Cursors::default());
        let fake = Fake::new(1, tools(50, None), 10);
        list(&catalogs, &fake, &cursors, None, Some(20)).await.unwrap();
        assert_eq!(fake.requests(), 2);
        let listed = catalogs.entry(&fake, "t-000").await.unwrap().unwrap();
        assert_eq!(fake.requests(), 2, "a tool already here needs no fetch");
        let later = catalogs.entry(&fake, "t-049").await.unwrap().unwrap();
        assert_eq!(fake.requests(), 5, "the remaining pages were fetched");
        assert_eq!(later.info.name, "t-049");
        // Checked exactly as a tool of the first page: the same refusal, and good arguments pass.
        let refusal = |e: &crate::mcp::catalog::Entry, args| {
            let check = e.check();
            let check = check.as_ref().as_ref().unwrap();
            check.check(&args).map_err(|r| (r.code, r.field, r.message))
        };
        let bad = refusal(&later, json!({"count": 9})).unwrap_err();
        assert_eq!(bad, refusal(&listed, json!({"count": 9})).unwrap_err());
        assert_eq!(bad.1.as_deref(), Some("count"), "{bad:?}");
        assert_eq!(refusal(&later, json!({})), refusal(&listed, json!({})));
        assert!(refusal(&later, json!({})).is_err());
        assert_eq!(refusal(&later, json!({"count": 3})), Ok(()));
        // A tool the whole catalog lacks: the catalog, for "did you mean".
        let unknown = catalogs.entry(&fake, "t-999").await.unwrap().unwrap_err();
        assert_eq!(unknown.len(), 50);
    }

    #[tokio::test]
    async fn a_short_list_without_a_page_size_is_one_answer() {
        let (catalogs, cursors) = (Catalogs::default(), Cursors::default());
        let fake = Fake::new(1, tools(50, Some(10)), 10);
        let answer = list(&catalogs, &fake, &cursors, None, None).await.unwrap();
        assert!(answer.next.is_none() && answer.ahead.is_none());
        let names: Vec<String> = answer.tools.iter().map(|t| t.name.to_string()).collect();
        let mut expected: Vec<String> = (0..50).map(|i| format!("t-{i:03}")).collect();
        expected.extend(builtin_names(true));
        assert_eq!(names, expected);
    }
}
