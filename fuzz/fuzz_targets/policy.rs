//! A policy file (core/src/policy): parsed, validated and probed as cordond and `cordon policy
//! check` load it, then each tool's examples run through the argument validator.
use std::path::PathBuf;

use cordon_core::policy::{Host, examples, load_sources};

fn main() {
    let host = Host::new(true, 7);
    afl::fuzz!(|data: &[u8]| {
        // Policy files are read as UTF-8 text (anything else is refused before parsing).
        let Ok(text) = std::str::from_utf8(data) else { return };
        let sources = [(PathBuf::from("fuzz.toml"), text.to_string())];
        if let Ok(set) = load_sources(&sources, &host) {
            for tool in &set.tools {
                for (_, outcome) in examples::run_all(tool) {
                    let _ = std::hint::black_box(outcome.passed());
                }
            }
        }
    });
}
