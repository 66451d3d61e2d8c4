"""SMART's cost model: device profiling (`profile` -> `Profile`) and the fitted step cost (`CostModel`).

SMART grows a tree only while the next node raises the predicted speedup
``R(T) = c_T * L(T) / C(|T|)``, so it needs the step cost C(n) of a tree of n nodes on this device, at the
running batch size. `profile` times real tree forwards; `CostModel.fit` fits (DESIGN 5)::

    C(n) = c0 + lambda * n + gamma * (exp(delta * n^rho) - 1)      C_draft = lambda n, C_verify the rest

- form "paper": c0 = 0 (the paper's beta = eta = 0), rho free;
- form "intercept": c0 = beta + eta free (draft fit beta + lambda n, verify fit eta + gamma(...)), rho >= 1
  (the fixed cost sits in c0, the growth term stays convex: see RHO_MIN_INTERCEPT).

The form with the lower error is kept and both errors are recorded. Errors are RMS relative errors of C(n)
over the profiled sizes (times span two decades, so absolute residuals would only see the largest trees).

lambda: fitted to the draft's forward time over n nodes, the cost of drafting one layer n wide (the
paper's C_draft = lambda |T|). A profile without a draft gives lambda = 0. c_T: the measured target time
of a one-node tree (a plain decoding step) at the same batch size.

Batch-size rule (`fit(profile, batch_size)`): a profiled batch size uses its own points; a batch size
between two profiled ones uses the times interpolated linearly in the batch size, size by size; outside
the profiled range the nearest profiled size is used, with a warning.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel

from .checks import as_int, is_int
from .profiling import Profile, finite_list, read_json, require_fields, device_name, model_name

__all__ = ["CostModel", "FORMS", "check_compatible", "plot_fits"]

FORMS = ("paper", "intercept")
# The intercept form carries the fixed cost in c0, so its growth term is kept convex (rho >= 1): the marginal
# cost of a node should not fall as the tree grows, and with rho < 1 n^rho is steepest at n = 1, which
# overstates the cost of small trees (the demo pair on this CPU, batch 1: dC(1) fitted 0.21 ms per node
# with rho 0.14, 0.12 ms with rho >= 1; the measured slope over 1..8 nodes is ~0.13 ms).
RHO_MIN_INTERCEPT = 1.0
# K2 evaluates gamma * (exp(delta n^rho) - 1) in float32; with delta n^rho >= 1e-3 (n >= 1) the difference
# keeps ~4 significant digits. Smaller delta (a nearly linear curve, as on a CPU) lost the whole verify
# term on the device (exp(1e-12 n) - 1 == 0 in float32) while the float64 fit looked right.
DELTA_MIN = 1e-3


# ---------------------------------------------------------------------------------------------- fitting
def _verify_curve(n: np.ndarray, eta: float, slope: float, delta: float, rho: float) -> np.ndarray:
    """eta + gamma (exp(delta n^rho) - 1) with gamma = slope / delta: as delta -> 0 the curve tends to
    eta + slope n^rho instead of sending gamma to infinity (CPU costs are nearly linear in n, a limit the
    gamma parametrisation reaches only after thousands of evaluations). The exponent is clipped so that
    curve_fit's trial points far out never overflow."""
    return eta + slope * np.expm1(np.minimum(delta * np.power(n, rho), 600.0)) / delta


