//! llama-server's administrative routes: those that change or read what
//! every caller of one llama-server shares (its slots and their caches,
//! LoRA adapters, metrics, global properties, the models a router runs),
//! as opposed to one caller's own answers.
//!
//! The list, from the pinned llama-server's route table (`server.cpp`,
//! `server-models.cpp`, `server-http.cpp`):
//!
//! - `/slots` and `/slots/<id>`, any method: `GET /slots` shows every
//!   slot's task and sampling settings; `POST /slots/<id>?action=save|restore|erase`
//!   erases a slot's cache or writes and reads files on the server.
//! - `/metrics`, any method: counts of every caller's traffic, and each
//!   scrape restarts the window llama-server averages its gauges over (a
//!   caller's scrape skews the operator's).
//! - `/lora-adapters` other than `GET`/`HEAD`: sets the adapters every
//!   answer uses. `GET` only lists them, the same list for every caller,
//!   needed to pick one per request: not administrative.
//! - `/props` other than `GET`/`HEAD`: changes global properties
//!   (`--props`). `GET /props` (the model's settings, which the web UI
//!   reads) is not administrative.
//! - The router's models: `/models/load`, `/models/unload` (any method),
//!   `/models` and `/v1/models` other than `GET`/`HEAD` (`POST` downloads a
//!   model, `DELETE` removes one), and a `GET` of them with a `reload`
//!   query parameter (rescans the models). `GET /models/sse` (load states)
//!   is not administrative.
//! - `/predict`, any method: the Vertex AI route (`AIP_MODE=PREDICTION`),
//!   which runs any other route's handler named in its body, these
//!   included. A predict route moved with `AIP_PREDICT_ROUTE` is not known
//!   here.
//!
//! `OPTIONS` is never administrative: llama-server answers a CORS
//! preflight without running a handler.
//!
//! Deliberately not here: who may use them (the proxy's guard), and
//! routes that act on one caller's own work by an id only that caller
//! holds (`/v1/chat/completions/control`, the resumable streams).

use super::{path, query, Route};

/// An administrative route of llama-server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdminRoute {
    /// `/slots`, `/slots/<id>`: slot state, cache save, restore, erase.
    Slots,
    /// `/metrics`: llama-server's own metrics.
    Metrics,
    /// `POST /lora-adapters`: the adapters every answer uses.
    LoraAdapters,
    /// `POST /props`: global properties.
    Props,
    /// The router's models: load, unload, download, remove, reload.
    Models,
    /// `/predict`: Vertex AI's route to any handler.
    Predict,
}

impl AdminRoute {
    /// The administrative route a request is, if it is one: `route` is
    /// [`Route::from_target`] of `target` (the request target as it goes
    /// on the wire), `method` the request's method.
    pub fn of(route: Route, method: &str, target: &[u8]) -> Option<AdminRoute> {
        if method == "OPTIONS" {
            return None;
        }
        let reads = matches!(method, "GET" | "HEAD");
        match route {
            Route::Slots => return Some(AdminRoute::Slots),
            Route::Metrics => return Some(AdminRoute::Metrics),
            Route::Props if !reads => return Some(AdminRoute::Props),
            Route::Models if !reads => return Some(AdminRoute::Models),
            Route::Models if query::has(target, b"reload") => return Some(AdminRoute::Models),
            Route::Other => {}
            _ => return None,
        }
        let path = path::decoded(target);
        match path.as_ref() {
            b"/lora-adapters" if !reads => Some(AdminRoute::LoraAdapters),
            b"/models/load" | b"/models/unload" => Some(AdminRoute::Models),
            b"/predict" => Some(AdminRoute::Predict),
            _ => None,
        }
    }

    /// What the route does, for the refusal's message.
    pub fn what(self) -> &'static str {
        match self {
            AdminRoute::Slots => "llama-server's slots (their caches and settings)",
            AdminRoute::Metrics => "llama-server's own metrics",
            AdminRoute::LoraAdapters => "the LoRA adapters every answer uses",
            AdminRoute::Props => "llama-server's global properties",
            AdminRoute::Models => "the models llama-server runs",
            AdminRoute::Predict => "the Vertex AI predict route",
        }
    }
}

#[cfg(test)]
mod tests;
