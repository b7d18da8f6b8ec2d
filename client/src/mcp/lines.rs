//! The line layer in front of rmcp: reads the JSON-RPC lines from stdin itself, answers every
//! line that rmcp would drop or misanswer, and hands only well-formed messages to rmcp.
//!
//! rmcp's stdio transport drops unparsable lines and lines over its limit without an answer,
//! answers a request whose `params` have the wrong shape without its id (the client waits
//! forever) or as "method not found", and answers malformed notifications. Here every line gets
//! exactly one verdict ([`classify`]):
//!
//! - a request that can be attributed to an id gets an error answer with that id and the code
//!   that says what is wrong: -32700 (not JSON), -32600 (not a valid request), -32601 (unknown
//!   method, answered by rmcp), -32602 (a known method with params of the wrong shape);
//! - a line that cannot be attributed to an id gets -32700 or -32600 with `"id": null`;
//! - notifications and responses never get an answer (a malformed one is logged to stderr);
//! - batches (JSON arrays) get -32600 with a null id: MCP removed JSON-RPC batching in
//!   2025-06-18, rmcp has no batch support, and a 2025-03-26 session is refused the same way
//!   (one message per line works in every version);
//! - a line over [`MAX_LINE`] bytes gets -32600 with the id recovered from its first
//!   [`ID_SCAN_BYTES`] bytes (or null), and the session goes on with the next line.
//!
//! Architecture invariant: stdout carries only JSON-RPC lines, written by one task in order;
//! logs go to stderr.

use std::collections::VecDeque;
use std::io;

use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ClientRequest, JsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::{mpsc, oneshot};

/// The longest line (one JSON-RPC message) read; longer ones are answered and skipped. rmcp's
/// own default, so a payload acceptable to any rmcp server is acceptable here.
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// How much of an oversized line is kept to find its id.
pub const ID_SCAN_BYTES: usize = 64 * 1024;

/// JSON-RPC error codes.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;

/// Requests rmcp parses into a typed variant: for these, params that do not fit are -32602.
const TYPED_REQUESTS: &[&str] = &[
    "ping",
    "initialize",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "subscriptions/listen",
    "resources/subscribe",
    "resources/unsubscribe",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
    "resources/directory/read",
];

/// What to do with one line.
#[derive(Debug)]
pub enum Verdict {
    /// A well-formed message for rmcp.
    Pass(Box<RxJsonRpcMessage<RoleServer>>),
    /// An error response to write, and nothing for rmcp.
    Answer(Value),
    /// Nothing to answer (a blank line, a malformed notification or response); the reason is logged.
    Ignore(String),
}

/// A JSON-RPC error response.
pub fn error_response(id: Option<Value>, code: i64, message: impl Into<String>) -> Value {
    json!({ "jsonrpc": "2.0", "id": id.unwrap_or(Value::Null), "error": { "code": code, "message": message.into() } })
}

/// The verdict on one line (without its `\n`; a trailing `\r` and a leading BOM are allowed).
pub fn classify(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Ignore("blank line".into());
    }
    let value: Value = match std::str::from_utf8(line) {
        Err(e) => {
            return Verdict::Answer(error_response(
                recover_id(line),
                PARSE_ERROR,
                format!(
                    "parse error: the line is not valid UTF-8 (bad byte at offset {}); send one JSON-RPC message per \
                     line, encoded as UTF-8",
                    e.valid_up_to()
                ),
            ));
        }
        Ok(text) => match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                return Verdict::Answer(error_response(
                    recover_id(line),
                    PARSE_ERROR,
                    format!("parse error: {e}; send one JSON-RPC message per line"),
                ));
            }
        },
    };
    classify_value(value)
}