def _fit_verify(n: np.ndarray, t: np.ndarray, intercept: bool,
                start: tuple[float, float, float, float] | None = None) -> tuple[float, float, float, float]:
    """(eta, gamma, delta, rho) minimising the relative error of the verify curve; eta = 0 without intercept.

    Fitted as (eta, slope = gamma delta, delta, rho), see `_verify_curve`.

    Times are scaled to t(smallest size) = 1 and several starts are tried: the exponential form has
    shallow valleys (gamma and delta trade off while delta n^rho is small). `start`: one more starting
    point (eta, gamma, delta, rho) in seconds, so the intercept form can begin from the paper form's optimum.
    """
    from scipy.optimize import curve_fit

    scale = float(t[0])
    y = t / scale
    if intercept:
        f, lo, hi = _verify_curve, [0.0, 1e-12, DELTA_MIN, RHO_MIN_INTERCEPT], [np.inf, np.inf, 100.0, 3.0]
    else:
        f = lambda x, g, d, r: _verify_curve(x, 0.0, g, d, r)  # noqa: E731
        lo, hi = [1e-12, DELTA_MIN, 0.01], [np.inf, 100.0, 3.0]
    starts = []
    for rho0 in ((1.0, 2.0) if intercept else (0.5, 1.0)):
        for reach in (0.5, 3.0):  # delta * max(n)^rho at the start: nearly linear, strongly convex
            delta0 = reach / float(n.max()) ** rho0
            eta0 = 0.9 * float(y.min()) if intercept else 0.0
            starts.append([eta0, max(float(y.max()) - eta0, 1e-3) / math.expm1(reach) * delta0, delta0, rho0])
    if start is not None:
        starts.append([start[0] / scale, start[1] / scale * start[2], start[2], max(start[3], lo[-1])])
    # Flat, noisy or non-monotonic times (tiny models on a loaded CPU) leave the curve undetermined and a
    # start can run out of evaluations: it is skipped. A flat curve (the mean) competes as one more fit.
    flat = [float(np.mean(y)), 1e-12, DELTA_MIN, 1.0] if intercept else [float(np.mean(y)) / (math.e - 1), 1.0, 0.01]
    rel_err = lambda p: float(np.sqrt(np.mean(((f(n, *p) - y) / y) ** 2)))  # noqa: E731
    best, best_err = flat, rel_err(flat)
    for p0 in starts:
        p0 = np.clip(p0 if intercept else p0[1:], lo, hi)
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p, _ = curve_fit(f, n, y, p0=p0, sigma=y, bounds=(lo, hi), maxfev=500)
        except (RuntimeError, ValueError):
            continue
        err = rel_err(p)
        if err < best_err:
            best, best_err = p, err
    eta, slope, delta, rho = (best if intercept else [0.0, *best])
    return eta * scale, slope / delta * scale, float(delta), float(rho)


def _fit_draft(n: np.ndarray, t: np.ndarray | None, intercept: bool) -> tuple[float, float]:
    """(beta, lambda) of the draft line beta + lambda n by relative least squares; beta = 0 without intercept."""
    if t is None:
        return 0.0, 0.0
    w = 1.0 / t  # relative residuals: (beta + lambda n - t) / t
    if not intercept:
        return 0.0, float(np.sum(w * w * n * t) / np.sum(w * w * n * n))
    a = np.stack([w, w * n], 1)
    (beta, lam), *_ = np.linalg.lstsq(a, w * t, rcond=None)
    if beta < 0:  # a negative fixed cost is not physical: fall back to the line through the origin
        return _fit_draft(n, t, False)
    return float(beta), float(max(lam, 0.0))


def _batch_points(prof: Profile, batch_size: int) -> tuple[np.ndarray, np.ndarray | None, str]:
    """Verify and draft times at `batch_size` by the batch-size rule (see the module docstring)."""
    bs = list(prof.batch_sizes)
    v = np.array(prof.verify_seconds)
    d = None if prof.draft_seconds is None else np.array(prof.draft_seconds)
    if batch_size in bs:
        i = bs.index(batch_size)
        return v[i], None if d is None else d[i], "profiled"
    if batch_size < bs[0] or batch_size > bs[-1]:
        i = 0 if batch_size < bs[0] else len(bs) - 1
        warnings.warn(f"batch_size: {batch_size} is outside the profiled batch sizes {bs}; using the cost of "
                      f"batch {bs[i]} (profile this batch size for an accurate model)", stacklevel=3)
        return v[i], None if d is None else d[i], f"nearest profiled ({bs[i]})"
    hi = next(i for i, b in enumerate(bs) if b > batch_size)
    w = (batch_size - bs[hi - 1]) / (bs[hi] - bs[hi - 1])
    mix = lambda a: (1 - w) * a[hi - 1] + w * a[hi]  # noqa: E731
    return mix(v), None if d is None else mix(d), f"interpolated between {bs[hi - 1]} and {bs[hi]}"


