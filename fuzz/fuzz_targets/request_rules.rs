//! A request's method and target against a host's request rules (`RequestRules::check`,
//! core/src/egress/request.rs): an allowed request whose path a lenient server reads outside
//! the allowed prefixes, or whose method is not listed, is a finding.
fn main() {
    afl::fuzz!(|data: &[u8]| {
        if let Err(e) = cordon_daemon::fuzzing::request_rules(data) {
            panic!("{e}");
        }
    });
}
