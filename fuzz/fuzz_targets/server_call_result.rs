//! An MCP server's answer to `tools/call` (core/src/mcp_server.rs): the result checked, bounded
//! and cleaned as cordond does before passing it on, and a progress notification's params. A
//! cleaned result must pass the check again unchanged and stay within the bound.
use cordon_core::mcp_server::{check_result, parse_progress};
use serde_json::Value;

const MAX_BYTES: u64 = 64 * 1024;

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let Ok(value) = serde_json::from_slice::<Value>(data) else { return };
        if let Ok(cleaned) = check_result(&value, MAX_BYTES) {
            assert!(cleaned.to_string().len() as u64 <= MAX_BYTES, "a cleaned result is over the bound");
            assert_eq!(check_result(&cleaned, MAX_BYTES).as_ref(), Ok(&cleaned), "cleaning is not idempotent");
        }
        if let Some((progress, total, message)) = parse_progress(&value) {
            assert!(progress.is_finite() && total.is_none_or(f64::is_finite));
            assert!(message.chars().count() <= 1_000);
        }
    });
}
