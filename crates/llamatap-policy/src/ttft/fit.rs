//! The prefill curve of one member and model on an idle member: milliseconds
//! of `prompt_ms` as a function of the tokens to prefill (`n`) and the tokens
//! already in the KV cache before them (`c`).
//!
//! The curve is `a + b·n/1000 + d·n·(c + n/2)/10⁶ + e·max(c − 64, 0)/1000`:
//! a fixed part, a cost per token, a cost per token that grows with the
//! context it attends to (attention reads every earlier token), and a cost
//! per cached token paid once per prefill (each batch reads the whole KV
//! cache: for a short addition to a long conversation, that read, not the
//! new tokens' arithmetic, is most of the time; the first [`HEAD`] cached
//! tokens are left out of it). It is fitted by exponentially decayed
//! weighted least squares from sufficient statistics (a 4×4 matrix, a
//! vector, a weight), so memory is fixed and an update is O(1). The
//! coefficients are kept non-negative: when the unconstrained solve gives a
//! negative one, the last solve's subset of features is tried (kept when
//! the optimality conditions hold), and failing that every subset of the
//! four features is solved (fifteen 4×4-or-smaller solves) and the
//! feasible one of least residual is kept.
//! The curve is then non-decreasing in `n` and in `c`, and never negative.
//!
//! Prompts all of nearly one size (their new tokens' coefficient of
//! variation under [`ONE_SIZE_CV`]) cannot tell a fixed cost from a cost
//! per token: the noise chose, and a fit that put every millisecond in
//! the fixed part predicted the prompts prefilling beside, and any longer
//! prompt, at no cost at all. Such data are fitted without the fixed
//! part: as a cost per token, which is what a prefill on llama-server
//! mostly is.
//!
//! A curve from few prefills chooses its features sparingly: while the
//! fit rests on fewer than [`FEW`] prefills, each allowed subset is scored
//! by the Bayesian information criterion (its residual against the number
//! of features, with relative errors under [`NOISE_FLOOR`] taken as
//! noise), so a feature is kept only when it explains clearly more than
//! a cost per token alone. Three prompts of 600 to 1,200 tokens, one of
//! them sharing its batches, were fitted best by a fixed part of
//! 268 ms and a context term, and a 67-token addition to a conversation
//! was predicted at 311 ms; it took 80.
//!
//! Deliberately not here: the bend with busy slots (`bend.rs`), outlier and
//! change handling beyond the decay (`member.rs` clips and resets).

/// Below this many milliseconds a prefill weighs as if it took this long
/// (a 0 ms prefill must not weigh infinitely).
const REL_FLOOR_MS: f64 = 5.0;

/// Features of a prefill.
const F: usize = 4;

/// Below this weight (prefills seen, decayed) the features are chosen by
/// the information criterion rather than by the residual alone.
const FEW: f64 = 6.0;

/// The relative error (root mean square) taken as a prefill's noise when
/// choosing features from few prefills: a subset fitting more closely than
/// this is no better than one at it.
const NOISE_FLOOR: f64 = 0.05;

/// Below this coefficient of variation of the new tokens (weighted as the
/// fit weighs them) the prompts are of one size, and the fit has no fixed
/// part: with sizes within ±10 %, noise of a few percent in the times
/// makes the cost per token's own error as large as the cost.
const ONE_SIZE_CV: f64 = 0.1;

/// The most cached tokens taken for what a prompt shares with nearly any
/// other (the chat template's head), left out of the cost per cached
/// token: a cost seen only on caches of 8 to 10 tokens would be told apart
/// from the fixed part by noise alone, and extrapolated to a long
/// conversation's cache.
pub(super) const HEAD: f64 = 64.0;

/// Features of one prefill: `[1, n/1000, n·(c + n/2)/10⁶, max(c − HEAD, 0)/1000]`.
pub(super) fn features(new: f64, cached: f64) -> [f64; F] {
    [
        1.0,
        new / 1000.0,
        new * (cached + new / 2.0) / 1.0e6,
        (cached - HEAD).max(0.0) / 1000.0,
    ]
}

