//! onetrip: a Postgres-wire proxy that counts and saves round trips.
//!
//! The proxy is a library first: start it in-process, learn its address,
//! shut it down.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = onetrip::Config::default();
//! config.listen.address = "127.0.0.1:0".parse()?;
//! config.upstream.address = onetrip::config::UpstreamAddress::parse("127.0.0.1:5432")?;
//! let proxy = onetrip::Proxy::start(config).await?;
//! println!("connect to {}", proxy.local_addr());
//! proxy.shutdown(std::time::Duration::from_secs(5)).await;
//! # Ok(()) }
//! ```

pub mod admin;
pub mod auth;
pub mod cancel;
pub mod config;
pub mod cypher_cache;
pub mod kept;
pub mod metrics;
pub mod net;
pub mod pooling;
pub mod protocol;
pub mod relay;
pub mod reload;
pub mod replicas;
mod server;
pub mod session;
pub mod shared;
pub mod stats;
pub mod timers;
pub mod wire;
pub mod worker;

pub use config::Config;

/// Worker threads as the binary starts them (`threads` = 0: one per CPU
/// core), each relaying its plain-TCP sessions through its own epoll; hand
/// their runtimes to `Proxy::start_on`. Stopped when dropped.
pub fn workers(threads: usize) -> std::io::Result<worker::Workers> {
    worker::Workers::start(threads, relay::epoll::WORKER_RELAY)
}

/// The private PostgreSQL of `upstream = "embedded"`; its types appear in
/// [`Proxy::embedded`] and [`StartError`].
pub use onetrip_embedded as embedded;
pub use server::{Proxy, StartError};
pub use shared::Shared;
