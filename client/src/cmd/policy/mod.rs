//! `cordon policy check|test|diff|reference`: policy files checked, tested and compared offline
//! with the daemon's own loader (or against a running daemon), and the key reference.

pub(super) mod check;
pub(super) mod diff;
pub(super) mod reference;
pub(super) mod test;
