//! Prompt tokens from prompt bytes, when only the bytes are known: a line
//! `tokens = a + bytes / β` learned from observations that carried both.
//!
//! A line rather than a ratio, because a chat template adds tokens of its
//! own per message: short prompts have fewer bytes per token than long ones,
//! and a single ratio, fitted mostly on short requests, overestimates long
//! prompts. Decayed weighted least squares with a bounded weight, an
//! intercept kept ≥ 0 and a slope > 0 (otherwise the ratio of the decayed
//! sums is used). Before any observation: 4 bytes per token.
//!
//! Prompts all of nearly one size (their bytes' coefficient of variation
//! under [`ONE_SIZE_CV`]) cannot tell the template's tokens from the
//! text's: the tokens beyond 4 bytes a token are taken as the template's,
//! up to [`TEMPLATE_TOKENS`], and the rest as the text's. A member's first
//! answer, a 23-byte question that made 33 tokens, had set a ratio of
//! 0.7 bytes a token, and the next prompt, of 1,804 bytes, was predicted
//! at 2,589 tokens and 2.3 s; it had 415 and took 0.27 s.
//!
//! Deliberately not here: tokenizing (the caller passes counted tokens as
//! [`super::PromptSize::Tokens`] when it has them).

/// Bytes per token before any was learned.
pub(super) const DEFAULT_BYTES_PER_TOKEN: f64 = 4.0;

/// Decay per observation.
const DECAY: f64 = 0.95;

/// Below this coefficient of variation of the bytes seen, the prompts are
/// of one size, and the line's slope is not fitted.
const ONE_SIZE_CV: f64 = 0.25;

/// The most tokens of a prompt of one size taken as its template's (a
/// system and a user message in a chat template, with a short default
/// system prompt).
const TEMPLATE_TOKENS: f64 = 32.0;

/// The learned line.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct BytesToTokens {
    w: f64,
    b: f64,
    t: f64,
    bb: f64,
    bt: f64,
}

impl BytesToTokens {
    /// Learns that `bytes` made `tokens`.
    pub(super) fn add(&mut self, bytes: f64, tokens: f64) {
        if !(bytes.is_finite() && tokens.is_finite()) || bytes <= 0.0 || tokens <= 0.0 {
            return;
        }
        self.w = self.w * DECAY + 1.0;
        self.b = self.b * DECAY + bytes;
        self.t = self.t * DECAY + tokens;
        self.bb = self.bb * DECAY + bytes * bytes;
        self.bt = self.bt * DECAY + bytes * tokens;
    }

    /// The same line, its weight cut to at most `most`.
    pub(super) fn faded_to(self, most: f64) -> BytesToTokens {
        if self.w <= most {
            return self;
        }
        let k = most / self.w;
        BytesToTokens {
            w: self.w * k,
            b: self.b * k,
            t: self.t * k,
            bb: self.bb * k,
            bt: self.bt * k,
        }
    }

    /// Whether anything was learned.
    pub(super) fn learned(&self) -> bool {
        self.w > 0.0
    }

    /// `(intercept, tokens per byte)` of the line.
    pub(super) fn line(&self) -> (f64, f64) {
        if self.w <= 0.0 || self.b <= 0.0 {
            return (0.0, 1.0 / DEFAULT_BYTES_PER_TOKEN);
        }
        let ratio = (0.0, self.t / self.b);
        // w² times the bytes' variance; b² is w² times their mean squared.
        let var = self.bb * self.w - self.b * self.b;
        if var <= ONE_SIZE_CV * ONE_SIZE_CV * self.b * self.b {
            let (bytes, tokens) = (self.b / self.w, self.t / self.w);
            let template = (tokens - bytes / DEFAULT_BYTES_PER_TOKEN).clamp(0.0, TEMPLATE_TOKENS);
            return (template, (tokens - template) / bytes);
        }
        let slope = (self.bt * self.w - self.b * self.t) / var;
        let intercept = (self.t - slope * self.b) / self.w;
        if slope > 0.0 && intercept >= 0.0 && slope.is_finite() && intercept.is_finite() {
            (intercept, slope)
        } else {
            ratio
        }
    }

    /// Tokens of `bytes` (0 bytes: 0 tokens), non-decreasing in `bytes`.
    pub(super) fn tokens(&self, bytes: u64) -> u32 {
        if bytes == 0 {
            return 0;
        }
        let (a, s) = self.line();
        let n = (a + bytes as f64 * s).ceil();
        if n.is_finite() {
            n.clamp(1.0, f64::from(u32::MAX)) as u32
        } else {
            1
        }
    }

    /// Bytes per token over what was learned (the ratio of the sums).
    pub(super) fn bytes_per_token(&self) -> Option<f64> {
        (self.w > 0.0 && self.t > 0.0).then(|| self.b / self.t)
    }
}
