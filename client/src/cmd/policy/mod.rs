//! `cordon policy test|diff`.

pub mod diff;
pub mod test;