fn classify_value(value: Value) -> Verdict {
    let Value::Object(object) = &value else {
        let what = if value.is_array() {
            "batches (JSON arrays) are not supported: MCP removed JSON-RPC batching in 2025-06-18; send one message \
             per line"
        } else {
            "a JSON-RPC message is a JSON object"
        };
        return Verdict::Answer(error_response(None, INVALID_REQUEST, format!("invalid request: {what}")));
    };
    // The id as the client wrote it, when it is one (a string or an integer); else it cannot be
    // attributed and the answer carries null.
    let id = match object.get("id") {
        None => None,
        Some(v @ Value::String(_)) => Some(Some(v.clone())),
        Some(v @ Value::Number(n)) if n.is_i64() || n.is_u64() => Some(Some(v.clone())),
        Some(_) => Some(None),
    };
    let is_response = object.contains_key("result") || object.contains_key("error");
    let method = object.get("method");
    let Some(id) = id else {
        // No id: a notification (never answered), or nothing we can attribute.
        return match method {
            Some(Value::String(m)) => notification(value.clone(), m),
            Some(_) => Verdict::Ignore("a notification whose method is not a string".into()),
            None if is_response => Verdict::Ignore("a response without an id".into()),
            None => Verdict::Answer(error_response(
                None,
                INVALID_REQUEST,
                "invalid request: neither a request (method and id) nor a notification (method)",
            )),
        };
    };
    if is_response && method.is_none() {
        // A response to one of our requests (ping, elicitation): never answered.
        return match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
            Ok(m @ (JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_))) if id.is_some() => {
                Verdict::Pass(Box::new(m))
            }
            _ => Verdict::Ignore("a malformed response".into()),
        };
    }
    let Some(id) = id else {
        return Verdict::Answer(error_response(
            None,
            INVALID_REQUEST,
            "invalid request: the id must be a string or an integer",
        ));
    };
    let invalid = |what: &str| Verdict::Answer(error_response(Some(id.clone()), INVALID_REQUEST, what));
    if object.get("jsonrpc") != Some(&json!("2.0")) {
        return invalid("invalid request: \"jsonrpc\" must be \"2.0\"");
    }
    let method = match method {
        Some(Value::String(m)) => m.clone(),
        Some(_) => return invalid("invalid request: \"method\" must be a string"),
        None => return invalid("invalid request: a request needs a \"method\""),
    };
    let typed = TYPED_REQUESTS.contains(&method.as_str());
    if !typed {
        // rmcp would answer these too, but with the bare method name as the message.
        return Verdict::Answer(method_not_found(id, &method));
    }
    if let Some(params) = object.get("params")
        && !params.is_object()
    {
        return Verdict::Answer(error_response(
            Some(id),
            INVALID_PARAMS,
            format!("invalid params for {method:?}: \"params\" must be an object"),
        ));
    }
    if id.as_number().is_some_and(|n| !n.is_i64()) {
        return invalid(
            "invalid request: the id is out of range; use an integer that fits in 64 bits signed, or a string",
        );
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(value.clone()) {
        Ok(JsonRpcMessage::Request(r)) if !matches!(r.request, ClientRequest::CustomRequest(_)) => {
            Verdict::Pass(Box::new(JsonRpcMessage::Request(r)))
        }
        // A known method whose params fell through to rmcp's untyped fallback, or did not parse.
        Ok(JsonRpcMessage::Request(_)) | Err(_) => {
            Verdict::Answer(error_response(Some(id), INVALID_PARAMS, params_problem(&method, &value)))
        }
        Ok(_) => invalid("invalid request: not a request"),
    }
}

fn method_not_found(id: Value, method: &str) -> Value {
    error_response(
        Some(id),
        METHOD_NOT_FOUND,
        format!("method not found: {method:?} is not a method this server implements; see the MCP specification"),
    )
}

/// Why a known method's params do not fit: serde's reason for the methods clients use most,
/// else a pointer to the specification (rmcp's untagged fallback hides the reason).
#[allow(deprecated)] // rmcp marks MCP logging deprecated (SEP-2577); `logging/setLevel` is still served.
fn params_problem(method: &str, value: &Value) -> String {
    use rmcp::model::{
        CallToolRequestParams, CompleteRequestParams, GetPromptRequestParams, InitializeRequestParams,
        PaginatedRequestParams, ReadResourceRequestParams, SetLevelRequestParams,
    };
    fn reason<T: serde::de::DeserializeOwned>(params: &Value) -> Option<String> {
        serde_json::from_value::<T>(params.clone()).err().map(|e| e.to_string())
    }
    let params = value.get("params").cloned().unwrap_or(Value::Null);
    let detail = match method {
        "tools/call" => reason::<CallToolRequestParams>(&params),
        "initialize" => reason::<InitializeRequestParams>(&params),
        "logging/setLevel" => reason::<SetLevelRequestParams>(&params),
        "resources/read" => reason::<ReadResourceRequestParams>(&params),
        "prompts/get" => reason::<GetPromptRequestParams>(&params),
        "completion/complete" => reason::<CompleteRequestParams>(&params),
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" if !params.is_null() => {
            reason::<PaginatedRequestParams>(&params)
        }
        _ => None,
    };
    let detail = detail.unwrap_or_else(|| "they do not match the method's params in the MCP specification".into());
    format!("invalid params for {method:?}: {detail}; fix them and send the request again")
}

