//! The limit arithmetic: fixed one-minute windows aligned to the wall clock
//! (window `n` is the UTC minute `[n·60 s, (n+1)·60 s)` since the epoch), a
//! concurrency count, and what a client is told about both.
//!
//! Why fixed windows: the wait a refused client is told is exact. When a
//! window is full, nothing it holds expires before the window ends, and at
//! its end everything does, so `retry-after` is the time to the window's end
//! and a retry then finds an empty window. The same window is named the same
//! by every replica (it is the minute since the epoch), so a shared store
//! (Redis) needs one counter per tenant and minute, nothing more. The price
//! is the known one of fixed windows: a client can use a full window at the
//! end of one minute and another at the start of the next.
//!
//! Pure: the clock is an argument (milliseconds since the epoch), counts come
//! in as numbers. This module deliberately stores nothing across tenants and
//! knows nothing of where the counts are kept (in this process or in Redis).

use super::Limits;

/// Window length, milliseconds.
pub const WINDOW_MS: u64 = 60_000;

/// The window `now_ms` falls in.
pub fn window(now_ms: u64) -> u64 {
    now_ms / WINDOW_MS
}

/// Milliseconds from `now_ms` to the end of its window (1 to [`WINDOW_MS`]).
pub fn reset_ms(now_ms: u64) -> u64 {
    WINDOW_MS - now_ms % WINDOW_MS
}

/// Which limit refused a request. A fixed list: it is a metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// `requests_per_minute`.
    Requests,
    /// `tokens_per_minute`.
    Tokens,
    /// `max_concurrent`.
    Concurrency,
}

impl LimitKind {
    /// Every kind, in label order.
    pub const ALL: [LimitKind; 3] = [
        LimitKind::Requests,
        LimitKind::Tokens,
        LimitKind::Concurrency,
    ];

    /// The metric label value.
    pub fn as_str(&self) -> &'static str {
        match self {
            LimitKind::Requests => "requests",
            LimitKind::Tokens => "tokens",
            LimitKind::Concurrency => "concurrency",
        }
    }
}

/// What a tenant has used when a request arrives (the request itself not
/// counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Requests admitted in the current window.
    pub requests: u64,
    /// Tokens charged in the current window.
    pub tokens: u64,
    /// Requests in flight.
    pub concurrent: u32,
}

/// One `x-ratelimit-*` family: a limit, what is left of it, and when it resets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gauge {
    /// The limit per window.
    pub limit: u64,
    /// What is left in the current window.
    pub remaining: u64,
    /// Milliseconds until the window resets.
    pub reset_ms: u64,
}

/// The state of a tenant's per-minute limits, for the `x-ratelimit-*`
/// headers; a family is `None` when its limit is not configured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quota {
    /// `requests_per_minute`.
    pub requests: Option<Gauge>,
    /// `tokens_per_minute`.
    pub tokens: Option<Gauge>,
}

/// A request over a limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The limit reached.
    pub limit: LimitKind,
    /// Its configured value.
    pub value: u64,
    /// How long until a retry can succeed; `None` when no one can know (a
    /// concurrency slot frees when one of the tenant's answers ends).
    pub retry_after_ms: Option<u64>,
    /// The per-minute limits' state.
    pub quota: Quota,
}

/// Decides whether a request of a tenant with `limits`, who has `used` this
/// much, is admitted at `now_ms`. Checked in order: concurrency, requests per
/// minute, tokens per minute (a request is admitted while the window has at
/// least one token left; its own tokens are charged when its answer ends).
/// Admitted: the quota with this request counted.
pub fn decide(limits: &Limits, used: Usage, now_ms: u64) -> Result<Quota, Refusal> {
    let reset = reset_ms(now_ms);
    let admitted = Quota {
        requests: limits.requests_per_minute.map(|limit| Gauge {
            limit,
            remaining: limit.saturating_sub(used.requests.saturating_add(1)),
            reset_ms: reset,
        }),
        tokens: limits.tokens_per_minute.map(|limit| Gauge {
            limit,
            remaining: limit.saturating_sub(used.tokens),
            reset_ms: reset,
        }),
    };
    let refused = |limit: LimitKind, value: u64, retry_after_ms: Option<u64>| {
        let mut quota = admitted;
        if let Some(g) = quota.requests.as_mut() {
            g.remaining = g.limit.saturating_sub(used.requests);
        }
        Err(Refusal {
            limit,
            value,
            retry_after_ms,
            quota,
        })
    };
    if let Some(max) = limits.max_concurrent {
        if used.concurrent >= max {
            return refused(LimitKind::Concurrency, u64::from(max), None);
        }
    }
    if let Some(rpm) = limits.requests_per_minute {
        if used.requests >= rpm {
            return refused(LimitKind::Requests, rpm, Some(reset));
        }
    }
    if let Some(tpm) = limits.tokens_per_minute {
        if used.tokens >= tpm {
            return refused(LimitKind::Tokens, tpm, Some(reset));
        }
    }
    Ok(admitted)
}

