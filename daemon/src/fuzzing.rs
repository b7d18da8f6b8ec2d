//! Entry points for the fuzz targets in `fuzz/` and the property test
//! `tests/tests/suite/check_agrees.rs` (not an API: nothing else may use them). Each runs the
//! code cordond runs on input it does not trust, or that the front-end reads back; the parsers
//! stay private to their modules, this only reaches them.

pub use crate::identities::{Accounts, Rules, parse as identities_file};
/// A tool as `ListTools` sends it to an admin (`server/convert.rs`).
pub use crate::server::convert::tool as listed_tool;
pub use cordon_egress::fuzzing::{chunked_body, proxy_request, request_rules, terminated_request, tls_first_record};

/// A token file's bytes as cordond reads them: the number of tokens, or why the file is refused.
pub fn tokens_file(bytes: &[u8]) -> Result<usize, String> {
    crate::tokens::parse(bytes).map(|t| t.len())
}
