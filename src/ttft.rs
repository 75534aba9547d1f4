//! The TTFT predictor in the proxy: one [`TtftBook`] for the process, keyed
//! by (member, model), fed from finished requests and asked before each
//! dispatch.
//!
//! - [`Predictor::predict`]: the query of a request on one member, from the
//!   prompt's size (the text bytes of its prefix chain, or its body's bytes
//!   when the chain is unknown), the bytes of it the affinity book says
//!   that member holds, and the member's load now (its slots from
//!   `/slots`, the in-flight count the fleet keeps as busy slots, those
//!   beyond its slots and llama-server's `requests_deferred` as the queue
//!   ahead).
//! - [`Predictor::bound`]: before routing, for a TTFT objective, the
//!   prediction on one member with the admission queue's requests ahead of
//!   it, times a high quantile of the member's recent measured over
//!   predicted ratios.
//! - [`Predictor::learn`]: a finished request's `timings`, busy slots at
//!   dispatch, prompt bytes, whether it was predicted with nothing cached,
//!   `max_tokens`, and its measured TTFT when it
//!   started at once; and the ratio of its measured TTFT (dispatch to the
//!   first token) to a prediction of high confidence, for the bound. A
//!   member's first answer starts it from a peer: the member running the
//!   same model (by the lists the members report) with the most answers.
//! - [`Predictor::correct`] ([`progress`]): the prediction corrected by a
//!   `prompt_progress` event of the answer, during its prefill.
//!
//! The book's lock is held for one lookup or one update (microseconds),
//! never across an await; nothing here runs per streamed chunk.
//!
//! The answers in flight on each member ([`Flights`]: the prompt tokens
//! each still has to prefill) go into every prediction beside them; those
//! admitted with an objective hold it there as a [`Promise`] until their
//! first token.
//!
//! Deliberately not here: the tokens generated so far by the answers in
//! flight (counting them would be work per token; each answer's time since
//! its first token, at the member's decode rate, stands in), the admission queue's waiting
//! requests at dispatch (a request is predicted when it is dispatched,
//! after its wait; only the bound before routing counts them), asking for
//! and reading progress events (the proxy's `progress`), and any decision
//! by the prediction ([`slo`], [`steer`]).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use llamatap_policy::router::Chain;
use llamatap_policy::ttft::{
    Bound, Confidence, InFlight, Load, Prediction, PromptSize, Query, Stratum, Timings, TtftBook,
    MAX_SLOTS,
};

use crate::fleet::Fleet;

mod flights;
mod learn;
mod plan;
mod progress;
mod promise;
mod slots;
mod tally;
mod window;
pub use flights::{Boarded, Flights, Overlap};
pub use plan::Plan;
pub use promise::Promise;
pub use slots::Slots;
pub use tally::Tally;
pub mod slo;
pub mod steer;
#[cfg(test)]
mod tests;

/// Most (member, model) pairs learned at once.
pub const CAPACITY: usize = 256;

/// A member's id and its model's hash.
pub type Key = (usize, u64);

/// The process's predictor.
#[derive(Debug)]
pub struct Predictor {
    book: Mutex<TtftBook<Key>>,
    /// The answers in flight on each member.
    pub flights: Flights,
    /// What each member's slots hold, for the part of a prompt it reuses.
    pub slots: Slots,
    /// Attempts with an objective go on the board with their [`Promise`]
    /// (`[ttft] keep_promises`).
    pub keeps_promises: bool,
    /// The origin of the book's clock (the ratios' ages).
    epoch: Instant,
}

/// What a request was predicted with at its dispatch: plain data kept in
/// its context until `logging` teaches the book from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Predicted {
    /// The member and model.
    pub key: Key,
    /// The prediction.
    pub prediction: Prediction,
    /// Other requests in flight on the member when it was dispatched.
    pub busy_others: u32,
    /// The prompt tokens those in the member's slots were taken to have
    /// left to prefill then (the prediction's `ahead_tokens`: their
    /// `prefill_left` less what their time prefilling had gone through; the
    /// plain sum without an estimate).
    pub beside_tokens: u32,
    /// A free slot and nothing queued ahead at dispatch.
    pub at_once: bool,
    /// The kind of load it was dispatched into (its ratio calibrates the
    /// bounds of that kind).
    pub stratum: Stratum,
    /// The prompt's size in bytes, in the measure [`Predictor::predict`]
    /// used.
    pub prompt_bytes: u64,
    /// The bytes of it the affinity book said the member holds.
    pub cached_bytes: u64,
    /// Dispatched at.
    pub sent: Instant,
}

