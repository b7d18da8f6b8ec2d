//! `cordon policy check|test|diff|reference|suggest`: policy files checked, tested and compared offline
//! with the daemon's own loader (or against a running daemon), the key reference, and grants
//! suggested from the audit log's denial records.

pub(super) mod check;
pub(super) mod diff;
pub(super) mod reference;
pub(super) mod suggest;
pub(super) mod test;
