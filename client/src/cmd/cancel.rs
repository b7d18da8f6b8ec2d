//! `cordon cancel ID`: cancels a running invocation or workflow.

use cordon_core::code::ErrorCode;
use serde_json::json;

use super::output::print_json;
use crate::api::Client;
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};
use crate::term::outln;

pub(super) async fn run(endpoint: &Endpoint, id: &str, as_json: bool) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    if !client.cancel(id).await? {
        return Err(CliError::Refused {
            code: ErrorCode::UnknownInvocation,
            message: format!(
                "no running invocation {id:?} (it may have finished already; `cordon status` lists running ones)"
            ),
        });
    }
    if as_json {
        print_json(&json!({ "cancelled": true, "invocation_id": id }));
    } else {
        outln!("cancelled {id}");
    }
    Ok(exit::OK)
}
