//! Membership: members of discovered names joining and leaving the table
//! of ids, and telemetry written under a member's name only while it is
//! there (so that a departed member's series cannot come back after they
//! were removed), and how each name's last lookup went (what `/readyz`
//! says when a name gives no member).

use std::net::SocketAddr;
use std::sync::Arc;

use super::{Fleet, Full, Lookup, Member};

impl Fleet {
    /// A discovered address joins as a new member of entry `entry`, named
    /// by its address, with an empty index and not yet checked: it takes
    /// requests once its first health check passes. `Err(Full)` when the
    /// fleet holds its most members.
    pub fn join(&self, entry: usize, address: SocketAddr) -> Result<Arc<Member>, Full> {
        let template = self.entries.get(entry).ok_or(Full)?;
        let mut upstream = template.clone();
        upstream.name = address.to_string();
        upstream.address = address.to_string();
        upstream.host = address.ip().to_string();
        upstream.port = address.port();
        let mut table = self.table.write().map_err(|_| Full)?;
        let id = match table.iter().position(Option::is_none) {
            Some(free) => free,
            None if table.len() < self.capacity => {
                table.push(None);
                table.len() - 1
            }
            None => return Err(Full),
        };
        let name = upstream.name.clone();
        let member = Arc::new(Member::new(upstream, id, entry, true));
        member.set_address(address);
        if let Some(slot) = table.get_mut(id) {
            *slot = Some(member.clone());
        }
        drop(table);
        if let Ok(mut r) = self.router.lock() {
            r.place(id, &name);
        }
        Ok(member)
    }

    /// Member `member` leaves: its id is freed, the router forgets it, its
    /// models leave the fleet's list. The caller drained it first (no
    /// request in flight).
    pub fn leave(&self, member: &Member) {
        member.mark_gone();
        if let Ok(mut table) = self.table.write() {
            if let Some(slot) = table.get_mut(member.id) {
                if slot.as_deref().is_some_and(|m| std::ptr::eq(m, member)) {
                    *slot = None;
                }
            }
            while table.len() > self.static_count() && table.last().is_some_and(Option::is_none) {
                table.pop();
            }
        }
        if let Ok(mut r) = self.router.lock() {
            r.vacate(member.id);
        }
        self.refresh_models();
    }

    /// The members configured by URL (ids `0..n`).
    fn static_count(&self) -> usize {
        self.entries.iter().filter(|u| !u.discover).count()
    }

    /// Runs `f` on each member, by id, while none can leave: what `f`
    /// records under a member's name cannot outlive the member's departure
    /// (its series are removed after it left).
    pub fn each_member(&self, mut f: impl FnMut(&Member)) {
        if let Ok(t) = self.table.read() {
            t.iter().flatten().for_each(|m| f(m));
        }
    }

    /// Runs `f` if `member` is still in the fleet, while it cannot leave;
    /// whether it ran.
    pub fn if_present(&self, member: &Member, f: impl FnOnce()) -> bool {
        let Ok(t) = self.table.read() else {
            return false;
        };
        let present = t
            .get(member.id)
            .and_then(Option::as_deref)
            .is_some_and(|m| std::ptr::eq(m, member));
        if present {
            f();
        }
        present
    }

    /// Records how the last lookup of entry `entry`'s name went.
    pub fn note_lookup(&self, entry: usize, lookup: Lookup) {
        if let Some(Ok(mut g)) = self.lookups.get(entry).map(|l| l.lock()) {
            *g = lookup;
        }
    }

    /// Each discovered name and why it gives no member now, `; `-separated:
    /// not looked up yet, its lookup failed, or it resolves to nothing.
    pub(super) fn lookup_list(&self) -> String {
        self.entries
            .iter()
            .zip(&self.lookups)
            .filter(|(u, _)| u.discover)
            .map(|(u, l)| {
                let last = l.lock().map(|g| g.clone()).unwrap_or_default();
                match last {
                    Lookup::Pending => format!("{} is not resolved yet", u.address),
                    Lookup::Answered => format!("{} resolves to no address now", u.address),
                    Lookup::Failed(why) => format!("{}: its lookup failed ({why})", u.address),
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}
