//! The `[routing]` part of the configuration (and `--routing-policy`):
//! the policy that picks one of several upstreams, the session header, and
//! the steering by the TTFT prediction (`ttft_steer_percent`), validated.
//!
//! Validation only: choosing an upstream is [`llamatap_policy::router`]'s
//! job and the proxy's, not this module's.

use serde::Deserialize;

use super::{invalid, ConfigError};
use llamatap_policy::router::Policy;

/// `[routing]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouting {
    /// `prefix_affinity`, `least_busy` or `round_robin`.
    pub policy: Option<String>,
    /// Request header whose value pins a request to one upstream.
    pub session_header: Option<String>,
    /// Without a TTFT objective, leave out upstreams predicted slower than
    /// this percentage of the fastest one's TTFT; 0: off.
    pub ttft_steer_percent: Option<u32>,
}

/// Validated routing settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    /// The policy.
    pub policy: Policy,
    /// Lower-cased header name whose value sticks a request to one upstream.
    pub session_header: Option<String>,
    /// Without a TTFT objective, upstreams predicted (with high
    /// confidence) over this percentage of the fastest one's TTFT, and
    /// slower by at least [`crate::ttft::steer::MARGIN_MS`], are left out
    /// of routing; `None`: off.
    pub ttft_steer_percent: Option<u32>,
}

/// Smallest and largest `ttft_steer_percent` (0 turns it off).
pub const TTFT_STEER_PERCENT: std::ops::RangeInclusive<u32> = 110..=10_000;

/// Validates `[routing]` with the `--routing-policy` override. The default
/// policy is `prefix_affinity`; with one upstream the policy has no effect.
pub fn routing(flag: Option<&str>, raw: &RawRouting) -> Result<Routing, ConfigError> {
    let name = flag
        .or(raw.policy.as_deref())
        .unwrap_or("prefix_affinity")
        .trim();
    let policy = Policy::parse(name).ok_or_else(|| ConfigError::Invalid {
        key: "routing.policy",
        message: format!("{name:?} is not one of prefix_affinity, least_busy, round_robin"),
    })?;
    let session_header = match raw.session_header.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(h) => {
            if http_token(h) {
                Some(h.to_ascii_lowercase())
            } else {
                return Err(invalid(
                    "routing.session_header",
                    &format!("{h:?} is not a valid header name"),
                ));
            }
        }
    };
    let ttft_steer_percent = match raw.ttft_steer_percent {
        None | Some(0) => None,
        Some(p) if TTFT_STEER_PERCENT.contains(&p) => Some(p),
        Some(p) => {
            return Err(invalid(
                "routing.ttft_steer_percent",
                &format!(
                    "{p} is neither 0 (off) nor between {} and {}",
                    TTFT_STEER_PERCENT.start(),
                    TTFT_STEER_PERCENT.end()
                ),
            ))
        }
    };
    Ok(Routing {
        policy,
        session_header,
        ttft_steer_percent,
    })
}

/// RFC 9110 token characters, the shape of a header name.
fn http_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