impl Predicted {
    /// The predicted TTFT in whole milliseconds, if there is one.
    pub fn ms(&self) -> Option<u64> {
        self.prediction.ttft_ms().map(round_ms)
    }

    /// The prediction's confidence (`None`: no data).
    pub fn confidence(&self) -> Option<Confidence> {
        match self.prediction {
            Prediction::NoData => None,
            Prediction::Estimate(e) => Some(e.confidence),
        }
    }
}

/// Milliseconds rounded to a whole number (finite, ≥ 0).
pub fn round_ms(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        ms.round().min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// What a finished request tells the book.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Finished {
    /// llama-server's `timings` (`prompt_n`, `prompt_ms`, `cache_n`, ...).
    pub timings: Timings,
    /// The request's `max_tokens`.
    pub max_tokens: Option<u32>,
    /// Dispatch to first token, when there was one.
    pub ttft: Option<Duration>,
    /// Prompt tokens of other answers on the member processed during its
    /// prefill ([`Flights::overlap`]; 0 when not known).
    pub prefill_others: u32,
    /// Prompt tokens of other answers on the member processed between its
    /// dispatch and its prefill's start ([`Flights::overlap`]; 0 when not
    /// known).
    pub prefill_before: u32,
    /// It was admitted as a probe ([`Predictor::claim_probe`]): its ratio
    /// takes the place of the largest one its bound held when lower.
    pub probe: bool,
}

/// The key of `member` and the model it runs for a request naming `model`
/// ([`Member::model_for`](crate::fleet::Member::model_for)): on a member
/// with one model, every name a client gives (or none) is one key, so
/// names do not split what is learned, and a client's made-up names add
/// no keys.
pub fn key(fleet: &Fleet, member: usize, model: Option<&str>) -> Key {
    let model = match fleet.member(member) {
        Some(m) => m.model_for(model, name_hash),
        None => name_hash(model.unwrap_or("")),
    };
    (member, model)
}

/// The model part of a [`Key`].
fn name_hash(name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// The model `key` stands for, when its member's list is known
/// ([`Member::model_of`](crate::fleet::Member::model_of)).
fn model_of(fleet: &Fleet, key: &Key) -> Option<String> {
    fleet.member(key.0)?.model_of(key.1, name_hash)
}

/// The query of a prompt of `prompt_bytes` on `member` now, `cached_bytes`
/// of it likely cached, with `queued` requests of the admission queue ahead
/// (see [`Predictor::predict`]), and the member's other requests in flight
/// less `excluded` of them (the request itself when counted, an answer told
/// to pause) (`flights`: what is known of them, in dispatch order).
fn query<'a>(
    fleet: &Fleet,
    member: usize,
    (prompt_bytes, cached_bytes): (u64, u64),
    (excluded, queued): (u32, u32),
    flights: &'a [InFlight],
) -> (Query<'a>, u32) {
    let m = fleet.member(member);
    let in_flight = m.as_ref().map_or(0, |m| m.in_flight());
    let busy_others = in_flight.saturating_sub(excluded);
    let slots = m.as_ref().and_then(|m| m.total_slots()).unwrap_or(0);
    let deferred = m.as_ref().and_then(|m| m.deferred()).unwrap_or(0);
    let busy = if slots == 0 {
        busy_others
    } else {
        busy_others.min(slots)
    };
    let queue_ahead = if slots == 0 {
        0
    } else {
        busy_others.saturating_sub(slots).max(deferred)
    };
    let query = Query {
        prompt: PromptSize::Bytes(prompt_bytes),
        cached: PromptSize::Bytes(cached_bytes.min(prompt_bytes)),
        load: Load {
            slots,
            busy,
            queue_ahead: queue_ahead.saturating_add(queued),
            in_flight: flights,
        },
    };
    (query, busy_others)
}

/// The prompt tokens `p` expects to prefill: its prompt's tokens less the
/// share `cached_bytes` is of its bytes (with no data, 4 bytes a token).
pub fn new_tokens(p: &Predicted, cached_bytes: u64) -> u32 {
    let left = p.prompt_bytes.saturating_sub(cached_bytes);
    let tokens = match p.prediction {
        Prediction::Estimate(e) if p.prompt_bytes > 0 => {
            f64::from(e.prompt_tokens) * left as f64 / p.prompt_bytes as f64
        }
        _ => left as f64 / 4.0,
    };
    tokens.round().clamp(0.0, f64::from(u32::MAX)) as u32
}

/// The prompt's size in bytes: its chain's text when read, else the body.
pub fn prompt_bytes(chain: &Chain, body_bytes: Option<u64>) -> u64 {
    match chain.total_bytes() {
        0 => body_bytes.unwrap_or(0),
        n => n,
    }
}

