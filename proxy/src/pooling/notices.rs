//! What sessions' statements tell the pools and the looked-up passwords
//! (`protocol::PoolNotices`): the protocol room, below this one, reaches
//! them only through that trait.

use std::sync::Arc;

use super::Pools;
use crate::{auth::cache::Secrets, protocol::PoolNotices};

pub struct Notices {
    pub pools: Arc<Pools>,
    pub secrets: Arc<Secrets>,
}

impl PoolNotices for Notices {
    fn drain(&self, databases: &[String]) {
        self.pools.drain(databases);
    }

    fn end_drain(&self, databases: &[String]) {
        self.pools.end_drain(databases);
    }

    fn forget_password(&self, role: Option<&str>) {
        self.secrets.forget_user(role);
        if let Some(role) = role {
            self.pools.forget_credentials(role);
        }
    }
}
