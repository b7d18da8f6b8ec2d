//! One invocation's secrets as the proxy holds them: the placeholder the tool was given, the
//! real value (read by cordond for this call), the hosts it may go to and where in a request.

use cordon_core::egress::HostRule;
use cordon_core::secret::Placement;
use zeroize::Zeroizing;

/// A secret bound for one invocation.
pub struct Secret {
    /// The policy's name for it (in records and refusals; never the value).
    pub name: String,
    /// What the tool was given in its place: per invocation, unguessable.
    pub placeholder: String,
    /// The real value, wiped when dropped.
    pub value: Zeroizing<Vec<u8>>,
    /// Where it may be sent (each also among the tool's host rules).
    pub hosts: Vec<HostRule>,
    /// Where in a request to those hosts the placeholder is replaced.
    pub place: Placement,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the value.
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("place", &self.place)
            .finish_non_exhaustive()
    }
}
