//! The token file (daemon/src/tokens.rs) as cordond reads it at start and on reload.
fn main() {
    afl::fuzz!(|data: &[u8]| {
        let _ = std::hint::black_box(cordon_daemon::fuzzing::tokens_file(data));
    });
}
