//! `cordon metrics`: the Prometheus metrics, as cordond's HTTP endpoint serves them.

use crate::api::Client;
use crate::endpoint::Endpoint;
use crate::error::{CliError, exit};

/// `cordon metrics`: the exposition text as it is (it is already machine-readable).
pub(super) async fn run(endpoint: &Endpoint) -> Result<u8, CliError> {
    let mut client = Client::connect(endpoint).await?;
    let text = client.metrics().await?;
    // Raw, for tools that read it (promtool, a pushgateway): the encoder escapes label values,
    // which are policy tool names and fixed words.
    cordon_core::stdio::out_bytes(text.as_bytes());
    Ok(exit::OK)
}
