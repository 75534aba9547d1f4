//! Passive ejection: a member that shows itself unwell under a request
//! (a failed connect, a reset or timeout, a 502/503/504 on a route that
//! works) is left out of the routing for an exponentially growing time,
//! unless an active check passes first; a response that shows it well ends
//! its failure streak.
//!
//! Deliberately not here: deciding what shows a member unwell (the
//! proxy's typed causes) and the active checks ([`super::watch`]).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Fleet;

/// First passive ejection; doubled per consecutive failure.
const EJECT_BASE: Duration = Duration::from_secs(1);
/// Longest passive ejection.
const EJECT_MAX: Duration = Duration::from_secs(30);

impl Fleet {
    /// A sign that member `i` itself is unwell (a failed connect, a reset or
    /// timeout under a request, a 502/503/504 on a route that works): eject
    /// it for an exponentially growing time (1 s, 2 s, ... 30 s) unless an
    /// active check passes first. Never called for an error a client caused.
    pub fn eject(&self, i: usize) {
        let Some(m) = self.member(i) else {
            return;
        };
        let n = m
            .consecutive_failures
            .fetch_add(1, Ordering::Relaxed)
            .min(5);
        let backoff = (EJECT_BASE * 2u32.pow(n)).min(EJECT_MAX);
        let now = self.now_ms();
        if !self.ejected(&m) {
            m.ejected_since_ms.store(now, Ordering::Relaxed);
        }
        let until = now.saturating_add(u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX));
        m.ejected_until_ms.store(until.max(1), Ordering::Relaxed);
    }

    /// How long member `i` has been on its way out without a break: draining
    /// (its address left its name's answer), or ejected; `None` when it is
    /// neither (or gone).
    pub fn away_for(&self, i: usize) -> Option<Duration> {
        let m = self.member(i)?;
        if let Some(d) = m.draining_for() {
            return Some(d);
        }
        if !self.ejected(&m) {
            return None;
        }
        let since = m.ejected_since_ms.load(Ordering::Relaxed);
        Some(Duration::from_millis(self.now_ms().saturating_sub(since)))
    }

    /// A response arrived from member `i` that shows it well: its failure
    /// streak ends.
    pub fn succeeded(&self, i: usize) {
        if let Some(m) = self.member(i) {
            m.consecutive_failures.store(0, Ordering::Relaxed);
        }
    }
}
