"""What several test modules share: tiny models and prompts, reference outputs, cost models, EAGLE heads,
datastores, ValuSpec calibrations, the sampling test's pair and its distribution check and the CLI's runner
(the kernels' inputs: tests/kernel_inputs.py). Fixtures are in tests/conftest.py; no test module imports another."""

from __future__ import annotations

import copy
import json
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from scipy.stats import chisquare
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

import specdec
from specdec.calibration import Calibration
from specdec.cost import CostModel, Curve, VerifyFit
from specdec.datastore import Datastore
from specdec.planner import Plan
from specdec.profiling import BACKLOGS, Profile
from specdec.records import device_name
from specdec.sampling import Sampling
from specdec.stages import StepRecord
from specdec.state import DecodeState
from specdec.suppliers.base import Supplier
from specdec.tree import TreeBatch
from specdec.valuspec import BranchScorer

ROOT = Path(__file__).resolve().parents[1]  # the repository



# ------------------------------------- tiny models of each supported architecture, built offline from configs
VOCAB = 96
_COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0, bos_token_id=1, eos_token_id=2,
               tie_word_embeddings=False)


ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, {}),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, {"head_dim": 16}),
    "mistral": (MistralConfig, MistralForCausalLM, {"sliding_window": None, "num_key_value_heads": 1}),
}


def make_model(arch: str, seed: int = 0, **overrides) -> torch.nn.Module:
    config_cls, model_cls, extra = ARCHS[arch]
    torch.manual_seed(seed)
    config = config_cls(**{**_COMMON, **extra, **overrides})
    model = model_cls(config).eval()
    # Random init gives near-uniform logits; sharpen them so greedy paths are not decided by rounding.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model


def perturbed(model: torch.nn.Module, scale: float = 0.3, seed: int = 1) -> torch.nn.Module:
    """A copy whose weights carry relative noise: it agrees with `model` often, not always. The noise is drawn
    on the CPU's generator whatever the model's device, so a CUDA copy gets the same draft."""
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=gen).to(p.device, p.dtype))
    return draft


