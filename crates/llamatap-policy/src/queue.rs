//! Admission queue arithmetic: which waiting request gets the next free
//! upstream slot.
//!
//! Three tiers decide, as in llm-d's flow control: the class first (index 0
//! is the most urgent; a lower index is always dispatched first), then the
//! tenants of that class in weighted round robin (a tenant of weight `w`
//! takes up to `w` dispatches per turn), then arrival order within a tenant.
//! A class may not take the last `reserve` free slots of the fleet, so that
//! room is kept for more urgent classes (llama-server cannot pre-empt a
//! running slot). Classes stay strict under the tenant reserve too: when a
//! class's queued tenants are all held back by its `tenant_reserve`, the
//! slot is kept for a tenant of that class with none running, and no less
//! urgent class takes it.
//!
//! A class holding `max_depth` requests keeps room for every tenant by the
//! tenant-share rule (`queue/share.rs`): an arrival from a tenant below its
//! weighted share takes the place of the newest request of the tenant most
//! over its own, which leaves the queue displaced
//! ([`Scheduler::displaced`]); any other arrival is refused. A paused
//! answer queued again ([`Scheduler::requeue`]) is never displaced.
//!
//! Capacity is counted per upstream: each has a capacity (`None`: unknown,
//! never limiting), a count of requests bound to it and an up/down mark; a
//! request granted but not yet bound to an upstream is counted as pending,
//! so the fleet is never over-granted while the router picks
//! (`queue/capacity.rs`).
//!
//! Enqueue, dispatch and removal are O(1) amortized (an arrival at a full
//! class: O(its tenants)): entries live in a slab addressed by
//! generation-checked [`Handle`]s; an entry that left leaves a stale handle
//! in its queues, skipped when met and compacted away once stale handles
//! outnumber live ones, so the queues stay bounded by what is queued
//! (`queue/handles.rs`). The turns between a class's tenants are in
//! `queue/turns.rs`.
//!
//! Pure: no clock (callers pass `Instant`s), no I/O, no framework.
//! Deliberately not here: deadlines' timers, waking the waiters, routing
//! (the caller chooses among [`Scheduler::open_upstreams`]).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::tenant::Priority;

mod capacity;
mod handles;
mod share;
#[cfg(test)]
mod tests;
mod turns;

pub use capacity::UpstreamLoad;
pub use share::Displaced;

use handles::{live, settle, Entry, Slot};
use turns::holds_back;

/// A request's class: its key's (`None`: `default`), changed by the
/// priority header only downwards (towards `batch`) unless the header is
/// `trusted`, when it may also raise it.
pub fn class(key: Option<Priority>, header: Option<Priority>, trusted: bool) -> Priority {
    let key = key.unwrap_or_default();
    match header {
        Some(h) if trusted => h,
        Some(h) if (h as usize) > (key as usize) => h,
        _ => key,
    }
}

/// A queued entry's address; stale once the entry left the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    index: u32,
    generation: u32,
}

/// The rules of one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassRules {
    /// Longest a request may wait queued; `None`: no limit.
    pub max_wait: Option<Duration>,
    /// Most requests queued at once; `None`: no limit.
    pub max_depth: Option<usize>,
    /// Free slots of the fleet this class may not take.
    pub reserve: u32,
    /// Free slots (beyond `reserve`) that a tenant of this class with a
    /// request already granted may not take: kept for a tenant of the class
    /// that has none, so that one tenant's flood cannot make another's turn
    /// wait for a slot to free.
    pub tenant_reserve: u32,
}

/// A dispatched request: its handle and waker, and whose it is (the caller
/// reports its end with [`Scheduler::tenant_done`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Dispatched<T> {
    /// Its address in the queue (stale now).
    pub handle: Handle,
    /// What wakes its waiter.
    pub waker: T,
    /// Its class index.
    pub class: usize,
    /// Its tenant key.
    pub tenant: usize,
}

/// Why an entry was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The class's queue holds `max_depth` requests.
    Full,
    /// The class's queue holds `max_depth` requests, other tenants wait in
    /// it too, and this tenant already holds at least its weighted share of
    /// it: the cause is its own share (a `429`, not a `503`).
    TenantShare,
}

/// What [`Scheduler::enqueue`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// Class index (0: most urgent).
    pub class: usize,
    /// Tenant key, any number (one per tenant).
    pub tenant: usize,
    /// The tenant's weight, at least 1.
    pub weight: u32,
    /// When it arrived.
    pub at: Instant,
}

#[derive(Debug, Default)]
struct TenantQueue {
    queue: VecDeque<Handle>,
    /// Its entries still queued (its queue may hold stale handles too).
    live: usize,
    /// Of those, paused answers queued again: never displaced.
    paused: usize,
    weight: u32,
    credit: u32,
    /// In the class's ring.
    active: bool,
}

