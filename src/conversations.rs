//! Resumable streams through a fleet: which member holds which
//! conversation, so that a replay (`GET /v1/stream`), a stop
//! (`DELETE /v1/stream`) and a follow-up generation with the same
//! `X-Conversation-Id` reach the llama-server whose buffer holds it.
//!
//! - [`Conversations::claim`] (in `request_filter`) reads what the request
//!   says about a conversation (the header on a generation, the `conv_id`
//!   parameter on `/v1/stream`), scoped to the tenant as it goes upstream,
//!   and finds its holder: the local book
//!   ([`llamatap_policy::conversation::Book`]), then, in a fleet, the
//!   shared store when `queue.shared` is on ([`shared`]).
//! - [`Conversations::discover`]: a replay or stop whose id neither knows
//!   asks the members ([`find`]).
//! - [`lost`]: a replay or stop whose holder left the fleet or is down
//!   gets a clear error instead of another member's 404.
//! - [`pinned`] (in routing's choice) sends the request to the holder.
//! - [`Conversations::answered`] and [`Conversations::finish`] write the
//!   book: a generation's answer head starts an entry, its end keeps it
//!   [`KEEP_AFTER_END`]; a stop forgets it. At its end, what llamatap saw
//!   of a generation is kept as its copy
//!   ([`llamatap_policy::conversation::copies`]), which the proxy serves a
//!   replay from when the holder is gone ([`Conversations::copy`]); a
//!   cut copy keeps its request, and one replay at a time takes its rest
//!   ([`Conversations::take_rest`]), the grown copy replacing it at that
//!   replay's end.
//!
//! Deliberately not here: scoping ids per tenant
//! ([`llamatap_wire::conversation`]), the lookup's exchange (the proxy's
//! `lookup`), choosing among members when no conversation binds the
//! request (the router).

pub mod find;
pub mod shared;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use pingora::http::RequestHeader;
use pingora::{Error, ErrorType};

use crate::config::Config;
use crate::fleet::{Fleet, Health, Member};
use crate::store::Store;
use crate::upstream::spare::Spares;
use llamatap_policy::conversation::copies::{self, Copies, Copy, Kept};
use llamatap_policy::conversation::{Book, Claim, Use, DEFAULT_CAPACITY, KEEP_AFTER_END, MAX_OPEN};
use llamatap_wire::conversation::{self, Scope};
use llamatap_wire::request::Route;

/// The book of one replica, and the store it shares it through.
pub struct Conversations {
    book: Mutex<Book>,
    copies: Mutex<Copies>,
    store: Option<Arc<Store>>,
}

impl Conversations {
    /// A book of [`DEFAULT_CAPACITY`] ids, shared through `store` when one
    /// is given (`queue.shared`).
    pub fn new(store: Option<Arc<Store>>) -> Self {
        Conversations {
            book: Mutex::new(Book::new(DEFAULT_CAPACITY)),
            copies: Mutex::new(Copies::new(copies::DEFAULT_BUDGET)),
            store,
        }
    }

    /// What the request says about a conversation (`None`: nothing), with
    /// its holder when the book or the store knows it.
    pub async fn claim(
        &self,
        req: &RequestHeader,
        route: Route,
        scope: Option<&Scope>,
    ) -> Option<Box<Claim>> {
        let (usage, raw) = read(req, route)?;
        let id = match scope {
            Some(s) => s.scope(&raw),
            None => raw,
        };
        let id = String::from_utf8(id).ok()?;
        let holder = self.holder(&id).await;
        Some(Box::new(Claim::new(usage, id, holder)))
    }

    /// A replay or stop in a fleet whose id neither the book nor the store
    /// knows: the members are asked ([`find`]), and the one that lists the
    /// id is its holder (learnt for [`KEEP_AFTER_END`]).
    pub async fn discover(
        &self,
        claim: &mut Claim,
        fleet: &Fleet,
        spares: &Spares,
        config: &Config,
        authorization: Option<&str>,
    ) {
        if claim.holder.is_some()
            || !matches!(claim.usage, Use::Replay | Use::Stop)
            || !fleet.is_fleet()
        {
            return;
        }
        claim.holder = find::holder(fleet, spares, config, &claim.id, authorization).await;
        if let (Some(m), Ok(mut b)) = (&claim.holder, self.book.lock()) {
            b.learn(&claim.id, m, Instant::now() + KEEP_AFTER_END);
        }
    }