/// Subsets of the features tried by the non-negative solve, as bit masks
/// (bit `i`: feature `i`), in order of preference on equal residuals: more
/// features first, and a cost per token before a fixed cost (it is the more
/// plausible explanation of prompts all of one size).
const SUBSETS: [u8; 15] = [
    0b1111, 0b1011, 0b0111, 0b1110, 0b0011, 0b1010, 0b0110, 0b0010, 0b1101, 0b1001, 0b0101, 0b1100,
    0b0001, 0b1000, 0b0100,
];

/// A decayed least-squares fit of the prefill curve.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PrefillFit {
    /// Σ w·φφᵀ.
    xx: [[f64; F]; F],
    /// Σ w·φ·y.
    xy: [f64; F],
    /// Σ w·y².
    yy: f64,
    /// Σ w (bounded by 1 / (1 − decay)).
    weight: f64,
    /// The non-negative coefficients of the last solve.
    coef: [f64; F],
    /// The features the last constrained solve kept (0: none yet).
    support: u8,
}

impl PrefillFit {
    /// The decayed weight of what was seen: 0 before any observation.
    pub(super) fn weight(&self) -> f64 {
        self.weight
    }

    /// The curve at `new` tokens after `cached` ones (ms, ≥ 0).
    pub(super) fn at(&self, new: f64, cached: f64) -> f64 {
        let phi = features(new, cached);
        let y: f64 = self.coef.iter().zip(phi).map(|(k, x)| k * x).sum();
        if y.is_finite() {
            y.max(0.0)
        } else {
            0.0
        }
    }

