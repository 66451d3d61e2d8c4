"""Tensor-parallel targets (transformers' tp_plan="auto" under torchrun, gloo on this CPU): output identity
on every rank against single-process `generate()`, and the refusals of what the hook cannot serve."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import specdec
from specdec.app.cli import main
from tests.helpers import ROOT, VOCAB, make_model, perturbed, ragged_prompts

pytestmark = [pytest.mark.dist, pytest.mark.hf]

WORLD = 2
TARGETS = {  # name -> (arch, overrides): GQA and MHA, Llama and Qwen2; every head count divisible by WORLD
    "llama-gqa": ("llama", {}),
    "llama-mha": ("llama", {"num_key_value_heads": 4}),
    "qwen2-gqa": ("qwen2", {"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2}),
}
PLANS = {  # plans the hook cannot serve, loaded by the worker with tp_plan=<dict>
    "lm_head": {"model.layers.*.self_attn.q_proj": "colwise", "model.layers.*.self_attn.k_proj": "colwise",
                "model.layers.*.self_attn.v_proj": "colwise", "model.layers.*.self_attn.o_proj": "rowwise",
                "lm_head": "colwise"},
    "attention": {"model.layers.*.self_attn.q_proj": "colwise", "model.layers.*.self_attn.k_proj": "colwise",
                  "model.layers.*.self_attn.v_proj": "colwise", "model.layers.*.self_attn.o_proj": "colwise",
                  "lm_head": "colwise_gather_output"},
}


def _cases(root: Path) -> list[dict]:
    """Every target x (AR, prompt lookup, draft tree with a replicated draft) x (batch 1, ragged), plus
    a tensor-parallel draft and a tensor-parallel ValuSpec scorer; references from single-process generate."""
    prompts = {"batch1": ragged_prompts([9], seed=4), "ragged": ragged_prompts([6, 11], seed=5)}
    combos = [(t, m, False, False, False) for t in TARGETS for m in ("ar", "prompt_lookup", "tree")]
    combos += [("llama-gqa", "tree", True, False, False), ("llama-gqa", "tree", True, True, False)]
    combos += [("qwen2-gqa", m, False, False, True) for m in ("prompt_lookup", "tree")]  # temperature 1, seeded
    cases = []
    for target_name, method, draft_tp, filtered, sampled in combos:
        target = AutoModelForCausalLM.from_pretrained(root / target_name, dtype=torch.float32).eval()
        for batch, (ids, mask) in prompts.items():
            ref = target.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False, eos_token_id=[],
                                  pad_token_id=0)
            cases.append({"name": f"{target_name}-{method}{'-tpdraft' if draft_tp else ''}"
                                  f"{'-filtered' if filtered else ''}{'-sampled' if sampled else ''}-{batch}",
                          "sampled": sampled,
                          "target": target_name, "method": method, "draft": f"{target_name}-draft" if method == "tree" else None,
                          "draft_tp": draft_tp, "filter": filtered, "input_ids": ids.tolist(),
                          "attention_mask": mask.tolist(), "max_new_tokens": 12, "reference": ref.tolist()})
    return cases


def _free_port() -> int:
    """A free local port for the rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tp_results(tmp_path_factory) -> tuple[list[dict], list[dict]]:
    root = tmp_path_factory.mktemp("tp")
    with torch.no_grad():
        for name, (arch, overrides) in TARGETS.items():
            target = make_model(arch, **overrides)
            target.save_pretrained(root / name)
            perturbed(target, scale=0.2).save_pretrained(root / f"{name}-draft")
        make_model("qwen2", hidden_size=96, num_attention_heads=6, num_key_value_heads=3).save_pretrained(
            root / "indivisible")
        cases = _cases(root)
    (root / "cases.json").write_text(json.dumps({"cases": cases, "plans": PLANS}))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD}",
                          f"--master_port={_free_port()}", str(Path(__file__).with_name("tp_worker.py")), str(root),
                          str(root / "result")], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-8000:]
    ranks = [json.loads((root / f"result.rank{r}.json").read_text()) for r in range(WORLD)]
    return cases, ranks


def test_every_rank_decodes_like_single_process_generate(tp_results):
    cases, ranks = tp_results
    assert sorted(r["rank"] for r in ranks) == list(range(WORLD)) and {r["world_size"] for r in ranks} == {WORLD}
    for rank in ranks:
        assert sorted(rank["sequences"]) == sorted(c["name"] for c in cases)
        for case in cases:
            if not case["sampled"]:
                assert rank["sequences"][case["name"]] == case["reference"], (rank["rank"], case["name"])


