"""SMART's cost model: the fit, the batch-size rule, validated JSON, and profiling a tiny model."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import specdec
from conftest import make_model, perturbed
from specdec.cost import CostModel, check_compatible
from specdec.ops import smart_cost
from specdec.profiling import Profile, device_name

SIZES = (1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256)
TRUE = {"lam": 2e-5, "gamma": 4e-3, "delta": 0.05, "rho": 0.8}


def synthetic_profile(noise: float = 0.0, seed: int = 0, batch_sizes=(1,), scales=(1.0,), sizes=SIZES,
                      **names) -> Profile:
    """Times of the paper's form with known coefficients, times (1 + noise * N(0, 1)); scales per batch size."""
    rng = np.random.default_rng(seed)
    n = np.array(sizes, dtype=np.float64)
    verify, draft = [], []
    for s in scales:
        verify.append(tuple(s * TRUE["gamma"] * np.expm1(TRUE["delta"] * n ** TRUE["rho"])
                            * (1 + noise * rng.standard_normal(len(n)))))
        draft.append(tuple(TRUE["lam"] * n * (1 + noise * rng.standard_normal(len(n)))))
    return Profile(device=names.get("device", device_name(torch.device("cpu"))), dtype="float32", target=names.get("target", "t"),
                   draft=names.get("draft", "d"), context_len=512, batch_sizes=tuple(batch_sizes), sizes=tuple(sizes),
                   repeats=5, verify_seconds=tuple(verify), draft_seconds=tuple(draft))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_known_coefficients_from_noisy_points(seed):
    model = CostModel.fit(synthetic_profile(noise=0.02, seed=seed), 1)
    c0, lam, gamma, delta, rho = model.fits["paper"]
    assert c0 == 0.0
    for name, got in (("lam", lam), ("gamma", gamma), ("delta", delta), ("rho", rho)):
        assert got == pytest.approx(TRUE[name], rel=0.10), name
    assert set(model.errors) == {"paper", "intercept"} and all(0 < e < 0.05 for e in model.errors.values())
    assert model.form == min(model.errors, key=model.errors.get)  # the lower error wins


def test_free_intercept_is_kept_when_the_times_have_a_floor():
    prof = synthetic_profile()
    floored = Profile(**{**prof.__dict__, "verify_seconds": (tuple(v + 8e-3 for v in prof.verify_seconds[0]),)})
    model = CostModel.fit(floored, 1)
    assert model.form == "intercept" and model.errors["intercept"] < 0.5 * model.errors["paper"]
    assert model.c0 == pytest.approx(8e-3, rel=0.1)
    assert model.c_target == pytest.approx(floored.verify_seconds[0][0])


def test_predict_derivative_and_k2_cost_vector_agree():
    model = CostModel.fit(synthetic_profile(), 1)
    n = np.array([1.0, 7.0, 40.0, 200.0])
    value, slope = smart_cost(model.as_tensor("cpu"), torch.tensor(n, dtype=torch.float32))
    assert np.allclose(value.numpy(), model.predict(n), rtol=1e-4)
    assert np.allclose(slope.numpy(), model.derivative(n), rtol=1e-4)
    h = 1e-3
    assert model.derivative(40.0) == pytest.approx((model.predict(40 + h) - model.predict(40 - h)) / (2 * h), rel=1e-4)
    assert model.speedup(3.0, 1) == pytest.approx(3.0 * model.c_target / model.predict(1.0))
    assert model.as_tensor().dtype == torch.float32 and model.as_tensor().shape == (5,)


def test_batch_size_rule_interpolates_between_and_clamps_outside():
    prof = synthetic_profile(batch_sizes=(1, 4, 8), scales=(1.0, 2.0, 4.0))
    at4 = CostModel.fit(prof, 4)
    assert at4.batch_rule == "profiled" and at4.verify_seconds == prof.verify_seconds[1]
    at6 = CostModel.fit(prof, 6)
    assert at6.batch_rule == "interpolated between 4 and 8"
    assert np.allclose(at6.verify_seconds, 3.0 * np.array(prof.verify_seconds[0]))
    with pytest.warns(UserWarning, match="outside the profiled batch sizes"):
        at16 = CostModel.fit(prof, 16)
    assert at16.verify_seconds == prof.verify_seconds[2] and at16.batch_rule == "nearest profiled (8)"
    with pytest.raises(ValueError, match="batch_size: expected an int >= 1"):
        CostModel.fit(prof, 0)


