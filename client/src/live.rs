//! `cordon run`'s live output: the tool's stdout and stderr written as cordond reads them, each
//! chunk to the same stream and flushed; at the end, what the live view did not show, from the
//! result. Printed bytes are exactly the result's bytes (see `OutputChunk` in the proto): per
//! stream, a chunk is printed only when it starts where the last one ended, and the rest comes
//! from the result. Writing happens on a thread of its own fed through a small bounded queue, so a
//! slow reader of our stdout stops us reading cordond's stream (cordond then stops reading the
//! tool's pipes, and the tool waits in `write`) while Ctrl-C is still heard. That thread starts
//! with the first thing to write (a run that prints nothing starts none: a thread costs the
//! one-shot `cordon run` more than its whole request), and tells its end through a channel, so
//! waiting for it takes no thread either. On a terminal a long
//! quiet run shows `running TOOL… 12s` on stderr. The first Ctrl-C cancels the invocation in
//! cordond (its process group is killed; the result says cancelled); a second stops waiting.

use std::future::Future;
use std::io::{IsTerminal as _, Write};
use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{mpsc, oneshot};

use crate::api::{Client, Event, Events, Invocation, RunResult, Step};
use crate::error::CliError;
use crate::term::{self, errln};

/// How long a run must be quiet before the elapsed time shows.
const QUIET: Duration = Duration::from_secs(2);
/// How often the elapsed time is redrawn.
const TICK: Duration = Duration::from_millis(500);
/// Chunks queued for the writer (each at most 64 KiB).
const QUEUE: usize = 4;
/// Erases the line the cursor is on and goes to its start.
const CLEAR_LINE: &[u8] = b"\r\x1b[2K";

/// What was printed of each stream so far, and whether its live view ended at a gap.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Shown {
    printed: [u64; 2],
    gap: [bool; 2],
}

impl Shown {
    /// The part of a chunk to print now: the bytes past what was printed, when the chunk starts
    /// at or before that point; nothing once a chunk started past it (a gap: that stream's
    /// live view ends and the result fills in the rest).
    pub fn accept<'a>(&mut self, stderr: bool, offset: u64, data: &'a [u8]) -> &'a [u8] {
        let i = usize::from(stderr);
        if self.gap[i] {
            return &[];
        }
        let printed = self.printed[i];
        if offset > printed {
            self.gap[i] = true;
            return &[];
        }
        let skip = usize::try_from(printed - offset).unwrap_or(usize::MAX);
        let new = data.get(skip..).unwrap_or(&[]);
        self.printed[i] += new.len() as u64;
        new
    }

    /// What of `result`'s bytes for this stream is still to print. None when more was printed
    /// than the result has (cordond broke the protocol; nothing more is printed).
    pub fn rest<'a>(&self, stderr: bool, result: &'a [u8]) -> Option<&'a [u8]> {
        let printed = usize::try_from(self.printed[usize::from(stderr)]).ok()?;
        result.get(printed..)
    }
}

/// What the writer thread is asked to do.
#[derive(Debug)]
enum Msg {
    Output {
        stderr: bool,
        data: Vec<u8>,
    },
    /// Redraw the elapsed time if the run has been quiet long enough.
    Tick,
    /// The tool's name, once cordond said it (`cordon confirm TOKEN` starts without it).
    Tool(String),
}

/// The writer thread: output in order, each chunk flushed, and the elapsed-time line.
struct Writer {
    tool: String,
    started: Instant,
    spinner: bool,
    /// The spinner line on the screen, if any.
    drawn: Option<String>,
    last_output: Instant,
    /// The last byte that reached the terminal ended a line (or nothing was printed yet): only
    /// then may the spinner take the line (it would otherwise erase a partial line).
    at_line_start: bool,
    stdout_is_tty: bool,
    /// Writing to this stream failed (a closed pipe): nothing more goes to it.
    failed: [bool; 2],
}

