"""The step cost model: the fit, its parts, the batch-size rule, validated JSON, and profiling a tiny pair."""

from __future__ import annotations

import json
import math
import platform
import shutil

import numpy as np
import pytest
import torch

import specdec
from specdec import profiling
from specdec.cost import MAX_FIT_ERROR, CostModel, Curve, check_compatible
from specdec.cost_by_batch import CostsByBatch
from specdec.ops import smart_cost
from specdec.profiling import BACKLOGS, FORMAT_VERSION, Profile
from tests.helpers import (MODERATE, ONE_NODE, PROFILE_SIZES, TRUE_FIT, count_calls, fixed_cost, make_model, perturbed,
                           synthetic_profile)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_known_coefficients_from_noisy_points(seed):
    model = CostModel.fit(synthetic_profile(noise=0.02, seed=seed), 1)
    c0, gamma, delta, rho = model.verify.fits["paper"]
    assert c0 == 0.0
    for name, got in (("gamma", gamma), ("delta", delta), ("rho", rho)):
        assert got == pytest.approx(TRUE_FIT[name], rel=0.10), name
    assert set(model.verify.errors) == {"paper", "intercept"}
    assert all(0 < e < 0.05 for e in model.verify.errors.values())
    assert model.verify.form == min(model.verify.errors, key=model.verify.errors.get)  # the lower error wins
    assert model.use_fit and model.notes == ()


def test_one_node_is_priced_as_measured_and_the_loop_is_what_the_ar_step_adds():
    prof = synthetic_profile()
    model = CostModel.fit(prof, 1)
    assert model.verify_seconds(1) == pytest.approx(ONE_NODE)  # not the curve's value at 1
    assert model.verify_seconds(8) == pytest.approx(model.verify(8.0)) and model.verify_seconds(8) > 2 * ONE_NODE
    assert model.ar_step == prof.ar_step_seconds[0] == model.c_target
    assert model.loop == pytest.approx(2e-4)
    assert model.step_seconds(1) == pytest.approx(model.ar_step)
    assert model.draft_seconds(4) == pytest.approx(1.04e-3) and model.catch_up_seconds(3) == pytest.approx(1.56e-3)
    assert model.step_seconds(10, backlog=3, layers=2, layer_width=4) == pytest.approx(
        model.loop + model.verify_seconds(10) + 1.56e-3 + 2 * 1.04e-3)


def test_context_scales_verification():
    model = CostModel.fit(synthetic_profile(), 1)
    assert model.context_slope == pytest.approx(0.2 / (512 - 128))
    assert model.verify_seconds(8, context=512) == pytest.approx(model.verify_seconds(8))
    assert model.verify_seconds(8, context=128) == pytest.approx(0.8 * model.verify_seconds(8))


def test_free_intercept_is_kept_when_the_times_have_a_floor():
    prof = synthetic_profile()
    floored = Profile(**{**prof.__dict__, "verify_seconds": (tuple(v + 8e-3 for v in prof.verify_seconds[0]),)})
    model = CostModel.fit(floored, 1)
    assert model.verify.form == "intercept" and model.verify.errors["intercept"] < 0.5 * model.verify.errors["paper"]
    assert model.verify.c0 == pytest.approx(8e-3, rel=0.1)


def test_a_fit_that_misses_is_reported_and_the_measured_points_price_verification():
    prof = synthetic_profile()
    zigzag = tuple(t * (3.0 if i % 2 else 1.0) for i, t in enumerate(prof.verify_seconds[0]))
    with pytest.warns(UserWarning, match=r"misses the measured times by \d+% \(RMS relative, limit 20%\)"):
        model = CostModel.fit(Profile(**{**prof.__dict__, "verify_seconds": (zigzag,)}), 1)
    assert model.verify.error > MAX_FIT_ERROR and not model.use_fit and "misses" in model.notes[-1]
    assert model.verify_seconds(3) == pytest.approx(max(zigzag[:3]))  # the points, made non-decreasing


