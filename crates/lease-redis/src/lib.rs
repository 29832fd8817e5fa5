//! Redis adapter for redlease: Lua scripts (acquire, renew, release, fenced writes) run by EVALSHA over any redis-rs async connection.
#![forbid(unsafe_code)]