/// One tenant's counts in its current window, kept in this process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    window: u64,
    requests: u64,
    tokens: u64,
}

impl Window {
    /// Starts a new window when `now_ms` is past the current one.
    fn roll(&mut self, now_ms: u64) {
        let w = window(now_ms);
        if w != self.window {
            *self = Window {
                window: w,
                requests: 0,
                tokens: 0,
            };
        }
    }

    /// Requests admitted and tokens charged in the window of `now_ms`.
    pub fn used(&mut self, now_ms: u64) -> (u64, u64) {
        self.roll(now_ms);
        (self.requests, self.tokens)
    }

    /// Counts an admitted request.
    pub fn admit(&mut self, now_ms: u64) {
        self.roll(now_ms);
        self.requests = self.requests.saturating_add(1);
    }

    /// Charges `tokens` to the window of `now_ms` (the one the answer ended in).
    pub fn charge(&mut self, now_ms: u64, tokens: u64) {
        self.roll(now_ms);
        self.tokens = self.tokens.saturating_add(tokens);
    }
}

/// A duration as OpenAI's `x-ratelimit-reset-*` headers write it: `250ms`,
/// `12s`, `1.5s`, `1m0s`.
pub fn duration(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (m, s, frac) = (ms / 60_000, ms % 60_000 / 1000, ms % 1000);
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        let f = format!("{frac:03}");
        format!("{s}.{}s", f.trim_end_matches('0'))
    };
    if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

/// Whole seconds for `retry-after`, rounded up (never 0).
pub fn retry_after_secs(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// The `x-ratelimit-*` headers of `quota`, in OpenAI's names.
pub fn quota_headers(quota: &Quota) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(6);
    if let Some(g) = quota.requests {
        out.push(("x-ratelimit-limit-requests", g.limit.to_string()));
        out.push(("x-ratelimit-remaining-requests", g.remaining.to_string()));
        out.push(("x-ratelimit-reset-requests", duration(g.reset_ms)));
    }
    if let Some(g) = quota.tokens {
        out.push(("x-ratelimit-limit-tokens", g.limit.to_string()));
        out.push(("x-ratelimit-remaining-tokens", g.remaining.to_string()));
        out.push(("x-ratelimit-reset-tokens", duration(g.reset_ms)));
    }
    out
}

/// Every header of a 429: `retry-after` (whole seconds, rounded up) and
/// `retry-after-ms` when the wait is known, `x-should-retry: true`, and the
/// `x-ratelimit-*` headers.
pub fn refusal_headers(r: &Refusal) -> Vec<(&'static str, String)> {
    let mut out = Vec::with_capacity(9);
    if let Some(ms) = r.retry_after_ms {
        out.push(("retry-after", retry_after_secs(ms).to_string()));
        out.push(("retry-after-ms", ms.to_string()));
    }
    out.push(("x-should-retry", "true".to_string()));
    out.extend(quota_headers(&r.quota));
    out
}

/// The error message of a 429, naming the tenant (never its key).
pub fn message(tenant: &str, r: &Refusal) -> String {
    let what = match r.limit {
        LimitKind::Requests => "requests per minute",
        LimitKind::Tokens => "tokens per minute",
        LimitKind::Concurrency => "concurrent requests",
    };
    match r.retry_after_ms {
        Some(ms) => format!(
            "tenant \"{tenant}\": {what} limit {} reached; retry in {} s",
            r.value,
            retry_after_secs(ms)
        ),
        None => format!(
            "tenant \"{tenant}\": {what} limit {} reached; retry when one of its requests ends",
            r.value
        ),
    }
}

#[cfg(test)]
mod tests;
