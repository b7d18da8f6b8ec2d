//! A call's arguments (core/src/validate.rs, core/src/argv.rs): the wire text parsed, validated
//! against a tool with one param of every type (fuzz/policies/arguments.toml), and rendered into
//! the command line, as cordond and `cordon mcp` do before a call runs.
use std::path::PathBuf;

use cordon_core::argv::render;
use cordon_core::policy::{Host, load_sources};
use cordon_core::validate::{parse_arguments, validate};

const POLICY: &str = include_str!("../policies/arguments.toml");

fn main() {
    let sources = [(PathBuf::from("arguments.toml"), POLICY.to_string())];
    let set = match load_sources(&sources, &Host::new(true, 7)) {
        Ok(set) => set,
        Err(e) => panic!("fuzz/policies/arguments.toml does not load: {e}"),
    };
    // A panic aborts the process (the fuzzer's crash): nothing observes state after one.
    let tools = std::panic::AssertUnwindSafe(set.tools);
    assert!(!tools.is_empty(), "fuzz/policies/arguments.toml has no tool");
    afl::fuzz!(|data: &[u8]| {
        let Ok(text) = std::str::from_utf8(data) else { return };
        let Ok(value) = parse_arguments(text) else { return };
        for tool in tools.iter() {
            if let Ok(args) = validate(tool, &value) {
                let _ = std::hint::black_box(render(tool, &args));
            }
        }
    });
}