#[derive(Debug, Default)]
struct Class {
    rules: ClassRules,
    tenants: HashMap<usize, TenantQueue>,
    /// Tenants with entries, in turn order.
    ring: VecDeque<usize>,
    /// Every handle in arrival order: the oldest live one is at the front.
    arrivals: VecDeque<Handle>,
    depth: usize,
    stale: usize,
    /// Requests granted and not yet ended, per tenant (only tenants with
    /// some).
    running: HashMap<usize, u32>,
}

/// The queue of every class and the capacity of every upstream. `T` is
/// whatever wakes a waiter; it is handed back on dispatch or removal.
#[derive(Debug)]
pub struct Scheduler<T> {
    classes: Vec<Class>,
    slots: Vec<Slot<T>>,
    free_slots: Vec<u32>,
    upstreams: Vec<UpstreamLoad>,
    pending: u32,
    /// Requests displaced and not yet taken by [`Scheduler::displaced`].
    displaced: VecDeque<Displaced<T>>,
    /// Per class: requests waiting in other replicas' queues (shared
    /// slots), which free slots are kept for before a less urgent class
    /// here takes them.
    elsewhere: Vec<u32>,
}

impl<T> Scheduler<T> {
    /// A scheduler for classes with `rules` (most urgent first) and
    /// `upstreams` upstreams, each up with an unknown capacity.
    pub fn new(rules: &[ClassRules], upstreams: usize) -> Self {
        Scheduler {
            classes: rules
                .iter()
                .map(|r| Class {
                    rules: *r,
                    ..Class::default()
                })
                .collect(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            upstreams: vec![
                UpstreamLoad {
                    capacity: None,
                    in_flight: 0,
                    up: true,
                    awaited: 0,
                };
                upstreams
            ],
            pending: 0,
            displaced: VecDeque::new(),
            elsewhere: vec![0; rules.len()],
        }
    }

    /// Sets, per class, the requests waiting in other replicas' queues: a
    /// class here then takes a free slot only beyond those waiting
    /// elsewhere at a more urgent class (and beyond its reserve).
    pub fn set_elsewhere(&mut self, waiting: &[u32]) {
        for (i, n) in self.elsewhere.iter_mut().enumerate() {
            *n = waiting.get(i).copied().unwrap_or(0);
        }
    }

    /// Free slots class `class` may take: the fleet's, less those kept for
    /// requests of more urgent classes waiting in other replicas.
    fn free_for(&self, class: usize, free: u32) -> u32 {
        let ahead = self
            .elsewhere
            .iter()
            .take(class)
            .fold(0u32, |n, w| n.saturating_add(*w));
        free.saturating_sub(ahead)
    }

    /// Requests queued in class `class`.
    pub fn depth(&self, class: usize) -> usize {
        self.classes.get(class).map_or(0, |c| c.depth)
    }

    /// Requests queued in every class.
    pub fn total_depth(&self) -> usize {
        self.classes.iter().map(|c| c.depth).sum()
    }

    /// How long the oldest request of `class` has waited at `now`.
    pub fn oldest_wait(&mut self, class: usize, now: Instant) -> Option<Duration> {
        let slots = &self.slots;
        let c = self.classes.get_mut(class)?;
        settle(c, slots);
        let e = live(slots, *c.arrivals.front()?)?;
        Some(now.saturating_duration_since(e.at))
    }

    /// The class's rules.
    pub fn rules(&self, class: usize) -> Option<ClassRules> {
        self.classes.get(class).map(|c| c.rules)
    }

    /// Queues a request; `waker` comes back when it is dispatched, removed
    /// or displaced. At a full class, the tenant-share rule decides: the
    /// request is refused, or queued in the place of another tenant's,
    /// which [`Scheduler::displaced`] then hands back.
    pub fn enqueue(&mut self, a: Arrival, waker: T) -> Result<Handle, (Refusal, T)> {
        if let Err(refusal) = self.make_room(&a) {
            return Err((refusal, waker));
        }
        self.insert(a, waker, false)
    }

    /// Queues a paused request again at the head of its class: first of its
    /// tenant's queue, its tenant's turn next, never refused (it held a
    /// slot until a more urgent request took it; `max_depth` does not apply).
    pub fn requeue(&mut self, a: Arrival, waker: T) -> Result<Handle, (Refusal, T)> {
        self.insert(a, waker, true)
    }

    fn insert(&mut self, a: Arrival, waker: T, front: bool) -> Result<Handle, (Refusal, T)> {
        let entry = Entry {
            class: a.class,
            tenant: a.tenant,
            at: a.at,
            waker,
            paused: front,
        };
        let handle = match self.free_slots.pop() {
            Some(index) => {
                let Some(s) = self.slots.get_mut(index as usize) else {
                    return Err((Refusal::Full, entry.waker));
                };
                s.entry = Some(entry);
                Handle {
                    index,
                    generation: s.generation,
                }
            }
            None => {
                let Ok(index) = u32::try_from(self.slots.len()) else {
                    return Err((Refusal::Full, entry.waker));
                };
                self.slots.push(Slot {
                    generation: 0,
                    entry: Some(entry),
                });
                Handle {
                    index,
                    generation: 0,
                }
            }
        };
        // The class exists: checked above.
        let Some(c) = self.classes.get_mut(a.class) else {
            return Ok(handle);
        };
        c.depth += 1;
        let weight = a.weight.max(1);
        let t = c.tenants.entry(a.tenant).or_default();
        t.weight = weight;
        t.live += 1;
        if front {
            t.paused += 1;
        }
        if front {
            c.arrivals.push_front(handle);
            t.queue.push_front(handle);
            if t.active {
                // Its tenant's turn comes next.
                if let Some(at) = c.ring.iter().position(|x| *x == a.tenant) {
                    c.ring.remove(at);
                }
            } else {
                t.active = true;
                t.credit = weight;
            }
            c.ring.push_front(a.tenant);
        } else {
            c.arrivals.push_back(handle);
            t.queue.push_back(handle);
            if !t.active {
                t.active = true;
                t.credit = weight;
                c.ring.push_back(a.tenant);
            }
        }
        Ok(handle)
    }

    /// Takes a queued request out (its client hung up, or its deadline
    /// passed); `None` when it already left (dispatched or removed).
    pub fn remove(&mut self, h: Handle) -> Option<T> {
        let e = self.take(h)?;
        if let Some(c) = self.classes.get_mut(e.class) {
            c.depth = c.depth.saturating_sub(1);
            if let Some(t) = c.tenants.get_mut(&e.tenant) {
                t.live = t.live.saturating_sub(1);
                if e.paused {
                    t.paused = t.paused.saturating_sub(1);
                }
            }
            // Two stale handles: one in the arrivals, one in the tenant's queue.
            c.stale += 2;
            settle(c, &self.slots);
        }
        Some(e.waker)
    }

    /// Chooses the next request to go, if a slot is free for it: the most
    /// urgent class with a queued request that its reserve lets through,
    /// the tenant whose turn it is, its oldest request. The request is then
    /// pending until [`Scheduler::bind`] (or [`Scheduler::abandon`]).
    pub fn dispatch(&mut self) -> Option<Dispatched<T>> {
        let free = self.free();
        if free == 0 {
            return None;
        }
        for ci in 0..self.classes.len() {
            let (depth, reserve) = match self.classes.get(ci) {
                Some(c) => (c.depth, c.rules.reserve),
                None => continue,
            };
            let free = self.free_for(ci, free);
            if depth == 0 || free <= reserve {
                continue;
            }
            let Some(h) = self.next_of(ci, free) else {
                if self.classes.get(ci).is_some_and(|c| c.ring.is_empty()) {
                    continue;
                }
                // Every tenant queued here is held back by the tenant
                // reserve: the slot is kept for this class (strict classes).
                return None;
            };
            if let Some(e) = self.take(h) {
                if let Some(c) = self.classes.get_mut(ci) {
                    c.depth = c.depth.saturating_sub(1);
                    // Its handle in the arrivals is stale now.
                    c.stale += 1;
                    if e.paused {
                        if let Some(t) = c.tenants.get_mut(&e.tenant) {
                            t.paused = t.paused.saturating_sub(1);
                        }
                    }
                    *c.running.entry(e.tenant).or_default() += 1;
                    settle(c, &self.slots);
                }
                self.pending += 1;
                return Some(Dispatched {
                    handle: h,
                    waker: e.waker,
                    class: ci,
                    tenant: e.tenant,
                });
            }
        }
        None
    }

    /// Admits a request of `tenant` at once, without queueing, when the
    /// queue is empty and a slot is free for it in `class`: it is then
    /// pending, as if dispatched.
    pub fn admit_now(&mut self, class: usize, tenant: usize) -> bool {
        let free = self.free_for(class, self.free());
        let empty = self.total_depth() == 0;
        let Some(c) = self.classes.get_mut(class) else {
            return false;
        };
        if empty && free > c.rules.reserve && !holds_back(c, tenant, free) {
            *c.running.entry(tenant).or_default() += 1;
            self.pending += 1;
            return true;
        }
        false
    }

    /// A granted request of `tenant` in `class` ended (answered, failed,
    /// or given back).
    pub fn tenant_done(&mut self, class: usize, tenant: usize) {
        if let Some(c) = self.classes.get_mut(class) {
            if let Some(n) = c.running.get_mut(&tenant) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    c.running.remove(&tenant);
                }
            }
        }
    }
}
