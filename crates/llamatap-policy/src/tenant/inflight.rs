//! A tenant's requests in flight, counted: [`InFlight::enter`] counts one
//! and returns its guard, which counts it out when dropped (whatever path
//! the request ends by).
//!
//! Deliberately not here: the limit on the count (the proxy's tenant
//! admission, with [`super::window`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// One request counted in its tenant's in-flight count, until dropped.
#[derive(Debug)]
pub struct InFlight(Arc<AtomicU32>);

impl InFlight {
    /// Counts one more in `count`; returns the count before it and the
    /// guard that counts it out.
    pub fn enter(count: &Arc<AtomicU32>) -> (u32, InFlight) {
        let before = count.fetch_add(1, Ordering::Relaxed);
        (before, InFlight(Arc::clone(count)))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted_in_then_out_on_drop() {
        let count = Arc::new(AtomicU32::new(0));
        let (before, a) = InFlight::enter(&count);
        assert_eq!(before, 0);
        let (before, b) = InFlight::enter(&count);
        assert_eq!(before, 1);
        assert_eq!(count.load(Ordering::Relaxed), 2);
        drop(a);
        assert_eq!(count.load(Ordering::Relaxed), 1);
        drop(b);
        assert_eq!(count.load(Ordering::Relaxed), 0);
    }
}