def test_k2_cost_vector_is_the_fitted_curve_plus_what_the_step_spent():
    model = CostModel.fit(synthetic_profile(), 1)
    n = np.array([2.0, 7.0, 40.0, 200.0])
    value, slope = smart_cost(model.as_tensor("cpu", fixed=3e-3), torch.tensor(n, dtype=torch.float32))
    assert np.allclose(value.numpy(), model.predict(n) + 3e-3, rtol=1e-4)
    assert np.allclose(slope.numpy(), model.derivative(n), rtol=1e-4)
    h = 1e-3
    assert model.derivative(40.0) == pytest.approx((model.predict(40 + h) - model.predict(40 - h)) / (2 * h), rel=1e-4)
    assert model.speedup(3.0, 2 * model.ar_step) == pytest.approx(1.5)
    assert model.as_tensor().dtype == torch.float32 and model.as_tensor().shape == (5,)


def test_curves_are_monotone_and_extend_linearly():
    curve = Curve.through([1, 2, 4, 8], [1.0, 3.0, 2.0, 5.0])
    assert curve.seconds == (1.0, 3.0, 3.0, 5.0)
    assert curve(3) == pytest.approx(3.0) and curve(12) == pytest.approx(7.0) and curve(0.5) == pytest.approx(1.0)


def test_costs_by_batch_fits_a_profile_once_per_size_and_warns_once_for_a_fixed_model(recwarn):
    prof = synthetic_profile(batch_sizes=(1, 4, 8), scales=(1.0, 2.0, 4.0))
    costs = CostsByBatch(prof)
    at4 = costs(4)
    assert costs(4) is at4 and at4.verify_points == CostModel.fit(prof, 4).verify_points and costs(1).batch_size == 1
    fixed = CostsByBatch(at4)
    assert fixed(4) is at4 and not recwarn.list
    with pytest.warns(UserWarning, match="fitted at batch size 4, running at 2"):
        assert fixed(2) is at4
    recwarn.clear()
    fixed(2)  # asked again (every generate call asks): said once
    assert not recwarn.list


def test_batch_size_rule_interpolates_between_and_clamps_outside():
    prof = synthetic_profile(batch_sizes=(1, 4, 8), scales=(1.0, 2.0, 4.0))
    at4 = CostModel.fit(prof, 4)
    assert at4.batch_rule == "profiled" and at4.verify_points.seconds == prof.verify_seconds[1]
    at6 = CostModel.fit(prof, 6)
    assert at6.batch_rule == "interpolated between 4 and 8"
    assert np.allclose(at6.verify_points.seconds, 3.0 * np.array(prof.verify_seconds[0]))
    assert at6.draft_seconds(1) == pytest.approx(3 * 1.01e-3)
    with pytest.warns(UserWarning, match="outside the profiled batch sizes"):
        at16 = CostModel.fit(prof, 16)
    assert at16.verify_points.seconds == prof.verify_seconds[2] and at16.batch_rule == "nearest profiled (8)"
    with pytest.raises(ValueError, match="batch_size: expected an int >= 1"):
        CostModel.fit(prof, 0)


