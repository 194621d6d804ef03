//! A pooled session's reads on replicas: between two transactions, before
//! it takes a connection of its pool, the client's next bytes are looked
//! at; a pure read (or a read only transaction's statement) runs on a
//! replica connection leased from the pool (`relay/replica/`), and the
//! session goes on waiting without ever taking a primary connection.

use tracing::debug;

use super::{Client, farewell, read_from_client};
use crate::{
    pooling::Pool,
    protocol::Protocol,
    relay::{
        Closer, End, Room,
        replica::{Detour, Detoured, whole_head},
    },
};

/// What became of the client's next bytes.
pub(super) enum Routed {
    /// A replica answered them; the answer is queued for the client.
    Served(Client),
    /// They need the primary (or are answered here otherwise).
    No(Client),
    /// The session is over (its client left, or was told why).
    End,
}

/// Runs the head of the client's bytes on a replica if it may go there,
/// reading more of them first while it is not whole (a read may arrive
/// in pieces, and its client waits for nothing before it is all sent).
pub(super) async fn route(
    mut client: Client,
    b: &mut Room,
    proto: &mut Protocol,
    detour: &mut Detour,
    pool: &Pool,
    forced: &mut Closer,
) -> Routed {
    let limit = proto.services.config.limits.buffer_bytes;
    // A client that has had no connection yet goes by its pool's default
    // isolation, as it would once it took one.
    if !proto.settings.asked() && !proto.own_defaults {
        let isolation = pool.default_isolation();
        proto.note_pool_isolation(isolation);
    }
    loop {
        let Client::Runtime(stream) = &mut client else {
            return Routed::No(client);
        };
        if !whole_head(&b.cin) && b.cin.len() < limit {
            client = match read_more(client, b, proto, forced).await {
                Some(c) => c,
                None => return Routed::End,
            };
            continue;
        }
        match detour.route(stream, proto, b, forced).await {
            Detoured::Served => return Routed::Served(client),
            Detoured::No | Detoured::Wait => return Routed::No(client),
            // In a transaction a replica runs: where its next message goes
            // is known once it is whole.
            Detoured::Hold if b.cin.len() < limit => {
                client = match read_more(client, b, proto, forced).await {
                    Some(c) => c,
                    None => return Routed::End,
                };
            }
            Detoured::Hold => return Routed::No(client),
            Detoured::End(end @ (End::Shutdown | End::IdleTimeout)) => {
                farewell(client, end, proto).await;
                return Routed::End;
            }
            Detoured::End(End::Error(why)) => {
                debug!("session closed: {why}");
                return Routed::End;
            }
            Detoured::End(_) => return Routed::End,
        }
    }
}

/// More of the client's bytes, read into `cin`.
async fn read_more(
    client: Client,
    b: &mut Room,
    proto: &mut Protocol,
    forced: &mut Closer,
) -> Option<Client> {
    match client {
        Client::Runtime(s) => read_from_client(s, &mut b.cin, proto, forced).await,
        plain => Some(plain),
    }
}
