//! `cordon policy check|test|diff|replay|suggest|reference`: policy files checked, tested and
//! compared offline with the daemon's own loader (or against a running daemon), an audit log
//! replayed against them, grants suggested from the audit log's denial records, and the key
//! reference.

pub(super) mod check;
pub(super) mod diff;
pub(super) mod reference;
pub(super) mod replay;
pub(super) mod suggest;
pub(super) mod test;
