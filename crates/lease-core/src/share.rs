//! The share rule of a group of members that split `N` names among themselves
//! (`lease-tokio`'s `ElectionGroup`): pure arithmetic, so it is tested by property.
//!
//! Members are ranked (by the roster slot each holds, lowest first). With `m` live members,
//! the first `N mod m` ranks own `ceil(N / m)` names and the others `floor(N / m)`: the
//! targets add up to exactly `N`, so when every member holds no more than its target, every
//! name is owned and no two members differ by more than one.
//!
//! ```
//! use lease_core::share::target;
//! // 10 names, 3 members: 4, 3, 3.
//! assert_eq!([target(10, 3, 0), target(10, 3, 1), target(10, 3, 2)], [4, 3, 3]);
//! // A member that knows of no live member (not even itself yet) counts itself alone.
//! assert_eq!(target(10, 0, 0), 10);
//! ```

/// How many of `names` the member of rank `rank` (0-based) among `members` live members
/// should own. `members == 0` counts as one; a rank at or past `members` (a view that has not
/// caught up) gets the smaller share.
pub fn target(names: usize, members: usize, rank: usize) -> usize {
    let members = members.max(1);
    names / members + usize::from(rank < names % members)
}

/// The target of a member that holds **no roster slot** and owns `owned` names: exactly
/// those. A member without a slot is not ranked, so it contends for no name; but losing its
/// slot (the key evicted or overwritten, an ACL change, a lost renewal) says nothing about its
/// names, whose terms are still valid: it keeps them, resigning none, while it contends for a
/// slot again. The other members no longer count it and take the names it does not hold;
/// once it is ranked again the ordinary [`target`] applies. Before its first slot it owns
/// nothing, so it aims at nothing.
///
/// ```
/// use lease_core::share::{Step, step, target_without_slot};
/// assert_eq!(step(7, target_without_slot(7)), Step::Hold, "a lost slot ends no term");
/// assert_eq!(target_without_slot(0), 0, "and a member without one starts no new term");
/// ```
pub fn target_without_slot(owned: usize) -> usize {
    owned
}

/// What a member owning `owned` names should do under its `target`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Below its share: contend for names it does not own.
    Contend,
    /// At its share: keep what it owns, contend for nothing more.
    Hold,
    /// Above its share: resign this many names (gracefully, releasing each), contend for
    /// nothing more.
    Resign(usize),
}

/// The step for a member owning `owned` names with share `target`.
pub fn step(owned: usize, target: usize) -> Step {
    match owned.cmp(&target) {
        std::cmp::Ordering::Less => Step::Contend,
        std::cmp::Ordering::Equal => Step::Hold,
        std::cmp::Ordering::Greater => Step::Resign(owned - target),
    }
}
