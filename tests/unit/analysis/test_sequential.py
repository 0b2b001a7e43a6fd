"""The sequential paired gate's statistics (tasks.analysis.sequential): boundaries, level over repeated
looks, early stops, the budget, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from tasks.analysis import sequential as sq
from tasks.analysis.stats import compare_paired

DESIGN = sq.Design()  # 99%, 5% tolerance, at most 320 pairs, looks every 16 pairs from 32 on
SCHEDULE = sq.look_schedule(DESIGN.max_pairs, DESIGN.round_pairs)


def gate(d, design=DESIGN):
    """Run a gate over the pair log ratios ``d`` as the profiled-run stage does: look after every round,
    stop at the first decisive look. Returns (verdict, pairs spent, the analysis)."""
    looks = []
    for p in sq.look_schedule(design.max_pairs, design.round_pairs):
        looks.append(p)
        if sq.look(d, looks, design).verdict != "inconclusive":
            break
    g = sq.analyse(d, looks, design)
    return g.final.verdict, g.final.pairs, g


def test_boundaries_match_published_lan_demets_obf_values():
    """Five equally spaced looks, two-sided 5%: the values ldbounds and gsDesign (sfLDOF) print."""
    got = sq.boundaries((0.2, 0.4, 0.6, 0.8, 1.0), 0.05)
    assert got == pytest.approx((4.8769, 3.3569, 2.6803, 2.2898, 2.0310), abs=2e-4)
    assert sq.boundaries((1.0,), 0.01) == pytest.approx((sps.norm.isf(0.005),))  # one look: the fixed z
    assert sq.spent_alpha(1.0, 0.01) == pytest.approx(0.01) and sq.spent_alpha(0.0, 0.01) == 0.0


def test_boundaries_spend_the_level_over_all_looks():
    """Brownian motion under no change crosses the 19-look boundaries with probability alpha overall
    (Monte Carlo, 400k paths: 1% +- 0.05%), though each look alone is far stricter than 1%."""
    fr = np.array([p / 320 for p in SCHEDULE])
    c = np.array(sq.boundaries(tuple(fr), 0.01))
    rng = np.random.default_rng(0)
    crossed = np.zeros(400_000, dtype=bool)
    s = np.zeros(crossed.size)
    prev = 0.0
    for t, ck in zip(fr, c, strict=True):
        s += rng.normal(0.0, math.sqrt(t - prev), crossed.size)
        prev = t
        crossed |= np.abs(s / math.sqrt(t)) >= ck
    assert crossed.mean() == pytest.approx(0.01, abs=0.0008)
    assert c[0] > 8 and c[-1] < 2.75  # O'Brien-Fleming shape: wide first, near z_0.995 = 2.58 last


@pytest.mark.slow  # a Monte Carlo of sequential gates
def test_no_change_false_alarms_stay_under_half_alpha_over_repeated_looks():
    """An unchanged model (iid pair noise sd 0.15, as on the dev machine) looked at up to 19 times: the
    gate says regression in at most alpha/2 = 0.5% of gates (+ MC error), and passes almost always."""
    rng = np.random.default_rng(1)
    verdicts = [gate(rng.normal(0.0, 0.15, 320))[0] for _ in range(800)]
    assert verdicts.count("regression") / 800 <= 0.01
    assert verdicts.count("pass") / 800 >= 0.95


@pytest.mark.slow  # a Monte Carlo of sequential gates
def test_a_fixed_interval_looked_at_19_times_would_not_keep_the_level():
    """Why the sequential boundaries: the same looks with the fixed 99% batch-means t interval alarm
    several times as often (the test can tell the two apart)."""
    rng = np.random.default_rng(2)
    naive = seq = 0
    for _ in range(400):
        d = rng.normal(0.0, 0.15, 320)
        a, b = np.full(320, 100.0), 100.0 * np.exp(d)
        for p in SCHEDULE:
            v = compare_paired(a[:p], b[:p]).verdict
            if v != "inconclusive":
                naive += v == "regression"
                break
        seq += gate(d)[0] == "regression"
    assert naive >= 3 * max(seq, 1)


@pytest.mark.slow  # a Monte Carlo of sequential gates
def test_correlated_neighbours_keep_the_level():
    """Pair ratios with AR(1) correlation 0.3 and a slow wave (a host's drift ABBA did not cancel):
    batch means carry the correlation, false alarms stay near alpha/2."""
    rng = np.random.default_rng(3)
    alarms = 0
    for _ in range(400):
        e = np.zeros(320)
        x = 0.0
        for j in range(320):
            x = 0.3 * x + rng.normal(0, 0.15)
            e[j] = x
        d = e + 0.03 * np.sin(2 * np.pi * np.arange(320) / 160 + rng.uniform(0, 6.3))
        alarms += gate(d)[0] == "regression"
    assert alarms / 400 <= 0.015


def test_detects_5pct_and_stops_early_for_a_gross_slowdown():
    rng = np.random.default_rng(4)
    five = [gate(rng.normal(math.log(1.05), 0.15, 320)) for _ in range(300)]
    assert sum(v == "regression" for v, _, _ in five) / 300 >= 0.9
    assert sum(v == "pass" for v, _, _ in five) / 300 <= 0.02  # a slowdown of exactly t passes ~alpha/2
    twice = [gate(rng.normal(math.log(2.0), 0.15, 320)) for _ in range(50)]
    assert all(v == "regression" for v, _, _ in twice)
    assert max(p for _, p, _ in twice) <= 64  # a few dozen pairs, not the budget


def test_quiet_aa_gate_passes_before_the_budget():
    v, pairs, g = gate(np.random.default_rng(5).normal(0.0, 0.08, 320))
    assert (v, g.stopped) == ("pass", "decided") and pairs < 320 and g.needed_pairs is None


def test_noisy_host_spends_the_budget_and_says_what_it_would_need():
    v, pairs, g = gate(np.random.default_rng(6).normal(0.0, 0.6, 320))
    assert (v, pairs, g.stopped) == ("inconclusive", 320, "budget")
    assert g.needed_pairs is not None and g.needed_pairs > 320
    # with that many pairs the final half-width is within log(1.05)/2 at this noise
    n = g.needed_pairs
    c = sq.boundaries(tuple(p / 320 for p in SCHEDULE), 0.01)[-1]
    half = float(sps.t.isf(sps.norm.sf(c), n // sq.batch_pairs(n) - 1)) * g.final.sd_pair / math.sqrt(n)
    assert half <= math.log1p(0.05) / 2


def test_offset_widens_every_look_and_can_make_more_pairs_useless():
    d = np.random.default_rng(7).normal(0.0, 0.05, 320)
    plain = sq.look(d, [320], DESIGN)
    wide = sq.look(d, [320], DESIGN.model_copy(update={"offset_sd": 0.02}))
    assert wide.ci_high - wide.ci_low > plain.ci_high - plain.ci_low
    assert sq.needed_pairs(0.05, DESIGN.model_copy(update={"offset_sd": 0.02})) is None


def test_batches_shrink_while_pairs_are_few():
    assert [sq.batch_pairs(n) for n in (32, 64, 128, 256, 320, 5000)] == [2, 4, 8, 16, 16, 16]
    assert sq.look(np.zeros(40) + np.linspace(0, 0.01, 40), [32], DESIGN).df == 15


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: sq.boundaries((), 0.01), "at least one look"),
        (lambda: sq.boundaries((0.5, 0.4), 0.01), "strictly increasing"),
        (lambda: sq.boundaries((0.5, 1.2), 0.01), r"in \(0, 1\]"),
        (lambda: sq.look([0.1, float("nan")] * 20, [32], DESIGN), r"log_ratios\[1\] = nan"),
        (lambda: sq.look(np.zeros(20), [32], DESIGN), "look at 32 pairs but only 20"),
        (lambda: sq.look(np.zeros(40), [16], DESIGN), r"each must be in \[32, 320\]"),
        (lambda: sq.Design(max_pairs=10), "max_pairs"),
    ],
)
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_analyse_refuses_looks_past_a_decision():
    d = np.full(64, math.log(2.0)) + np.random.default_rng(8).normal(0, 0.05, 64)
    with pytest.raises(ValueError, match="look at 32 pairs already decided"):
        sq.analyse(d, [32, 48], DESIGN)