fn notification(value: Value, method: &str) -> Verdict {
    match serde_json::from_value::<ClientJsonRpcMessage>(value) {
        Ok(JsonRpcMessage::Notification(n)) => match &n.notification {
            ClientNotification::CustomNotification(_) => Verdict::Ignore(format!(
                "a notification this server does not handle, or with malformed params: {method}"
            )),
            _ => Verdict::Pass(Box::new(JsonRpcMessage::Notification(n))),
        },
        _ => Verdict::Ignore(format!("a malformed notification: {method}")),
    }
}

/// The top-level `"id"` of a JSON object that may be cut short or not parse: a small scanner
/// that skips every nested value, so an `"id"` inside `params` is never taken for the request's.
/// Only a complete string or integer counts.
pub fn recover_id(b: &[u8]) -> Option<Value> {
    let b = b.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(b);
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        let is_id = &b[i..key_end] == b"\"id\"";
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        if is_id {
            return match b.get(i)? {
                b'"' => {
                    let end = string_end(b, i)?;
                    serde_json::from_slice::<String>(&b[i..end]).ok().map(Value::String)
                }
                b'-' | b'0'..=b'9' => {
                    let len = b[i..]
                        .iter()
                        .take_while(|c| matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                        .count();
                    if i + len >= b.len() {
                        return None; // cut short: the number may go on
                    }
                    let n: Value = serde_json::from_slice(&b[i..i + len]).ok()?;
                    n.as_number().is_some_and(|n| n.is_i64() || n.is_u64()).then_some(n)
                }
                _ => None,
            };
        }
        i = skip_value(b, i)?;
        i = skip_ws(b, i);
        if b.get(i) != Some(&b',') {
            return None;
        }
        i += 1;
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n')) {
        i += 1;
    }
    i
}

/// `b[i]` is `"`: the index after the closing quote.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match b.get(j)? {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
}

/// The index after the value starting at `b[i]`.
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let len =
                b[i..].iter().take_while(|c| !matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')).count();
            (i + len < b.len()).then_some(i + len)
        }
    }
}

/// One line read from the input.
#[derive(Debug)]
enum Read {
    Line,
    /// The line passed [`MAX_LINE`]; its head is in the buffer, the rest is being skipped.
    Oversized,
    Eof,
}

/// Bounded, cancel-safe line reading: the state lives in the struct, so a read dropped by
/// rmcp's `select!` resumes where it stopped.
#[derive(Debug)]
struct LineReader<R> {
    read: BufReader<R>,
    line: Vec<u8>,
    max: usize,
    /// Skipping the rest of an oversized line.
    discarding: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    async fn next(&mut self) -> io::Result<Read> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                // A last line without its newline is still a line.
                if !self.line.is_empty() && !self.discarding {
                    return Ok(Read::Line);
                }
                self.discarding = false;
                return Ok(Read::Eof);
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            let mut step = None;
            if self.discarding {
                if newline.is_some() {
                    self.discarding = false;
                }
            } else if self.line.len() + take > self.max {
                let keep = ID_SCAN_BYTES.saturating_sub(self.line.len()).min(take);
                self.line.extend_from_slice(&available[..keep]);
                self.line.truncate(ID_SCAN_BYTES);
                self.discarding = newline.is_none();
                step = Some(Read::Oversized);
            } else {
                self.line.extend_from_slice(&available[..take]);
                if newline.is_some() {
                    step = Some(Read::Line);
                }
            }
            self.read.consume(take);
            if let Some(step) = step {
                return Ok(step);
            }
        }
    }
}

/// What the writer task writes.
#[derive(Debug)]
enum Out {
    Line(Vec<u8>),
    Flush(oneshot::Sender<()>),
}

/// rmcp's transport for `cordon mcp`: lines in through [`classify`], lines out through one
/// writer task.
#[derive(Debug)]
pub struct LineTransport<R> {
    reader: LineReader<R>,
    /// Told of every line answered here with an error (see [`LineTransport::reporting`]).
    reporter: Option<Reporter>,
    out: mpsc::Sender<Out>,
    /// Answers waiting for room in the writer's queue (taken only once room is reserved, so a
    /// cancelled `receive` loses none).
    answers: VecDeque<Vec<u8>>,
}

