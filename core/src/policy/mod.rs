//! Policy files: TOML text -> validated [`Tool`]s.
//!
//! Parsing walks the spanned TOML document by hand instead of deriving serde structs, so that
//! every problem in a file is reported with its `file:line:col`, not only the first one. A file
//! with any error contributes no tools; a load with any error fails as a whole.
//!
//! # Layout
//! From the bottom up (each module imports only modules listed before it, and leaves):
//! - `model`: the validated types ([`Tool`], [`Param`], [`SandboxPolicy`], [`Host`], ...) and the
//!   policy facts everyone reads ([`BASE_ENV`], [`MAX_SAFE_INTEGER`], [`SEARCH_PATH`], ranges).
//!   Leaves beside it: [`keys`](KeyDoc) (the key tables), [`carve`] (carve-outs inside grants and
//!   the default protected set of a git work tree), [`diag`], [`units`], [`defaults`],
//!   [`trust`], `pattern`, [`foreign`] (recognizes CtxNest and Gandalf configs, to say how to
//!   import them), [`rootfile`] (files trusted for what they hold, such as an `upstream_ca`),
//!   [`budget`] (a tool's `budget`: its model, the rate texts like `"30/min"`).
//! - [`server`]: an MCP server a policy declares ([`McpServer`], its launcher a [`Tool`]) and
//!   [`downloads_at_start`], the recognizer of commands that fetch a package when they start.
//! - [`fleet`]: the policy digest, a tool's (or server's) policy as canonical JSON and the diff of
//!   two sets.
//! - [`schema`] (a tool's JSON Schema), [`output`] (a result judged by the policy: ok_exit_codes,
//!   the output schema, wrapping), `probe` (availability and pinning), `repin` (a changed grant root
//!   taken anew under the exact rule of docs/pins.md).
//! - [`crate::validate`] and [`crate::argv`] stand on the model too; `parse` uses the validator to
//!   check param defaults.
//! - `parse` (one file -> tools), then `load` (read files under the trust rules, parse, probe).
//! - [`reference`](mod@reference) (the authoring reference) documents all of the above.
//!
//! Architecture invariant: a [`Tool`] cannot hold an invalid state. Every rule in the key tables
//! is checked while parsing; later stages (validation, execution) never re-check policy syntax.
//! The module graph is a DAG: the model imports no other policy module but the leaves `carve`
//! and `budget`, and nothing below `load` imports it.

pub mod budget;
pub mod carve;
pub mod defaults;
pub mod diag;
pub mod examples;
pub mod fleet;
pub mod foreign;
mod intern;
mod keys;
mod load;
pub(crate) mod model;
pub mod output;
mod parse;
mod pattern;
mod probe;
pub mod reference;
mod repin;
pub mod rootfile;
pub mod schema;
pub mod server;
pub mod trust;
pub mod units;

pub use diag::{Diagnostic, Severity};
pub use keys::{
    BUDGET_KEYS, CLIENT_REQUEST_KEYS, FILE_KEYS, GRANT_KEYS, HOST_KEYS, KeyDoc, LIFT_KEYS, LIMIT_KEYS, NETWORK_KEYS,
    PARAM_KEYS, SECRET_KEYS, SERVER_KEYS, SERVER_RULE_KEYS, SOURCE_KEYS, STEP_KEYS, TEMP_KEYS, TOOL_KEYS,
    TOOL_SECRET_KEYS, WORKFLOW_KEYS,
};
pub use load::{
    ExampleResult, LoadError, MAX_POLICY_FILE_BYTES, MAX_POLICY_TOTAL_BYTES, PolicySet, Reuse, Sources, TestReport,
    load_dir, load_dir_after, load_dir_as, load_sources, load_sources_after, read_dir_sources, read_path_sources,
    test_sources,
};
pub use model::*;
pub use pattern::PatternError;
pub use probe::{Control, PinChecks, ProbeError, executable_control, pin_learn_tree, resolve_run_as};
pub use repin::{Repin, Runner};
pub use server::{
    ArgCheck, ArgRule, ClientRequests, Download, Expose, McpServer, PackageRegistry, SERVER_TOOL_SEPARATOR,
    downloads_at_start,
};
pub use trust::{Subject, Trust, TrustError, Walked};
