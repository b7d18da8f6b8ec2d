//! The egress proxy's SOCKS5 handshake and request (daemon/egress/src/socks.rs); every input is
//! a SOCKS5 connection (its version byte is put in front).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        let mut bytes = Vec::with_capacity(data.len() + 1);
        bytes.push(5);
        bytes.extend_from_slice(data);
        let _ = std::hint::black_box(cordon_daemon::fuzzing::proxy_request(&bytes));
    });
}
