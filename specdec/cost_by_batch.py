"""The step cost model of each batch size a consumer meets (`CostsByBatch`), fitted once per profile.

A `Profile` measures a few batch sizes; the planned suppliers and the ValuSpec gate each need a
`CostModel` at the batch size of the call in hand (`CostModel.fit`'s batch-size rule). A fit takes 150-170
ms on the 2-core CPU, so the profiled sizes are fitted when the consumer is built and the fits are shared
by every consumer of the same profile object.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

from .cost import CostModel
from .profiling import Profile

__all__ = ["CostsByBatch"]

_FITS: "OrderedDict[int, tuple[Profile, dict[int, CostModel]]]" = OrderedDict()  # id(profile) -> its fits
_FITS_KEPT = 8  # profiles whose fits are kept (each entry holds its profile, so its id stays its own)


def _fitted(profile: Profile, batch_size: int) -> CostModel:
    """`CostModel.fit(profile, batch_size)`, once per profile object and batch size in this process: a fit
    takes 150-170 ms on the 2-core CPU (nine least-squares starts), which a supplier built per benchmark
    cell or per call would otherwise pay inside its first call at each batch size."""
    entry = _FITS.get(id(profile))
    if entry is None or entry[0] is not profile:
        entry = _FITS[id(profile)] = (profile, {})
        while len(_FITS) > _FITS_KEPT:
            _FITS.popitem(last=False)
    _FITS.move_to_end(id(profile))
    fits = entry[1]
    if batch_size not in fits:
        fits[batch_size] = CostModel.fit(profile, batch_size)
    return fits[batch_size]


class CostsByBatch:
    """The cost model of each batch size from one source, made once per size: a `Profile` is fitted there
    (`CostModel.fit`'s batch-size rule; its profiled batch sizes when this is built, so that no `generate`
    call pays a fit for them, and the fits are shared by every consumer of the same profile object); a
    `CostModel` serves every size, with one warning per size it was not fitted at. Every consumer of a step
    cost (the planned suppliers, the ValuSpec gate) asks through one."""

    def __init__(self, source: CostModel | Profile):
        self.source = source
        self._models: dict[int, CostModel] = {}
        if isinstance(source, Profile):
            for b in source.batch_sizes:
                self(b)

    def __call__(self, batch_size: int) -> CostModel:
        model = self._models.get(batch_size)
        if model is None:
            src = self.source
            if isinstance(src, Profile):
                model = _fitted(src, batch_size)
            else:
                if src.batch_size != batch_size:
                    warnings.warn(f"cost_model: fitted at batch size {src.batch_size}, running at {batch_size}; pass a "
                                  "Profile so the cost follows the batch size", stacklevel=3)
                model = src
            self._models[batch_size] = model
        return model
