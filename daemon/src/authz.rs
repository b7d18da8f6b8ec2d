//! Authorization: a caller's role comes only from who the server established it is: the kernel's
//! peer credentials on the Unix socket, or the local account a verified client certificate or
//! an admin-issued token is mapped to.
//!
//! *Admin*: uid 0, the daemon's own uid, or a member of the admin group. Everyone else who can
//! connect is an *agent caller*, and sees and runs only the tools whose `allow` admits it (a tool
//! without `allow` admits no agent caller).
//!
//! Architecture invariant: every decision is made from a [`Caller`] the server took from
//! `SO_PEERCRED`; nothing in a request can change it. Lookups that fail deny.

use nix::unistd::{Gid, Group, Uid, User};

use crate::caller::Caller;
use cordon_core::policy::{Allow, Tool, Workflow};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Admin,
    Agent,
}

/// Decides roles and tool access.
#[derive(Debug, Clone)]
pub(crate) struct Authorizer {
    daemon_uid: u32,
    admin_gid: Option<u32>,
}

/// The group admins belong to when `--admin-group` is not given (used only if it exists).
pub(crate) const DEFAULT_ADMIN_GROUP: &str = "cordon-admin";

impl Authorizer {
    pub(crate) fn new(admin_gid: Option<u32>) -> Authorizer {
        Authorizer { daemon_uid: nix::unistd::geteuid().as_raw(), admin_gid }
    }

    pub(crate) fn role(&self, c: &Caller) -> Role {
        if c.uid == 0 || c.uid == self.daemon_uid {
            return Role::Admin;
        }
        match self.admin_gid {
            Some(gid) if groups_of(c).contains(&gid) => Role::Admin,
            _ => Role::Agent,
        }
    }

    /// Whether the caller may see and run `tool`.
    pub(crate) fn may_use(&self, c: &Caller, role: Role, tool: &Tool) -> bool {
        self.admits(c, role, tool.allow.as_ref())
    }

    /// Whether the caller may see and run a workflow (each step's tool is checked on its own).
    pub(crate) fn may_run(&self, c: &Caller, role: Role, workflow: &Workflow) -> bool {
        self.admits(c, role, workflow.allow.as_ref())
    }

    /// Admins always; an agent caller when `allow` names it or one of its groups.
    fn admits(&self, c: &Caller, role: Role, allow: Option<&Allow>) -> bool {
        role == Role::Admin || decide(c, allow).admitted
    }

    /// What a call's decision record says of its caller: `role`, and for an agent caller what
    /// its `allow` decision looked up (`user`, the account's name; `groups`, the gids), only
    /// those it needed (an `allow` that admits the uid by number looks nothing up). `cordon
    /// policy replay` decides again from these.
    pub(crate) fn principal(&self, c: &Caller, allow: Option<&Allow>) -> Principal {
        match self.role(c) {
            Role::Admin => Principal { role: Role::Admin, evidence: None },
            Role::Agent => Principal { role: Role::Agent, evidence: Some(decide(c, allow)) },
        }
    }
}

/// The caller's role and what its `allow` decision used, for a record.
#[derive(Debug, Clone)]
pub(crate) struct Principal {
    pub role: Role,
    pub evidence: Option<Evidence>,
}

impl Principal {
    /// Adds `role` (and `user`, `groups` when looked up) to a record.
    pub(crate) fn on(&self, mut record: cordon_audit::Record) -> cordon_audit::Record {
        record = record.with("role", self.role.as_str());
        if let Some(e) = &self.evidence {
            if let Some(user) = &e.user {
                record = record.with("user", user.as_deref());
            }
            if let Some(groups) = &e.groups {
                // A record has a bounded size: an account in thousands of groups keeps the first
                // MAX_RECORDED_GROUPS and says how many it had (replay then cannot tell a refusal).
                record = record.with("groups", groups.iter().take(MAX_RECORDED_GROUPS).copied().collect::<Vec<u32>>());
                if groups.len() > MAX_RECORDED_GROUPS {
                    record = record.with("groups_total", groups.len());
                }
            }
        }
        record
    }
}

/// The most gids a record carries (`groups`); more are counted in `groups_total`.
pub(crate) const MAX_RECORDED_GROUPS: usize = 256;

/// What deciding an agent caller's `allow` looked up.
#[derive(Debug, Clone)]
pub(crate) struct Evidence {
    pub admitted: bool,
    /// The account's name (`Some(None)`: no such account); `None`: not looked up.
    pub user: Option<Option<String>>,
    /// The caller's gids; `None`: not looked up.
    pub groups: Option<Vec<u32>>,
}

/// An agent caller's `allow` decision (the pure part is core's `Allow::admits_user` and `admits_groups`), looking up
/// only what it needs, in order: the uid, the user name, the groups.
fn decide(c: &Caller, allow: Option<&Allow>) -> Evidence {
    let Some(allow) = allow else { return Evidence { admitted: false, user: None, groups: None } };
    let user = allow.needs_user_name().then(|| user_name(c.uid));
    if allow.admits_user(c.uid, user.as_ref().and_then(|u| u.as_deref())) {
        return Evidence { admitted: true, user, groups: None };
    }
    if allow.groups.is_empty() {
        return Evidence { admitted: false, user, groups: None };
    }
    let groups = groups_of(c);
    let admitted = allow.admits_groups(&groups, group_id);
    Evidence { admitted, user, groups: Some(groups) }
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Agent => "agent",
        }
    }
}

fn user_name(uid: u32) -> Option<String> {
    User::from_uid(Uid::from_raw(uid)).ok().flatten().map(|u| u.name)
}

/// Resolves a group name to its gid.
pub(crate) fn group_id(name: &str) -> Option<u32> {
    Group::from_name(name).ok().flatten().map(|g| g.gid.as_raw())
}

/// The caller's groups: the ones its mapping names when it has one (a certificate or a token
/// mapped to an account and groups), else its gid plus its user's memberships in the group
/// database.
pub(crate) fn groups_of(c: &Caller) -> Vec<u32> {
    if let Some(groups) = &c.groups {
        let mut groups = groups.to_vec();
        if !groups.contains(&c.gid) {
            groups.insert(0, c.gid);
        }
        return groups;
    }
    let mut groups = vec![c.gid];
    if let Ok(Some(user)) = User::from_uid(Uid::from_raw(c.uid))
        && let Ok(name) = std::ffi::CString::new(user.name)
        && let Ok(list) = nix::unistd::getgrouplist(&name, Gid::from_raw(c.gid))
    {
        groups.extend(list.into_iter().map(Gid::as_raw));
        // getgrouplist lists the gid it is given too: each group once (records carry this list).
        groups.sort_unstable();
        groups.dedup();
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caller::Via;

    #[test]
    fn a_mapped_callers_groups_are_exactly_its_mappings_not_the_accounts() {
        // uid 0's database groups would include 0; a mapping that names groups replaces them.
        let mapped =
            Caller { uid: 65534, gid: 65534, pid: None, via: Via::Token("t1".into()), groups: Some([4242].into()) };
        assert_eq!(groups_of(&mapped), vec![65534, 4242]);
        let authz = Authorizer { daemon_uid: 1, admin_gid: Some(4242) };
        assert_eq!(authz.role(&mapped), Role::Admin, "the admin group named by the mapping");
        let without = Caller { groups: Some([7].into()), ..mapped.clone() };
        assert_eq!(authz.role(&without), Role::Agent);
        assert_eq!(groups_of(&without), vec![65534, 7]);
    }
}
