//! Every invalid election input named in lease-core gives its typed error through the facade,
//! at construction (no server involved).

use std::time::Duration;

use redlease::{ConfigError, ElectionConfig, Token, TokenError};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn build(
    f: impl FnOnce(redlease::ElectionConfigBuilder) -> redlease::ElectionConfigBuilder,
) -> Result<ElectionConfig, ConfigError> {
    f(ElectionConfig::builder("svc", "a")).build()
}

#[test]
fn every_invalid_election_input_is_a_typed_error() {
    assert_eq!(build(|b| b.ttl(Duration::ZERO)), Err(ConfigError::ZeroTtl));
    assert!(matches!(
        build(|b| b.ttl(Duration::from_micros(1500))),
        Err(ConfigError::TtlNotWholeMillis(_))
    ));
    assert!(matches!(
        build(|b| b.ttl(Duration::from_nanos(10))),
        Err(ConfigError::TtlNotWholeMillis(_))
    ));
    assert!(matches!(
        build(|b| b.ttl(ms(99))),
        Err(ConfigError::TtlTooShort { .. })
    ));
    assert!(matches!(
        build(|b| b.ttl(Duration::from_secs(31 * 86400))),
        Err(ConfigError::TtlTooLong { .. })
    ));
    assert_eq!(
        build(|b| b.renew_interval(Duration::ZERO)),
        Err(ConfigError::ZeroRenewInterval)
    );
    assert!(matches!(
        build(|b| b.ttl(ms(1000)).renew_interval(ms(501))),
        Err(ConfigError::RenewIntervalTooLong { .. })
    ));
    assert!(
        build(|b| b.ttl(ms(1000)).renew_interval(ms(500))).is_ok(),
        "TTL/2 is allowed"
    );
    assert_eq!(
        build(|b| b.acquire_interval(Duration::ZERO)),
        Err(ConfigError::ZeroAcquireInterval)
    );
    assert!(matches!(
        build(|b| b.ttl(ms(1000)).acquire_interval(ms(1000))),
        Err(ConfigError::AcquireIntervalTooLong { .. })
    ));
    assert_eq!(
        build(|b| b.operation_timeout(Duration::ZERO)),
        Err(ConfigError::ZeroOperationTimeout)
    );
    assert!(matches!(
        build(|b| b.ttl(ms(1000)).operation_timeout(ms(1000))),
        Err(ConfigError::OperationTimeoutTooLong { .. })
    ));
    // Issue defect 3: sub-millisecond intervals cannot fit a round trip (a 1 ns renew
    // interval gave ~100 spurious "renew timed out" errors per second): refused.
    for (what, result) in [
        (
            "renew interval",
            build(|b| b.renew_interval(Duration::from_nanos(1))),
        ),
        (
            "acquire interval",
            build(|b| b.acquire_interval(Duration::from_micros(500))),
        ),
        (
            "operation timeout",
            build(|b| b.operation_timeout(Duration::from_micros(999))),
        ),
    ] {
        match result {
            Err(ConfigError::IntervalTooShort { what: w, min, .. }) => {
                assert_eq!(w, what);
                assert_eq!(min, ms(1));
            }
            other => panic!("{what}: {other:?}"),
        }
    }
    assert!(build(|b| b.renew_interval(ms(1)).acquire_interval(ms(1))).is_ok());
    // Retry strategies too, and they cannot be built any other way (the type is opaque).
    assert!(matches!(
        redlease::RetryStrategy::linear(Duration::from_micros(500)),
        Err(ConfigError::IntervalTooShort { .. })
    ));
    assert!(matches!(
        redlease::RetryStrategy::exponential(Duration::from_nanos(1), ms(10)),
        Err(ConfigError::IntervalTooShort { .. })
    ));
    assert!(redlease::RetryStrategy::linear(Duration::ZERO).is_err());
    assert!(matches!(
        ElectionConfig::builder("", "a").build(),
        Err(ConfigError::Empty { .. })
    ));
    assert!(matches!(
        ElectionConfig::builder("x".repeat(1025), "a").build(),
        Err(ConfigError::TooLong { .. })
    ));
    assert!(matches!(
        ElectionConfig::builder("svc", "").build(),
        Err(ConfigError::Empty { .. })
    ));
    assert!(matches!(
        ElectionConfig::builder("svc", "i".repeat(257)).build(),
        Err(ConfigError::TooLong { .. })
    ));
    assert!(matches!(
        ElectionConfig::builder("svc", "a\0b").build(),
        Err(ConfigError::ContainsNul { .. })
    ));
}

#[test]
fn defaults_are_relative_to_the_ttl() {
    let c = build(|b| b.ttl(ms(900))).unwrap();
    assert_eq!(c.renew_interval(), ms(300));
    assert_eq!(c.acquire_interval(), ms(450));
    assert_eq!(c.acquire_timeout(), ms(450));
    assert_eq!(c.release_timeout(), ms(300));
}

#[test]
fn invalid_tokens_are_typed_errors() {
    assert_eq!(Token::new(0), Err(TokenError::Zero));
    assert_eq!(Token::from_i64(-1), Err(TokenError::Negative(-1)));
    assert!(matches!(
        Token::new((1 << 53) + 1),
        Err(TokenError::TooLarge(_))
    ));
    assert!(matches!(
        "1e3".parse::<Token>(),
        Err(TokenError::NotANumber(_))
    ));
}
