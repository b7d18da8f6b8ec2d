//! A tool's own tests: `[[tools.NAME.examples]]` (calls that must be accepted, optionally with the
//! exact argv they resolve to) and `[[tools.NAME.refuse]]` (calls that must be refused with a
//! validation code). Every load runs them (a failing example is an error of its file, at the
//! example's `file:line:col`); `cordon policy test` runs them and prints each outcome.
//!
//! An example is checked exactly as the daemon checks a call: [`crate::validate::validate`] then
//! [`crate::argv::render`]. Availability, callers and confirmations are not part of it.

use super::model::{Example, Expect, Tool};
use crate::argv;
use crate::validate;

/// What running one example gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// As expected: the argv a call with these arguments resolves to (accepted examples), or the
    /// refusal's message (refused ones).
    Passed { detail: String },
    /// Not as expected; the message says what happened and what to change.
    Failed { message: String },
}

impl Outcome {
    pub fn passed(&self) -> bool {
        matches!(self, Outcome::Passed { .. })
    }
}

/// Runs one example of `tool`.
pub fn run(tool: &Tool, example: &Example) -> Outcome {
    let result = validate::validate(tool, &example.args).map(|args| argv::render(tool, &args).0);
    let name = &tool.name;
    match (&example.expect, result) {
        (Expect::Accepted { argv: expected }, Ok(argv)) => match expected {
            Some(want) if *want != argv => Outcome::Failed {
                message: format!(
                    "example of tool {name:?} resolves to {}, not the expected argv {}; fix `argv` or the command",
                    show(&argv),
                    show(want)
                ),
            },
            _ => Outcome::Passed { detail: show(&argv) },
        },
        (Expect::Accepted { .. }, Err(e)) => Outcome::Failed {
            message: format!(
                "example of tool {name:?} is refused ({}: {}); it must be accepted: fix its args or the params' rules",
                e.code, e.message
            ),
        },
        (Expect::Refused { code }, Ok(argv)) => Outcome::Failed {
            message: format!(
                "refuse example of tool {name:?} is accepted (it resolves to {}); it must be refused with {code}: \
                 tighten the params' rules (pattern, min/max, values) or fix the example",
                show(&argv)
            ),
        },
        (Expect::Refused { code }, Err(e)) if e.code == *code => {
            Outcome::Passed { detail: format!("{code}: {}", e.message) }
        }
        (Expect::Refused { code }, Err(e)) => Outcome::Failed {
            message: format!(
                "refuse example of tool {name:?} is refused with {} ({}), not the expected {code}; fix `code` or the params' rules",
                e.code, e.message
            ),
        },
    }
}

/// Every example of `tool` with its outcome, in file order.
pub fn run_all(tool: &Tool) -> impl Iterator<Item = (&Example, Outcome)> {
    tool.examples.iter().map(move |e| (e, run(tool, e)))
}

/// An argv as a JSON array (what the policy writes).
fn show(argv: &[String]) -> String {
    serde_json::Value::from(argv.to_vec()).to_string()
}
