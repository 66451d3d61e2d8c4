"""SMART's step cost model: what one step of speculative decoding costs on this device (`CostModel`).

A step that drafts pays, at batch size B (docs/smart.md)::

    C_step = loop + catch_up(m) + layers * draft_layer(w) + verify(n, context)

- ``verify(n, context)``: the target's forward over the tree at its padded width n, at the context length
  (fitted, see below, and scaled by ``1 + context_slope * (context - context_len)``);
- ``draft_layer(w)``: one draft forward of w nodes per row (a tree layer); ``catch_up(m)``: the draft's
  forward over its backlog of m committed tokens per row (`DraftRunner.backlog`, the widest row);
- ``loop``: the loop's own fixed work per step (acceptance, commits, bookkeeping), measured as the
  difference between c_T and the target's one-node forward;
- ``ar_step`` = c_T: a plain decoding step measured through `SpeculativeGenerator`, the unit of speedup.

A plain decoding step costs ``ar_step`` and runs no draft at all; a supplier that drafts nothing (retrieval,
prompt lookup) pays its own query instead of catch-up and layers (`specdec.planner` measures it online).

The verify curve keeps the paper's form and a free-intercept form, fitted to the measured tree forwards
of n >= 2 nodes (on a CPU a one-node forward takes a matrix-vector path that is much cheaper than any
tree, a jump no smooth curve holds; the one-node point is priced as measured)::

    V(n) = c0 + gamma * (exp(delta * n^rho) - 1)       "paper": c0 = 0, rho free; "intercept": c0 free, rho >= 1

The form with the lower RMS relative error is kept; when even that error exceeds `MAX_FIT_ERROR` the fit
is reported (a warning and ``notes``) and the measured points, interpolated, price verification instead.
Draft layer and catch-up are piecewise-linear through their measured points (non-decreasing).

Public API for other planners (issue-independent, stable): per batch size, ``CostModel.fit(profile, B)``,
then ``verify_seconds(width, context=None)``, ``draft_seconds(width)`` (a draft model's tree forward of n
nodes per row), ``catch_up_seconds(backlog)``, ``step_seconds(width, backlog=, layers=, layer_width=)``,
``ar_step`` and ``speedup(L, seconds)``. ``as_tensor(device, fixed)`` is K2's cost vector.

Batch-size rule (`fit(profile, batch_size)`): a profiled batch size uses its own points; a batch size
between two profiled ones uses the times interpolated linearly in the batch size, point by point; outside
the profiled range the nearest profiled size is used, with a warning.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
from transformers import PreTrainedModel

from .checks import as_int, is_int
from .profiling import FORMAT_HISTORY, FORMAT_VERSION, Profile
from .records import (atomic_path, atomic_write_text, check_version, device_name, model_name, read_json,
                      require_extra, require_fields)

__all__ = ["CostModel", "Curve", "VerifyFit", "FORMS", "MAX_FIT_ERROR", "check_compatible", "plot_fits"]

FORMS = ("paper", "intercept")
MAX_FIT_ERROR = 0.20
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
    """(c0, gamma, delta, rho) minimising the relative error of the verify curve; c0 = 0 without intercept.

    Fitted as (c0, slope = gamma delta, delta, rho), see `_verify_curve`. Times are scaled to t(smallest
    size) = 1 and several starts are tried: the exponential form has shallow valleys (gamma and delta trade
    off while delta n^rho is small). `start`: one more starting point (c0, gamma, delta, rho) in seconds,
    so the intercept form can begin from the paper form's optimum.
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


def _at_batch(rows: tuple | None, batch_sizes: list[int], batch_size: int) -> np.ndarray | None:
    """The row of a per-batch-size table at `batch_size` by the batch-size rule (module docstring)."""
    if rows is None:
        return None
    table = np.asarray(rows, dtype=np.float64)
    if batch_size in batch_sizes:
        return table[batch_sizes.index(batch_size)]
    if batch_size < batch_sizes[0] or batch_size > batch_sizes[-1]:
        return table[0 if batch_size < batch_sizes[0] else -1]
    hi = next(i for i, b in enumerate(batch_sizes) if b > batch_size)
    w = (batch_size - batch_sizes[hi - 1]) / (batch_sizes[hi] - batch_sizes[hi - 1])
    return (1 - w) * table[hi - 1] + w * table[hi]


