//! Test kit for redlease: real Redis, Redis Cluster and Postgres servers, and a TCP fault proxy, torn down on drop.
#![forbid(unsafe_code)]
