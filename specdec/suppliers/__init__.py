"""Tree suppliers: where candidate tokens come from."""

from .base import ARSupplier, Supplier
from .draft import DraftSupplier
from .eagle import EagleSupplier
from .prompt_lookup import PromptLookupSupplier
from .retrieval import RetrievalSupplier
from .smart import SmartSupplier

__all__ = ["Supplier", "ARSupplier", "DraftSupplier", "EagleSupplier", "PromptLookupSupplier", "RetrievalSupplier", "SmartSupplier"]
