//! Redlock quorum backend for redlease: leases and fenced quorum tokens over N independent Redis primaries.
#![forbid(unsafe_code)]