impl Default for Predictor {
    fn default() -> Self {
        Predictor {
            book: Mutex::new(TtftBook::new(CAPACITY)),
            flights: Flights::default(),
            slots: Slots::default(),
            keeps_promises: false,
            epoch: Instant::now(),
        }
    }
}

impl Predictor {
    /// A predictor whose attempts with an objective keep it
    /// (`[ttft] keep_promises`) or not.
    pub fn new(keeps_promises: bool) -> Self {
        Predictor {
            keeps_promises,
            ..Predictor::default()
        }
    }

    /// The predicted TTFT of a prompt of `prompt_bytes` for `model` on
    /// `member` now, `cached_bytes` of it likely in the member's cache (the
    /// affinity book's estimate: [`Fleet::cached_bytes`] before routing,
    /// the decision's own after), with `counted` when the request is
    /// already in the member's in-flight count.
    pub fn predict(
        &self,
        fleet: &Fleet,
        member: usize,
        model: Option<&str>,
        sizes: (u64, u64),
        counted: bool,
    ) -> Predicted {
        self.predict_excluding(fleet, member, model, sizes, (u32::from(counted), 0))
    }

    /// [`Predictor::predict`] with `excluded` of the member's requests in
    /// flight left out (the request itself when counted, and an answer
    /// told to pause to make room for it), and `queued` requests of the
    /// admission queue to take a slot of the member before it.
    pub fn predict_excluding(
        &self,
        fleet: &Fleet,
        member: usize,
        model: Option<&str>,
        (prompt_bytes, cached_bytes): (u64, u64),
        (excluded, queued): (u32, u32),
    ) -> Predicted {
        let key = key(fleet, member, model);
        let mut flights = [InFlight::default(); MAX_SLOTS];
        let n = self.flights.of(member, &mut flights);
        let sizes = (prompt_bytes, cached_bytes);
        let (query, busy_others) = query(fleet, member, sizes, (excluded, queued), &flights[..n]);
        let prediction = match self.book_for(fleet, &key) {
            Some(book) => book.predict(&key, &query),
            None => Prediction::NoData,
        };
        let load = query.load;
        let prefill_left = load
            .in_flight
            .iter()
            .take(load.busy as usize)
            .fold(0u32, |sum, f| sum.saturating_add(f.prefill_left));
        let beside_tokens = match prediction {
            Prediction::Estimate(e) => e.ahead_tokens,
            Prediction::NoData => prefill_left,
        };
        Predicted {
            key,
            prediction,
            busy_others,
            beside_tokens,
            at_once: (load.slots == 0 || load.busy < load.slots)
                && load.queue_ahead == 0
                && prefill_left == 0,
            prompt_bytes,
            cached_bytes: cached_bytes.min(prompt_bytes),
            stratum: Stratum::of(&load),
            sent: Instant::now(),
        }
    }

    /// The calibrated bound ([`Bound`]) on the TTFT of a prompt for
    /// `model` on `member` before routing (sizes as [`Predictor::predict`]),
    /// with `queued` requests of the admission queue to take a slot of the
    /// member before it, and one of its requests in flight left out when
    /// `freed` (as if paused); `None`: no data. Its floor (and the
    /// prediction's) is of the member's current process
    /// ([`crate::fleet::Member::restarts`]).
    pub fn bound(
        &self,
        fleet: &Fleet,
        member: usize,
        model: Option<&str>,
        sizes: (u64, u64),
        (queued, freed): (u32, bool),
    ) -> Option<Bound> {
        let key = key(fleet, member, model);
        let mut flights = [InFlight::default(); MAX_SLOTS];
        let n = self.flights.of(member, &mut flights);
        let excluded = u32::from(freed);
        let (query, _) = query(fleet, member, sizes, (excluded, queued), &flights[..n]);
        self.book_for(fleet, &key)?
            .bound(&key, &query, self.now_s())
    }

    /// The book, locked, with `key`'s floor emptied if it is of the
    /// member's process before a restart ([`TtftBook::renew_floor`]).
    fn book_for(&self, fleet: &Fleet, key: &Key) -> Option<MutexGuard<'_, TtftBook<Key>>> {
        let mut book = self.book.lock().ok()?;
        book.renew_floor(key, learn::restarts(fleet, key.0));
        Some(book)
    }

    /// Whole seconds since the predictor was made (the book's clock).
    fn now_s(&self) -> u32 {
        u32::try_from(self.epoch.elapsed().as_secs()).unwrap_or(u32::MAX)
    }

    /// Keys learned.
    pub fn len(&self) -> usize {
        self.book.lock().map_or(0, |b| b.len())
    }

    /// Nothing learned yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
