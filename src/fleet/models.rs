//! What the fleet serves: the model names its members report, whether it is
//! ready (`/readyz`), and why a request's model has no member to go to
//! ([`NoRoute`]).
//!
//! Deliberately not here: reading model lists (the watcher) and choosing a
//! member (the router).

use super::{Fleet, Member, NoRoute};

impl Fleet {
    /// Every model name the fleet serves, sorted, each once.
    pub fn models(&self) -> Vec<String> {
        self.models.read().map(|g| g.clone()).unwrap_or_default()
    }

    /// Replaces `member`'s model names (the watcher's job) and the fleet's
    /// list; nothing when it left the fleet.
    pub fn set_models(&self, member: &Member, names: Vec<String>) {
        if member.gone() {
            return;
        }
        member.set_models(names);
        self.refresh_models();
    }

    /// Rebuilds the fleet's model list from its members.
    pub(super) fn refresh_models(&self) {
        let mut all: Vec<String> = self.members().iter().flat_map(|m| m.models()).collect();
        all.sort();
        all.dedup();
        if let Ok(mut g) = self.models.write() {
            *g = all;
        }
    }

    /// Member `id` reports `model` among its models.
    pub fn member_serves(&self, id: usize, model: &str) -> bool {
        self.member(id).is_some_and(|m| m.serves(model))
    }

    /// The fleet serves two or more models: requests are routed by model.
    pub fn serves_several_models(&self) -> bool {
        self.models.read().map(|g| g.len() > 1).unwrap_or(false)
    }

    /// Some member reports `name`.
    fn knows_model(&self, name: &str) -> bool {
        self.models
            .read()
            .map(|g| g.binary_search_by(|m| m.as_str().cmp(name)).is_ok())
            .unwrap_or(false)
    }

    /// Ready: at least one upstream is healthy and its model list was read,
    /// and every model any upstream reported has such an upstream serving
    /// it. `Err` names what is missing, for `/readyz`.
    pub fn readiness(&self) -> Result<(), String> {
        let members = self.serving();
        if members.is_empty() {
            return Err(format!("no upstream: {}", self.lookup_list()));
        }
        let ready = |m: &Member| m.healthy() && !m.models().is_empty();
        if !members.iter().any(|m| ready(m)) {
            return Err(format!(
                "no upstream ready ({})",
                Self::down_list(members.iter().map(|m| &**m))
            ));
        }
        let missing: Vec<String> = self
            .models()
            .into_iter()
            .filter(|model| !members.iter().any(|m| ready(m) && m.serves(model)))
            .collect();
        match missing.as_slice() {
            [] => Ok(()),
            _ => Err(format!(
                "no healthy upstream for model {}",
                missing.join(", ")
            )),
        }
    }

    /// Each member's name and why it serves nothing now, `; `-separated.
    fn down_list<'a>(members: impl Iterator<Item = &'a Member>) -> String {
        members
            .map(|m| format!("{}: {}", m.upstream.name, m.not_ready_reason()))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The model names healthy upstreams serve now, sorted, each once: what
    /// the fleet's `GET /v1/models` lists.
    pub fn servable_models(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .serving()
            .iter()
            .filter(|m| !m.checked_down())
            .flat_map(|m| m.models())
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// `Err(Unavailable)` when every upstream that could serve a request
    /// for `model` failed its last health check (an upstream not checked yet
    /// still counts as able).
    pub fn unavailable(&self, model: Option<&str>) -> Result<(), NoRoute> {
        let filter = self.serves_several_models();
        let mut serving = self.serving();
        if serving.is_empty() && self.capacity > 0 {
            if let Err(why) = self.readiness() {
                return Err(NoRoute::Unavailable { why });
            }
        }
        serving.retain(|m| !filter || model.is_none_or(|name| m.serves(name)));
        if serving.is_empty() || serving.iter().any(|m| !m.checked_down()) {
            return Ok(());
        }
        Err(NoRoute::Unavailable {
            why: Self::down_list(serving.iter().map(|m| &**m)),
        })
    }

    /// `Err(UnknownModel)` when the fleet serves several models and none
    /// named `model` (a request naming no model may go anywhere).
    pub fn check_model(&self, model: Option<&str>) -> Result<(), NoRoute> {
        match model {
            Some(name) if self.serves_several_models() && !self.knows_model(name) => {
                Err(NoRoute::UnknownModel {
                    available: self.models(),
                })
            }
            _ => Ok(()),
        }
    }
}
