//! How `apply` and `archive` join their consumer group.

use clap::Args as ClapArgs;

use crate::parse_instance_id;

#[derive(Debug, ClapArgs)]
pub struct MembershipArgs {
    /// This member's `group.instance.id` (static membership): restarted
    /// under the same id, it takes its partitions back at once instead of
    /// waiting for the broker to expire the old member. Default: the host's
    /// name; two members of one group on one host need distinct ids.
    #[arg(long, env = "STOCKLEDGER_INSTANCE_ID", value_parser = parse_instance_id)]
    pub instance_id: Option<String>,
    /// Join as a dynamic member, without a `group.instance.id`: for hosts
    /// that cannot keep a stable name. A killed member's partitions then
    /// wait until the broker expires its session (`session.timeout.ms`,
    /// 45 s by default), restarted or not.
    #[arg(
        long,
        env = "STOCKLEDGER_DYNAMIC_MEMBERSHIP",
        conflicts_with = "instance_id"
    )]
    pub dynamic_membership: bool,
}

impl MembershipArgs {
    /// Sets a member configuration's `instance_id` (whose default is the
    /// host's name) as these flags ask.
    pub fn configure(self, instance_id: &mut Option<String>) {
        if self.dynamic_membership {
            *instance_id = None;
        } else if let Some(id) = self.instance_id {
            *instance_id = Some(id);
        }
    }
}