def test_cost_model_json_round_trip_and_plot(tmp_path):
    model = CostModel.fit(synthetic_profile(noise=0.02), 1)
    model.save(tmp_path / "cost.json")
    assert CostModel.load(tmp_path / "cost.json") == model
    png = model.plot(tmp_path / "fit.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("ar_step"), r"missing field\(s\) \['ar_step'\]"),
    (lambda d: d["verify"].update(delta=float("nan")), "verify.delta: must be a finite number"),
    (lambda d: d["verify"].update(form="cubic"), "verify.form must be one of"),
    (lambda d: d["catch_up"].update(x=d["catch_up"]["x"][:-1]), "catch_up: needs at least 2 points"),
    (lambda d: d.update(format="specdec-profile"), "is not a specdec-cost-model file"),
    (lambda d: d.update(version=1), "format version 1, this specdec reads version 2"),
])
def test_corrupt_or_old_cost_model_json_is_a_value_error(tmp_path, edit, message):
    CostModel.fit(synthetic_profile(), 1).save(tmp_path / "cost.json")
    doc = json.loads((tmp_path / "cost.json").read_text())
    edit(doc)
    (tmp_path / "cost.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message):
        CostModel.load(tmp_path / "cost.json")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("context_len"), r"missing field\(s\) \['context_len'\]"),
    (lambda d: d["verify_seconds"][0].__setitem__(3, float("nan")), "verify_seconds: expected finite positive"),
    (lambda d: d["draft_seconds"].append(d["draft_seconds"][0]), "draft_seconds needs one row per batch size"),
    (lambda d: d.update(sizes=[4, 2, 1] + d["sizes"][3:]), "sizes: expected at least 3 increasing"),
    (lambda d: d.update(catch_up_seconds=None), "draft_seconds and catch_up_seconds must both be present"),
    (lambda d: d.update(ar_step_seconds=[0.0]), "ar_step_seconds: expected finite positive"),
    (lambda d: d.update(version=1), r"format version 1, .* profile again \(specdec profile\)"),
])
def test_corrupt_or_old_profile_json_is_a_value_error(tmp_path, edit, message):
    synthetic_profile().save(tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["version"] == FORMAT_VERSION
    edit(doc)
    (tmp_path / "p.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message):
        Profile.load(tmp_path / "p.json")


def test_unreadable_files_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="no file at"):
        Profile.load(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        CostModel.load(tmp_path / "x.json")


def test_mismatched_models_raise_and_another_device_warns():
    target = make_model("llama")
    target.config._name_or_path = "org/target"
    model = CostModel.fit(synthetic_profile(target="org/other", draft=""), 1)
    with pytest.raises(ValueError, match="cost_model: profiled with target 'org/other', used with 'org/target'"):
        check_compatible(model, target)
    same = CostModel.fit(synthetic_profile(target="org/target", device="some GPU"), 1)
    with pytest.warns(UserWarning, match="profiled on some GPU in float32, running on cpu"):
        check_compatible(same, target)


def test_cpu_description_tells_cpus_of_one_model_name_apart():
    """Two CPUs both named "AMD EPYC" (one decoded twice as fast as the other) differ by family and model;
    the first processor's block counts; without those fields (an ARM board), the model name alone, and
    without that the machine type."""
    from specdec.records import cpu_description

    def info(family, model):
        return (f"processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: {family}\nmodel\t\t: {model}\n"
                f"model name\t: AMD EPYC\nflags\t\t: fpu\n\nprocessor\t: 1\ncpu family\t: 99\nmodel\t\t: 9\n")

    assert cpu_description(info(26, 2)) == "AMD EPYC, family 26 model 2"
    assert cpu_description(info(25, 1)) != cpu_description(info(26, 2))
    assert cpu_description("processor\t: 0\nmodel name\t: Cortex-A72\n") == "Cortex-A72"
    assert cpu_description("") == platform.machine()


@pytest.mark.filterwarnings("ignore:cost model at batch")  # a tiny model's timings may not fit a curve
def test_profile_a_tiny_pair(tmp_path):
    target = make_model("qwen2")
    draft = perturbed(target)
    prof = specdec.profile(target, draft, batch_sizes=(1, 2), context_len=24, sizes=(1, 3, 8), repeats=2,
                           progress=False)
    assert prof.batch_sizes == (1, 2) and prof.sizes == (1, 3, 8) and prof.context_len == 24
    assert prof.short_context == 6 and prof.context_sizes == (1, 3) and prof.backlogs == BACKLOGS
    for table, width in ((prof.verify_seconds, 3), (prof.draft_seconds, 3), (prof.context_seconds, 2),
                         (prof.catch_up_seconds, len(BACKLOGS))):
        assert len(table) == 2 and all(len(row) == width and all(t > 0 for t in row) for row in table)
    assert len(prof.ar_step_seconds) == 2 and all(t > 0 for t in prof.ar_step_seconds)
    assert prof.device.startswith("cpu") and prof.dtype == "float32"
    assert prof.versions["torch"] == torch.__version__ and prof.versions["specdec"] == specdec.__version__
    prof.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json") == prof
    model = CostModel.fit(prof, 2)
    assert all(math.isfinite(c) for c in model.coefficients()) and model.c_target == prof.ar_step_seconds[1]


def test_profile_measures_out_of_line_points_again(monkeypatch):
    """The self-check: a point cheaper than the size before it, or spread too widely, is timed again (the
    repeats pooled); what stays out of line is noted."""
    from specdec import profiling

    rounds = {0: 0, 1: 0, 2: 0}
    times = {0: lambda r: [1.0] * 3, 1: lambda r: [0.5] * 3 if r == 0 else [2.0] * 3, 2: lambda r: [1.0, 3.0, 9.0]}

    def timed(fn, repeats, device):
        i = fn()
        if repeats == 1:  # the warm-up
            return [0.0]
        rounds[i] += 1
        return times[i](rounds[i] - 1)

    monkeypatch.setattr(profiling, "_timed", timed)
    notes: list[str] = []
    med, _ = profiling._checked_series([lambda i=i: i for i in range(3)], 3, torch.device("cpu"), "verify", notes)
    assert rounds == {0: 2, 1: 1 + profiling.RETRIES, 2: 1 + profiling.RETRIES}  # 0 and 1 were out of order
    assert med == [1.0, 2.0, 3.0]  # point 1's first timings (cheaper than point 0) were outvoted
    assert len(notes) == 1 and notes[0].startswith("verify: after 2 re-measurements, points [1, 2] still spread")


@pytest.mark.parametrize("rounds, want, noted", [
    ([[1.1] * 8], 1.1, False),  # in line: measured once
    ([[6.0] * 8, [1.2] * 8, [1.2] * 8], 1.2, False),  # a stalled first measurement is outvoted
    ([[1.0, 1.0, 9.0, 9.0, 1.0, 1.0, 9.0, 9.0]] * 3, 5.0, True),  # spread too wide every time: noted
    ([[3.0] * 8] * 3, 3.0, True),  # 3x the one-node forward every time: noted, not hidden
])
def test_profile_measures_an_out_of_line_ar_step_again(monkeypatch, rounds, want, noted):
    """c_T, the unit of every plan, is checked like the other points and against the one-node verification
    it contains (a profile taken while the machine stalled read c_T at 6x that forward)."""
    from specdec import profiling

    calls = []

    def samples(*args):
        calls.append(args)
        return np.array(rounds[len(calls) - 1])

    monkeypatch.setattr(profiling, "_ar_step_samples", samples)
    notes: list[str] = []
    step, _ = profiling._ar_step_seconds(None, 1, 64, 1, "torch", None, 1.0, "ar_step at batch 1", notes)
    assert step == pytest.approx(want) and len(calls) == (profiling.RETRIES + 1 if noted else len(rounds))
    assert len(notes) == noted and (not noted or notes[0].startswith("ar_step at batch 1: after 2 re-measurements"))


@pytest.mark.parametrize("kwargs, message", [
    ({"sizes": (1, 2)}, "sizes: the fit needs at least 3"),
    ({"sizes": (4, 2, 1)}, "sizes: expected increasing positive ints"),
    ({"batch_sizes": (0,)}, "batch_sizes: expected increasing positive ints"),
    ({"context_len": 250}, r"context_len: expected an int >= 4 with context_len \+ 64 <= the model's 256"),
    ({"repeats": 0}, "repeats: expected an int >= 1"),
])
def test_profile_argument_errors(kwargs, message):
    target = make_model("llama")
    with pytest.raises(ValueError, match=message):
        specdec.profile(target, **{"sizes": (1, 2, 8), "context_len": 8, **kwargs})


def test_linear_costs_survive_k2s_float32_cost_vector():
    """CPU-like tree times, linear in n: the device's C(n) must keep the verify term (float32 exp - 1)."""
    prof = synthetic_profile()
    n = np.array(PROFILE_SIZES, dtype=np.float64)
    prof = Profile(**{**prof.__dict__, "verify_seconds": (tuple(4e-3 + 1.2e-4 * n),)})
    model = CostModel.fit(prof, 1)
    assert model.verify.error < 0.02
    value, slope = smart_cost(model.as_tensor(), torch.tensor(n[1:], dtype=torch.float32))
    assert np.allclose(value.numpy(), model.predict(n[1:]), rtol=1e-3)
    assert np.allclose(value.numpy(), model.loop + 4e-3 + 1.2e-4 * n[1:], rtol=0.05)
    assert np.allclose(slope.numpy(), model.derivative(n[1:]), rtol=1e-3)


@pytest.mark.hf
@pytest.mark.parametrize("value", ["x", None, -3])
def test_cost_model_batch_size_is_validated(tmp_path, value):
    model = fixed_cost(**MODERATE)
    model.save(tmp_path / "c.json")
    doc = json.loads((tmp_path / "c.json").read_text())
    (tmp_path / "c.json").write_text(json.dumps({**doc, "batch_size": value}))
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        CostModel.load(tmp_path / "c.json")


@pytest.mark.hf
def test_profile_cache_is_keyed_by_content(tmp_path, monkeypatch, saved):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    calls = count_calls(monkeypatch, profiling, "profile")
    settings = dict(batch_sizes=(1,), context_len=8, sizes=(1, 2, 4), repeats=1, progress=False)
    one, two = make_model("llama", seed=0), make_model("llama", seed=1)  # two config-built models
    profiling.cached_profile(one, **settings)
    profiling.cached_profile(one, **settings)
    profiling.cached_profile(two, **settings)
    assert len(calls) == 2
    from specdec import records

    monkeypatch.setattr(records, "source_hash", lambda: "another version of the code")
    profiling.cached_profile(one, **settings)
    assert len(calls) == 3
    path = next((tmp_path / "profiles").glob("*.json"))  # a damaged cache file is measured again
    doc = json.loads(path.read_text())
    for p in (tmp_path / "profiles").glob("*.json"):
        p.write_text(json.dumps({**doc, "sizes": 5}))
    profiling.cached_profile(one, **settings)
    assert len(calls) == 4
    folder = tmp_path / "model"  # retrained in place: same path, new weights
    shutil.copytree(saved[0] / "target", folder)
    from specdec.app.models import load_model
    profiling.cached_profile(load_model(str(folder), device="cpu"), **settings)
    perturbed(load_model(str(folder), device="cpu")).save_pretrained(folder)
    profiling.cached_profile(load_model(str(folder), device="cpu"), **settings)
    assert len(calls) == 6


def test_a_profile_is_fitted_when_its_consumer_is_built_and_once_per_profile(monkeypatch):
    """A fit takes ~150 ms on a 2-core CPU: `CostsByBatch` fits the profiled batch sizes when it is built (not
    inside a consumer's first call), and every consumer of the same profile object shares the fits; another
    profile object (equal or not) is fitted afresh, and a batch size outside the profile on first use."""
    import specdec.cost_by_batch as cost

    fits = []
    real = CostModel.fit.__func__
    monkeypatch.setattr(CostModel, "fit", classmethod(lambda cls, p, b: fits.append(b) or real(cls, p, b)))
    prof = synthetic_profile(batch_sizes=(1, 4, 8), scales=(1.0, 2.0, 4.0))
    first = CostsByBatch(prof)
    assert sorted(fits) == [1, 4, 8]
    second = CostsByBatch(prof)
    assert sorted(fits) == [1, 4, 8] and second(4) is first(4)
    assert second(6).batch_size == 6 and fits[-1] == 6 and first(6) is second(6) and len(fits) == 4
    CostsByBatch(synthetic_profile(batch_sizes=(1, 4, 8), scales=(1.0, 2.0, 4.0)))
    assert len(fits) == 7
    for _ in range(cost._FITS_KEPT + 2):  # the memo keeps a bounded number of profiles
        CostsByBatch(synthetic_profile(batch_sizes=(1,), scales=(1.0,)))
    assert len(cost._FITS) <= cost._FITS_KEPT
