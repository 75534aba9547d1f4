//! The prefill curve of one member and model on an idle member: milliseconds
//! of `prompt_ms` as a function of the tokens to prefill (`n`) and the tokens
//! already in the KV cache before them (`c`).
//!
//! The curve is `a + b·n/1000 + d·n·(c + n/2)/10⁶`: a fixed part, a cost per
//! token, and a cost per token that grows with the context it attends to
//! (attention reads every earlier token). It is fitted by exponentially
//! decayed weighted least squares from sufficient statistics (a 3×3 matrix,
//! a vector, a weight), so memory is fixed and an update is O(1). The
//! coefficients are kept non-negative: when the unconstrained solve gives a
//! negative one, every subset of the three features is solved (seven
//! 3×3-or-smaller solves) and the feasible one of least residual is kept.
//! The curve is then non-decreasing in `n`, and never negative.
//!
//! Deliberately not here: the bend with busy slots (`bend.rs`), outlier and
//! change handling beyond the decay (`member.rs` clips and resets).

/// Below this many milliseconds a prefill weighs as if it took this long
/// (a 0 ms prefill must not weigh infinitely).
const REL_FLOOR_MS: f64 = 5.0;

/// Features of one prefill: `[1, n/1000, n·(c + n/2)/10⁶]`.
pub(super) fn features(new: f64, cached: f64) -> [f64; 3] {
    [1.0, new / 1000.0, new * (cached + new / 2.0) / 1.0e6]
}

/// Subsets of the features tried by the non-negative solve, as bit masks,
/// in order of preference on equal residuals: a cost per token is the more
/// plausible explanation of prompts all of one size than a fixed cost.
const SUBSETS: [u8; 7] = [0b111, 0b011, 0b110, 0b010, 0b101, 0b100, 0b001];

/// A decayed least-squares fit of the prefill curve.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PrefillFit {
    /// Σ w·φφᵀ.
    xx: [[f64; 3]; 3],
    /// Σ w·φ·y.
    xy: [f64; 3],
    /// Σ w·y².
    yy: f64,
    /// Σ w (bounded by 1 / (1 − decay)).
    weight: f64,
    /// The non-negative coefficients of the last solve.
    coef: [f64; 3],
}

impl PrefillFit {
    /// The decayed weight of what was seen: 0 before any observation.
    pub(super) fn weight(&self) -> f64 {
        self.weight
    }

    /// The curve at `new` tokens after `cached` ones (ms, ≥ 0).
    pub(super) fn at(&self, new: f64, cached: f64) -> f64 {
        let phi = features(new, cached);
        let y = self.coef[0] * phi[0] + self.coef[1] * phi[1] + self.coef[2] * phi[2];
        if y.is_finite() {
            y.max(0.0)
        } else {
            0.0
        }
    }

    /// The coefficients `[fixed ms, ms per 1000 tokens, context term]`.
    pub(super) fn coefficients(&self) -> [f64; 3] {
        self.coef
    }

    /// Multiplies every past weight by `keep` (0..=1): the decay, and the
    /// forgetting after a detected change.
    pub(super) fn fade(&mut self, keep: f64) {
        for row in &mut self.xx {
            for v in row.iter_mut() {
                *v *= keep;
            }
        }
        for v in &mut self.xy {
            *v *= keep;
        }
        self.yy *= keep;
        self.weight *= keep;
    }

    /// Adds one prefill of `new` tokens after `cached` ones that took `ms`
    /// (already normalised to an idle member), after fading the past by
    /// `decay`, and solves again.
    pub(super) fn add(&mut self, new: f64, cached: f64, ms: f64, decay: f64) {
        if !(new.is_finite() && cached.is_finite() && ms.is_finite()) || new <= 0.0 || ms < 0.0 {
            return;
        }
        self.fade(decay);
        let phi = features(new, cached.max(0.0));
        // Relative least squares: each prefill weighs by 1/ms², so a short
        // prompt's error counts as much as a long one's, in percent.
        let w = 1.0 / ms.max(REL_FLOOR_MS).powi(2);
        for i in 0..3 {
            for j in 0..3 {
                self.xx[i][j] += w * phi[i] * phi[j];
            }
            self.xy[i] += w * phi[i] * ms;
        }
        self.yy += w * ms * ms;
        self.weight += 1.0;
        self.solve();
    }

    /// The non-negative least-squares coefficients over every feature subset.
    fn solve(&mut self) {
        // The unconstrained least squares, when feasible, is the answer:
        // the subsets are only needed when it is not (or is singular).
        if let Some(coef) = self.solve_subset(SUBSETS[0]) {
            if coef.iter().all(|c| *c >= 0.0) {
                self.coef = coef;
                return;
            }
        }
        let mut best: Option<([f64; 3], f64)> = None;
        for mask in SUBSETS {
            let Some(coef) = self.solve_subset(mask) else {
                continue;
            };
            if coef.iter().any(|c| *c < 0.0) {
                continue;
            }
            let sse = self.residual(&coef);
            // Strictly better only (by more than rounding, relative to the
            // data's scale): ties keep the earlier, preferred subset.
            let better = match best {
                None => true,
                Some((_, b)) => sse < b - 1e-6 * self.yy,
            };
            if better {
                best = Some((coef, sse));
            }
        }
        if let Some((coef, _)) = best {
            self.coef = coef;
        }
    }

    /// Σ w·(y − φ·coef)², from the sufficient statistics.
    fn residual(&self, coef: &[f64; 3]) -> f64 {
        let mut quad = 0.0;
        let mut lin = 0.0;
        for i in 0..3 {
            lin += coef[i] * self.xy[i];
            for j in 0..3 {
                quad += coef[i] * self.xx[i][j] * coef[j];
            }
        }
        self.yy - 2.0 * lin + quad
    }

    /// Solves the normal equations restricted to the features in `mask`
    /// (Gaussian elimination with a relative pivot test); `None` when they
    /// are singular for the data seen (e.g. one prompt size only).
    fn solve_subset(&self, mask: u8) -> Option<[f64; 3]> {
        let mut idx = [0usize; 3];
        let mut k = 0;
        for i in 0..3 {
            if mask & (1 << i) != 0 {
                idx[k] = i;
                k += 1;
            }
        }
        let idx = &idx[..k];
        let scale = idx
            .iter()
            .map(|&i| self.xx[i][i].abs())
            .fold(f64::MIN_POSITIVE, f64::max);
        let mut m = [[0.0f64; 4]; 3];
        for (r, &i) in idx.iter().enumerate() {
            for (c, &j) in idx.iter().enumerate() {
                m[r][c] = self.xx[i][j];
            }
            m[r][k] = self.xy[i];
        }
        for col in 0..k {
            let pivot = (col..k).max_by(|a, b| m[*a][col].abs().total_cmp(&m[*b][col].abs()))?;
            m.swap(col, pivot);
            let p = m[col][col];
            // Singular when elimination leaves next to nothing of the
            // diagonal: the data does not tell this feature apart.
            if p.abs() <= 1e-9 * scale {
                return None;
            }
            let pivot_row = m[col];
            for (r, row) in m.iter_mut().enumerate().take(k) {
                if r != col {
                    let f = row[col] / p;
                    for (v, pv) in row.iter_mut().zip(pivot_row).take(k + 1).skip(col) {
                        *v -= f * pv;
                    }
                }
            }
        }
        let mut coef = [0.0; 3];
        for (r, &i) in idx.iter().enumerate() {
            coef[i] = m[r][k] / m[r][r];
            if !coef[i].is_finite() {
                return None;
            }
        }
        Some(coef)
    }
}
