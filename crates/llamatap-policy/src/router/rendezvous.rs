//! Weighted rendezvous (highest random weight) hashing: every upstream draws
//! a number for a key, and the highest draw wins.
//!
//! It needs no shared state: two llamatap processes with the same upstreams
//! (identified by name, see [`upstream_id`], not by position in the
//! configuration) place the same key on the same upstream. Removing an
//! upstream moves only the keys it held; adding one takes from each a share
//! in proportion to its weight.
//!
//! With equal weights the winner is the highest 64-bit draw (integers only,
//! so every platform agrees). With unequal weights an upstream's score is
//! `-weight / ln(u)` for its draw `u` mapped into (0, 1), which makes its
//! share of keys proportional to its weight; that uses `f64::ln`, so
//! processes agree when they run on the same platform.

use super::hash::{hash_bytes, hash_pair};

/// The identity of an upstream for rendezvous: the stable hash of its name
/// (its configured name, else its URL).
pub fn upstream_id(name: &str) -> u64 {
    hash_bytes(name.as_bytes())
}

/// The rendezvous key of a session: the stable hash of the session header's
/// value.
pub fn session_key(value: &[u8]) -> u64 {
    hash_bytes(value)
}

/// Upstream `id`'s draw for `key`, uniform over `u64`.
pub fn draw(id: u64, key: u64) -> u64 {
    hash_pair(id, key)
}

/// The weighted score of a draw: `-weight / ln(u)`, with `u` the draw's top
/// 53 bits mapped into the open interval (0, 1).
pub fn score(draw: u64, weight: u32) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    let unit = ((draw >> 11) as f64 + 0.5) * SCALE;
    -f64::from(weight) / unit.ln()
}

/// The item of `items` that wins `key`, given each item's upstream id and
/// weight by `identify`; `None` when `items` is empty. Items of weight 0
/// never win unless all weigh 0. Equal draws (the same id twice) go to the
/// earlier item.
pub fn pick<T>(items: &[T], key: u64, identify: impl Fn(&T) -> (u64, u32)) -> Option<&T> {
    let first_weight = items.first().map(|item| identify(item).1)?;
    let equal = items.iter().all(|item| identify(item).1 == first_weight);
    let mut best: Option<(&T, f64, u64)> = None;
    for item in items {
        let (id, weight) = identify(item);
        let drawn = draw(id, key);
        let scored = if equal { 0.0 } else { score(drawn, weight) };
        let wins = match best {
            None => true,
            Some((_, best_score, best_draw)) => {
                scored > best_score || (scored == best_score && drawn > best_draw)
            }
        };
        if wins {
            best = Some((item, scored, drawn));
        }
    }
    best.map(|(item, _, _)| item)
}
