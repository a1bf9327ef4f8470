"""Chinchilla's two fits recover laws we planted, points files are checked row by row, and a fit that cannot be
trusted prints nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tinylm.cli.main import main
from tinylm.errors import TinyLMError
from tinylm.scaling.fit import fit_points
from tinylm.scaling.isoflop_fit import fit_isoflop
from tinylm.scaling.parametric_fit import NAMES, Law, fit_parametric, huber, objective
from tinylm.scaling.points import Point, isoflop_curves, read_points

# Chinchilla's published fit (Hoffmann et al. 2022), Besiroglu et al.'s 2024 refit of it, and a small-scale law
PLANTED = {
    "chinchilla": Law(1.69, 406.4, 410.7, 0.34, 0.28),
    "besiroglu": Law(1.82, 482.01, 2085.43, 0.3478, 0.3658),
    "laptop": Law(2.1, 60.0, 300.0, 0.45, 0.38),
}


def planted_points(law: Law, budgets: tuple[float, ...], noise: float, seed: int = 0) -> list[Point]:
    """IsoFLOP curves around the law's own optimum (C = 6ND), each loss times exp(noise x a normal draw)."""
    rng = np.random.default_rng(seed)
    points = []
    for flops in budgets:
        best, _ = law.optimal(flops)
        for factor in np.exp(np.linspace(-1.2, 1.2, 7)):
            n = best * factor
            d = flops / (6 * n)
            points.append(Point(n, d, law.loss(n, d) * math.exp(rng.normal(0, noise)), flops))
    return points


def scale_of(law: Law) -> tuple[float, ...]:
    """Five budgets a decade apart in half-decades, where the law's optimum lies at 1e5-1e9 parameters."""
    anchor = 10 ** round(math.log10(6 * 1e7 * 2e8))
    return tuple(anchor * 10 ** (k / 2) for k in range(-2, 3))


@pytest.mark.parametrize("name", list(PLANTED))
def test_approach_3_recovers_a_planted_law_within_its_intervals(name: str) -> None:
    law = PLANTED[name]
    fit = fit_parametric(planted_points(law, scale_of(law), noise=0.003), bootstrap=60)
    for field, planted in zip(NAMES, law.values()):
        low, high = fit.intervals[field]
        assert low <= planted <= high, (field, planted, fit.intervals[field])
    assert fit.rms_residual < 0.006


def test_approach_2_exponents_equal_the_closed_form() -> None:
    """Noise-free curves: the parabolas' minima follow N* ~ C^(beta/(alpha+beta)), D* ~ C^(alpha/(alpha+beta))."""
    for law in PLANTED.values():
        fit = fit_isoflop(isoflop_curves(planted_points(law, scale_of(law), noise=0.0)), bootstrap=20)
        a, b = law.exponents
        assert fit.a == pytest.approx(a, abs=0.005) and fit.b == pytest.approx(b, abs=0.005)
        assert a + b == pytest.approx(1.0)
        for curve in fit.curves:  # each minimum is the law's own, within a few percent
            assert curve.best_params == pytest.approx(law.optimal(curve.flops)[0], rel=0.05)
            assert curve.measured_interior


def test_objective_gradient_and_huber_against_finite_differences() -> None:
    rng = np.random.default_rng(1)
    data = (np.log(rng.uniform(1e5, 1e8, 30)), np.log(rng.uniform(1e6, 1e9, 30)), np.log(rng.uniform(2, 4, 30)))
    theta = np.array([6.0, 7.0, 0.5, 0.34, 0.28])
    _, gradient = objective(theta, *data)
    for i in range(5):
        step = np.zeros(5)
        step[i] = 1e-6
        numeric = (objective(theta + step, *data)[0] - objective(theta - step, *data)[0]) / 2e-6
        assert gradient[i] == pytest.approx(numeric, rel=1e-4, abs=1e-9)
    loss, slope = huber(np.array([-0.01, 0.0005, 0.002]), 1e-3)
    assert loss.tolist() == pytest.approx([1e-3 * (0.01 - 5e-4), 0.5 * 0.0005**2, 1e-3 * (0.002 - 5e-4)])
    assert slope.tolist() == pytest.approx([-1e-3, 0.0005, 1e-3])


