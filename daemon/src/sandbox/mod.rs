//! Process execution: the only module with `unsafe` code.
//!
//! # Layout
//! - [`spawn`]: starts a planned invocation as the leader of a new session and process group,
//!   tracks it through a pidfd, enforces the timeout and cancellation with SIGTERM, a grace
//!   period and SIGKILL to the whole group, and reaps it.
//! - [`output`]: bounded head+tail capture of stdout and stderr.
//!
//! Architecture invariant: every `unsafe` block in the crate is in this module and carries a
//! `// SAFETY:` comment; code that runs between fork and exec only makes async-signal-safe
//! calls on data prepared before the fork.

pub mod output;
pub mod spawn;

pub use output::{Capture, Captured};
pub use spawn::{Outcome, RunSpec, SpawnError, run};