def _batch_rule(batch_sizes: list[int], batch_size: int) -> str:
    if batch_size in batch_sizes:
        return "profiled"
    if batch_sizes[0] < batch_size < batch_sizes[-1]:
        hi = next(b for b in batch_sizes if b > batch_size)
        return f"interpolated between {max(b for b in batch_sizes if b < batch_size)} and {hi}"
    near = batch_sizes[0] if batch_size < batch_sizes[0] else batch_sizes[-1]
    warnings.warn(f"batch_size: {batch_size} is outside the profiled batch sizes {batch_sizes}; using the cost of "
                  f"batch {near} (profile this batch size for an accurate model)", stacklevel=4)
    return f"nearest profiled ({near})"


# ---------------------------------------------------------------------------------------------- the parts
@dataclass(frozen=True)
class Curve:
    """Seconds as a piecewise-linear function of a size (nodes, tokens) through measured points, made
    non-decreasing (a later point never reads cheaper); past the last point the last segment continues,
    below the first the first point holds. x increasing, at least two points."""

    x: tuple[float, ...]
    seconds: tuple[float, ...]

    @classmethod
    def through(cls, x, seconds) -> "Curve":
        return cls(tuple(float(v) for v in x), tuple(float(v) for v in np.maximum.accumulate(np.asarray(seconds))))

    def __call__(self, x: float | np.ndarray) -> float | np.ndarray:
        xs, ys = np.asarray(self.x), np.asarray(self.seconds)
        x = np.asarray(x, dtype=np.float64)
        tail = ys[-1] + (x - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        out = np.where(x > xs[-1], tail, np.interp(x, xs, ys))
        return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class VerifyFit:
    """The fitted target tree forward V(n) = c0 + gamma (exp(delta n^rho) - 1) of the chosen `form`;
    fits: both forms' (c0, gamma, delta, rho); errors: their RMS relative errors over the fitted points."""

    form: str
    c0: float
    gamma: float
    delta: float
    rho: float
    fits: dict[str, list[float]]
    errors: dict[str, float]

    def __call__(self, n: float | np.ndarray) -> float | np.ndarray:
        return _curve([self.c0, self.gamma, self.delta, self.rho], np.asarray(n, dtype=np.float64))

    def slope(self, n: float | np.ndarray) -> float | np.ndarray:
        n = np.asarray(n, dtype=np.float64)
        out = self.gamma * self.delta * self.rho * np.power(n, self.rho - 1.0) * np.exp(self.delta * np.power(n, self.rho))
        return float(out) if out.ndim == 0 else out

    @property
    def error(self) -> float:
        return self.errors[self.form]


def _curve(p: list[float], n: np.ndarray) -> float | np.ndarray:
    c0, gamma, delta, rho = p
    out = c0 + gamma * np.expm1(np.minimum(delta * np.power(n, rho), 600.0))
    return float(out) if np.ndim(out) == 0 else out


# ---------------------------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class CostModel:
    """What a step costs at one batch size (module docstring); seconds throughout.

    ar_step: c_T; loop: the loop's fixed work per step; verify: the fitted tree forward (n >= 2), used
    when ``use_fit``; verify_points: the measured tree forwards at context_len (n = 1 included);
    context_slope: relative change of a verify forward per context token; draft_layer, catch_up: the
    draft's parts (None without a draft); notes: what the fit or the profile reported.
    """

    batch_size: int
    context_len: int
    ar_step: float
    loop: float
    verify: VerifyFit
    verify_points: Curve
    use_fit: bool
    context_slope: float
    draft_layer: Curve | None
    catch_up: Curve | None
    batch_rule: str
    device: str
    dtype: str
    target: str
    draft: str | None
    notes: tuple[str, ...] = ()

    FORMAT = "specdec-cost-model"

    @classmethod
    def fit(cls, profile: Profile, batch_size: int) -> "CostModel":
        """The step cost at `batch_size` from a profile (batch-size rule in the module docstring)."""
        batch_size = as_int(batch_size, "batch_size", 1)
        bs = list(profile.batch_sizes)
        rule = _batch_rule(bs, batch_size)
        row = lambda table: _at_batch(table, bs, batch_size)  # noqa: E731
        verify, short = row(profile.verify_seconds), row(profile.context_seconds)
        sizes = np.array(profile.sizes, dtype=np.float64)
        tree = sizes >= 2 if (sizes >= 2).sum() >= 3 else np.ones_like(sizes, dtype=bool)
        fits, errors, start = {}, {}, None
        for form in FORMS:  # paper first: its optimum is one of the intercept form's starting points
            start = _fit_verify(sizes[tree], verify[tree], form == "intercept", start=start)
            fits[form] = [float(x) for x in start]
            errors[form] = float(np.sqrt(np.mean(((_curve(fits[form], sizes[tree]) - verify[tree]) / verify[tree]) ** 2)))
        form = min(FORMS, key=errors.get)
        fit = VerifyFit(form, *fits[form], fits=fits, errors=errors)
        notes = list(profile.notes)
        use_fit = fit.error <= MAX_FIT_ERROR
        if not use_fit:
            message = (f"cost model at batch {batch_size}: the best verify fit ({form}) misses the measured times by "
                       f"{fit.error:.0%} (RMS relative, limit {MAX_FIT_ERROR:.0%}); pricing verification from the "
                       "measured points instead (re-profile on a quiet machine)")
            warnings.warn(message, stacklevel=2)
            notes.append(message)
        points = Curve.through(sizes, verify)
        long_at = np.interp(np.array(profile.context_sizes, dtype=np.float64), sizes, verify)
        span = profile.context_len - profile.short_context
        slope = float(max(np.mean((long_at - short) / (long_at * span)), 0.0))
        ar_step = float(row(profile.ar_step_seconds))
        draft = row(profile.draft_seconds)
        catch = row(profile.catch_up_seconds)
        return cls(batch_size, profile.context_len, ar_step, max(ar_step - points(1.0), 0.0), fit, points, use_fit,
                   slope, None if draft is None else Curve.through(sizes, draft),
                   None if catch is None else Curve.through(profile.backlogs, catch), rule, profile.device,
                   profile.dtype, profile.target, profile.draft, tuple(notes))

    # ------------------------------------------------------------------ the parts
    def verify_seconds(self, width: float | np.ndarray, context: float | None = None) -> float | np.ndarray:
        """The target's forward over a tree padded to `width` nodes (root included), at `context` tokens
        (None: the profiled context length)."""
        n = np.asarray(width, dtype=np.float64)
        tree = self.verify(np.maximum(n, 2.0)) if self.use_fit else self.verify_points(n)
        out = np.where(n <= 1.0, self.verify_points(1.0), tree) * self.context_factor(context)
        return float(out) if out.ndim == 0 else out

    def verify_slope(self, width: float | np.ndarray) -> float | np.ndarray:
        """d verify / d width (seconds per node) from the fitted curve."""
        return self.verify.slope(np.maximum(np.asarray(width, dtype=np.float64), 2.0))

    def draft_seconds(self, width: float | np.ndarray) -> float | np.ndarray:
        """One draft forward of `width` nodes per row (a tree layer); also the price of a draft-sized
        model's tree forward of n nodes (ValuSpec's scorer is the draft)."""
        return self._draft_part(self.draft_layer, width)

    def catch_up_seconds(self, backlog: float | np.ndarray) -> float | np.ndarray:
        """The draft's catch-up over a backlog of `backlog` tokens (the widest row's)."""
        return self._draft_part(self.catch_up, backlog)

    def step_seconds(self, width: float, *, backlog: float = 0, layers: float = 0, layer_width: float = 1,
                     context: float | None = None) -> float:
        """A whole step: loop, verification at `width`, and, when `backlog` > 0 (the draft ran), its catch-up
        and `layers` layer forwards of `layer_width` nodes. backlog 0 and width 1: c_T's parts."""
        total = self.loop + self.verify_seconds(width, context)
        if backlog > 0:
            total += self.catch_up_seconds(backlog) + layers * self.draft_seconds(layer_width)
        return float(total)

    def speedup(self, expected_len: float | np.ndarray, seconds: float | np.ndarray) -> float | np.ndarray:
        """Predicted speedup over plain decoding, c_T * L / C, of a step taking `seconds` and accepting L."""
        out = self.ar_step * np.asarray(expected_len, dtype=np.float64) / np.asarray(seconds, dtype=np.float64)
        return float(out) if np.ndim(out) == 0 else out

    # ------------------------------------------------------------------ K2 and the paper's notation
    @property
    def c_target(self) -> float:
        """c_T, the paper's name for `ar_step`."""
        return self.ar_step

    def coefficients(self, fixed: float = 0.0) -> list[float]:
        """K2's (c0, lambda, gamma, delta, rho) of C(n) = loop + fixed + V(n): the cost of a step that has
        already paid `fixed` seconds (catch-up, layers) as a function of its tree size. lambda = 0: a draft
        is priced per layer forward, not per node."""
        return [self.loop + fixed + self.verify.c0, 0.0, self.verify.gamma, self.verify.delta, self.verify.rho]

    def as_tensor(self, device: torch.device | str = "cpu", fixed: float = 0.0) -> torch.Tensor:
        """K2's cost vector: float32 [5] on `device` (`coefficients`)."""
        return torch.tensor(self.coefficients(fixed), dtype=torch.float32, device=device)

    def predict(self, n: float | np.ndarray) -> float | np.ndarray:
        """C(n): a step with a tree of n nodes that drafted nothing (loop + verification)."""
        out = self.loop + np.asarray(self.verify_seconds(n))
        return float(out) if out.ndim == 0 else out

    def derivative(self, n: float | np.ndarray) -> float | np.ndarray:
        """dC/dn at n, seconds per node (the fitted verify slope)."""
        return self.verify_slope(n)

    def context_factor(self, context: float | None) -> float:
        """Verification at `context` tokens over verification at the profiled context length."""
        if context is None:
            return 1.0
        return max(0.25, 1.0 + self.context_slope * (float(context) - self.context_len))

    def _draft_part(self, curve: Curve | None, x: float | np.ndarray) -> float | np.ndarray:
        if curve is None:
            raise ValueError("cost_model: profiled without a draft, so it cannot price drafting (profile the pair)")
        return curve(x)

    # ------------------------------------------------------------------ files and plots
    def save(self, path: str | Path) -> None:
        atomic_write_text(path, json.dumps({"format": self.FORMAT, "version": FORMAT_VERSION, **asdict(self)}, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "CostModel":
        """Read and validate: an older format, a missing field, NaN/inf or an unknown form raise ValueError."""
        doc = read_json(path, "cost model", cls.FORMAT)
        what = f"cost model {path}"
        check_version(doc, what, FORMAT_VERSION, "fit it again from a profile (CostModel.fit)", FORMAT_HISTORY)
        names = [f.name for f in fields(cls)]
        require_fields(doc, tuple(n for n in names if n != "notes"), what)
        for name in ("ar_step", "loop", "context_slope"):
            _number(doc[name], f"{what}: {name}")
        for name in ("batch_size", "context_len"):
            if not is_int(doc[name]) or doc[name] < 1:
                raise ValueError(f"{what}: {name} must be a positive int, got {doc[name]!r:.80}")
        for name in ("batch_rule", "device", "dtype", "target"):
            if not isinstance(doc[name], str):
                raise ValueError(f"{what}: {name} must be a string, got {doc[name]!r:.80}")
        if doc["draft"] is not None and not isinstance(doc["draft"], str):
            raise ValueError(f"{what}: draft must be a string or null, got {doc['draft']!r:.80}")
        if not isinstance(doc["use_fit"], bool):
            raise ValueError(f"{what}: use_fit must be true or false, got {doc['use_fit']!r:.80}")
        kw = {n: doc[n] for n in names if n in doc}
        kw["verify"] = _load_fit(doc["verify"], what)
        kw["verify_points"] = _load_curve(doc["verify_points"], f"{what}: verify_points")
        for name in ("draft_layer", "catch_up"):
            kw[name] = None if doc[name] is None else _load_curve(doc[name], f"{what}: {name}")
        kw["notes"] = tuple(doc.get("notes") or ())
        return cls(**kw)

    def plot(self, path: str | Path) -> Path:
        """The measured parts and the fitted verify forms, as a PNG."""
        return plot_fits([self], path)


def _number(v: object, name: str) -> float:
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{name}: must be a finite number >= 0, got {v!r}")
    return float(v)


def _load_curve(doc: object, what: str) -> Curve:
    if not isinstance(doc, dict) or not isinstance(doc.get("x"), list) or not isinstance(doc.get("seconds"), list):
        raise ValueError(f"{what}: expected {{'x': [...], 'seconds': [...]}}")
    x = [_number(v, f"{what}: x") for v in doc["x"]]
    y = [_number(v, f"{what}: seconds") for v in doc["seconds"]]
    if len(x) < 2 or len(x) != len(y) or x != sorted(set(x)):
        raise ValueError(f"{what}: needs at least 2 points with increasing x")
    return Curve(tuple(x), tuple(y))


def _load_fit(doc: object, what: str) -> VerifyFit:
    if not isinstance(doc, dict) or doc.get("form") not in FORMS:
        raise ValueError(f"{what}: verify.form must be one of {FORMS}")
    values = [_number(doc.get(k), f"{what}: verify.{k}") for k in ("c0", "gamma", "delta", "rho")]
    fits, errors = doc.get("fits"), doc.get("errors")
    if not isinstance(fits, dict) or not isinstance(errors, dict) or set(fits) != set(FORMS) or set(errors) != set(FORMS):
        raise ValueError(f"{what}: verify.fits and verify.errors must hold both forms {FORMS}")
    return VerifyFit(doc["form"], *values, fits={k: [float(x) for x in v] for k, v in fits.items()},
                     errors={k: _number(v, f"{what}: verify.errors") for k, v in errors.items()})


def plot_fits(models: list[CostModel], path: str | Path) -> Path:
    """Per cost model (e.g. per batch size) a column: top, the measured tree forwards, both fitted verify
    forms and c_T; bottom, the draft's layer forward and catch-up."""
    require_extra("matplotlib", "plot_fits").use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(models), figsize=(4.2 * len(models), 6.4), squeeze=False)
    for (top, bottom), m in zip(axes.T, models):
        n = np.array(m.verify_points.x)
        grid = np.geomspace(max(n.min(), 2.0), n.max(), 200)
        top.plot(n, np.array(m.verify_points.seconds) * 1e3, "ko", label="measured verify")
        for form in FORMS:
            chosen = form == m.verify.form
            top.plot(grid, np.array(_curve(m.verify.fits[form], grid)) * 1e3, "-" if chosen else "--",
                     label=f"{form} fit (err {m.verify.errors[form]:.1%}){' *' if chosen else ''}")
        top.axhline(m.ar_step * 1e3, color="gray", lw=0.8, label=f"AR step c_T {m.ar_step * 1e3:.2f} ms")
        top.set_xscale("log", base=2)
        top.set_xlabel("tree width (nodes)")
        top.set_ylabel("ms")
        top.set_title(f"batch {m.batch_size}, context {m.context_len}\n{m.device}", fontsize=8)
        top.legend(fontsize=6)
        for curve, label in ((m.draft_layer, "draft layer (width)"), (m.catch_up, "catch-up (backlog)")):
            if curve is not None:
                bottom.plot(curve.x, np.array(curve.seconds) * 1e3, "o-", label=label)
        bottom.set_xscale("log", base=2)
        bottom.set_xlabel("nodes / tokens per row")
        bottom.set_ylabel("ms")
        bottom.legend(fontsize=6)
    fig.tight_layout()
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
