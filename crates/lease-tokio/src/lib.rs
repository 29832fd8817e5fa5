//! The tokio driver for redlease: one generic election and lock loop over any lease backend.
#![forbid(unsafe_code)]
