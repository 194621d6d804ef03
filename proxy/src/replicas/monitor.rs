//! A replica's watcher: one connection per replica per process, asking
//! every `poll_interval` whether it is still in recovery, how far it has
//! replayed and how far behind it is. Anything that goes wrong (no
//! connection, no answer within `max_lag`, an error) takes the replica out
//! until it answers again.

use std::{sync::Arc, time::Duration};

use tracing::{info, warn};

use super::{Replica, State, conn};
use crate::config::Replicas as Config;

/// What is asked at each poll. Lag is zero when everything received is
/// replayed; otherwise the time since the last replayed commit was made on
/// the primary (which overstates it after a quiet spell: a replica is
/// taken out too early, never kept in too long).
const POLL: &str = "SELECT pg_catalog.pg_is_in_recovery(), \
     pg_catalog.pg_last_wal_replay_lsn(), \
     CASE WHEN pg_catalog.pg_last_wal_receive_lsn() IS NULL \
       OR pg_catalog.pg_last_wal_receive_lsn() <= pg_catalog.pg_last_wal_replay_lsn() \
       OR pg_catalog.pg_last_xact_replay_timestamp() IS NULL THEN 0 \
     ELSE extract(epoch FROM pg_catalog.clock_timestamp() \
       - pg_catalog.pg_last_xact_replay_timestamp()) END";

/// Longest wait between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

pub(super) async fn watch(replica: Arc<Replica>, config: Config) {
    let addr = replica.address.clone();
    let params = [
        ("user", config.monitor_user.as_str()),
        ("database", config.monitor_database.as_str()),
        ("application_name", "onetrip replica monitor"),
    ];
    let query = conn::query_message(POLL);
    let answer_within = config.max_lag.max(config.poll_interval);
    let mut backoff = config.poll_interval;
    let mut last_told = State::Down;
    let mut told_failure = false;
    loop {
        let opened = conn::open(&addr, &params, answer_within.max(Duration::from_secs(1))).await;
        let (mut tcp, mut buf) = match opened {
            Ok(c) => c,
            Err(e) => {
                replica.set_state(State::Down);
                if !told_failure {
                    warn!(replica = %addr, "replica out: {e}");
                    told_failure = true;
                }
                last_told = State::Down;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = config.poll_interval;
        loop {
            let asked = conn::query_row(&addr, &mut tcp, &mut buf, &query, 3);
            let row = match crate::timers::timeout(answer_within, asked).await {
                Ok(Ok(row)) => row,
                Ok(Err(e)) => {
                    warn!(replica = %addr, "replica out: {e}");
                    break;
                }
                Err(_) => {
                    warn!(replica = %addr, "replica out: no answer within {answer_within:?}");
                    break;
                }
            };
            let in_recovery = row[0].as_deref() == Some("t");
            let replay = row[1].as_deref().and_then(conn::parse_lsn).unwrap_or(0);
            let lag = row[2]
                .as_deref()
                .and_then(|s| s.parse::<f64>().ok())
                .and_then(|s| Duration::try_from_secs_f64(s.max(0.0)).ok())
                .unwrap_or_default();
            let state = match (in_recovery, replay) {
                (false, _) => State::Promoted,
                // Nothing replayed yet: no position to route by.
                (true, 0) => State::Down,
                (true, _) if lag > config.max_lag => State::Lagging,
                (true, _) => State::Up,
            };
            replica.set(state, replay, lag);
            if state != last_told {
                info!(replica = %addr, state = state.as_str(), lag = ?lag, "replica state");
                last_told = state;
            }
            tokio::time::sleep(config.poll_interval).await;
        }
        replica.set_state(State::Down);
        last_told = State::Down;
        told_failure = true;
        tokio::time::sleep(config.poll_interval).await;
    }
}
