//! The egress proxy's HTTP request head: CONNECT and absolute-form requests, the rewrite to
//! origin-form (daemon/egress/src/http.rs), and the host the proxy then decides on.
fn main() {
    afl::fuzz!(|data: &[u8]| {
        // A first byte of 5 is SOCKS5 (the proxy_socks target).
        if data.first() != Some(&5) {
            let _ = std::hint::black_box(cordon_daemon::fuzzing::proxy_request(data));
        }
    });
}