def test_every_rank_samples_the_same_tokens(tp_results):
    """Sampling under tensor parallelism: identical logits and one seed per rank give identical draws."""
    cases, ranks = tp_results
    sampled = [c for c in cases if c["sampled"]]
    assert sampled
    for case in sampled:
        first = ranks[0]["sequences"][case["name"]]
        assert all(r["sequences"][case["name"]] == first for r in ranks[1:]), case["name"]
        prompt = len(case["input_ids"][0])
        assert [row[:prompt] for row in first] == case["input_ids"] and all(len(row) == prompt + 12 for row in first)
        assert all(0 <= t < VOCAB for row in first for t in row[prompt:])
    # the draws are not the greedy tokens everywhere (temperature 1 on these models is far from greedy)
    assert any(ranks[0]["sequences"][c["name"]] != c["reference"] for c in sampled)


@pytest.mark.parametrize("label, message", [
    ("kv_heads", r"target: a tensor-parallel world of 2 processes does not divide its 3 key/value heads"),
    ("lm_head", r"target: its tensor-parallel plan leaves the logits sharded \('lm_head': 'colwise'\)"),
    ("attention", r"target: .*shards attention .*'model.layers.\*.self_attn.o_proj': 'colwise'"),
    ("fsdp", r"target: FSDP-sharded \(2 shards\); specdec serves tensor parallelism only"),
])
def test_unsupported_tensor_parallel_layouts_are_refused(tp_results, label, message):
    for rank in tp_results[1]:
        with pytest.raises(ValueError, match=message):
            raise ValueError(rank["refusals"][label])


def test_a_model_split_over_devices_is_refused(tmp_path):
    make_model("llama").save_pretrained(tmp_path / "m")
    device_map = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk", "model.norm": "cpu",
                  "model.rotary_emb": "cpu", "lm_head": "cpu"}
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m", device_map=device_map, offload_folder=tmp_path / "off")
    with pytest.raises(ValueError, match=r"target: its weights are split over \['cpu', 'meta'\]"):
        specdec.TreeVerifier(model)
    with pytest.raises(ValueError, match=r"draft: its weights are split"):
        specdec.SpeculativeGenerator(make_model("llama"), specdec.DraftSupplier(model, mode="chain", depth=2))


def test_a_cache_of_the_wrong_head_count_is_refused_not_broadcast():
    model = make_model("llama")  # 2 key/value heads
    cache = specdec.TreeCache(2, 1, 1, 16, 32, dtype=torch.float32, device="cpu")  # sized for one
    cache.reserve(3)
    with pytest.raises(ValueError, match=r"key_states: \[1, 2, T, 16\] from layer 0, the cache holds \[1, 1, S, 16\]"):
        cache.update(torch.zeros(1, 2, 3, 16), torch.zeros(1, 2, 3, 16), 0)
    assert cache.tree_len == 0 and not cache.layers[0].keys.any()
    assert specdec.TreeCache.for_model(model, 1, 32).layers[0].keys.shape == (1, 2, 32, 16)


def test_cli_generate_tensor_parallel_prints_what_one_process_prints(capsys):
    args = ["generate", "--target", "demo-target", "--draft", "demo-draft", "--method", "tree", "--prompt",
            "def add(a, b):", "--prompt", "import os", "--batch-size", "2", "--max-new-tokens", "16", "--json"]
    assert main(args) == 0
    single = json.loads(capsys.readouterr().out)["results"]
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD}",
                          f"--master_port={_free_port()}", "-m", "specdec.app.cli", *args, "--tensor-parallel"],
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-8000:]
    assert json.loads(run.stdout)["results"] == single  # rank 0 alone prints


def test_cli_tensor_parallel_outside_torchrun_is_an_error(capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(["generate", "--target", "demo-target", "--method", "ar", "--prompt", "x", "--tensor-parallel"]) == 2
    assert "--tensor-parallel: needs several processes: launch with torchrun" in capsys.readouterr().err


def test_a_device_map_onto_one_device_is_served(tmp_path):
    make_model("llama").save_pretrained(tmp_path / "m")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m", device_map={"": "cpu"})
    ids, mask = ragged_prompts([7, 4], seed=2)
    out = specdec.SpeculativeGenerator(model, specdec.PromptLookupSupplier()).generate(
        ids, attention_mask=mask, max_new_tokens=8, eos_token_id=[], pad_token_id=0)
    ref = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, ref)