impl<R: AsyncRead + Unpin + Send> LineTransport<R> {
    pub fn new<W: AsyncWrite + Unpin + Send + 'static>(read: R, write: W) -> Self {
        Self::with_max_line(read, write, MAX_LINE)
    }

    pub fn with_max_line<W: AsyncWrite + Unpin + Send + 'static>(read: R, write: W, max: usize) -> Self {
        let (out, rx) = mpsc::channel(256);
        tokio::spawn(write_lines(write, rx));
        LineTransport {
            reader: LineReader { read: BufReader::new(read), line: Vec::new(), max, discarding: false },
            reporter: None,
            out,
            answers: VecDeque::new(),
        }
    }
}

impl<R> LineTransport<R> {
    /// Tells `reporter` of every line answered here with an error (cordond records them).
    pub fn reporting(mut self, reporter: Reporter) -> Self {
        self.reporter = Some(reporter);
        self
    }
}

/// Told of a line the transport refused: its method (when the line was JSON with one), the
/// JSON-RPC error's name (`PARSE_ERROR`, ...) and message.
#[derive(Clone)]
pub struct Reporter(pub std::sync::Arc<dyn Fn(String, &'static str, String) + Send + Sync>);

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reporter")
    }
}

/// The name of a JSON-RPC error code.
pub fn error_name(code: i64) -> &'static str {
    match code {
        PARSE_ERROR => "PARSE_ERROR",
        INVALID_REQUEST => "INVALID_REQUEST",
        METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
        INVALID_PARAMS => "INVALID_PARAMS",
        _ => "JSONRPC_ERROR",
    }
}

async fn write_lines<W: AsyncWrite + Unpin>(mut write: W, mut rx: mpsc::Receiver<Out>) {
    while let Some(out) = rx.recv().await {
        match out {
            Out::Line(bytes) => {
                if let Err(e) = write.write_all(&bytes).await {
                    tracing::error!(error = %e, "cannot write to stdout; the session ends");
                    return;
                }
                // Flush when nothing else is queued, so a burst is written in few syscalls.
                if rx.is_empty()
                    && let Err(e) = write.flush().await
                {
                    tracing::error!(error = %e, "cannot write to stdout; the session ends");
                    return;
                }
            }
            Out::Flush(done) => {
                let _ = write.flush().await;
                let _ = done.send(());
            }
        }
    }
    let _ = write.flush().await;
}

fn to_line(v: &impl serde::Serialize) -> io::Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(v).map_err(io::Error::other)?;
    bytes.push(b'\n');
    Ok(bytes)
}