impl Writer {
    /// Writes what comes until the queue closes, then says so on `done`.
    fn run(mut self, mut rx: mpsc::Receiver<Msg>, done: oneshot::Sender<()>) {
        while let Some(msg) = rx.blocking_recv() {
            match msg {
                Msg::Output { stderr, data } => self.output(stderr, &data),
                Msg::Tick => self.tick(),
                Msg::Tool(name) => self.tool = name,
            }
        }
        self.clear();
        let _ = done.send(());
    }

    fn output(&mut self, stderr: bool, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.clear();
        let i = usize::from(stderr);
        if !self.failed[i] {
            let written = if stderr {
                write_flushed(std::io::stderr().lock(), data)
            } else {
                write_flushed(std::io::stdout().lock(), data)
            };
            self.failed[i] = written.is_err();
        }
        if stderr || self.stdout_is_tty {
            self.at_line_start = data.last() == Some(&b'\n');
        }
        self.last_output = Instant::now();
    }

    fn tick(&mut self) {
        if !self.spinner || !self.at_line_start || self.last_output.elapsed() < QUIET || self.failed[1] {
            return;
        }
        let text = format!("running {}\u{2026} {}s", term::line(&self.tool), self.started.elapsed().as_secs());
        if self.drawn.as_ref() == Some(&text) {
            return;
        }
        let mut err = std::io::stderr().lock();
        let drawn = err.write_all(CLEAR_LINE).and_then(|()| err.write_all(text.as_bytes())).and_then(|()| err.flush());
        self.drawn = drawn.is_ok().then_some(text);
    }

    fn clear(&mut self) {
        if self.drawn.take().is_some() {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(CLEAR_LINE).and_then(|()| err.flush());
        }
    }
}

fn write_flushed(mut to: impl Write, data: &[u8]) -> std::io::Result<()> {
    to.write_all(data)?;
    to.flush()
}

/// A Cancel call on its way.
type Cancelling = Pin<Box<dyn Future<Output = Result<bool, CliError>>>>;

/// `cordon run`'s output and Ctrl-C, for one run (which may follow two streams: the call, and
/// after a human approval, its confirmation).
#[derive(Debug)]
pub struct Live {
    tool: String,
    /// Where output goes: nowhere yet (`--json` prints it with the result, as one JSON object),
    /// a writer not started yet, or the running writer thread.
    out: Out,
    spinner: bool,
    shown: Shown,
    interrupt: Signal,
    interrupts: u32,
}

/// The writer thread's state.
#[derive(Debug)]
enum Out {
    /// `--json`, or the writer was ended or abandoned.
    None,
    /// Live output, nothing written yet: the writer to start with the first thing to write.
    Idle(Box<Writer>),
    /// The writer thread: its queue, and the channel it says its end on.
    Running(mpsc::Sender<Msg>, oneshot::Receiver<()>),
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("tool", &self.tool).finish_non_exhaustive()
    }
}

impl Live {
    /// `live`: print output as it arrives (false for `--json`).
    pub fn new(tool: &str, live: bool) -> Result<Live, CliError> {
        let interrupt =
            signal(SignalKind::interrupt()).map_err(|e| CliError::Other(format!("cannot watch for Ctrl-C: {e}")))?;
        let stderr_tty = std::io::stderr().is_terminal();
        let spinner = live && stderr_tty && term::colour(term::Stream::Err);
        let out = if live {
            Out::Idle(Box::new(Writer {
                tool: tool.to_string(),
                started: Instant::now(),
                spinner,
                drawn: None,
                last_output: Instant::now(),
                at_line_start: true,
                stdout_is_tty: std::io::stdout().is_terminal(),
                failed: [false; 2],
            }))
        } else {
            Out::None
        };
        Ok(Live { tool: tool.to_string(), out, spinner, shown: Shown::default(), interrupt, interrupts: 0 })
    }

    /// The writer's queue, once its thread runs.
    fn sender(&self) -> Option<mpsc::Sender<Msg>> {
        match &self.out {
            Out::Running(tx, _) => Some(tx.clone()),
            Out::None | Out::Idle(_) => None,
        }
    }

