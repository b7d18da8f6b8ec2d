//! Reading records back: the last matching ones, across rotated files.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::Value;

use super::Decision;
use super::chain;

/// Which records a reader wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub tool: Option<String>,
    pub decision: Option<Decision>,
}

impl Filter {
    pub fn matches(&self, record: &Value) -> bool {
        let field = |key: &str| record.get(key).and_then(Value::as_str);
        self.tool.as_deref().is_none_or(|t| field("tool") == Some(t))
            && self.decision.is_none_or(|d| field("decision") == Some(d.as_str()))
    }
}

/// The seq of a record line (0 when it has none).
pub fn seq_of(line: &str) -> u64 {
    serde_json::from_str::<Value>(line).ok().and_then(|v| v.get("seq").and_then(Value::as_u64)).unwrap_or(0)
}

/// The last `n` records matching `filter`, oldest first, and the seq of the last record read
/// (matching or not), from `path` and, when needed, its rotated files.
pub fn last(path: &Path, n: usize, filter: &Filter) -> std::io::Result<(Vec<String>, u64)> {
    let files = chain::chain_files(path)?;
    let mut found: VecDeque<String> = VecDeque::new();
    let mut last_seq = 0;
    for (i, file) in files.iter().rev().enumerate() {
        let (lines, file_last) = last_in(file, n - found.len().min(n), filter)?;
        if i == 0 {
            last_seq = file_last;
        }
        for line in lines.into_iter().rev() {
            found.push_front(line);
        }
        if found.len() >= n {
            break;
        }
    }
    Ok((found.into(), last_seq))
}

fn last_in(path: &Path, n: usize, filter: &Filter) -> std::io::Result<(VecDeque<String>, u64)> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((VecDeque::new(), 0)),
        Err(e) => return Err(e),
    };
    let mut ring = VecDeque::with_capacity(n.min(4096));
    let mut last_seq = 0;
    for line in BufReader::new(file).lines() {
        let line = line?;
        let Ok(record) = serde_json::from_str::<Value>(&line) else { continue };
        last_seq = record.get("seq").and_then(Value::as_u64).unwrap_or(last_seq);
        if n > 0 && filter.matches(&record) {
            if ring.len() == n {
                ring.pop_front();
            }
            ring.push_back(line);
        }
    }
    Ok((ring, last_seq))
}
