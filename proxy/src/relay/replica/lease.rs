//! Transaction pooling's replica connections: a pooled session leases one
//! of its pool's (`replicas::spare`) for a read, or for a read only
//! transaction, and gives it back when that is over, with what it holds
//! of named statements. Session mode opens its own (`Leased::Open(None)`).

use tokio::net::TcpStream;
use tracing::debug;

use super::{Conn, Detour};
use crate::{
    protocol::Protocol,
    replicas::spare::{Idle, Lease, Place},
};

pub(super) enum Leased {
    /// The session holds a connection to the replica now.
    Conn,
    /// One is to be opened (with its place under the pool's cap, pooled).
    Open(Option<Place>),
    /// None may be had now: the read goes to the primary.
    No,
}

impl Detour {
    /// A connection to replica `i`, from the pool's idle ones if the
    /// session is pooled.
    pub(super) fn lease(&mut self, i: usize, proto: &mut Protocol) -> Leased {
        let Some(spare) = &self.spare else {
            return Leased::Open(None);
        };
        match spare.lease(i, &self.params) {
            Lease::Idle(idle) => {
                let Idle {
                    replica,
                    tcp,
                    buf,
                    statements,
                    place,
                    ..
                } = *idle;
                match TcpStream::from_std(tcp) {
                    Ok(tcp) => {
                        proto.replica_connection_leased(statements);
                        self.conn = Some(Conn {
                            replica,
                            tcp,
                            buf,
                            place: Some(place),
                        });
                        Leased::Conn
                    }
                    Err(e) => {
                        debug!("a replica connection could not wait here: {e}");
                        Leased::No
                    }
                }
            }
            Lease::Open(place) => Leased::Open(Some(place)),
            Lease::Full => Leased::No,
        }
    }

    /// A pooled session's connection goes back to its pool, with what it
    /// holds, unless a read only transaction still runs there. One whose
    /// transaction moved to the primary is closed instead: closing rolls
    /// it back.
    pub(super) fn give_back(&mut self, proto: &mut Protocol) {
        if self.txn.is_some() {
            return;
        }
        let Some(conn) = self.conn.take() else {
            return;
        };
        let statements = proto.replica_connection_given_back();
        if std::mem::take(&mut self.rollback_due) {
            return;
        }
        let (Some(spare), Some(place)) = (&self.spare, conn.place) else {
            return;
        };
        let Ok(tcp) = conn.tcp.into_std() else {
            return;
        };
        spare.give_back(Idle {
            replica: conn.replica,
            params: self.params.clone(),
            tcp,
            buf: conn.buf,
            statements,
            place,
        });
    }
}