    /// The member holding `id`: the book's, else the store's (learnt).
    async fn holder(&self, id: &str) -> Option<String> {
        let now = Instant::now();
        if let Some(m) = self
            .book
            .lock()
            .ok()
            .and_then(|mut b| b.holder(id, now).map(str::to_string))
        {
            return Some(m);
        }
        let store = self.store.as_ref()?;
        let (member, left) = shared::get(store, id).await?;
        if let Ok(mut b) = self.book.lock() {
            b.learn(id, &member, now + left);
        }
        Some(member)
    }

    /// The answer head of the request's attempt on `member` arrived with
    /// `status`: a generation's buffer starts there; a stop forgot it.
    pub fn answered(&self, claim: &Claim, member: Option<&Member>, status: u16, streaming: bool) {
        let Some(member) = member else {
            return;
        };
        let name = member.upstream.name.as_str();
        match claim.usage {
            Use::Generate if status == 200 && streaming => {
                if let Ok(mut b) = self.book.lock() {
                    b.started(&claim.id, name, Instant::now());
                }
                self.share(&claim.id, name, MAX_OPEN.as_secs());
            }
            Use::Stop if (200..300).contains(&status) => {
                if let Ok(mut b) = self.book.lock() {
                    b.forget(&claim.id, name);
                }
                if let Ok(mut c) = self.copies.lock() {
                    c.forget(&claim.id);
                }
                if let Some(store) = self.store.clone() {
                    let id = claim.id.clone();
                    tokio::spawn(async move { shared::forget(&store, &id).await });
                }
            }
            _ => {}
        }
    }

    /// The request is over (`logging`): a generation's answer ended on
    /// `member`, and llama-server keeps it [`KEEP_AFTER_END`] from now;
    /// what llamatap saw of it is kept as its copy (`complete`: its
    /// terminal event was seen; `answered`: it was a streamed `200`), with
    /// its request when continuation kept it (`kept`). A replay that
    /// generated the rest of a cut copy leaves the grown copy in its place.
    pub fn finish(
        &self,
        claim: &mut Claim,
        member: Option<&Member>,
        answer: (bool, bool),
        kept: Option<Kept>,
    ) {
        let (answered, complete) = answer;
        if claim.rest {
            self.grown(claim, member, complete, kept);
            return;
        }
        let Some(member) = member else {
            return;
        };
        if claim.usage != Use::Generate {
            return;
        }
        let name = member.upstream.name.as_str();
        let seen = std::mem::take(&mut claim.seen);
        if answered && !claim.overflow {
            if let Ok(mut c) = self.copies.lock() {
                let kept = kept.map(Arc::new);
                c.keep(&claim.id, name, (seen, complete), kept, Instant::now());
            }
        }
        let held = self.book.lock().ok().is_some_and(|mut b| {
            let ours = b.holder(&claim.id, Instant::now()) == Some(name);
            if ours {
                b.ended(&claim.id, name, Instant::now());
            }
            ours
        });
        if held {
            self.share(&claim.id, name, KEEP_AFTER_END.as_secs());
        }
    }

    /// A replay's rest ended: the copy it grew (the copy's bytes, then
    /// the rest's) replaces the cut one, on the rest's member.
    fn grown(
        &self,
        claim: &mut Claim,
        member: Option<&Member>,
        complete: bool,
        kept: Option<Kept>,
    ) {
        claim.rest = false;
        let seen = std::mem::take(&mut claim.seen);
        let Ok(mut c) = self.copies.lock() else {
            return;
        };
        let now = Instant::now();
        let name = match member {
            Some(m) => m.upstream.name.clone(),
            None => c.get(&claim.id, now).map(|x| x.member).unwrap_or_default(),
        };
        if claim.overflow || seen.is_empty() {
            c.give_back(&claim.id);
        } else {
            c.keep(&claim.id, &name, (seen, complete), kept.map(Arc::new), now);
        }
    }

    /// Takes the rest of `id`'s cut copy for one replay
    /// ([`Copies::take_rest`]).
    pub fn take_rest(&self, id: &str) -> bool {
        self.copies
            .lock()
            .is_ok_and(|mut c| c.take_rest(id, Instant::now()))
    }

    /// A replay is generating the rest of `id`'s copy now.
    pub fn rest_taken(&self, id: &str) -> bool {
        self.copies.lock().is_ok_and(|c| c.rest_taken(id))
    }

