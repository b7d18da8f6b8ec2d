//! A chunked request body as the egress proxy reads it on a terminated connection: decoded,
//! scanned for a placeholder, framed again (daemon/egress/src/exchange.rs).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        let _ = std::hint::black_box(cordon_daemon::fuzzing::chunked_body(data));
    });
}