# ---------------------------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class CostModel:
    """The fitted step cost C(n) of a tree of n nodes at one batch size (see the module docstring).

    c0, lam, gamma, delta, rho: the chosen form's coefficients (seconds); form: "paper" or "intercept".
    fits / errors: both forms' coefficients (c0, lambda, gamma, delta, rho) and RMS relative errors.
    c_target: the target's one-token step time c_T. sizes, verify_seconds, draft_seconds: the points fitted.
    """

    c0: float
    lam: float
    gamma: float
    delta: float
    rho: float
    form: str
    c_target: float
    batch_size: int
    context_len: int
    batch_rule: str
    device: str
    dtype: str
    target: str
    draft: str | None
    sizes: tuple[int, ...]
    verify_seconds: tuple[float, ...]
    draft_seconds: tuple[float, ...] | None
    fits: dict[str, list[float]]
    errors: dict[str, float]

    FORMAT = "specdec-cost-model"

    @classmethod
    def fit(cls, profile: Profile, batch_size: int) -> "CostModel":
        """Fit both forms to `profile` at `batch_size` (the batch-size rule picks the points) and keep the better."""
        batch_size = as_int(batch_size, "batch_size", 1)
        verify, draft, rule = _batch_points(profile, batch_size)
        n = np.array(profile.sizes, dtype=np.float64)
        total = verify + (0.0 if draft is None else draft)
        fits, errors = {}, {}
        paper = None
        for form in FORMS:  # paper first: its optimum is one of the intercept form's starting points
            intercept = form == "intercept"
            eta, gamma, delta, rho = paper = _fit_verify(n, verify, intercept, start=paper)
            beta, lam = _fit_draft(n, draft, intercept)
            fits[form] = [float(x) for x in (beta + eta, lam, gamma, delta, rho)]
            pred = _cost(fits[form], n)
            errors[form] = float(np.sqrt(np.mean(((pred - total) / total) ** 2)))
        form = "intercept" if errors["intercept"] < errors["paper"] else "paper"
        c0, lam, gamma, delta, rho = fits[form]
        return cls(c0, lam, gamma, delta, rho, form, float(verify[0]) if profile.sizes[0] == 1 else
                   float(np.interp(1.0, n, verify)), batch_size, profile.context_len, rule, profile.device,
                   profile.dtype, profile.target, profile.draft, profile.sizes, tuple(map(float, verify)),
                   None if draft is None else tuple(map(float, draft)), fits, errors)

    @property
    def coefficients(self) -> list[float]:
        """(c0, lambda, gamma, delta, rho), the order of `specdec.ops.smart_expand`'s cost vector."""
        return [self.c0, self.lam, self.gamma, self.delta, self.rho]

    def predict(self, n: float | np.ndarray) -> float | np.ndarray:
        """C(n) in seconds: the step time of a tree of n nodes (root included), drafting and verification."""
        out = _cost(self.coefficients, np.asarray(n, dtype=np.float64))
        return float(out) if np.ndim(out) == 0 else out

    def derivative(self, n: float | np.ndarray) -> float | np.ndarray:
        """dC/dn at n, seconds per node."""
        n = np.asarray(n, dtype=np.float64)
        c0, lam, gamma, delta, rho = self.coefficients
        out = lam + gamma * delta * rho * np.power(n, rho - 1.0) * np.exp(delta * np.power(n, rho))
        return float(out) if np.ndim(out) == 0 else out

    def speedup(self, expected_len: float | np.ndarray, n: float | np.ndarray) -> float | np.ndarray:
        """Predicted speedup over plain decoding, c_T * L / C(n), of a tree of n nodes accepting L tokens."""
        out = self.c_target * np.asarray(expected_len, dtype=np.float64) / self.predict(n)
        return float(out) if np.ndim(out) == 0 else out

    def as_tensor(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """K2's cost vector: float32 [5] (c0, lambda, gamma, delta, rho) on `device`."""
        return torch.tensor(self.coefficients, dtype=torch.float32, device=device)

    def scaled_verify(self, factor: float) -> "CostModel":
        """The same model with the verification part (c0 and gamma) times `factor` (online refit)."""
        if not math.isfinite(factor) or factor <= 0:
            raise ValueError(f"factor: expected a finite number > 0, got {factor!r}")
        return replace(self, c0=self.c0 * factor, gamma=self.gamma * factor, c_target=self.c_target * factor,
                       batch_rule=f"{self.batch_rule}, verify rescaled x{factor:.3g} online")

    def save(self, path: str | Path) -> None:
        from .records import atomic_write_text

        atomic_write_text(path, json.dumps({"format": self.FORMAT, "version": 1, **asdict(self)}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "CostModel":
        """Read and validate: a missing field, NaN/inf or an unknown form raise ValueError naming it."""
        doc = read_json(path, "cost model", cls.FORMAT)
        what = f"cost model {path}"
        names = [f.name for f in fields(cls)]
        require_fields(doc, tuple(names), what)
        for name in ("c0", "lam", "gamma", "delta", "rho", "c_target"):
            v = doc[name]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{what}: {name} must be a finite number >= 0, got {v!r}")
        if doc["form"] not in FORMS:
            raise ValueError(f"{what}: form {doc['form']!r} is not one of {FORMS}")
        for name in ("batch_size", "context_len"):
            if not is_int(doc[name]) or doc[name] < 1:
                raise ValueError(f"{what}: {name} must be a positive int, got {doc[name]!r:.80}")
        for name in ("batch_rule", "device", "dtype", "target"):
            if not isinstance(doc[name], str):
                raise ValueError(f"{what}: {name} must be a string, got {doc[name]!r:.80}")
        if doc["draft"] is not None and not isinstance(doc["draft"], str):
            raise ValueError(f"{what}: draft must be a string or null, got {doc['draft']!r:.80}")
        if not isinstance(doc["fits"], dict) or not isinstance(doc["errors"], dict):
            raise ValueError(f"{what}: fits and errors must be objects")
        sizes = doc["sizes"]
        if not isinstance(sizes, list) or len(sizes) < 3:
            raise ValueError(f"{what}: sizes must list at least 3 tree sizes")
        verify = finite_list(doc["verify_seconds"], f"{what}: verify_seconds", len(sizes))
        draft = None if doc["draft_seconds"] is None else finite_list(doc["draft_seconds"], f"{what}: draft_seconds",
                                                                       len(sizes))
        kw = {name: doc[name] for name in names}
        kw.update(sizes=tuple(int(s) for s in sizes), verify_seconds=tuple(verify),
                  draft_seconds=None if draft is None else tuple(draft))
        return cls(**kw)

    def plot(self, path: str | Path) -> Path:
        """Measured step times (verify + draft) and both fitted forms against tree size, as a PNG."""
        return plot_fits([self], path)


def plot_fits(models: list[CostModel], path: str | Path) -> Path:
    """One panel per cost model (e.g. per batch size): measured points and both fitted forms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False)
    for ax, m in zip(axes[0], models):
        n = np.array(m.sizes, dtype=np.float64)
        total = np.array(m.verify_seconds) + (0.0 if m.draft_seconds is None else np.array(m.draft_seconds))
        grid = np.geomspace(n.min(), n.max(), 200)
        ax.plot(n, total * 1e3, "ko", label="measured (verify + draft)")
        for form in FORMS:
            chosen = form == m.form
            ax.plot(grid, _cost(m.fits[form], grid) * 1e3, "-" if chosen else "--",
                    label=f"{form} fit (err {m.errors[form]:.1%}){' *' if chosen else ''}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tree size |T| (nodes)")
        ax.set_ylabel("step time (ms)")
        ax.set_title(f"batch {m.batch_size}, context {m.context_len}\n{m.device}", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    from .records import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return Path(path)


def check_compatible(record: "CostModel | Profile", target: PreTrainedModel,
                     draft: PreTrainedModel | None = None) -> None:
    """ValueError if a cost model's or profile's named checkpoints differ from `target` / `draft`; a warning
    when it was measured on another device or dtype (the user may mean it). Models built from a config
    carry no name and are not compared."""
    what = "cost_model" if isinstance(record, CostModel) else "profile"
    for role, model, profiled in (("target", target, record.target), ("draft", draft, record.draft)):
        name = model_name(model)
        if name and profiled and name != profiled:
            raise ValueError(f"{what}: profiled with {role} {profiled!r}, used with {name!r}; profile this pair "
                             "(specdec profile)")
    here, dtype = device_name(target.device), str(target.dtype).removeprefix("torch.")
    if (here, dtype) != (record.device, record.dtype):
        warnings.warn(f"{what}: profiled on {record.device} in {record.dtype}, running on {here} in {dtype}; "
                      "its costs may not hold here", stacklevel=3)


def _cost(coefficients: list[float], n: np.ndarray) -> np.ndarray:
    """C(n) for (c0, lambda, gamma, delta, rho), in float64 (the device-side twin is ops.smart_cost)."""
    c0, lam, gamma, delta, rho = coefficients
    return c0 + lam * n + gamma * np.expm1(np.minimum(delta * np.power(n, rho), 600.0))
