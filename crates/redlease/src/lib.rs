//! Lease-based leader election and distributed locks on Redis, with fencing tokens.
#![forbid(unsafe_code)]
