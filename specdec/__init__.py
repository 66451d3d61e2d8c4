"""specdec: tree-based speculative decoding for Hugging Face causal LMs."""

from . import ops
from .cache import TreeCache
from .calibration import Calibration, calibrate
from .cost import CostModel
from .datastore import Datastore
from .eagle import EagleHead
from .gate import CostGate
from .generate import FilterStats, GenerateOutput, SpeculativeGenerator, Stats, TreeFilter
from .profiling import Profile, profile
from .suppliers import (ARSupplier, DraftSupplier, EagleSupplier, PromptLookupSupplier, RetrievalSupplier, SmartSupplier,
                        Supplier)
from .tree import TreeBatch
from .valuspec import BranchScorer, FixedThresholdFilter, ValuSpecFilter
from .verify import Acceptance, TreeVerifier

__version__ = "0.1.0"

__all__ = [
    "ops",
    "TreeBatch",
    "TreeCache",
    "TreeVerifier",
    "Acceptance",
    "SpeculativeGenerator",
    "GenerateOutput",
    "Stats",
    "Supplier",
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