    /// The coefficients `[fixed ms, ms per 1000 tokens, context term, ms
    /// per 1000 cached tokens]`.
    pub(super) fn coefficients(&self) -> [f64; F] {
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

    /// The same fit as if every prefill seen had taken `r` times as long
    /// (`r` > 0, finite): the curve scaled by `r`, each prefill's relative
    /// weight kept.
    pub(super) fn scale(&mut self, r: f64) {
        if !(r.is_finite() && r > 0.0) {
            return;
        }
        for row in &mut self.xx {
            for v in row.iter_mut() {
                *v /= r * r;
            }
        }
        for v in &mut self.xy {
            *v /= r;
        }
        for v in &mut self.coef {
            *v *= r;
        }
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
        for i in 0..F {
            for j in 0..F {
                self.xx[i][j] += w * phi[i] * phi[j];
            }
            self.xy[i] += w * phi[i] * ms;
        }
        self.yy += w * ms * ms;
        self.weight += 1.0;
        self.solve();
    }

    /// The features the fit may use: all, or without the fixed part when
    /// the prompts seen are of one size ([`ONE_SIZE_CV`]).
    fn allowed(&self) -> u8 {
        let (w, sum, squares) = (self.xx[0][0], self.xx[0][1], self.xx[1][1]);
        if w <= 0.0 || sum <= 0.0 {
            return 0b1111;
        }
        let mean = sum / w;
        let variance = (squares / w - mean * mean).max(0.0);
        if variance.sqrt() < ONE_SIZE_CV * mean {
            0b1110
        } else {
            0b1111
        }
    }

    /// The non-negative least-squares coefficients over every feature
    /// subset allowed.
    fn solve(&mut self) {
        let allowed = self.allowed();
        if self.weight < FEW {
            self.solve_sparing(allowed);
            return;
        }
        // The unconstrained least squares, when feasible, is the answer:
        // the subsets are only needed when it is not (or is singular).
        if let Some(coef) = self.solve_subset(SUBSETS[0] & allowed) {
            if coef.iter().all(|c| *c >= 0.0) {
                self.coef = coef;
                return;
            }
        }
        // The last solve's support usually still holds: when its solve is
        // feasible and no feature left out would lower the residual (the
        // optimality conditions of a non-negative least squares, a convex
        // problem), it is the answer, in one solve instead of fifteen.
        if let Some(coef) = self.optimal_on(self.support, allowed) {
            self.coef = coef;
            return;
        }
        // Strictly better only (by more than rounding, relative to the
        // data's scale): ties keep the earlier, preferred subset.
        let margin = 1e-6 * self.yy;
        if let Some((coef, mask)) = self.best_subset(allowed, margin, |c, _| self.residual(c)) {
            self.coef = coef;
            self.support = mask;
        }
    }

    /// The non-negative solve over the `allowed` subsets of least
    /// information criterion: `W·ln(SSE/W) + k·ln(W)` for `k` features and
    /// the fit's weight `W`, the residual no lower than [`NOISE_FLOOR`]'s.
    /// Ties keep the earlier subset of [`SUBSETS`]; among one feature,
    /// the cost per token.
    fn solve_sparing(&mut self, allowed: u8) {
        let w = self.weight.max(1.0);
        let floor = w * NOISE_FLOOR * NOISE_FLOOR;
        let criterion = |coef: &[f64; F], mask: u8| {
            let sse = self.residual(coef).max(floor);
            w * (sse / w).ln() + f64::from(mask.count_ones()) * w.ln()
        };
        if let Some((coef, mask)) = self.best_subset(allowed, 1e-9, criterion) {
            self.coef = coef;
            self.support = mask;
        }
    }

    /// The non-negative solve of least `score` over the `allowed` subsets
    /// of [`SUBSETS`]; a later subset must beat the best so far by more
    /// than `margin`, so ties keep the earlier, preferred one.
    fn best_subset(
        &self,
        allowed: u8,
        margin: f64,
        score: impl Fn(&[f64; F], u8) -> f64,
    ) -> Option<([f64; F], u8)> {
        let mut best: Option<([f64; F], f64, u8)> = None;
        for mask in SUBSETS.into_iter().filter(|m| m & !allowed == 0) {
            let Some(coef) = self.solve_subset(mask) else {
                continue;
            };
            if coef.iter().any(|c| *c < 0.0) {
                continue;
            }
            let value = score(&coef, mask);
            if best.is_none_or(|(_, b, _)| value < b - margin) {
                best = Some((coef, value, mask));
            }
        }
        best.map(|(coef, _, mask)| (coef, mask))
    }

    /// The solve on the features of `mask` when it is the non-negative
    /// optimum among those `allowed`: feasible, and the residual's
    /// gradient along every allowed feature left out is not negative.
    fn optimal_on(&self, mask: u8, allowed: u8) -> Option<[f64; F]> {
        if mask == 0 || mask & !allowed != 0 {
            return None;
        }
        let coef = self.solve_subset(mask)?;
        if coef.iter().any(|c| *c < 0.0) {
            return None;
        }
        for i in (0..F).filter(|i| mask & (1 << i) == 0 && allowed & (1 << i) != 0) {
            let slope: f64 = (0..F).map(|j| self.xx[i][j] * coef[j]).sum::<f64>() - self.xy[i];
            if slope < -1e-9 * self.xy[i].abs().max(f64::MIN_POSITIVE) {
                return None;
            }
        }
        Some(coef)
    }

    /// Σ w·(y − φ·coef)², from the sufficient statistics.
    fn residual(&self, coef: &[f64; F]) -> f64 {
        let mut quad = 0.0;
        let mut lin = 0.0;
        for i in 0..F {
            lin += coef[i] * self.xy[i];
            for j in 0..F {
                quad += coef[i] * self.xx[i][j] * coef[j];
            }
        }
        self.yy - 2.0 * lin + quad
    }

    /// Solves the normal equations restricted to the features in `mask`
    /// (Gaussian elimination with a relative pivot test); `None` when they
    /// are singular for the data seen (e.g. one prompt size only).
    fn solve_subset(&self, mask: u8) -> Option<[f64; F]> {
        let mut idx = [0usize; F];
        let mut k = 0;
        for i in 0..F {
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
        let mut m = [[0.0f64; F + 1]; F];
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
        let mut coef = [0.0; F];
        for (r, &i) in idx.iter().enumerate() {
            coef[i] = m[r][k] / m[r][r];
            if !coef[i].is_finite() {
                return None;
            }
        }
        Some(coef)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Prompts within a few tokens of one size, their times falling as
    /// they grow (noise): the fit takes a cost per token, so a prompt of
    /// twice the size costs about twice as much, not the same.
    #[test]
    fn prompts_of_one_size_are_a_cost_per_token() {
        let mut fit = PrefillFit::default();
        for i in 0..40 {
            let (n, ms) = [(522.0, 470.0), (523.0, 455.0), (524.0, 440.0)][i % 3];
            fit.add(n, 10.0, ms, 0.95);
        }
        let one = fit.at(523.0, 10.0);
        let two = fit.at(1046.0, 10.0);
        assert!((one - 455.0).abs() < 10.0, "{one}");
        assert!(two > 1.8 * one, "{two} against {one}");
        // Sizes spread more widely keep their fixed part.
        let mut spread = PrefillFit::default();
        for i in 0..40 {
            let n = [100.0, 500.0, 1500.0][i % 3];
            spread.add(n, 10.0, 40.0 + 0.8 * n, 0.95);
        }
        let fixed = spread.coefficients()[0];
        assert!((fixed - 40.0).abs() < 1.0, "{:?}", spread.coefficients());
    }

    /// Three long prompts, one of them sharing its batches (its time and
    /// tokens both larger), fit a fixed part and a context term best;
    /// from so few the curve stays a cost per token, and a short addition
    /// to a conversation is not predicted at the fixed part's 270 ms.
    #[test]
    fn few_prefills_keep_a_cost_per_token() {
        let mut fit = PrefillFit::default();
        for (n, c, ms) in [
            (739.0, 0.0, 484.0),
            (607.0, 8.0, 406.0),
            (1202.0, 0.0, 764.0),
        ] {
            fit.add(n, c, ms, 0.95);
        }
        let [fixed, per_1k, context, _] = fit.coefficients();
        assert_eq!((fixed, context), (0.0, 0.0), "{:?}", fit.coefficients());
        assert!((per_1k - 650.0).abs() < 30.0, "{per_1k}");
        let short = fit.at(67.0, 500.0);
        assert!(short > 30.0 && short < 60.0, "{short}");
    }

    /// A fixed part that a cost per token cannot explain (a 50-token
    /// prompt at 80 ms, 1,000 at 650) is kept from three prefills.
    #[test]
    fn few_prefills_keep_a_fixed_part_they_show() {
        let mut fit = PrefillFit::default();
        for (n, ms) in [(50.0, 80.0), (500.0, 350.0), (1000.0, 650.0)] {
            fit.add(n, 0.0, ms, 0.95);
        }
        let fixed = fit.coefficients()[0];
        assert!(fixed > 30.0, "{:?}", fit.coefficients());
        let short = fit.at(50.0, 0.0);
        assert!((short - 80.0).abs() < 10.0, "{short}");
    }

    proptest! {
        /// Once the curve rests on [`FEW`] prefills, the shortcut through
        /// the last support finds the same least residual as solving every
        /// subset (before, the sparing choice may keep fewer features and a
        /// larger residual).
        #[test]
        fn the_last_support_shortcut_keeps_the_optimum(
            points in proptest::collection::vec((1.0f64..2000.0, 0.0f64..2000.0, 1.0f64..5000.0), 3..40),
        ) {
            let mut fit = PrefillFit::default();
            for (n, c, ms) in points {
                fit.add(n, c, ms, 0.95);
                let mut best = f64::INFINITY;
                for mask in SUBSETS.into_iter().filter(|m| m & !fit.allowed() == 0) {
                    if let Some(coef) = fit.solve_subset(mask).filter(|k| k.iter().all(|v| *v >= 0.0)) {
                        best = best.min(fit.residual(&coef));
                    }
                }
                if best.is_finite() && fit.weight >= FEW {
                    let got = fit.residual(&fit.coef);
                    prop_assert!(got <= best + 1e-6 * fit.yy.max(1e-300), "{got} vs {best}");
                }
            }
        }
    }
}