def ragged_prompts(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts with the given lengths (pad id 0); tokens avoid the special ids 0-2."""
    gen = torch.Generator().manual_seed(seed)
    P = max(lengths)
    ids = torch.zeros(len(lengths), P, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        # repeat a short motif so prompt lookup finds matches
        motif = torch.randint(3, VOCAB, (max(2, n // 3),), generator=gen)
        ids[b, P - n:] = motif.repeat(n // len(motif) + 1)[:n]
        mask[b, P - n:] = 1
    return ids, mask


def make_tree(kind: str, B: int, T: int, seed: int, device: torch.device | str = "cpu"):
    """A chain, a star or a random tree per row; rows after the first are ragged (padding nodes)."""
    from specdec.tree import TreeBatch

    rng = random.Random(seed)
    if kind == "chain":
        parents = [[-1] + list(range(T - 1))] * B
    elif kind == "star":
        parents = [[-1] + [0] * (T - 1)] * B
    else:
        parents = [[-1] + [rng.randrange(i) for i in range(1, T)] for _ in range(B)]
    num_nodes = [T] + [rng.randint(1, T) for _ in range(B - 1)]
    return TreeBatch.from_parents([list(range(T))] * B, parents, num_nodes, device=device)


def reference(target, ids, mask, max_new_tokens, eos):
    return target.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                           eos_token_id=eos, pad_token_id=0)


# ------------------------------------------------------------------------------------------- the command line
CLI_PROMPTS = ["w5 w6 w7 w5 w6", "w9 w10 w11 w12 w13 w9 w10 w11 w40"]


def generate_matches_hf(saved, capsys, options: list[str], prompts: list[str] = CLI_PROMPTS) -> dict:
    """`specdec generate --json` with `options` on `prompts` (one batch of two) equals HF generate; returns the JSON."""
    from specdec.app.cli import main  # the app layer: loaded only where a test runs the command line

    root, target, tokenizer = saved
    argv = ["generate", "--target", str(root / "target"), "--max-new-tokens", "12", "--batch-size", "2", "--device",
            "cpu", "--json", *options]
    for p in prompts:
        argv += ["--prompt", p]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    ref = target.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=0)
    want = tokenizer.batch_decode(ref[:, enc.input_ids.shape[1]:], skip_special_tokens=True)
    assert [r["completion"] for r in doc["results"]] == want
    return doc


def run_cli(capsys, argv: list[str]) -> tuple[int, list[str]]:
    """`specdec ARGV` through the entry point: its exit status and stderr lines (progress bars dropped)."""
    from specdec.app.cli import main

    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [line for line in err.split("\n") if line.strip() and "\r" not in line]  # \r: progress bars
    assert "Traceback" not in err
    return code, lines


def assert_one_line_error(capsys, argv: list[str], prefix: str) -> str:
    code, lines = run_cli(capsys, argv)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"specdec: error: {prefix}"), lines[0]
    return lines[0]


def count_calls(monkeypatch, module, name: str) -> list:
    calls, real = [], getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


# ------------------------------------------------------------------------------------------- step cost models
PROFILE_SIZES = (1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 128, 181, 256)
TRUE_FIT = {"gamma": 4e-3, "delta": 0.05, "rho": 0.8}
ONE_NODE = 2e-4  # the one-node forward sits below the tree curve, as a matrix-vector product does on a CPU


def step_record(width: int, verify: float, propose: float = 0.0, accepted=(1,)) -> StepRecord:
    """A loop step's timers as the planner receives them: `width` padded nodes, the stage seconds, accepted
    tokens per row."""
    return StepRecord(width, np.array(accepted), propose, 0.0, verify, 0.0)


def synthetic_profile(noise: float = 0.0, seed: int = 0, batch_sizes=(1,), scales=(1.0,), sizes=PROFILE_SIZES,
                      **names) -> Profile:
    """Tree times of the paper's form with known coefficients (n >= 2; n = 1 cheaper), times (1 + noise
    N(0, 1)); scales per batch size. Draft layer 1 ms + 10 us a node, catch-up 1.5 ms + 20 us a token, the AR
    step 0.2 ms above the one-node forward, the short context 20% cheaper."""
    rng = np.random.default_rng(seed)
    n = np.array(sizes, dtype=np.float64)
    tree = TRUE_FIT["gamma"] * np.expm1(TRUE_FIT["delta"] * n ** TRUE_FIT["rho"])
    tree[n == 1] = ONE_NODE
    verify, context, draft, catch, ar = [], [], [], [], []
    for s in scales:
        v = s * tree * (1 + noise * rng.standard_normal(len(n)))
        verify.append(tuple(v))
        context.append(tuple(0.8 * v[[0, len(n) // 2]]))
        draft.append(tuple(s * (1e-3 + 1e-5 * n)))
        catch.append(tuple(s * (1.5e-3 + 2e-5 * np.array(BACKLOGS))))
        ar.append(v[0] + 2e-4)
    return Profile(device=names.get("device", device_name(torch.device("cpu"))), dtype="float32",
                   target=names.get("target", "t"), draft=names.get("draft", "d"), context_len=512,
                   batch_sizes=tuple(batch_sizes), sizes=tuple(sizes), repeats=5, verify_seconds=tuple(verify),
                   short_context=128, context_sizes=(sizes[0], sizes[len(sizes) // 2]),
                   context_seconds=tuple(context), ar_step_seconds=tuple(ar), draft_seconds=tuple(draft),
                   backlogs=BACKLOGS, catch_up_seconds=tuple(catch))


def make_cost(c0: float = 0.01, gamma: float = 2e-4, delta: float = 0.05, rho: float = 1.0, *, ar_step: float | None = None,
              loop: float = 0.0, layer: float = 1e-3, catch_up: float = 1e-3, batch_size: int = 1) -> CostModel:
    """A cost model with given parts (the fit is tested in tests/methods/test_cost.py): verify c0 + gamma
    (exp(delta n^rho) - 1) for n >= 2, the one-node forward ar_step - loop (default: the curve's value at 1),
    flat draft parts."""
    fit = VerifyFit("intercept", c0, gamma, delta, rho, fits={"paper": [0.0, gamma, delta, rho],
                                                              "intercept": [c0, gamma, delta, rho]},
                    errors={"paper": 0.1, "intercept": 0.05})
    one = float(fit(1.0)) if ar_step is None else ar_step - loop
    widths = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
    points = Curve((1.0, *widths), (one, *(float(fit(n)) for n in widths)))
    return CostModel(batch_size, 512, one + loop, loop, fit, points, True,
                     0.0, Curve((1.0, 64.0), (layer, layer)), Curve((1.0, 64.0), (catch_up, catch_up)), "profiled",
                     device_name(torch.device("cpu")), "float32", "", "", ())


def fixed_cost(c0: float, gamma: float, delta: float, rho: float, batch_size: int = 1, *, layer: float = 1e-4,
               catch_up: float = 1e-4) -> CostModel:
    """A step cost with given parts (the fit is tested in tests/methods/test_cost.py): verify c0 + gamma
    (exp(delta n^rho) - 1), flat draft layer and catch-up."""
    return make_cost(c0, gamma, delta, rho, layer=layer, catch_up=catch_up, batch_size=batch_size)


# An AR step of 10 ms, verification growing ~1% per node at first and steeply past ~60 nodes, draft layers of
# 0.1 ms: drafting pays and SMART's trees hold 5-20 nodes.
MODERATE = dict(c0=0.01, gamma=2e-4, delta=0.05, rho=1.0)


def state_for(ids, mask, capacity=96):
    return DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=8, capacity=capacity, eos_token_ids=[],
                             pad_token_id=0)


def generate_with(target, sup, ids, mask, n, eos=()):
    return specdec.SpeculativeGenerator(target, sup).generate(ids, attention_mask=mask, max_new_tokens=n,
                                                              eos_token_id=list(eos), pad_token_id=0)


def plan_schedule(sup, depths: list[int]) -> list[int]:
    """Make `sup`'s planner take the given depth caps, one per step (then its own choice); returns the
    draft's backlog at each step, as the planner saw it."""
    planner, real, seen = sup.planner, sup.planner.plan, []
    schedule = iter(depths)

    def plan(backlog: int = 1, context: float | None = None, cold: bool = False) -> Plan:
        seen.append(backlog)
        chosen = real(backlog, context, cold)
        depth = next(schedule, None)
        planner._plan = chosen if depth is None else replace(chosen, depth=depth)
        return planner._plan

    planner.plan = plan
    return seen


# Plain stretches of 1 to 6 steps between drafting steps: the draft's backlog grows, then one catch-up.
SCHEDULE = [3, 0, 0, 0, 0, 0, 0, 2, 0, 4, 0, 0, 3, 3, 0, 0, 0, 1, 0, 5]


# -------------------------------------------------------------------------------------------------- retrieval
def store_of_outputs(tmp_path: Path, ids: torch.Tensor, mask: torch.Tensor, free: torch.Tensor) -> Datastore:
    """A store holding each prompt with the target's greedy continuation, plus a copy with every 4th new token
    changed (wrong branches to reject) and one random document: trees are accepted, but not blindly."""
    rng = np.random.default_rng(0)
    docs = []
    for b in range(ids.shape[0]):
        row = torch.cat([ids[b][mask[b] == 1], free[b]]).numpy()
        noisy = row.copy()
        noisy[-free.shape[1]::4] = (noisy[-free.shape[1]::4] + 1 + rng.integers(0, VOCAB - 4)) % (VOCAB - 3) + 3
        docs += [row, noisy]
    docs.append(rng.integers(3, VOCAB, 200))
    return Datastore.build(None, docs, tmp_path, vocab_size=VOCAB, progress=False)


def eos_mid_batch_case(tmp_path: Path, target) -> tuple:
    """Ragged prompts whose row 0 meets EOS after 5 tokens: (ids, mask, eos, HF's output with that EOS, a
    store of the EOS-free greedy continuations)."""
    ids, mask = ragged_prompts([6, 10, 9], seed=3)
    free = reference(target, ids, mask, 20, eos=None)[:, ids.shape[1]:]
    eos = int(free[0, 4])
    return ids, mask, eos, reference(target, ids, mask, 20, eos=eos), store_of_outputs(tmp_path, ids, mask, free)


# --------------------------------------------------------------------------------------------------- ValuSpec
def calibration(*taus: float, **kw) -> Calibration:
    """A calibration with the given tau_1, tau_2, ... (one value: one tau for every length)."""
    fields = dict(taus=taus, num_windows=[10] * len(taus), window=min(4, len(taus)), delta=0.05, target="t",
                  scorer="s", num_prompts=1, max_new_tokens=16)
    return Calibration(**{**fields, **kw})


class FixedLogprobs(BranchScorer):
    """Node log-probs given by hand: the keep rule and the counters without a model."""

    def __init__(self, logp: torch.Tensor):
        self.logp, self.backend, self.reusing = logp, "torch", False

    def attach(self, target, supplier=None) -> None: ...

    def start(self, state, region) -> None: ...

    def commit(self, acc) -> None: ...

    def node_logprobs(self, tree):
        return self.logp


def plain_branch_scores(scorer, context: list[int], tree: TreeBatch, row: int) -> dict[int, float]:
    """Each leaf's branch score from one plain forward of the scorer over context + the branch's tokens."""
    out = {}
    for path in tree.paths[row].tolist():
        nodes = [i for i in path if i >= 0][1:]
        if not nodes:
            continue
        branch = [int(tree.tokens[row, i]) for i in nodes]
        ids = torch.tensor([context + branch])
        lp = torch.log_softmax(scorer(input_ids=ids).logits[0].double(), -1)
        out[nodes[-1]] = float(np.mean([lp[len(context) - 1 + j, t].item() for j, t in enumerate(branch)]))
    return out


def counting(scorer: BranchScorer) -> list[int]:
    """Count the scorer model's tree forwards (wraps its runner)."""
    calls = [0]
    forward = scorer.runner.forward_tree

    def counted(tree):
        calls[0] += 1
        return forward(tree)

    scorer.runner.forward_tree = counted
    return calls


# ----------------------------------------- sampling: a tiny pair and the distribution of its first two tokens
WARPS = [Sampling(1.0), Sampling(0.7, top_k=5), Sampling(1.3, top_p=0.8), Sampling(0.9, top_k=6, top_p=0.7)]
TINY_VOCAB = 12
TINY = dict(vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1)
TINY_PROMPT = [5, 7, 5]  # prompt lookup finds "5 -> 7" in it
SAMPLE_ROWS = 100_000


def spread(model, scale):
    """Rescale the LM head so that distributions are neither flat nor one-hot (chi-square needs both)."""
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def tiny_pair():
    target = spread(make_model("llama", seed=3, **TINY), 0.4)
    draft = spread(make_model("llama", seed=4, **TINY), 0.4)  # unrelated: many rejections
    return target, draft


def exact_two_tokens(target, s: Sampling) -> np.ndarray:
    """[V, V] float64: the target's probability of the first two tokens after TINY_PROMPT under `s`,
    enumerating the first token (V forwards in one batch)."""
    ids = torch.tensor([TINY_PROMPT + [v] for v in range(TINY_VOCAB)])
    logits = target(ids).logits.double()  # [V, 4, V]
    first = s.probs(logits[0, 2].float()).double()
    second = s.probs(logits[:, 3].float()).double()
    return (first[:, None] * second).numpy()


class SampledStar(Supplier):
    """A test supplier that *samples* its candidates: the root's `k` children and each child's `m`
    children are drawn without replacement (Gumbel top-k: the keys' order is the draw order) from a fixed
    distribution q, and the tree carries q: the recursive rule with siblings, away from any model."""

    def __init__(self, q: torch.Tensor, k: int = 2, m: int = 2, seed: int = 0):
        self.q, self.k, self.m = q, k, m
        self.gen = torch.Generator().manual_seed(seed)

    def max_tree_size(self) -> int:
        return 1 + self.k + self.k * self.m

    def _draw(self, B: int, n: int) -> torch.Tensor:
        gumbel = -torch.empty(B, TINY_VOCAB).exponential_(generator=self.gen).log()
        return (self.q.log() + gumbel).topk(n, -1).indices  # [B, n], in draw order

    def propose(self, state: DecodeState) -> TreeBatch:
        B, k, m = state.batch_size, self.k, self.m
        first = self._draw(B, k)
        second = torch.stack([self._draw(B, m) for _ in range(k)], 1).flatten(1)  # [B, k*m]
        tokens = torch.cat([state.root[:, None], first, second], 1)
        parents = torch.tensor([-1] + [0] * k + [1 + i // m for i in range(k * m)]).expand(B, -1)
        q = self.q.expand(B, tokens.shape[1], TINY_VOCAB)
        return TreeBatch(tokens, parents.contiguous(), torch.full((B,), tokens.shape[1]), max_depth=2, draft_probs=q)


def sampling_supplier(kind: str, draft, tmp_path):
    if kind == "ar":
        return specdec.ARSupplier()
    if kind == "chain":
        return specdec.DraftSupplier(draft, mode="chain", depth=2)
    if kind == "tree":
        return specdec.DraftSupplier(draft, mode="tree", depth=2, topk=2, total_tokens=6)
    if kind == "smart":
        return specdec.SmartSupplier(draft, fixed_cost(**MODERATE, batch_size=SAMPLE_ROWS), topk=2, frontier=2,
                                     max_depth=2, budget=6)
    if kind == "prompt_lookup":
        return specdec.PromptLookupSupplier(max_ngram=2, num_pred=2)
    if kind == "retrieval":
        docs = [np.random.default_rng(0).integers(3, TINY_VOCAB, 4000)]
        store = specdec.Datastore.build(None, docs, tmp_path / "ds", vocab_size=TINY_VOCAB, progress=False)
        return specdec.RetrievalSupplier(store, max_suffix=3, continuation=2, budget=6)
    if kind == "sampled_star":
        q = torch.softmax(torch.randn(TINY_VOCAB, generator=torch.Generator().manual_seed(9)) * 1.5, -1)
        return SampledStar(q)
    raise AssertionError(kind)


def sampling_filter(kind: str | None, draft):
    if kind is None:
        return None
    if kind == "fixed":
        return specdec.FixedThresholdFilter(draft, 0.12)
    return specdec.ValuSpecFilter(draft, calibration(math.log(0.1)))


def draw_two_tokens(target, draft, kind, filt, s: Sampling, rows: int, tmp_path, seed: int = 0):
    """[rows, 2] int64: the first two tokens of `rows` identical prompts in one generate call."""
    gen = specdec.SpeculativeGenerator(target, sampling_supplier(kind, draft, tmp_path), sampling_filter(filt, draft))
    ids = torch.tensor([TINY_PROMPT]).expand(rows, -1).contiguous()
    out = gen.generate(ids, max_new_tokens=2, eos_token_id=[], pad_token_id=0, temperature=s.temperature,
                       top_k=s.top_k, top_p=s.top_p, generator=torch.Generator().manual_seed(seed))
    return out.sequences[:, len(TINY_PROMPT):], out.stats


def assert_matches(draws: torch.Tensor, exact: np.ndarray, label: str) -> None:
    """Chi-square of the [V*V] pair counts against the exact joint (cells expecting < 5 pooled); pairs
    of probability 0 must never be drawn."""
    V = TINY_VOCAB
    counts = np.bincount((draws[:, 0] * V + draws[:, 1]).numpy(), minlength=V * V).astype(np.float64)
    expected = exact.reshape(-1) * len(draws)
    assert counts[expected == 0].sum() == 0, f"{label}: a pair of target probability 0 was drawn"
    small = expected < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    p = chisquare(obs, exp * obs.sum() / exp.sum()).pvalue
    assert p > 1e-3, f"{label}: chi-square p = {p:.2e} over {len(draws)} draws"