    /// llamatap's copy of `id`'s answer, if one is kept.
    pub fn copy(&self, id: &str) -> Option<Copy> {
        self.copies.lock().ok()?.get(id, Instant::now())
    }

    /// Forgets llamatap's copy of `id` (a stop whose member is gone).
    pub fn forget_copy(&self, id: &str) {
        if let Ok(mut c) = self.copies.lock() {
            c.forget(id);
        }
    }

    /// Writes `id`'s holder to the store, off the request's path.
    fn share(&self, id: &str, member: &str, seconds: u64) {
        if let Some(store) = self.store.clone() {
            let (id, member) = (id.to_string(), member.to_string());
            tokio::spawn(async move { shared::put(&store, &id, &member, seconds).await });
        }
    }
}

/// What the request does with a conversation, and the id it names (as the
/// client sent it).
fn read(req: &RequestHeader, route: Route) -> Option<(Use, Vec<u8>)> {
    let target = req.raw_path();
    if let Some(id) = conversation::stream_id(target) {
        return match req.method.as_str() {
            "GET" => Some((Use::Replay, id)),
            "DELETE" => Some((Use::Stop, id)),
            _ => None,
        };
    }
    if req.method != http::Method::POST || route.stream_format().is_none() {
        return None;
    }
    let id = req
        .headers
        .get(conversation::HEADER)?
        .as_bytes()
        .trim_ascii();
    (!id.is_empty()).then(|| (Use::Generate, id.to_vec()))
}

/// The member called `name`, if it is in the fleet now.
fn member_named(fleet: &Fleet, name: &str) -> Option<Arc<Member>> {
    fleet
        .members()
        .into_iter()
        .find(|m| m.upstream.name == name && !m.gone())
}

/// Why a replay or stop cannot reach the conversation's holder (the
/// client's message), or `None` when it can be tried.
pub fn lost(fleet: &Fleet, claim: &Claim) -> Option<String> {
    if !matches!(claim.usage, Use::Replay | Use::Stop) {
        return None;
    }
    let name = claim.holder.as_deref()?;
    match member_named(fleet, name) {
        None => Some(format!(
            "the conversation's answer is buffered on upstream {name}, which left the fleet (drained or removed); it cannot be resumed"
        )),
        Some(m) => match (m.address(), m.health()) {
            (None, _) => Some(format!(
                "the conversation's answer is buffered on upstream {name}, whose address is unknown now"
            )),
            (Some(_), Health::Down(why)) => Some(format!(
                "the conversation's answer is buffered on upstream {name}, which is down ({why}); it cannot be resumed"
            )),
            _ => None,
        },
    }
}

/// Where a conversation binds a request ([`pinned`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pin {
    /// The member holding the conversation.
    pub member: usize,
    /// Only that member will do (a replay, stop or lookup); otherwise (a
    /// follow-up) it is preferred while the admission queue has a slot
    /// there.
    pub strict: bool,
}

/// The member the request must go to, when a conversation binds it: a
/// replay, stop or lookup goes to its holder or fails (another member
/// would answer 404); a follow-up generation (naming `model`) goes to the
/// holder while it serves that model, else wherever the router sends it
/// (a new answer).
pub fn pinned(
    fleet: &Fleet,
    claim: Option<&Claim>,
    model: Option<&str>,
    tried: &[usize],
) -> Result<Option<Pin>, Box<Error>> {
    // A replay's rest goes to any member but the one that cut it.
    let Some(claim) = claim.filter(|c| !c.rest) else {
        return Ok(None);
    };
    let Some(name) = claim.holder.as_deref() else {
        return Ok(None);
    };
    let member = member_named(fleet, name).filter(|m| !tried.contains(&m.id));
    let serves = |m: &Member| {
        !fleet.serves_several_models()
            || model.is_none_or(|name| m.models().iter().any(|x| x == name))
    };
    match (claim.usage, member) {
        (Use::Generate, Some(m)) if !m.draining() && m.healthy() && serves(&m) => Ok(Some(Pin {
            member: m.id,
            strict: false,
        })),
        (Use::Generate, _) => Ok(None),
        (_, Some(m)) => Ok(Some(Pin {
            member: m.id,
            strict: true,
        })),
        (_, None) => Err(Error::explain(
            ErrorType::ConnectNoRoute,
            format!("upstream {name}, which holds the conversation, cannot be reached"),
        )),
    }
}
