//! The first flight of a CONNECT tunnel as the SNI check reads it (daemon/egress/src/sni.rs).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        let _ = std::hint::black_box(cordon_daemon::fuzzing::tls_first_record(data));
    });
}
