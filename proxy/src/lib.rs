//! onetrip: a Postgres-wire proxy that counts and saves round trips.
