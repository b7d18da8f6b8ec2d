//! Log lines for the systemd journal. Under systemd, cordond's stderr is a journal stream
//! (`JOURNAL_STREAM` names its device and inode): there each line starts with its syslog
//! priority (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug; sd-daemon(3)), so
//! `journalctl -p warning` finds cordond's warnings, and an event stays one entry (a newline
//! inside a message is written `\n`; the journal would split it into entries of priority info).
//! The journal stamps its own time, so the line carries none.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Whether stderr is the journal stream systemd connected (`JOURNAL_STREAM=DEV:INODE`).
pub(crate) fn stderr_is_journal() -> bool {
    let Ok(value) = std::env::var("JOURNAL_STREAM") else { return false };
    let Some((dev, ino)) = value.split_once(':') else { return false };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else { return false };
    nix::sys::stat::fstat(std::io::stderr()).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
}

/// The syslog priority of a tracing level.
pub(crate) fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// Wraps an event format: `<PRIORITY>` first, the event on one line.
#[derive(Debug)]
pub(crate) struct JournalFormat<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for JournalFormat<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.trim_end_matches('\n').replace('\n', "\\n");
        writeln!(writer, "<{}>{body}", priority(event.metadata().level()))
    }
}

/// A fatal message on stderr, before or after serving (a policy that does not load, a socket
/// that cannot be bound): on a journal stream every line at priority error, so
/// `journalctl -p err` shows why the unit failed; elsewhere as it is.
pub(crate) fn fatal(text: &str) {
    use std::io::Write as _;
    let mut out = String::new();
    let journal = stderr_is_journal();
    for line in text.lines() {
        if journal {
            out.push_str("<3>");
        }
        out.push_str(line);
        out.push('\n');
    }
    // A failed write to stderr has nowhere else to go.
    let _ = std::io::stderr().write_all(out.as_bytes());
}
