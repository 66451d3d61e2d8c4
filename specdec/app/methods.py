"""The named methods of `specdec generate --method`, `specdec bench --methods` and `specdec demo`: one
registry, in the order the CLI lists them and the demo prints its rows.

Each method says what it needs besides the target (`Method.needs`: fields of `Inputs`, named as
`harness.make_supplier`'s parameters: a draft model, an EAGLE head, a retrieval datastore, a cost
profile) and builds its supplier from them. ValuSpec is not a method: it filters any method's trees
(`specdec.valuspec`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from transformers import PreTrainedModel

from ..cost import CostModel
from ..datastore import Datastore
from ..eagle import EagleHead
from ..profiling import Profile
from ..suppliers import (ARSupplier, DraftSupplier, EagleSupplier, PromptLookupSupplier, RetrievalSupplier, SmartSupplier,
                         Supplier)

__all__ = ["DRAFT_METHODS", "EAGLE_METHODS", "EAGLE_SMART", "INPUT_DESCRIPTIONS", "METHODS", "PLANNED_METHODS",
           "REGISTRY", "RETRIEVAL_METHODS", "Inputs", "Method", "names"]


@dataclass(frozen=True)
class Inputs:
    """What a method's supplier is built from (`harness.make_supplier`'s arguments)."""

    draft: PreTrainedModel | None = None
    eagle: EagleHead | None = None
    datastore: Datastore | None = None
    cost: Profile | CostModel | None = None  # SMART's cost profile (eagle-smart: taken with the head)
    depth: int = 5  # static trees and chains
    topk: int = 4
    total_tokens: int = 32
    budget: int = 64  # retrieval's tree size cap
    smart: dict | None = None  # SmartSupplier options ("alpha", "benefit" alone for retrieval and prompt lookup)
    eagle_shape: tuple[int, int, int] | None = None  # (depth, topk, total_tokens) of EAGLE trees; None: the above


# What each input is, in a method's error when it is missing ("draft: method 'chain' needs a draft model").
INPUT_DESCRIPTIONS = {"draft": "a draft model", "eagle": "an EAGLE head trained for the target",
                      "datastore": "a datastore built with the target's tokenizer (specdec datastore build)",
                      "cost": "a cost profile"}


@dataclass(frozen=True)
class Method:
    """A named method: what it needs (`Inputs` fields, checked in this order) and how its supplier is built.

    profiled: the cost profile's models, in the error when `cost` is missing ("this pair", "the target").
    """

    name: str
    summary: str
    needs: tuple[str, ...]
    build: Callable[[Inputs], Supplier]
    profiled: str = ""

    def missing(self, inputs: Inputs) -> ValueError | None:
        """The error naming the first input this method needs and `inputs` lacks (None: all there)."""
        for need in self.needs:
            if getattr(inputs, need) is None:
                what = INPUT_DESCRIPTIONS[need] + (f" of {self.profiled}" if need == "cost" else "")
                return ValueError(f"{need}: method {self.name!r} needs {what}")
        return None


def _smart(drafter: PreTrainedModel | EagleHead, cost: Profile | CostModel, smart: dict | None) -> SmartSupplier:
    """SmartSupplier from a bench variant's options; fit_batch fits a Profile's cost model at that batch size."""
    smart = dict(smart or {})
    if "fit_batch" in smart:
        cost = CostModel.fit(cost, smart.pop("fit_batch")) if isinstance(cost, Profile) else cost
    return SmartSupplier(drafter, cost, **smart)


def _rule(smart: dict | None) -> dict:
    """The options of SMART's sizing rule that retrieval and prompt lookup take."""
    return {k: v for k, v in (smart or {}).items() if k in ("alpha", "benefit")}


def _draft(mode: str) -> Callable[[Inputs], Supplier]:
    return lambda i: DraftSupplier(i.draft, mode=mode, depth=i.depth, topk=i.topk, total_tokens=i.total_tokens)


def _eagle(mode: str) -> Callable[[Inputs], Supplier]:
    def build(i: Inputs) -> Supplier:
        depth, topk, total = i.eagle_shape or (i.depth, i.topk, i.total_tokens)
        return EagleSupplier(i.eagle, mode=mode, depth=depth, topk=topk, total_tokens=total)
    return build


REGISTRY: dict[str, Method] = {m.name: m for m in (
    Method("ar", "plain autoregressive decoding, one token per target forward (the baseline)", (),
           lambda i: ARSupplier()),
    Method("chain", "the draft model's greedy chain of depth tokens", ("draft",), _draft("chain")),
    Method("tree", "a static tree from the draft model: topk children per node, total_tokens nodes",
           ("draft",), _draft("tree")),
    Method("prompt-lookup", "continuations of the last n-gram's earlier occurrences in the prompt and output",
           (), lambda i: PromptLookupSupplier()),
    Method("prompt-lookup-smart", "prompt lookup sized by SMART's rule over a cost profile of the target",
           ("cost",), lambda i: PromptLookupSupplier(cost_model=i.cost, **_rule(i.smart)),
           profiled="the target (specdec profile)"),
    Method("smart", "SMART's tree from the draft model, grown while the cost profile says a node pays",
           ("draft", "cost"), lambda i: _smart(i.draft, i.cost, i.smart), profiled="this pair (specdec profile)"),
    Method("retrieval", "continuations of suffix matches in a datastore, up to budget nodes", ("datastore",),
           lambda i: RetrievalSupplier(i.datastore, budget=i.budget)),
    Method("retrieval-smart", "retrieval trees sized by SMART's rule over a cost profile of the target",
           ("datastore", "cost"),
           lambda i: RetrievalSupplier(i.datastore, budget=i.budget, cost_model=i.cost, **_rule(i.smart)),
           profiled="the target (specdec profile)"),
    Method("eagle", "a static tree from an EAGLE head reading the target's hidden states", ("eagle",),
           _eagle("tree")),
    Method("eagle-chain", "the EAGLE head's greedy chain", ("eagle",), _eagle("chain")),
    Method("eagle-smart", "SMART over the EAGLE head, with a cost profile taken with the head", ("eagle", "cost"),
           lambda i: _smart(i.eagle, i.cost, i.smart), profiled="the target with its head"),
)}

METHODS = tuple(REGISTRY)


def names(*, needing: Iterable[str] = (), within: Iterable[str] | None = None) -> tuple[str, ...]:
    """Registry names in order: the methods needing every input of `needing` and none outside `within`
    (None: any). names(needing=["draft"]): chain, tree, smart; names(within=[]): ar, prompt-lookup."""
    needing = set(needing)
    allowed = None if within is None else set(within)
    return tuple(m.name for m in REGISTRY.values()
                 if needing <= set(m.needs) and (allowed is None or set(m.needs) <= allowed))


DRAFT_METHODS = names(needing=["draft"])  # chain, tree, smart
EAGLE_METHODS = names(needing=["eagle"])  # eagle, eagle-chain, eagle-smart
RETRIEVAL_METHODS = names(needing=["datastore"])  # retrieval, retrieval-smart
PLANNED_METHODS = tuple(m for m in names(needing=["cost"]) if m not in EAGLE_METHODS)  # a profile of the pair
(EAGLE_SMART,) = names(needing=["eagle", "cost"])  # SMART over the EAGLE head: a profile taken with the head
