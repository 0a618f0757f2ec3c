"""The paired accuracy-difference interval covers, and agrees with the test it inverts.

Runs the short grid of ``benchmarks/coverage_paired.py`` (``--tiny``; the full grid and its
figures: docs/metrics.md, "Paired comparison") and enumerates every outcome of small n.
"""

from __future__ import annotations

import runpy

import numpy as np
import pytest

from chexpercept.analysis.inference import score_test_p, tango_interval, tango_statistic
from chexpercept.layouts import repo_root

BENCH = runpy.run_path(str(repo_root() / "benchmarks" / "coverage_paired.py"))


def test_tango_covers_at_every_cell_of_the_short_grid_where_the_bootstrap_did_not():
    cells = BENCH["grid"](BENCH["TINY"], ["tango", "bootstrap"], 0)
    tango = [c for c in cells if c.method == "tango"]
    low = min(tango, key=lambda c: c.coverage)
    assert low.coverage >= 0.94, low
    assert max(c.mass_left_out for c in cells) < 1e-8
    # the issue's three designs: the paired bootstrap it replaces under-covered there
    issue = {(c.p10, c.p01, c.n) for c in tango[:3]}
    assert issue == {(0.05, 0.15, 10), (0.02, 0.07, 10), (0.002, 0.01, 100)}
    assert all(c.coverage < 0.93 for c in cells[len(tango):len(tango) + 3])


def test_the_script_prints_each_methods_lowest_cell(capsys):
    assert BENCH["main"](["--tiny", "--methods", "tango"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tango      lowest ") and "0 of 18 cells below 94 %" in out


def test_interval_excludes_zero_exactly_when_the_test_rejects_on_every_outcome():
    for n in range(1, 41):
        b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        keep = b + c <= n
        b, c = b[keep], c[keep]
        low, high = tango_interval(b, c, np.full(b.shape, n))
        p = score_test_p(b, c)
        assert ((p < 0.05) == ((low > 0) | (high < 0))).all(), n
        est = (b - c) / n
        assert ((-1 <= low) & (low <= est) & (est <= high) & (high <= 1)).all(), n
        assert (high > low).all(), n  # never zero-width, also at 0 or n discordant pairs


def test_boundaries_no_and_all_discordant_pairs():
    # no discordant pair: +-z^2 / (n + z^2)
    z2 = 1.959963984540054 ** 2
    low, high = tango_interval(np.array([0]), np.array([0]), np.array([10]))
    assert (low[0], high[0]) == pytest.approx((-z2 / (10 + z2), z2 / (10 + z2)), abs=1e-15)
    # every pair discordant one way: the bound on that side is exactly 1 (or -1)
    low, high = tango_interval(np.array([10, 0]), np.array([0, 10]), np.array([10, 10]))
    assert high[0] == 1.0 and low[1] == -1.0 and 0 < low[0] < 1 and -1 < high[1] < 0
    assert low[0] == pytest.approx(-high[1], abs=1e-15)  # mirror images
    # the statistic decreases in the difference (what the bisection relies on)
    delta = np.linspace(-0.999, 0.999, 401)[:, None]
    for n in (3, 14, 60):
        b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        keep = (b + c <= n).ravel()
        z = tango_statistic(b.ravel()[keep], c.ravel()[keep], n, delta)
        assert (np.diff(z, axis=0) <= 1e-9).all(), n
