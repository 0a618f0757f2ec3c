"""Stage 04 statistics against reference implementations and published algorithms.

The project computes its intervals and tests with numpy alone; these tests hold them to
statsmodels, scikit-learn and scipy (test dependencies only) on fixed inputs (issue 30 item 8):
the Wilson interval, the MOVER interval of balanced accuracy, the AUROC and DeLong's variance,
the paired score test and Tango's interval, and Holm's adjustment.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import confint_proportions_2indep, proportion_confint

from chexpercept.analysis.bootstrap import wilson_cc_interval, wilson_interval
from chexpercept.analysis.confidence import _pair_wins, auroc_interval, delong_variance
from chexpercept.analysis.detection import balanced_accuracy_interval
from chexpercept.analysis.inference import holm, score_test_p, tango_interval, tango_statistic

Z = stats.norm.ppf(0.975)


def test_wilson_interval_matches_statsmodels():
    for n in (1, 2, 7, 10, 33, 200):
        k = np.arange(n + 1)
        low, high = wilson_interval(k, np.full(n + 1, n))
        ref_low, ref_high = proportion_confint(k, n, alpha=0.05, method="wilson")
        np.testing.assert_allclose(low, ref_low, atol=1e-12)
        np.testing.assert_allclose(high, ref_high, atol=1e-12)


@pytest.mark.parametrize(("k", "n", "low", "high"), [(81, 263, 0.2535, 0.3682),
                                                     (15, 148, 0.0598, 0.1644),
                                                     (0, 20, 0.0, 0.2005), (1, 29, 0.0018, 0.1963)])
def test_wilson_cc_interval_matches_newcombe_method_4(k, n, low, high):
    # Newcombe (1998), Stat Med 17:857, Table II, method 4 (score with continuity correction)
    lo, hi = wilson_cc_interval(np.array([k]), np.array([n]))
    assert (lo[0], hi[0]) == (pytest.approx(low, abs=5e-5), pytest.approx(high, abs=5e-5))


@pytest.mark.parametrize(("tp", "fn", "fp", "tn", "low", "high"),
                         [(56, 14, 48, 32, 0.0428, 0.3422), (9, 1, 3, 7, 0.1013, 0.8387)])
def test_balanced_accuracy_mover_matches_newcombe_method_11(tp, fn, fp, tn, low, high):
    # (se + sp) / 2 = (1 + se - fpr) / 2: the MOVER interval of a sum of two independent
    # proportions is Newcombe's (1998, Stat Med 17:873, Table II) method 11 interval (hybrid
    # score with continuity correction) of se - fpr, halved and shifted
    lo, hi = balanced_accuracy_interval(tp, fn, tn, fp)
    assert lo == pytest.approx((1 + low) / 2, abs=5e-5)
    assert hi == pytest.approx((1 + high) / 2, abs=5e-5)


def _scores(seed: int, m: int, n: int, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.normal(1.0, 1, m), rng.normal(0, 1, n)])
    if ties:
        x = np.round(x, 0)  # heavy ties, as probabilities rounded by a model often are
    return x, np.r_[np.ones(m, bool), np.zeros(n, bool)]


@pytest.mark.parametrize(("seed", "m", "n", "ties"), [(0, 12, 9, False), (1, 5, 30, True),
                                                      (2, 40, 40, True), (3, 3, 4, False)])
def test_auroc_and_delong_variance_match_sklearn_and_scipy(seed, m, n, ties):
    x, y = _scores(seed, m, n, ties)
    auc, low, high = auroc_interval(x, y)
    assert auc == pytest.approx(roc_auc_score(y, x), abs=1e-12)
    u = stats.mannwhitneyu(x[y], x[~y], alternative="two-sided").statistic
    assert auc == pytest.approx(u / (m * n), abs=1e-12)
    assert low < auc < high
    # DeLong's variance is exactly the two-sample jackknife variance of the AUC (leave one
    # positive, or one negative, out); each leave-one-out AUC from scikit-learn
    def loo(cls: np.ndarray) -> np.ndarray:
        keep = np.ones(len(x), bool)
        out = []
        for i in np.flatnonzero(cls):
            keep[i] = False
            out.append(roc_auc_score(y[keep], x[keep]))
            keep[i] = True
        return np.array(out)

    jack = sum((len(t) - 1) / len(t) * ((t - t.mean()) ** 2).sum() for t in (loo(y), loo(~y)))
    assert delong_variance(_pair_wins(x, y)) == pytest.approx(jack, rel=1e-10)


def test_score_test_is_statsmodels_mcnemar_without_correction():
    for b, c in [(1, 7), (4, 0), (0, 4), (6, 16), (12, 2), (30, 31), (1, 0), (25, 5)]:
        ref = mcnemar([[0, b], [c, 0]], exact=False, correction=False).pvalue
        assert score_test_p(np.array([b]), np.array([c]))[0] == pytest.approx(ref, rel=1e-12)
    assert score_test_p(np.array([0]), np.array([0]))[0] == 1.0


def _tango_closed_form(n: int, b: int, c: int) -> tuple[float, float]:
    """Tango's bounds as roots of the quartic of Yang, Sun & Hardin (2013, Stat Med 32:1336).

    Squaring |Z(delta)| = z gives a polynomial of degree 4 in delta whose real roots in
    [-1, 1] hold both bounds (and spurious roots from the squaring, dropped by checking the
    unsquared equation). An independent, non-iterative route to the same interval.
    """
    g, d, s = Z * Z, b - c, b + c
    coef = [n * n * (n / g + 1) ** 2,
            -n * d * (n / g + 1) * (4 * n / g + 1),
            2 * n * d * d * (3 * n / g + 2) / g - n * n * (s / g + 1),
            n * d * (2 * s / g + 1) - d ** 3 * (4 * n / g + 1) / g,
            d * d * (d * d / g - s) / g]
    roots = np.roots(coef)
    real = roots[np.abs(roots.imag) < 1e-9].real
    real = real[(real >= -1) & (real <= 1)]
    z_at = tango_statistic(np.full(real.shape, b), np.full(real.shape, c),
                           np.full(real.shape, n), real)
    return (float(real[np.abs(z_at - Z) < 1e-6].min()),
            float(real[np.abs(z_at + Z) < 1e-6].max()))


@pytest.mark.parametrize(("n11", "b", "c", "n22"), [
    (1, 1, 7, 12),     # Bentur et al. 2009, the airway example of Fagerland et al. 2014
    (59, 6, 16, 80),   # Cavo et al. 2012, their second example
    (0, 0, 4, 10),     # the sample run's lesion-free stage 1 (4 vs 0 discordant of 14)
    (39, 5, 0, 0),     # 44 pairs, 5 vs 0 discordant
    (40, 2, 1, 57), (300, 150, 86, 570)])
def test_tango_interval_matches_the_closed_form_and_inverts_the_test(n11, b, c, n22):
    n = n11 + b + c + n22
    low, high = tango_interval(np.array([b]), np.array([c]), np.array([n]))
    ref_low, ref_high = _tango_closed_form(n, b, c)
    assert low[0] == pytest.approx(ref_low, abs=1e-9)
    assert high[0] == pytest.approx(ref_high, abs=1e-9)
    # each bound is where the score test of that difference reaches p = 0.05
    for bound in (low, high):
        z = tango_statistic(np.array([b]), np.array([c]), np.array([n]), bound)
        assert 2 * stats.norm.sf(abs(z[0])) == pytest.approx(0.05, abs=1e-8)


def test_tango_bentur_example_values():
    # Bentur et al. 2009 (b = 1, c = 7 of 21 pairs), pinned to 4 decimals (the closed form
    # above gives the same); the point estimate is -6/21
    low, high = tango_interval(np.array([1]), np.array([7]), np.array([21]))
    assert (round(float(low[0]), 4), round(float(high[0]), 4)) == (-0.5172, -0.026)


def test_holm_matches_statsmodels():
    rng = np.random.default_rng(30)
    cases = [rng.uniform(0, 0.2, 136), rng.uniform(0, 1, 20),
             np.array([0.01, 0.04, 0.04, 0.03, 0.005, 1.0, 1.0]), np.array([0.2]),
             np.r_[np.full(40, 1.0), [1e-8, 0.02]]]
    for p in cases:
        ref = multipletests(p, alpha=0.05, method="holm")[1]
        np.testing.assert_allclose(holm(p), ref, rtol=0, atol=1e-15)
    # NaN entries are not tests: left out of the family
    p = np.array([0.01, np.nan, 0.04])
    out = holm(p)
    assert np.isnan(out[1])
    np.testing.assert_allclose(out[[0, 2]], multipletests([0.01, 0.04], method="holm")[1])
