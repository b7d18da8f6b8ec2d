//! `cordon policy reference`: the policy keys, for people (Markdown) or `--json`.

use cordon_core::policy::{self};

use crate::cmd::output::print_json;
use crate::error::{CliError, exit};

/// `cordon policy reference`: the Markdown text, or (`--json`) the same as data.
pub(crate) fn run(as_json: bool) -> Result<u8, CliError> {
    if as_json {
        print_json(&policy::reference::reference_json());
    } else {
        cordon_core::stdio::out_bytes(policy::reference::authoring_reference().as_bytes());
    }
    Ok(exit::OK)
}
