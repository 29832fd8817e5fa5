//! Properties of fencing tokens and the fence rule (`lease_core::token`).
//!
//! - `Token::new`, `Token::from_i64`, `FromStr` and `TryFrom` accept exactly `1..=2^53` and
//!   refuse 0, negatives and anything above 2^53 with the matching [`TokenError`];
//! - `FenceMark::accepts(t)` iff `t >= mark` (equal accepted, no mark accepts all);
//! - `FenceMark::advance` is a monotonic max: the mark never goes down, and after advancing by
//!   a sequence of tokens it equals their maximum.

use lease_core::token::MAX_TOKEN;
use lease_core::{FenceMark, Token, TokenError};
use proptest::prelude::*;

/// Raw values that hit the edges often: around 0, 1, 2^53 and the integer limits.
fn raw_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1u64),
        Just(MAX_TOKEN - 1),
        Just(MAX_TOKEN),
        Just(MAX_TOKEN + 1),
        Just(u64::MAX),
        0u64..100,
        (MAX_TOKEN - 100)..(MAX_TOKEN + 100),
        any::<u64>(),
    ]
}

fn raw_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(-1i64),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(MAX_TOKEN as i64),
        Just(MAX_TOKEN as i64 + 1),
        -100i64..100,
        any::<i64>(),
    ]
}

fn token() -> impl Strategy<Value = Token> {
    prop_oneof![
        Just(1u64),
        Just(MAX_TOKEN),
        1u64..1000,
        (MAX_TOKEN - 1000)..=MAX_TOKEN,
        1u64..=MAX_TOKEN,
    ]
    .prop_map(|v| match v.try_into() {
        Ok(t) => t,
        Err(_) => Token::FIRST,
    })
}

/// What the rule says a raw unsigned value is.
fn expected_u64(raw: u64) -> Result<u64, TokenError> {
    if raw == 0 {
        Err(TokenError::Zero)
    } else if raw > MAX_TOKEN {
        Err(TokenError::TooLarge(raw))
    } else {
        Ok(raw)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn new_accepts_exactly_1_to_2_pow_53(raw in raw_u64()) {
        prop_assert_eq!(Token::new(raw).map(Token::get), expected_u64(raw));
        prop_assert_eq!(Token::try_from(raw).map(Token::get), expected_u64(raw));
    }

    #[test]
    fn from_i64_refuses_negative_zero_and_too_large(raw in raw_i64()) {
        let expected = if raw < 0 {
            Err(TokenError::Negative(raw))
        } else {
            expected_u64(raw as u64)
        };
        prop_assert_eq!(Token::from_i64(raw).map(Token::get), expected.clone());
        prop_assert_eq!(Token::try_from(raw).map(Token::get), expected);
        if let Ok(t) = Token::from_i64(raw) {
            prop_assert_eq!(t.as_i64(), raw, "as_i64 is exact");
            prop_assert_eq!(u64::from(t), raw as u64);
        }
    }

    #[test]
    fn parse_agrees_with_new_for_decimal_text(raw in raw_u64(), pad in 0usize..3) {
        let text = format!("{}{raw}{}", " ".repeat(pad), " ".repeat(pad));
        let parsed = text.parse::<Token>();
        match expected_u64(raw) {
            Ok(v) => prop_assert_eq!(parsed.map(Token::get), Ok(v)),
            Err(TokenError::Zero) => prop_assert_eq!(parsed, Err(TokenError::Zero)),
            // Above the limit: refused as too large (the reported value may be clamped when the
            // text does not fit in u64, which a u64 raw always does).
            Err(_) => prop_assert!(matches!(parsed, Err(TokenError::TooLarge(_)))),
        }
    }

    #[test]
    fn parse_refuses_negative_text(raw in i64::MIN..0) {
        let parsed = raw.to_string().parse::<Token>();
        prop_assert_eq!(parsed, Err(TokenError::Negative(raw)));
    }

    #[test]
    fn parse_refuses_huge_digit_strings(digits in "[1-9][0-9]{20,40}") {
        prop_assert!(matches!(digits.parse::<Token>(), Err(TokenError::TooLarge(_))));
    }

    #[test]
    fn parse_refuses_non_numbers(s in "[^0-9 \t\n]{1,12}|[0-9]+[a-z.+e][0-9]*|\\+[0-9]+|") {
        prop_assert!(matches!(s.parse::<Token>(), Err(TokenError::NotANumber(_))), "{:?}", s);
    }

    #[test]
    fn display_parse_round_trip(t in token()) {
        prop_assert_eq!(t.to_string().parse::<Token>(), Ok(t));
    }

    #[test]
    fn next_is_plus_one_until_the_limit(t in token()) {
        match t.next() {
            Some(n) => prop_assert_eq!(n.get(), t.get() + 1),
            None => prop_assert_eq!(t, Token::MAX),
        }
    }

    #[test]
    fn fence_accepts_iff_token_at_least_mark(mark in token(), t in token()) {
        prop_assert_eq!(FenceMark::at(mark).accepts(t), t >= mark);
        prop_assert!(FenceMark::at(mark).accepts(mark), "equal token accepted");
        prop_assert!(FenceMark::NONE.accepts(t), "no mark accepts every valid token");
    }

    #[test]
    fn fence_accepts_raw_applies_token_limits(mark in proptest::option::of(token()), raw in raw_i64()) {
        let fence = mark.map_or(FenceMark::NONE, FenceMark::at);
        let expected = match Token::from_i64(raw) {
            Ok(t) => mark.is_none_or(|m| t >= m),
            Err(_) => false,
        };
        prop_assert_eq!(fence.accepts_raw(raw), expected);
    }

    #[test]
    fn advance_is_a_monotonic_max(tokens in proptest::collection::vec(token(), 0..40)) {
        let mut fence = FenceMark::NONE;
        let mut max: Option<Token> = None;
        for t in &tokens {
            let before = fence;
            fence.advance(*t);
            max = Some(max.map_or(*t, |m| m.max(*t)));
            prop_assert!(fence >= before, "the mark never goes down");
            prop_assert_eq!(fence.token(), max, "the mark is the maximum so far");
            prop_assert!(fence.accepts(*t) == (Some(*t) == max), "only the latest maximum still passes among equals");
        }
    }
}

#[test]
fn limits_exactly() {
    assert_eq!(Token::new(0), Err(TokenError::Zero));
    assert_eq!(Token::new(MAX_TOKEN).map(Token::get), Ok(1 << 53));
    assert_eq!(
        Token::new(MAX_TOKEN + 1),
        Err(TokenError::TooLarge(MAX_TOKEN + 1))
    );
    assert_eq!(Token::from_i64(-1), Err(TokenError::Negative(-1)));
    assert_eq!(Token::MAX.next(), None);
    assert_eq!(Token::FIRST.get(), 1);
    assert!(matches!(
        "-0".parse::<Token>(),
        Err(TokenError::Negative(0) | TokenError::Zero)
    ));
    assert!(matches!(
        "".parse::<Token>(),
        Err(TokenError::NotANumber(_))
    ));
    assert!(matches!(
        "   ".parse::<Token>(),
        Err(TokenError::NotANumber(_))
    ));
}
