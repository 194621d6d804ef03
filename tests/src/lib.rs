//! Test harness: a private PostgreSQL cluster and a proxy in front of it.
