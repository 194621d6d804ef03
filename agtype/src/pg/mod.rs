//! Driver integrations, each behind its feature.

#[cfg(feature = "tokio-postgres")]
mod with_postgres_types;
#[cfg(feature = "sqlx")]
mod with_sqlx;
