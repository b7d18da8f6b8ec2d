//! A request head on a terminated connection (placeholders put in or refused) and a response
//! head, as the egress proxy reads them (daemon/egress/src/substitute.rs).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        let _ = std::hint::black_box(cordon_daemon::fuzzing::terminated_request(data));
    });
}
