//! Entry points for the fuzz targets in `fuzz/` (not an API: nothing else may use them). Each
//! runs the code cordond runs on bytes it does not trust; the parsers stay private to their
//! modules, this only reaches them.

pub use cordon_egress::fuzzing::{proxy_request, tls_first_record};

/// A token file's bytes as cordond reads them: the number of tokens, or why the file is refused.
pub fn tokens_file(bytes: &[u8]) -> Result<usize, String> {
    crate::tokens::parse(bytes).map(|t| t.len())
}
