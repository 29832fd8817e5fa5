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

/// How a store mints the next token from a fence counter.
///
/// Both schemes mint a token above the counter, the applied mark and the acquirer's floor
/// ([`AcquireRequest::floor`](crate::AcquireRequest::floor)); they differ in what happens when
/// the store *loses* its counter (a restart without persistence, a flush, an eviction, a
/// failover to a replica that had not received the last writes):
///
/// | scheme | next token | strict after a counter loss |
/// |---|---|---|
/// | [`ClockFloored`](Self::ClockFloored) (default) | `max(counter + 1, server time in µs)` | yes, while the server's clock is not set back by more than the restart took |
/// | [`Counter`](Self::Counter) | `counter + 1` | no: the counter starts again at 1 |
///
/// Under `ClockFloored` tokens look like `1764590400123456` (µs since 1970: below 2^53, the
/// token limit, until the year 2255). A counter can only run ahead of the clock by minting more
/// than one token per microsecond on one key, which no Redis server does (one acquire is a
/// script call of several µs); `docs/fencing.md` gives the measured bound.
///
/// ```
/// use lease_core::TokenScheme;
/// assert_eq!(TokenScheme::default(), TokenScheme::ClockFloored);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TokenScheme {
    /// `max(counter + 1, server time in µs since 1970)`: a lost counter restarts above every
    /// token minted before the loss, as long as the server's clock did not go back by more than
    /// the time the restart or failover took.
    #[default]
    ClockFloored,
    /// `counter + 1`: small, dense tokens (1, 2, 3…); strict only while the counter survives.
    Counter,
}

/// One life of a store's fence state: the server's time in µs since 1970 when the fence
/// counter's epoch key was created.
///
/// A store that loses its data (restart without persistence, `FLUSHALL`, eviction) creates a
/// new epoch with the next acquire, so every instance that saw the old epoch notices the loss,
/// even when the clock floor kept the tokens strict ([`StoreLoss::NewEpoch`]).
///
/// ```
/// use lease_core::Epoch;
/// let e = Epoch::new(1_764_590_400_000_000);
/// assert_eq!(e.get(), 1_764_590_400_000_000);
/// assert_eq!(e.to_string(), "1764590400000000");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Epoch(u64);

impl Epoch {
    /// An epoch from its raw value.
    pub const fn new(raw: u64) -> Epoch {
        Epoch(raw)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// What an acquire (granted or not) saw of the fence state at the store, so that every
/// instance, not only one that held a higher token, can tell when the store lost state.
///
/// ```
/// use lease_core::{Epoch, FenceState, Token};
/// let s = FenceState::new(Token::new(7).ok(), Some(Epoch::new(1)));
/// assert_eq!(s.counter, Token::new(7).ok());
/// assert_eq!(FenceState::UNKNOWN.counter, None);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[non_exhaustive]
pub struct FenceState {
    /// The highest of the counter and the applied mark *before* the request: for a granted
    /// acquire, what the token was minted above; for a refused one, the current holder's
    /// token (or a later raise). `None`: none yet, unfenced, or not reported.
    pub counter: Option<Token>,
    /// The store's fence epoch, when the backend keeps one.
    pub epoch: Option<Epoch>,
}

impl FenceState {
    /// Nothing known (unfenced leases, backends that do not report it).
    pub const UNKNOWN: FenceState = FenceState {
        counter: None,
        epoch: None,
    };

    /// A state from its parts.
    pub const fn new(counter: Option<Token>, epoch: Option<Epoch>) -> FenceState {
        FenceState { counter, epoch }
    }
}

/// A store that lost fence state, as one instance noticed it. Reported (as an event, to
/// observers and in `tracing`), and healed by the next acquire: every acquire carries the
/// highest token its instance has seen as a floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum StoreLoss {
    /// The store's fence epoch changed: its fence state was created anew (a restart without
    /// persistence, a flush, an eviction of the fence keys).
    #[error(
        "the store lost its fence state: epoch {previous} was replaced by {current} (restart without persistence, flush or eviction)"
    )]
    NewEpoch {
        /// The epoch seen before.
        previous: Epoch,
        /// The epoch now.
        current: Epoch,
    },
    /// The store's counter is below a token this instance saw it mint: it lost recent writes
    /// (a failover to a replica that lagged, a restore from an older snapshot).
    #[error(
        "the store's fence counter went back: it is at {}, below token {seen} seen before (failover to a lagging replica or an older snapshot)",
        found.map_or_else(|| "none".to_owned(), |t| t.to_string())
    )]
    CounterBehind {
        /// The highest token this instance saw before.
        seen: Token,
        /// What the store's counter (or mark) is at now.
        found: Option<Token>,
    },
}

impl StoreLoss {
    /// What an instance that had seen `seen_epoch` and `seen_token` learns from `now`, the
    /// fence state a store just reported: a new epoch first (it explains a lower counter too),
    /// else a counter below `seen_token`; `None` when nothing was lost (or nothing can tell).
    ///
    /// ```
    /// use lease_core::{Epoch, FenceState, StoreLoss, Token};
    /// let t = |v| Token::new(v).ok();
    /// let now = FenceState::new(t(3), Some(Epoch::new(1)));
    /// assert_eq!(StoreLoss::detect(Some(Epoch::new(1)), t(3), now), None);
    /// assert!(matches!(
    ///     StoreLoss::detect(Some(Epoch::new(1)), t(9), now),
    ///     Some(StoreLoss::CounterBehind { .. })
    /// ));
    /// assert!(matches!(
    ///     StoreLoss::detect(Some(Epoch::new(0)), t(1), now),
    ///     Some(StoreLoss::NewEpoch { .. })
    /// ));
    /// ```
    pub fn detect(
        seen_epoch: Option<Epoch>,
        seen_token: Option<Token>,
        now: FenceState,
    ) -> Option<StoreLoss> {
        if let (Some(previous), Some(current)) = (seen_epoch, now.epoch)
            && previous != current
        {
            return Some(StoreLoss::NewEpoch { previous, current });
        }
        // A state with neither part is "not reported", never "lost".
        let reported = now.counter.is_some() || now.epoch.is_some();
        match seen_token {
            Some(seen) if reported && now.counter < Some(seen) => Some(StoreLoss::CounterBehind {
                seen,
                found: now.counter,
            }),
            _ => None,
        }
    }
}
