//! Printing for people: every line `cordon` prints for a person goes through [`line`], so that
//! control and bidi characters in values a caller chose (arguments, descriptions, audit fields,
//! error messages that echo them) are shown escaped instead of steering the terminal. JSON output
//! is exact JSON and is not touched (it escapes C0 controls itself).

pub use cordon_core::display::{escape_line as line, escape_lines as lines, is_unsafe};

use anstyle::{AnsiColor, Effects, Style};

/// Which stream a painted word goes to (each decides on its own: `cordon ... | less` keeps
/// colour on stderr's terminal).
#[derive(Debug, Clone, Copy)]
pub enum Stream {
    Out,
    Err,
}

/// Whether to colour `stream`: only a terminal, and never with `NO_COLOR` (or `TERM=dumb`,
/// `CLICOLOR=0`); `CLICOLOR_FORCE` forces it. anstream decides, as it does for clap's help.
pub fn colour(stream: Stream) -> bool {
    use std::sync::OnceLock;
    static OUT: OnceLock<bool> = OnceLock::new();
    static ERR: OnceLock<bool> = OnceLock::new();
    let never = anstream::ColorChoice::Never;
    match stream {
        Stream::Out => *OUT.get_or_init(|| anstream::AutoStream::choice(&std::io::stdout()) != never),
        Stream::Err => *ERR.get_or_init(|| anstream::AutoStream::choice(&std::io::stderr()) != never),
    }
}

pub const GOOD: Style = AnsiColor::Green.on_default();
pub const WARN: Style = AnsiColor::Yellow.on_default();
pub const BAD: Style = AnsiColor::Red.on_default().effects(Effects::BOLD);
pub const DIM: Style = Style::new().effects(Effects::DIMMED);

/// `text` in `style` when `stream` is coloured. `text` must be safe to print as is: one of
/// cordon's own words, or already escaped with [`line`] (the escape codes are added after it).
pub fn paint(stream: Stream, style: Style, text: &str) -> String {
    if colour(stream) { format!("{style}{text}{style:#}") } else { text.to_string() }
}

/// The style of a status or level word: available/ok, unavailable/warn, fail, disabled.
pub fn level_style(word: &str) -> Style {
    match word.trim() {
        "ok" | "available" => GOOD,
        "warn" | "unavailable" => WARN,
        "fail" | "FAILED" => BAD,
        "disabled" => DIM,
        _ => Style::new(),
    }
}

/// `println!` for people (through `cordon_core::stdio`: a closed stdout ends cordon quietly): the formatted line with controls and bidi characters escaped.
macro_rules! outln {
    ($($arg:tt)*) => {
        cordon_core::stdout_ln!("{}", $crate::term::line(&format!($($arg)*)))
    };
}

/// `eprintln!` for people: the formatted line with controls and bidi characters escaped.
macro_rules! errln {
    ($($arg:tt)*) => {
        cordon_core::stderr_ln!("{}", $crate::term::line(&format!($($arg)*)))
    };
}

pub(crate) use {errln, outln};
