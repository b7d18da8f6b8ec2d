//! The subcommands (being split into one module per command).

pub mod audit;
pub mod dry_run;
pub mod jobs;
pub mod policy;
pub mod registry;
pub mod run;
pub mod tokens;
