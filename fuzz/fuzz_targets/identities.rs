//! The TLS identities file (daemon/src/identities.rs): parsed and checked against a fixed set of
//! accounts, as cordond does against the host's.
use std::path::Path;

use cordon_daemon::fuzzing::{Accounts, Rules, identities_file as parse};

/// alice 1000 (in cordon 2000 and cordon-admin 3000), bob 1001, root, cordond's user 500.
struct Fixed;

impl Accounts for Fixed {
    fn user(&self, name: &str) -> Option<(u32, u32)> {
        match name {
            "alice" => Some((1000, 1000)),
            "bob" => Some((1001, 1001)),
            "root" => Some((0, 0)),
            "daemon" => Some((500, 500)),
            _ => None,
        }
    }

    fn group(&self, name: &str) -> Option<u32> {
        match name {
            "cordon" => Some(2000),
            "cordon-admin" => Some(3000),
            "ci" => Some(4000),
            _ => None,
        }
    }

    fn groups_of(&self, name: &str, gid: u32) -> Vec<u32> {
        match name {
            "alice" => vec![gid, 2000, 3000],
            _ => vec![gid],
        }
    }
}

const RULES: Rules = Rules { daemon_uid: 500, admin_gid: Some(3000) };

fn main() {
    afl::fuzz!(|data: &[u8]| {
        // cordond refuses a file that is not UTF-8 before parsing it.
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = std::hint::black_box(parse(Path::new("identities.toml"), text, RULES, &Fixed));
        }
    });
}