    /// The writer's queue, its thread started now if it was not yet (None for `--json`).
    fn start(&mut self) -> Option<mpsc::Sender<Msg>> {
        if let Out::Idle(_) = self.out {
            let Out::Idle(writer) = std::mem::replace(&mut self.out, Out::None) else { return None };
            let (tx, rx) = mpsc::channel(QUEUE);
            let (done, ended) = oneshot::channel();
            // The thread is never joined: it says its end on `done`, and nothing is left for it to
            // do after that.
            std::thread::spawn(move || writer.run(rx, done));
            self.out = Out::Running(tx, ended);
        }
        self.sender()
    }

    /// Awaits `work` (a call whose answer cordond only sends once the call was admitted, or a
    /// person approved it), or None on Ctrl-C: `work` is dropped, and so is the call.
    pub async fn or_interrupt<T>(&mut self, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            r = work => Some(r),
            _ = self.interrupt.recv() => None,
        }
    }

    /// The tool's name (as cordond accepted it, once it did).
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// Whether to ask cordond for live output.
    pub fn streams(&self) -> bool {
        !matches!(self.out, Out::None)
    }

    /// Reads the invocation's events to its end, printing live output, cancelling on Ctrl-C.
    /// None: we stopped waiting (Ctrl-C before cordond accepted the call, or a second one).
    pub async fn follow(&mut self, client: &Client, mut events: Events) -> Result<Option<Invocation>, CliError> {
        let live = self.streams();
        let mut sender = self.sender();
        let mut pending: Option<Msg> = None;
        let mut ticked = false;
        let mut invocation: Option<String> = None;
        let mut cancel: Option<Cancelling> = None;
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = self.interrupt.recv() => {
                    self.interrupts += 1;
                    match (&invocation, self.interrupts) {
                        (Some(id), 1) => {
                            self.note(&format!("cordon: cancelling {} (Ctrl-C again to stop waiting)", self.tool));
                            let (id, mut client) = (id.clone(), client.clone());
                            cancel = Some(Box::pin(async move { client.cancel(&id).await }));
                        }
                        _ => return Ok(None),
                    }
                }
                r = async { cancel.as_mut()?.await.ok() }, if cancel.is_some() => {
                    cancel = None;
                    if r.is_none() {
                        self.note(&format!("cordon: could not cancel {}; waiting for it to end (Ctrl-C again to stop waiting)", self.tool));
                    }
                }
                permit = async { sender.as_ref()?.reserve().await.ok() }, if pending.is_some() => {
                    if let (Some(permit), Some(msg)) = (permit, pending.take()) {
                        permit.send(msg);
                    }
                }
                step = events.next(), if pending.is_none() => match step? {
                    Step::Event(Event::Accepted(a)) => {
                        invocation = Some(a.invocation_id);
                        if a.tool != self.tool {
                            match (&sender, &mut self.out) {
                                (Some(tx), _) => {
                                    let _ = tx.try_send(Msg::Tool(a.tool.clone()));
                                }
                                (None, Out::Idle(writer)) => writer.tool.clone_from(&a.tool),
                                (None, _) => {}
                            }
                            self.tool = a.tool;
                        }
                    }
                    Step::Event(Event::Output { stderr, offset, data }) => {
                        let new = self.shown.accept(stderr, offset, &data);
                        if live && !new.is_empty() {
                            pending = Some(Msg::Output { stderr, data: new.to_vec() });
                        }
                    }
                    // A server tool's progress: `cordon run` shows the result.
                    Step::Event(Event::Progress { .. }) => {}
                    Step::Done(done) => return Ok(Some(*done)),
                },
                _ = tick.tick(), if self.spinner => {
                    // Before anything was written, the writer starts once the run has been quiet
                    // long enough for the elapsed time to show.
                    ticked = sender.is_some() || matches!(&self.out, Out::Idle(w) if w.started.elapsed() >= QUIET);
                }
            }
            // The writer thread starts with the first thing it has to do.
            if sender.is_none() && (pending.is_some() || ticked) {
                sender = self.start();
            }
            if std::mem::take(&mut ticked)
                && let Some(tx) = &sender
            {
                let _ = tx.try_send(Msg::Tick);
            }
        }
    }

    /// Prints what of `result`'s output the live view did not show, and waits until it is
    /// written. False: interrupted (Ctrl-C) while the output was still being written.
    pub async fn finish(&mut self, result: &RunResult) -> bool {
        if matches!(self.out, Out::None) {
            return true;
        }
        for (stderr, bytes) in [(false, &result.stdout_bytes), (true, &result.stderr_bytes)] {
            let Some(rest) = self.shown.rest(stderr, bytes) else {
                errln!("cordon: cordond sent more live output than its result holds; the rest is not shown");
                continue;
            };
            if rest.is_empty() {
                continue;
            }
            let Some(tx) = self.start() else { break };
            // The writer takes chunks of the size cordond sends; a large rest goes in pieces.
            for piece in rest.chunks(64 * 1024) {
                let sent = tokio::select! {
                    r = tx.send(Msg::Output { stderr, data: piece.to_vec() }) => r.is_ok(),
                    _ = self.interrupt.recv() => return false,
                };
                if !sent {
                    break;
                }
            }
        }
        self.close().await
    }

    /// A line of cordon's own on stderr while the tool runs, on a line of its own (not after the
    /// elapsed time).
    fn note(&self, text: &str) {
        if self.spinner {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(CLEAR_LINE).and_then(|()| err.flush());
        }
        errln!("{text}");
    }

    /// Leaves the writer to itself (it may be stuck on a stalled stdout) and clears the
    /// elapsed-time line: for when we stop waiting.
    pub fn abandon(&mut self) {
        if !matches!(std::mem::replace(&mut self.out, Out::None), Out::None) && self.spinner {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(CLEAR_LINE).and_then(|()| err.flush());
        }
    }

    /// Ends the writer (its queue written, the spinner line cleared). False: interrupted.
    pub async fn close(&mut self) -> bool {
        let Out::Running(tx, ended) = std::mem::replace(&mut self.out, Out::None) else { return true };
        drop(tx);
        tokio::select! {
            // Sent when the writer is done, or dropped if it panicked: either way it ended.
            _ = ended => true,
            _ = self.interrupt.recv() => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_in_order_are_printed_and_the_result_fills_the_rest() {
        let mut s = Shown::default();
        assert_eq!(s.accept(false, 0, b"abc"), b"abc");
        assert_eq!(s.accept(true, 0, b"E"), b"E");
        assert_eq!(s.accept(false, 3, b"de"), b"de");
        assert_eq!(s.rest(false, b"abcdefg"), Some(&b"fg"[..]));
        assert_eq!(s.rest(true, b"E"), Some(&b""[..]));
    }

    #[test]
    fn a_gap_ends_the_live_view_of_that_stream_only() {
        let mut s = Shown::default();
        assert_eq!(s.accept(false, 0, b"ab"), b"ab");
        assert_eq!(s.accept(false, 5, b"fg"), b"");
        // Even a chunk that would fit again is not printed: the result fills from 2.
        assert_eq!(s.accept(false, 2, b"cd"), b"");
        assert_eq!(s.rest(false, b"abcdefgh"), Some(&b"cdefgh"[..]));
        assert_eq!(s.accept(true, 0, b"x"), b"x");
    }

    #[test]
    fn overlap_prints_only_the_new_bytes_and_a_repeat_nothing() {
        let mut s = Shown::default();
        assert_eq!(s.accept(false, 0, b"abcd"), b"abcd");
        assert_eq!(s.accept(false, 2, b"cdef"), b"ef");
        assert_eq!(s.accept(false, 0, b"ab"), b"");
        assert_eq!(s.rest(false, b"abcdefXY"), Some(&b"XY"[..]));
    }

    #[test]
    fn more_printed_than_the_result_holds_is_caught() {
        let mut s = Shown::default();
        assert_eq!(s.accept(false, 0, b"abcdef"), b"abcdef");
        assert_eq!(s.rest(false, b"abc"), None);
    }
}
