//! Fencing tokens and the fence rule.
//!
//! Every term (or fenced lock acquisition) gets a [`Token`]: a strictly positive integer minted
//! by an atomic counter. A protected resource keeps a high-water [`FenceMark`] and accepts a write
//! iff its token is at least the mark; equal tokens are accepted (one term writes many times).
//! The mark only advances after a write has been applied, never on a refused or failed write.
//!
//! Tokens are limited to 2^53 because Redis Lua numbers are doubles: above 2^53 two distinct
//! tokens could compare equal inside a script.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

/// The largest valid token: 2^53, the largest integer a Lua number represents exactly along
/// with all smaller ones.
pub const MAX_TOKEN: u64 = 1 << 53;

/// Why a raw value is not a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Zero means "not leader" and is never a valid token.
    #[error("fencing token 0 is not a valid token (0 means \"not leader\")")]
    Zero,
    /// Negative values are never tokens.
    #[error("fencing token {0} is negative")]
    Negative(i64),
    /// Above 2^53 a Lua number loses precision.
    #[error("fencing token {0} exceeds 2^53, the largest value compared exactly in Lua")]
    TooLarge(u64),
    /// Not a decimal integer.
    #[error("fencing token {0:?} is not a decimal integer")]
    NotANumber(String),
}

/// A fencing token: an integer in `1..=2^53`.
///
/// ```
/// use lease_core::{Token, TokenError};
/// assert_eq!(Token::new(7)?.get(), 7);
/// assert_eq!(Token::new(0), Err(TokenError::Zero));
/// assert!(Token::new((1 << 53) + 1).is_err());
/// assert_eq!("42".parse::<Token>()?.get(), 42);
/// # Ok::<(), TokenError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(NonZeroU64);

impl Token {
    /// The first token a fresh counter mints.
    pub const FIRST: Token = Token(NonZeroU64::MIN);
    /// The largest valid token.
    // `MAX_TOKEN` is non-zero; `match` keeps this a const without unwrap.
    pub const MAX: Token = match NonZeroU64::new(MAX_TOKEN) {
        Some(v) => Token(v),
        None => Token(NonZeroU64::MIN),
    };

    /// Validates a raw token.
    pub fn new(raw: u64) -> Result<Token, TokenError> {
        if raw > MAX_TOKEN {
            return Err(TokenError::TooLarge(raw));
        }
        NonZeroU64::new(raw).map(Token).ok_or(TokenError::Zero)
    }

    /// Validates a signed raw token (as Redis integers and SQL `bigint` arrive).
    pub fn from_i64(raw: i64) -> Result<Token, TokenError> {
        if raw < 0 {
            return Err(TokenError::Negative(raw));
        }
        Token::new(raw.unsigned_abs())
    }

    /// The integer value.
    pub const fn get(self) -> u64 {
        self.0.get()
    }

    /// The value as `i64` (always exact: tokens are at most 2^53).
    pub const fn as_i64(self) -> i64 {
        // Tokens are <= 2^53 < i64::MAX, so the cast is lossless.
        self.0.get() as i64
    }

    /// The next token, or `None` above the limit.
    pub fn next(self) -> Option<Token> {
        Token::new(self.get().checked_add(1)?).ok()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token({})", self.0)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for Token {
    type Err = TokenError;
    fn from_str(s: &str) -> Result<Token, TokenError> {
        let t = s.trim();
        if let Some(rest) = t.strip_prefix('-') {
            if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
                return match t.parse::<i64>() {
                    Ok(v) => Err(TokenError::Negative(v)),
                    Err(_) => Err(TokenError::NotANumber(s.to_owned())),
                };
            }
            return Err(TokenError::NotANumber(s.to_owned()));
        }
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(TokenError::NotANumber(s.to_owned()));
        }
        match t.parse::<u64>() {
            Ok(v) => Token::new(v),
            // All digits but does not fit u64: certainly above the limit.
            Err(_) => Err(TokenError::TooLarge(u64::MAX)),
        }
    }
}

impl From<Token> for u64 {
    fn from(t: Token) -> u64 {
        t.get()
    }
}

impl TryFrom<u64> for Token {
    type Error = TokenError;
    fn try_from(v: u64) -> Result<Token, TokenError> {
        Token::new(v)
    }
}

impl TryFrom<i64> for Token {
    type Error = TokenError;
    fn try_from(v: i64) -> Result<Token, TokenError> {
        Token::from_i64(v)
    }
}

/// The high-water mark of a fenced resource: the largest token it has accepted (or seen at an
/// election), or none yet.
///
/// ```
/// use lease_core::{FenceMark, Token};
/// let mut mark = FenceMark::NONE;
/// let t5 = Token::new(5)?;
/// assert!(mark.accepts(t5));
/// mark.advance(t5);
/// assert!(mark.accepts(t5), "equal tokens are accepted");
/// assert!(!mark.accepts(Token::new(4)?));
/// # Ok::<(), lease_core::TokenError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct FenceMark(Option<Token>);

impl FenceMark {
    /// No token seen yet: every valid token is accepted.
    pub const NONE: FenceMark = FenceMark(None);

    /// A mark at `token`.
    pub const fn at(token: Token) -> FenceMark {
        FenceMark(Some(token))
    }

    /// The mark's token, if any.
    pub const fn token(self) -> Option<Token> {
        self.0
    }

    /// The fence rule: accept iff `token >= mark` (tokens are always >= 1).
    pub fn accepts(self, token: Token) -> bool {
        match self.0 {
            None => true,
            Some(mark) => token >= mark,
        }
    }

    /// The fence rule on a raw value from an untrusted source: token 0, negative or above the
    /// limit is refused, otherwise [`FenceMark::accepts`].
    pub fn accepts_raw(self, raw: i64) -> bool {
        Token::from_i64(raw).is_ok_and(|t| self.accepts(t))
    }

    /// Advances the mark to `token` if it is higher. Call only after the write was applied.
    pub fn advance(&mut self, token: Token) {
        if self.accepts(token) {
            self.0 = Some(token);
        }
    }
}