def test_cost_model_json_round_trip_and_plot(tmp_path):
    model = CostModel.fit(synthetic_profile(noise=0.02), 1)
    model.save(tmp_path / "cost.json")
    assert CostModel.load(tmp_path / "cost.json") == model
    png = model.plot(tmp_path / "fit.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("gamma"), r"missing field\(s\) \['gamma'\]"),
    (lambda d: d.update(delta=float("nan")), "delta must be a finite number"),
    (lambda d: d.update(form="cubic"), "form 'cubic' is not one of"),
    (lambda d: d.update(verify_seconds=d["verify_seconds"][:-1]), "verify_seconds: expected a list of 16"),
    (lambda d: d.update(format="specdec-profile"), "is not a specdec-cost-model file"),
])
def test_corrupt_cost_model_json_is_a_value_error(tmp_path, edit, message):
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
    (lambda d: d.update(sizes=[4, 2, 1] + d["sizes"][3:]), "sizes must be at least 3 increasing"),
])
def test_corrupt_profile_json_is_a_value_error(tmp_path, edit, message):
    synthetic_profile().save(tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
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


def test_profile_a_tiny_pair(tmp_path):
    target = make_model("qwen2")
    draft = perturbed(target)
    prof = specdec.profile(target, draft, batch_sizes=(1, 2), context_len=24, sizes=(1, 3, 8), repeats=2,
                           progress=False)
    assert prof.batch_sizes == (1, 2) and prof.sizes == (1, 3, 8) and prof.context_len == 24
    for table in (prof.verify_seconds, prof.draft_seconds):
        assert len(table) == 2 and all(len(row) == 3 and all(t > 0 for t in row) for row in table)
    assert prof.device.startswith("cpu") and prof.dtype == "float32"
    assert prof.versions["torch"] == torch.__version__ and prof.versions["specdec"] == specdec.__version__
    prof.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json") == prof
    model = CostModel.fit(prof, 2)
    assert all(math.isfinite(c) for c in model.coefficients) and model.c_target == prof.verify_seconds[1][0]


@pytest.mark.parametrize("kwargs, message", [
    ({"sizes": (1, 2)}, "sizes: the fit needs at least 3"),
    ({"sizes": (4, 2, 1)}, "sizes: expected increasing positive ints"),
    ({"batch_sizes": (0,)}, "batch_sizes: expected increasing positive ints"),
    ({"context_len": 250}, r"context_len: expected an int >= 1 with context_len \+ 8 <= the model's 256"),
    ({"repeats": 0}, "repeats: expected an int >= 1"),
])
def test_profile_argument_errors(kwargs, message):
    target = make_model("llama")
    with pytest.raises(ValueError, match=message):
        specdec.profile(target, **{"sizes": (1, 2, 8), "context_len": 8, **kwargs})


def test_linear_costs_survive_k2s_float32_cost_vector():
    """CPU-like verify times, linear in n: the device's C(n) must keep the verify term (float32 exp - 1)."""
    n = np.array(SIZES, dtype=np.float64)
    prof = Profile(device="cpu", dtype="float32", target="t", draft="d", context_len=512, batch_sizes=(1,),
                   sizes=SIZES, repeats=5, verify_seconds=(tuple(4e-3 + 1.2e-4 * n),),
                   draft_seconds=(tuple(8e-4 + 1e-5 * n),))
    model = CostModel.fit(prof, 1)
    assert model.errors[model.form] < 0.02
    value, slope = smart_cost(model.as_tensor(), torch.tensor(n, dtype=torch.float32))
    assert np.allclose(value.numpy(), model.predict(n), rtol=1e-3)
    assert np.allclose(value.numpy(), 4.8e-3 + 1.3e-4 * n, rtol=0.05)
    assert np.allclose(slope.numpy(), model.derivative(n), rtol=1e-3)
