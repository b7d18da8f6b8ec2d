//! cordon's one per-principal limiter, for every budget that callers share.
//!
//! The rule every budget in cordond and `cordon mcp --http` follows: a limit is kept per
//! principal (a caller's uid, a token, a call, a peer), work is admitted only after the peer is
//! accepted and known, and whoever exhausts their own share waits or is refused alone; nobody
//! can spend another principal's share.
//!
//! - [`Limiter`]: at most `per_key` held per key and `global` in all; a request that finds no
//!   free slot waits in a bounded queue (`queue_per_key`, `queue`) for at most `wait`, and freed
//!   slots go round-robin to the keys that wait, so a key with many waiters cannot get ahead of a
//!   key with one. A waiter that goes away (its future dropped) leaves the queue at once.
//! - [`FailureBudget`]: failures (a refused token, say) per key, per window; a key that
//!   spent its budget is refused alone, others keep theirs.
//! - [`Quota`]: use per key per fixed window (calls started, milliseconds, bytes), with the
//!   window's reset time; bounded in keys, serializable so that its keeper can persist it.
//!   Concurrency budgets use [`Limiter`]: one mechanism for waiting, one for counting.
//! - [`peer`]: who a TCP peer is: on loopback the uid that owns the connecting socket (from
//!   `/proc/net/tcp`), else its address.
//!
//! It depends on tokio (the sync and time parts) and serde, so both the daemon and the unprivileged
//! front-end can link it without linking each other.

mod budget;
mod fair;
pub mod peer;
mod quota;
mod refuse;

pub use budget::{BudgetLimits, FailureBudget, OverBudget};
pub use fair::{Limiter, LimiterLimits, Permit, Refused};
pub use peer::Principal;
pub use quota::{Exhausted, Left, Quota, Window};
pub use refuse::answer_503;