def test_tokens_per_parameter_and_both_approaches_agree_on_planted_points() -> None:
    law = PLANTED["chinchilla"]
    result, fit = fit_points(planted_points(law, scale_of(law), noise=0.001), bootstrap=25)
    assert result["approach2"] is not None
    for budget in result["budgets"]:
        n_opt, d_opt = law.optimal(budget["six_nd"])
        assert budget["tokens_per_param"] == pytest.approx(d_opt / n_opt, rel=0.1)
        low, high = budget["tokens_per_param_interval"]
        assert low <= budget["tokens_per_param"] <= high
        assert budget["params_ratio_3_to_2"] == pytest.approx(1.0, abs=0.1)
    assert fit.law.loss(1e8, 2e9) == pytest.approx(law.loss(1e8, 2e9), rel=0.01)


def write_rows(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


@pytest.mark.parametrize(("row", "message"), [
    ({"params": 1e6, "tokens": 1e7}, ":3: missing field 'loss'"),
    ('{"params": 1e6, "tokens": 1e7, "loss": NaN}', ":3: loss must be finite and positive"),
    ({"params": 1e6, "tokens": -1, "loss": 3.0}, ":3: tokens must be finite and positive"),
    ({"params": "1e6", "tokens": 1e7, "loss": 3.0}, ":3: params must be a number"),
    ("{not json", ":3: not a JSON object"),
])
def test_a_bad_points_row_is_named_by_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    row: object, message: str) -> None:
    good = {"params": 1e6, "tokens": 2e7, "loss": 3.2}
    path = write_rows(tmp_path / "points.jsonl", [good, good, row])
    with pytest.raises(TinyLMError, match=message.replace("(", r"\(")):
        read_points(path)
    assert main(["scaling", "fit", "--points", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}{message}" in err[0]


def test_fits_that_cannot_be_trusted_print_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one_size = [{"params": 1e6, "tokens": d, "loss": 2 + 10 / d ** 0.3} for d in np.geomspace(1e6, 1e9, 8)]
    assert main(["scaling", "fit", "--points", str(write_rows(tmp_path / "one.jsonl", one_size))]) == 1
    assert "one size alone cannot separate" in capsys.readouterr().err
    flat = [{"params": n, "tokens": d, "loss": 3.0} for n in (1e5, 1e6, 1e7) for d in (1e6, 1e7, 1e8)]
    assert main(["scaling", "fit", "--points", str(write_rows(tmp_path / "flat.jsonl", flat)), "--json"]) == 1
    captured = capsys.readouterr()
    assert "did not converge" in captured.err and captured.out == ""
    with pytest.raises(TinyLMError, match="at least 6 points"):
        fit_parametric([Point(1e6, 1e7, 3.0, 6e13)] * 3)


def test_fit_command_prints_the_law_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    law = PLANTED["laptop"]
    points = planted_points(law, scale_of(law), noise=0.002)
    path = write_rows(tmp_path / "p.jsonl", [{"params": p.params, "tokens": p.tokens, "loss": p.loss} for p in points])
    assert main(["scaling", "fit", "--points", str(path), "--json", "--bootstrap", "20"]) == 0
    result = json.loads(capsys.readouterr().out)
    for name in NAMES:
        assert math.isfinite(result[name]) and len(result[f"{name}_interval"]) == 2
    assert result["approach2"]["a"] == pytest.approx(law.exponents[0], abs=0.03)
    assert result["a"] == result["approach2"]["a"] and len(result["a_interval"]) == 2  # Approach 2's, at the top
    assert result["law_a"] == pytest.approx(law.exponents[0], abs=0.03)


def test_the_committed_sweep_refits_to_the_documented_numbers() -> None:
    """docs/scaling.md's tables come from docs/data/scaling: fitting its points again gives the committed fit,
    and every IsoFLOP curve of the default grid has its lowest loss inside the sizes tried."""
    folder = Path(__file__).resolve().parents[1] / "docs" / "data" / "scaling"
    committed = json.loads((folder / "fit.json").read_text())
    result, _ = fit_points(read_points(folder / "points.jsonl"), bootstrap=20)  # the fit, not its 200 resamples
    for name in NAMES:
        assert result[name] == pytest.approx(committed[name], rel=1e-4)
    assert result["approach2"]["a"] == pytest.approx(committed["approach2"]["a"], rel=1e-9)
    assert [c["measured_interior"] for c in result["approach2"]["curves"]] == [True, True, True]
    budgets = sorted({p.flops for p in read_points(folder / "points.jsonl")})
    assert budgets[-1] / budgets[0] >= 9.9  # three budgets spanning 10x
