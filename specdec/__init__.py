"""specdec: tree-based speculative decoding for Hugging Face causal LMs."""

from . import ops
from .cache import TreeCache
from .calibration import Calibration, calibrate
from .cost import CostModel
from .datastore import Datastore
from .eagle import EagleHead
from .gate import CostGate
from .generate import FilterStats, GenerateOutput, SpeculativeGenerator, Stats
from .profiling import Profile, profile
from .records import __version__
from .sampling import Sampling
from .stages import Supplier, TreeFilter
from .state import DecodeState
from .suppliers import ARSupplier, DraftSupplier, EagleSupplier, PromptLookupSupplier, RetrievalSupplier, SmartSupplier
from .tree import TreeBatch
from .valuspec import BranchScorer, FixedThresholdFilter, ValuSpecFilter
from .verify import Acceptance, TreeVerifier

__all__ = [
    "__version__",
    "ops",
    "TreeBatch",
    "TreeCache",
    "TreeVerifier",
    "Acceptance",
    "SpeculativeGenerator",
    "GenerateOutput",
    "Stats",
    "Supplier",
    "DecodeState",
    "Sampling",
    "ARSupplier",
    "DraftSupplier",
    "EagleHead",
    "EagleSupplier",
    "PromptLookupSupplier",
    "RetrievalSupplier",
    "Datastore",
    "SmartSupplier",
    "profile",
    "Profile",
    "CostModel",
    "TreeFilter",
    "FilterStats",
    "BranchScorer",
    "ValuSpecFilter",
    "FixedThresholdFilter",
    "CostGate",
    "Calibration",
    "calibrate",
]
