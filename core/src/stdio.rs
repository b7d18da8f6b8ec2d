//! Standard output and standard error for the binaries (`cordon`, `cordond`): one place that
//! decides what a failed write means, so that no output path panics the way `println!` does.
//!
//! - stdout closed by the reader (`EPIPE`: `cordon tools | head -1`): the process ends at once,
//!   quietly, with [`CLOSED_PIPE_EXIT`] (141 = 128 + SIGPIPE, what a shell reports for a
//!   coreutils program in the same place). The reader has what it wanted; the exit code does not
//!   claim that everything was written.
//! - any other stdout failure (a full disk, `>/dev/full`): one line on stderr saying so, then
//!   exit [`WRITE_FAILED_EXIT`] (1).
//! - stderr failures are ignored: there is nowhere left to report them, and the exit code still
//!   says how the command ended.
//!
//! Rust ignores SIGPIPE, so a closed pipe is an `EPIPE` error here, never a signal. `cordon mcp`
//! does not print through this module: its stdout is the protocol, written by one task that ends
//! the session on a write error (`client/src/mcp/lines.rs`).

use std::fmt;
use std::io::{self, Write as _};

/// The exit code when the reader closed stdout before everything was written.
pub const CLOSED_PIPE_EXIT: u8 = 141;
/// The exit code when stdout could not be written for another reason.
pub const WRITE_FAILED_EXIT: u8 = 1;

/// Writes `args` to stdout (see the module doc for what a failure does).
pub fn out(args: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args) {
        drop(stdout);
        failed(&e);
    }
}

/// Writes `bytes` to stdout as they are (a tool's output), then flushes.
pub fn out_bytes(bytes: &[u8]) {
    let mut stdout = io::stdout().lock();
    if let Err(e) = stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        drop(stdout);
        failed(&e);
    }
}

/// Flushes stdout (after text without a final newline).
pub fn flush() {
    if let Err(e) = io::stdout().lock().flush() {
        failed(&e);
    }
}

/// Writes `args` to stderr; a failure is ignored.
pub fn err(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// Writes `bytes` to stderr as they are; a failure is ignored.
pub fn err_bytes(bytes: &[u8]) {
    let mut stderr = io::stderr().lock();
    let _ = stderr.write_all(bytes).and_then(|()| stderr.flush());
}

/// stderr for logs (`tracing_subscriber::fmt().with_writer(|| LossyStderr)`). A failed write
/// (stderr closed by an agent host that went away, a full disk) loses the line: returned as an
/// error, tracing-subscriber would report it with `eprintln!`, which panics when stderr fails, and
/// the panic would take down the request being served.
#[derive(Debug, Clone, Copy, Default)]
pub struct LossyStderr;

impl io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// The exit code for a failed stdout write of this kind.
pub fn exit_code_for(e: &io::Error) -> u8 {
    if e.kind() == io::ErrorKind::BrokenPipe { CLOSED_PIPE_EXIT } else { WRITE_FAILED_EXIT }
}

fn failed(e: &io::Error) -> ! {
    let code = exit_code_for(e);
    if code != CLOSED_PIPE_EXIT {
        let program = std::env::args_os()
            .next()
            .and_then(|a| std::path::Path::new(&a).file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "cordon".into());
        err(format_args!("{program}: cannot write to standard output: {e}\n"));
    }
    std::process::exit(i32::from(code))
}

/// `println!` through [`out`].
#[macro_export]
macro_rules! stdout_ln {
    () => { $crate::stdio::out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::stdio::out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` through [`out`].
#[macro_export]
macro_rules! stdout {
    ($($arg:tt)*) => { $crate::stdio::out(format_args!($($arg)*)) };
}

/// `eprintln!` through [`err`].
#[macro_export]
macro_rules! stderr_ln {
    () => { $crate::stdio::err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::stdio::err(format_args!("{}\n", format_args!($($arg)*))) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_pipe_is_141_and_anything_else_is_1() {
        assert_eq!(exit_code_for(&io::Error::from(io::ErrorKind::BrokenPipe)), 141);
        assert_eq!(exit_code_for(&io::Error::from_raw_os_error(28)), 1); // ENOSPC
    }
}