impl<R: AsyncRead + Unpin + Send> rmcp::transport::Transport<RoleServer> for LineTransport<R> {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = self.out.clone();
        let line = to_line(&item);
        async move {
            out.send(Out::Line(line?)).await.map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "stdout is closed"))
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            while !self.answers.is_empty() {
                let permit = self.out.reserve().await.ok()?;
                if let Some(answer) = self.answers.pop_front() {
                    permit.send(Out::Line(answer));
                }
            }
            let read = match self.reader.next().await {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read stdin; the session ends");
                    return None;
                }
            };
            let verdict = match read {
                Read::Eof => return None,
                Read::Line => {
                    let line = self.reader.line.strip_suffix(b"\n").unwrap_or(&self.reader.line);
                    classify(line)
                }
                Read::Oversized => Verdict::Answer(error_response(
                    recover_id(&self.reader.line),
                    INVALID_REQUEST,
                    format!(
                        "invalid request: the line is longer than {} bytes, the most one message may take; it was \
                         skipped",
                        self.reader.max
                    ),
                )),
            };
            let method = match (&verdict, &self.reporter) {
                (Verdict::Answer(_), Some(_)) => serde_json::from_slice::<Value>(&self.reader.line)
                    .ok()
                    .and_then(|v| v.get("method").and_then(Value::as_str).map(str::to_string))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            self.reader.line.clear();
            match verdict {
                Verdict::Pass(message) => return Some(*message),
                Verdict::Answer(answer) => {
                    tracing::debug!(answer = %answer, "answered an invalid line");
                    if let Some(Reporter(report)) = &self.reporter {
                        let error = &answer["error"];
                        let code = error_name(error["code"].as_i64().unwrap_or_default());
                        report(method, code, error["message"].as_str().unwrap_or_default().to_string());
                    }
                    match to_line(&answer) {
                        Ok(bytes) => self.answers.push_back(bytes),
                        Err(e) => tracing::error!(error = %e, "cannot encode an error answer"),
                    }
                }
                Verdict::Ignore(why) => tracing::debug!(why, "ignored a line"),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Everything queued is written before the process exits.
        let (done, flushed) = oneshot::channel();
        if self.out.send(Out::Flush(done)).await.is_ok() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), flushed).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn answer(line: &[u8]) -> Value {
        match classify(line) {
            Verdict::Answer(a) => a,
            other => panic!("expected an answer for {:?}, got {other:?}", String::from_utf8_lossy(line)),
        }
    }

    fn code_and_id(a: &Value) -> (i64, Value) {
        (a["error"]["code"].as_i64().unwrap(), a["id"].clone())
    }

    #[test]
    fn each_malformed_line_gets_the_code_that_names_its_fault() {
        let cases: &[(&[u8], i64, Value)] = &[
            (b"garbage", PARSE_ERROR, Value::Null),
            (b"\xff\xfe", PARSE_ERROR, Value::Null),
            (b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}}", PARSE_ERROR, json!(7)),
            (b"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"ping\"", PARSE_ERROR, json!("a")),
            (b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":[1]}", INVALID_PARAMS, json!(1)),
            (
                b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":5}}",
                INVALID_PARAMS,
                json!(2),
            ),
            (b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":7}", INVALID_PARAMS, json!(3)),
            (b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"nosuch\",\"params\":[1]}", METHOD_NOT_FOUND, json!(4)),
            (b"{\"jsonrpc\":\"2.0\",\"id\":5}", INVALID_REQUEST, json!(5)),
            (b"{\"jsonrpc\":\"1.0\",\"id\":6,\"method\":\"ping\"}", INVALID_REQUEST, json!(6)),
            (b"{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":9}", INVALID_REQUEST, json!(8)),
            (b"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}", INVALID_REQUEST, Value::Null),
            (b"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}", INVALID_REQUEST, Value::Null),
            (
                b"{\"jsonrpc\":\"2.0\",\"id\":18446744073709551615,\"method\":\"ping\"}",
                INVALID_REQUEST,
                json!(u64::MAX),
            ),
            (b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", INVALID_REQUEST, Value::Null),
            (b"[]", INVALID_REQUEST, Value::Null),
            (b"42", INVALID_REQUEST, Value::Null),
            (b"{}", INVALID_REQUEST, Value::Null),
        ];
        for (line, code, id) in cases {
            let a = answer(line);
            assert_eq!(code_and_id(&a), (*code, id.clone()), "{}", String::from_utf8_lossy(line));
            assert!(!a["error"]["message"].as_str().unwrap().is_empty());
        }
    }

    #[test]
    fn invalid_params_say_what_is_wrong() {
        let a = answer(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}"#);
        assert_eq!(
            a["error"]["message"],
            "invalid params for \"tools/call\": invalid type: integer `5`, expected a string; fix them and send \
             the request again"
        );
        let a = answer(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#);
        assert!(a["error"]["message"].as_str().unwrap().contains("missing field `name`"), "{a}");
    }

    #[test]
    fn valid_messages_pass_and_notifications_are_never_answered() {
        for line in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#[..],
            br#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}"#,
            b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\r",
            br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            br#"{"jsonrpc":"2.0","id":3,"result":{}}"#,
        ] {
            assert!(matches!(classify(line), Verdict::Pass(_)), "{}", String::from_utf8_lossy(line));
        }
        for line in [
            &br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#[..],
            br#"{"jsonrpc":"2.0","method":"notifications/whatever"}"#,
            br#"{"jsonrpc":"2.0","method":7}"#,
            br#"{"jsonrpc":"2.0","result":{}}"#,
            br#"{"jsonrpc":"2.0","id":[1],"result":{}}"#,
            b"",
            b"  \r",
        ] {
            assert!(matches!(classify(line), Verdict::Ignore(_)), "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn the_id_is_recovered_from_the_top_level_only() {
        assert_eq!(recover_id(br#"{"params":{"id":5},"id":7,"x":"#), Some(json!(7)));
        assert_eq!(recover_id(br#"{"params":{"id":5,"s":"}\"{"},"id":"q\"r"}"#), Some(json!("q\"r")));
        assert_eq!(recover_id(br#"{"params":{"id":5},"x":"aaaa"#), None);
        assert_eq!(recover_id(br#"{"id":12"#), None, "a number cut short may go on");
        assert_eq!(recover_id(br#"{"id":1.5}"#), None);
        assert_eq!(recover_id(br#"["id",1]"#), None);
    }

    /// The transport itself: an over-long line is answered with its id and skipped, a line split
    /// across reads is whole, the next line passes, and a last line without a newline counts.
    #[tokio::test]
    async fn an_over_long_line_is_answered_and_the_session_goes_on() {
        use rmcp::transport::Transport as _;
        use tokio::io::AsyncReadExt as _;
        let (mut client_in, server_in) = tokio::io::duplex(64);
        let (server_out, mut client_out) = tokio::io::duplex(1 << 16);
        let mut t = LineTransport::with_max_line(server_in, server_out, 100);
        let writer = tokio::spawn(async move {
            let long = format!("{{\"jsonrpc\":\"2.0\",\"id\":41,\"method\":\"ping\",\"x\":\"{}\"}}\n", "a".repeat(500));
            client_in.write_all(long.as_bytes()).await.unwrap();
            client_in.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"ping\"}\n").await.unwrap();
            client_in.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":43,\"method\":\"ping\"}").await.unwrap();
        });
        for want in [42, 43] {
            match t.receive().await {
                Some(JsonRpcMessage::Request(r)) => assert_eq!(serde_json::to_value(&r.id).unwrap(), json!(want)),
                other => panic!("expected ping {want}, got {other:?}"),
            }
        }
        writer.await.unwrap();
        assert!(t.receive().await.is_none(), "end of input ends the session");
        t.close().await.unwrap();
        drop(t);
        let mut out = String::new();
        client_out.read_to_string(&mut out).await.unwrap();
        let answers: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(answers.len(), 1, "{out}");
        assert_eq!(code_and_id(&answers[0]), (INVALID_REQUEST, json!(41)));
        assert!(answers[0]["error"]["message"].as_str().unwrap().contains("longer than 100 bytes"));
    }

    fn request_id() -> impl Strategy<Value = Value> {
        prop_oneof![any::<i64>().prop_map(|n| json!(n)), "[a-z0-9-]{0,12}".prop_map(Value::String)]
    }

    /// Values of every JSON shape, small.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn method() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(TYPED_REQUESTS).prop_map(str::to_string),
            Just("notifications/initialized".to_string()),
            Just("notifications/cancelled".to_string()),
            "[a-z/]{0,12}",
        ]
    }

    fn params() -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            Just(None),
            any_json().prop_map(Some),
            Just(Some(json!({ "name": "echo", "arguments": { "text": "a" } }))),
            Just(Some(json!({ "level": "info" }))),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_bytes_never_panic_and_never_pass_garbage(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let bytes: Vec<u8> = bytes.into_iter().filter(|b| *b != b'\n').collect();
            match classify(&bytes) {
                Verdict::Answer(a) => {
                    let code = a["error"]["code"].as_i64().unwrap();
                    prop_assert!([PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS, METHOD_NOT_FOUND].contains(&code));
                }
                Verdict::Pass(_) | Verdict::Ignore(_) => {}
            }
            let _ = recover_id(&bytes);
        }

        #[test]
        fn a_request_with_an_id_is_passed_or_answered_with_that_id(
            id in request_id(), method in method(), params in params(), jsonrpc in prop_oneof![Just(json!("2.0")), any_json()],
            prefix in 0usize..200,
        ) {
            let mut request = json!({ "jsonrpc": jsonrpc, "id": id, "method": method });
            if let Some(p) = params {
                request["params"] = p;
            }
            let line = serde_json::to_vec(&request).unwrap();
            match classify(&line) {
                Verdict::Pass(m) => match *m {
                    JsonRpcMessage::Request(r) => prop_assert_eq!(serde_json::to_value(&r.id).unwrap(), id.clone()),
                    other => prop_assert!(false, "a request passed as {:?}", other),
                },
                Verdict::Answer(a) => prop_assert_eq!(&a["id"], &id),
                Verdict::Ignore(why) => prop_assert!(false, "a request was ignored: {}", why),
            }
            // The same line cut short (as an over-long line is) yields its id or none, never another.
            let cut = &line[..prefix.min(line.len())];
            if let Some(found) = recover_id(cut) {
                prop_assert_eq!(found, id);
            }
        }

        #[test]
        fn a_notification_is_never_answered(method in method(), params in params()) {
            let mut n = json!({ "jsonrpc": "2.0", "method": method });
            if let Some(p) = params {
                n["params"] = p;
            }
            let line = serde_json::to_vec(&n).unwrap();
            match classify(&line) {
                Verdict::Answer(a) => prop_assert!(false, "a notification was answered: {}", a),
                Verdict::Pass(m) => prop_assert!(matches!(*m, JsonRpcMessage::Notification(_))),
                Verdict::Ignore(_) => {}
            }
        }
    }
}
