//! RELOAD: read the configuration again, as SIGHUP does. A key that needs
//! a restart keeps its old value and comes back as a WARNING notice; a
//! configuration that is invalid is refused with the reason, and the one
//! in force stays.

use std::sync::Arc;

use bytes::BytesMut;

use crate::{
    shared::Shared,
    wire::write::{self, Severity},
};

pub const SYNTAX: &str = "RELOAD";
pub const ABOUT: &str = "read the configuration file and environment again";

pub fn run(shared: &Arc<Shared>, out: &mut BytesMut) {
    match crate::reload::reload(shared) {
        Ok(r) => {
            for w in r.warnings() {
                // PostgreSQL's SQLSTATE for a setting only a restart changes.
                write::warning_into(out, "55P02", &w);
            }
            write::command_complete(out, "RELOAD");
        }
        Err(e) => write::error_into(out, Severity::Error, e.sqlstate(), &e.to_string()),
    }
}
