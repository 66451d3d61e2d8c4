"""Tensor-parallel decoding on every rank; launched under torchrun by tests/core/test_tensor_parallel.py.

argv: a directory holding the checkpoints and ``cases.json`` (written by the test), and this rank's
result file. Each rank loads every target with ``tp_plan="auto"``, decodes each case, and records its
sequences and the messages of the refusals; the test compares them with single-process `generate()`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM, DistributedConfig

import specdec


def supplier_for(method: str, draft: torch.nn.Module | None) -> specdec.Supplier:
    if method == "ar":
        return specdec.ARSupplier()
    if method == "prompt_lookup":
        return specdec.PromptLookupSupplier(max_ngram=3, num_pred=5, max_matches=3)
    return specdec.DraftSupplier(draft, mode="tree", depth=4, topk=3, total_tokens=10)


def refusal(build) -> str:
    try:
        build()
    except ValueError as error:
        return str(error)
    return "no error"


def main(root: Path, out: Path) -> None:
    spec = json.loads((root / "cases.json").read_text())
    models: dict[tuple[str, bool], torch.nn.Module] = {}

    def load(name: str, tp: bool) -> torch.nn.Module:
        if (name, tp) not in models:
            kwargs = {"distributed_config": DistributedConfig(tp_plan="auto")} if tp else {}
            models[name, tp] = AutoModelForCausalLM.from_pretrained(root / name, dtype=torch.float32, **kwargs).eval()
        return models[name, tp]

    sequences = {}
    with torch.no_grad():
        for case in spec["cases"]:
            target = load(case["target"], True)
            draft = load(case["draft"], case["draft_tp"]) if case["draft"] else None
            filter = specdec.FixedThresholdFilter(draft, 0.05) if case["filter"] else None
            gen = specdec.SpeculativeGenerator(target, supplier_for(case["method"], draft), filter)
            ids, mask = torch.tensor(case["input_ids"]), torch.tensor(case["attention_mask"])
            sampling = {"temperature": 1.0, "generator": torch.Generator().manual_seed(7)} if case["sampled"] else {}
            result = gen.generate(ids, attention_mask=mask, max_new_tokens=case["max_new_tokens"], eos_token_id=[],
                                  pad_token_id=0, **sampling)
            sequences[case["name"]] = result.sequences.tolist()
    plans = spec["plans"]
    refusals = {
        "kv_heads": refusal(lambda: specdec.TreeVerifier(load("indivisible", True))),
        "lm_head": refusal(lambda: specdec.TreeVerifier(AutoModelForCausalLM.from_pretrained(
            root / "llama-gqa", dtype=torch.float32, distributed_config=DistributedConfig(tp_plan=plans["lm_head"])))),
        "attention": refusal(lambda: specdec.TreeVerifier(AutoModelForCausalLM.from_pretrained(
            root / "llama-gqa", dtype=torch.float32, distributed_config=DistributedConfig(tp_plan=plans["attention"])))),
        "fsdp": refusal(lambda: specdec.TreeVerifier(AutoModelForCausalLM.from_pretrained(
            root / "llama-gqa", dtype=torch.float32, distributed_config=DistributedConfig(fsdp_size=2)))),
    }
    out.write_text(json.dumps({"rank": dist.get_rank(), "world_size": dist.get_world_size(),
                               "sequences": sequences, "refusals": refusals}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]).with_suffix(f".rank{os.environ['RANK']}.json"))
