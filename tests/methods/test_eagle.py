"""EAGLE heads: the published layouts load (written here by name and shape, independently of the module),
their forward matches a plain-torch reading of the layout, the hidden-state index convention, the d2t
map, and every malformed checkpoint is refused with a message naming what is wrong."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import specdec
from specdec.attention import install_capture
from specdec.state import DecodeState
from specdec.suppliers.base import root_only
from specdec.suppliers.eagle import EagleRunner
from specdec.verify import PromptBlock
from tests.eagle_helpers import EAGLE_LAYERS, eagle_target, first_verification, head_tensors, write_head
from tests.helpers import ragged_prompts

pytestmark = pytest.mark.hf  # loading reads configs and RoPE through transformers: both CI versions run it


# ------------------------------------------------------------------------------ a plain reading of the layout
def rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta=10000.0):
    D = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    ang = pos[:, None].float() * inv  # [N, D/2]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    half = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * cos + half * sin


def reference_head(target, config, t, kind, tokens, features, project_rows):
    """Outputs [N, H] and target-vocabulary logits [N, V] of one sequence of N pairs, causal, positions
    0..N-1; rows < project_rows read target features (through fc), later rows the previous output."""
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    D = config["head_dim"]
    p = "midlayer." if kind == "eagle3" else "layers.0."
    emb = target.get_input_embeddings().weight[tokens]  # [N, H]
    outs = []
    for n in range(len(tokens)):  # recompute the prefix each time: simple and obviously causal
        feats = [features[i] if i < project_rows else outs[i - 1] for i in range(n + 1)]
        rows = []
        for i, f in enumerate(feats):
            if kind == "eagle1":
                x = torch.cat([emb[i], f]) @ t["fc.weight"].T + t.get("fc.bias", 0)
                rows.append((x, x))
            else:
                h = f @ t["fc.weight"].T if i < project_rows else f
                x = torch.cat([rms(emb[i], t[p + "input_layernorm.weight"]), rms(h, t[p + "hidden_norm.weight"])])
                rows.append((x, h))
        x = torch.stack([r[0] for r in rows])
        pos = torch.arange(n + 1)
        q = rope((x @ t[p + "self_attn.q_proj.weight"].T).view(n + 1, heads, D).transpose(0, 1), pos)
        k = rope((x @ t[p + "self_attn.k_proj.weight"].T).view(n + 1, kv, D).transpose(0, 1), pos)
        v = (x @ t[p + "self_attn.v_proj.weight"].T).view(n + 1, kv, D).transpose(0, 1)
        k, v = k.repeat_interleave(heads // kv, 0), v.repeat_interleave(heads // kv, 0)
        att = torch.softmax(q[:, -1:] @ k.transpose(-1, -2) / math.sqrt(D), -1) @ v  # [heads, 1, D]
        h = rows[-1][1] + att.transpose(0, 1).reshape(-1) @ t[p + "self_attn.o_proj.weight"].T
        y = rms(h, t[p + "post_attention_layernorm.weight"])
        out = h + (torch.nn.functional.silu(y @ t[p + "mlp.gate_proj.weight"].T) * (y @ t[p + "mlp.up_proj.weight"].T)) \
            @ t[p + "mlp.down_proj.weight"].T
        outs.append(out)
    out = torch.stack(outs)
    if kind == "eagle1":
        return out, out @ target.get_output_embeddings().weight.T
    draft = rms(out, t["norm.weight"]) @ t["lm_head.weight"].T
    logits = torch.full((len(tokens), config["vocab_size"]), float("-inf"))
    logits[:, torch.arange(config.get("draft_vocab_size", config["vocab_size"])) + t["d2t"]] = draft
    return out, logits


def first_step(target, head, ids, mask, backend="auto"):
    """Run a generation's first verification by hand; returns the runner after its catch-up, the root
    logits it returned and the acceptance."""
    state, _, _, acc = first_verification(target, head, ids, mask)
    runner = EagleRunner(head, backend)
    runner.attach(target)
    runner.start(state, region=16)
    runner.commit(acc)
    return runner, runner.catch_up(), acc


def reference_features(target, seq, layers):
    hs = target(seq[None], output_hidden_states=True).hidden_states
    return torch.cat([hs[i][0] for i in layers], -1)  # [N, k * H]


# fp32 through the target and a head layer, summed in another order than the reading below: on an AMD EPYC
# the EAGLE-1 logits (up to ~12 in magnitude) differed by up to 2.5e-4 (1e-4 held on the Xeons); reading the
# features from the wrong layers moves them by units (13.5 at most, measured)
TOL = 1e-3


@pytest.mark.parametrize("arch, backend", [("llama", "auto"), ("qwen2", "auto"), ("qwen3", "auto"), ("llama", "torch")])
@pytest.mark.parametrize("kind", ["eagle3", "eagle1"])
def test_head_matches_a_plain_reading_of_the_layout(tmp_path, arch, backend, kind):
    """Catch-up over the prompt's and the first acceptance's pairs (a ragged batch), then two draft
    layers of a chain: every logit equals the plain-torch reading of the published layout. "auto" on a
    CPU is the runner's dense-mask sdpa path, "torch" the packed-bitmask path other backends take."""
    target = eagle_target(arch)
    draft_ids = torch.tensor(sorted(np.random.default_rng(0).choice(96, 50, replace=False))) if kind == "eagle3" else None
    config, t = head_tensors(target, kind, draft_ids=draft_ids)
    head = specdec.EagleHead.from_pretrained(write_head(tmp_path / kind, config, t), target)
    ids, mask = ragged_prompts([6, 9])
    runner, root_logits, acc = first_step(target, head, ids, mask, backend)
    assert runner._dense is (backend == "auto")
    layers = head.feature_layers
    for b in range(2):
        seq = torch.cat([ids[b][mask[b] == 1], acc.tokens[b, :1]])  # the prompt, then the bonus
        feats = reference_features(target, seq, layers)[:-1]  # [P, F]: the states that predicted seq[1:]
        out, logits = reference_head(target, config, t, kind, seq[1:], feats, len(feats))
        torch.testing.assert_close(root_logits[b], logits[-1], rtol=TOL, atol=TOL)
    # Two chain layers: the root's child, then its child, each read as (token, parent's output).
    runner.begin_tree(1, 2)
    child = root_logits.argmax(-1)
    l1 = runner.forward_layer(child[:, None], None)[:, 0]
    grand = l1.argmax(-1)
    l2 = runner.forward_layer(grand[:, None], torch.zeros(2, 1, dtype=torch.int64))[:, 0]
    for b in range(2):
        seq = torch.cat([ids[b][mask[b] == 1], acc.tokens[b, :1]])
        feats = reference_features(target, seq, layers)[:-1]
        _, logits = reference_head(target, config, t, kind, torch.cat([seq[1:], child[b:b + 1], grand[b:b + 1]]),
                                   feats, len(feats))
        torch.testing.assert_close(l1[b], logits[-2], rtol=TOL, atol=TOL)
        torch.testing.assert_close(l2[b], logits[-1], rtol=TOL, atol=TOL)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_capture_follows_the_hidden_states_tuple(arch):
    """FeatureCapture's index i is transformers' hidden_states[i] for every i in 0..L (0: embeddings,
    L: after the final norm), on a prompt-and-tree forward as the verifier runs it."""
    target = eagle_target(arch)
    ids = torch.tensor([[5, 9, 17, 4, 33, 8]])
    want = target(ids, output_hidden_states=True).hidden_states
    install_capture(target, tuple(range(EAGLE_LAYERS + 1)))
    verifier = specdec.TreeVerifier(target)
    verifier.request_features(tuple(range(EAGLE_LAYERS + 1)))
    cache = verifier.new_cache(1, 32)
    acc = verifier.verify(specdec.TreeBatch.chain(ids[:, -1:], torch.ones(1, dtype=torch.int64)), cache,
                          prompt=PromptBlock(ids[:, :-1], torch.zeros(1, dtype=torch.int64)))
    H = target.config.hidden_size
    got = torch.cat([acc.prompt_features, acc.features[:, :1]], 1)  # [1, 6, (L + 1) H]
    for i in range(EAGLE_LAYERS + 1):
        torch.testing.assert_close(got[..., i * H:(i + 1) * H], want[i], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"layers: hidden-state indices \[8\] outside 0..7"):
        install_capture(target, (8,))


@pytest.mark.parametrize("batch", [1, 3])
def test_a_plain_step_returns_its_root_features(batch):
    """A root-only tree (a planner's plain step, which skips the gather of the accepted nodes) brings back
    each row's hidden states at its root, as a tree's first node does: transformers' hidden_states at the
    root's position."""
    target = eagle_target("llama")
    layers = (0, 2, EAGLE_LAYERS)
    install_capture(target, layers)
    verifier = specdec.TreeVerifier(target)
    verifier.request_features(layers)
    ids = torch.randint(1, 90, (batch, 6), generator=torch.Generator().manual_seed(batch))
    cache = verifier.new_cache(batch, 32)
    first = verifier.verify(root_only(ids[:, -1]), cache, prompt=PromptBlock(ids[:, :-1], torch.zeros(batch, dtype=torch.int64)))
    root = first.tokens[:, 0]
    acc = verifier.verify(root_only(root), cache)
    want = target(torch.cat([ids, root[:, None]], 1), output_hidden_states=True).hidden_states
    H = target.config.hidden_size
    assert acc.features.shape == (batch, 1, len(layers) * H)
    for j, i in enumerate(layers):
        torch.testing.assert_close(acc.features[:, 0, j * H:(j + 1) * H], want[i][:, -1], rtol=1e-5, atol=1e-5)


def test_an_off_by_one_feature_index_is_caught(tmp_path):
    """The head's output depends on which hidden state it reads: the reference fed the neighbouring
    indices (i - 1 or i + 1, the two ways to get the convention wrong) disagrees with the runner."""
    target = eagle_target("llama")
    config, t = head_tensors(target, "eagle3", aux=[2, 3, 4])
    head = specdec.EagleHead.from_pretrained(write_head(tmp_path / "h", config, t), target)
    ids, mask = ragged_prompts([8])
    _, root_logits, acc = first_step(target, head, ids, mask)
    seq = torch.cat([ids[0], acc.tokens[0, :1]])
    for shift, same in ((0, True), (-1, False), (1, False)):
        feats = reference_features(target, seq, [i + shift for i in (2, 3, 4)])[:-1]
        _, logits = reference_head(target, config, t, "eagle3", seq[1:], feats, len(feats))
        close = torch.allclose(root_logits[0], logits[-1], rtol=1e-4, atol=1e-4)
        assert close is same, f"shift {shift}"


def test_d2t_maps_a_hand_built_vocabulary(tmp_path):
    """Draft ids 0..3 stand for target ids 5, 7, 9, 20: d2t = [5, 6, 7, 17]; the head's target-vocabulary
    logits hold the draft logits at those ids and -inf elsewhere, and its trees use only them."""
    target = eagle_target("llama")
    ids = torch.tensor([5, 7, 9, 20])
    config, t = head_tensors(target, "eagle3", draft_ids=ids)
    assert t["d2t"].tolist() == [5, 6, 7, 17]
    head = specdec.EagleHead.from_pretrained(write_head(tmp_path / "h", config, t), target)
    hidden = torch.randn(3, target.config.hidden_size)
    draft, full = head.draft_logits(hidden), head.logits(hidden)
    assert torch.equal(full[:, ids], draft)
    rest = torch.ones(96, dtype=torch.bool)
    rest[ids] = False
    assert bool(torch.isneginf(full[:, rest]).all())
    fresh = specdec.EagleHead.initialize(target, draft_vocab=ids, seed=1)
    assert fresh.d2t.tolist() == [5, 6, 7, 17] and fresh.t2d.nonzero()[:, 0].tolist() == ids.tolist()
    sup = specdec.EagleSupplier(head, depth=3, topk=2, total_tokens=7)
    trees = []
    propose = sup.propose
    sup.propose = lambda state: trees.append(propose(state)) or trees[-1]
    specdec.SpeculativeGenerator(target, sup).generate(*ragged_prompts([5, 9]), max_new_tokens=6, eos_token_id=[],
                                                       pad_token_id=0)
    drafted = [tree.tokens[:, 1:][tree.valid[:, 1:]] for tree in trees if tree.size > 1]
    assert drafted and set(torch.cat(drafted).tolist()) <= set(ids.tolist())


def test_llama3_rope_and_defaults_load(tmp_path):
    """A config with the legacy rope_theta/rope_scaling fields (Llama 3.1's llama3 scaling) and no aux
    layer ids (the default 2, L // 2, L - 3) loads."""
    target = eagle_target("llama")
    config, t = head_tensors(target, "eagle3")
    del config["eagle_config"]
    config["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 128}
    head = specdec.EagleHead.from_pretrained(write_head(tmp_path / "h", config, t), target)
    assert head.feature_layers == (2, 3, 4)
    assert head._rope_inv_freq.shape == (8,)


# ------------------------------------------------------------------------------ malformed checkpoints
def _drop(name):
    return lambda c, t: t.pop(name)


def _set(name, value):
    return lambda c, t: t.__setitem__(name, value)


def _cfg(key, value):
    return lambda c, t: c.__setitem__(key, value) if value is not None else c.pop(key)


MALFORMED = [
    ("missing tensor", _drop("midlayer.hidden_norm.weight"), r"midlayer.hidden_norm.weight: missing"),
    ("fc shape", _set("fc.weight", torch.zeros(64, 128)), r"fc.weight: shape \[64, 128\], expected \[64, 192\]"),
    ("lm_head shape", _set("lm_head.weight", torch.zeros(95, 64)), r"lm_head.weight: shape \[95, 64\]"),
    ("unexpected", _set("midlayer.self_attn.q_proj.bias", torch.zeros(64)), r"midlayer.self_attn.q_proj.bias: unexpected"),
    ("unknown layout", lambda c, t: [t.__setitem__(k.replace("midlayer.", "block."), t.pop(k)) for k in list(t)
                                     if k.startswith("midlayer.")], r"architecture: unknown EAGLE layout"),
    ("vocab", _cfg("vocab_size", 100), r"vocab_size: the head's vocabulary has 100 tokens, the target's 96"),
    ("target width", _cfg("target_hidden_size", 32), r"target_hidden_size: the head reads 32-wide"),
    ("aux range", _cfg("eagle_config", {"eagle_aux_hidden_state_layer_ids": [2, 3, 7]}),
     r"eagle_aux_hidden_state_layer_ids: \[2, 3, 7\] must be indices in 0..6"),
    ("aux type", _cfg("eagle_config", {"eagle_aux_hidden_state_layer_ids": "2,3"}), r"expected a list of ints"),
    ("missing field", _cfg("hidden_size", None), r"field 'hidden_size' is missing"),
    ("field type", _cfg("intermediate_size", "80"), r"field 'intermediate_size' is '80', expected int"),
    ("heads", _cfg("num_key_value_heads", 3), r"num_attention_heads 4 is not a multiple of num_key_value_heads 3"),
    ("d2t range", _set("d2t", torch.full((96,), 5)), r"d2t: maps draft ids outside the target's vocabulary"),
    ("d2t dtype", _set("d2t", torch.zeros(96)), r"d2t: expected int64"),
    ("t2d shape", _set("t2d", torch.zeros(95, dtype=torch.bool)), r"t2d: shape \[95\], expected \[96\]"),
    ("int weights", _set("norm.weight", torch.ones(64, dtype=torch.int32)), r"norm.weight: expected a floating"),
    ("rope", _cfg("rope_scaling", {"rope_type": "dynamic", "factor": 2.0}), r"rope type 'dynamic'"),
    ("greedy temperature", _cfg("specdec_greedy_temperature", 0), r"field 'specdec_greedy_temperature' is 0.0, expected "
                                                                    r"a number > 0"),
]


@pytest.mark.parametrize("label, damage, message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_checkpoints_are_refused(tmp_path, label, damage, message):
    target = eagle_target("llama")
    config, t = head_tensors(target, "eagle3")
    damage(config, t)
    with pytest.raises(ValueError, match=message):
        specdec.EagleHead.from_pretrained(write_head(tmp_path / "h", config, t), target)


def test_eagle1_bias_must_match_its_config(tmp_path):
    target = eagle_target("llama")
    config, t = head_tensors(target, "eagle1", bias=False)
    config["bias"] = True
    with pytest.raises(ValueError, match=r"fc.bias: config.json says bias=True, the checkpoint lacks it"):
        specdec.EagleHead.from_pretrained(write_head(tmp_path / "h", config, t), target)


def test_greedy_temperature_sharpens_greedy_ranking_only(tmp_path):
    """A head whose config carries specdec_greedy_temperature 0.5 hands greedy decoding logits twice as
    sharp (same argmax) and sampling its own distribution."""
    target = eagle_target("llama")
    config, t = head_tensors(target, "eagle3")
    config["specdec_greedy_temperature"] = 0.5
    head = specdec.EagleHead.from_pretrained(write_head(tmp_path / "h", config, t), target)
    assert head.config.greedy_temperature == 0.5
    ids, mask = ragged_prompts([6, 9])
    greedy = first_step(target, head, ids, mask)[1]
    runner = EagleRunner(head)
    runner.attach(target)
    state = DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=8, capacity=ids.shape[1] + 40, eos_token_ids=[],
                              pad_token_id=0, sampling=specdec.sampling.Sampling(1.0))
    runner.start(state, region=16)
    runner.commit(first_step(target, head, ids, mask)[2])
    torch.testing.assert_close(greedy, 2 * runner.catch_up())


def test_files_that_are_not_a_head(tmp_path):
    target = eagle_target("llama")
    with pytest.raises(ValueError, match="is not a directory"):
        specdec.EagleHead.from_pretrained(tmp_path / "nothing", target)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="config.json: missing"):
        specdec.EagleHead.from_pretrained(tmp_path / "empty", target)
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text(json.dumps(head_tensors(target, "eagle3")[0]))
    (pickled / "pytorch_model.bin").write_bytes(b"\x80\x04not unpickled")
    with pytest.raises(ValueError, match=r"pytorch_model.bin: a pickled checkpoint.*weights_only=True.*model.safetensors"):
        specdec.EagleHead.from_pretrained(pickled, target)
    (pickled / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="model.safetensors: not a readable safetensors file"):
        specdec.EagleHead.from_pretrained(pickled, target)
    (pickled / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json: .* is not JSON"):
        specdec.EagleHead.from_pretrained(pickled, target)


def test_save_pretrained_round_trip(tmp_path):
    target = eagle_target("qwen2")
    head = specdec.EagleHead.initialize(target, draft_vocab=torch.arange(0, 96, 2), seed=3)
    head.save_pretrained(tmp_path / "h")
    again = specdec.EagleHead.from_pretrained(tmp_path / "h", target)
    for (k, a), (k2, b) in zip(head.state_dict().items(), again.state_dict().items()):
        assert k == k2 and torch.equal(a, b), k
    assert again.feature_layers == (2, 3, 4)


def test_a_head_made_under_inference_mode_drafts_and_reloads(tmp_path):
    """Inference tensors keep no version counter: a head loaded under `torch.inference_mode` drafts the
    logits a normally loaded one does, and after `load_state_dict` of other weights (an in-place copy the
    fused q/k/v and gate/up weights cannot see by version) it drafts with the new weights."""
    target = eagle_target()
    paths = []
    for seed in (0, 1):
        config, t = head_tensors(target, "eagle3", seed=seed)
        paths.append(write_head(tmp_path / f"h{seed}", config, t))
    ids, mask = ragged_prompts([6, 9])
    expected = [first_step(target, specdec.EagleHead.from_pretrained(p, target), ids, mask)[1] for p in paths]
    assert not torch.allclose(expected[0], expected[1])
    with torch.inference_mode():
        head = specdec.EagleHead.from_pretrained(paths[0], target)
        assert head.layer.self_attn.q_proj.weight.is_inference()
        torch.testing.assert_close(first_step(target, head, ids, mask)[1], expected[0], rtol=1e-5, atol=1e-5)
        head.load_state_dict(specdec.EagleHead.from_pretrained(paths[1], target).state_dict())
        torch.testing.assert_close(first_step(target, head, ids, mask)[1], expected[1], rtol=1e-5, atol=1e-5)


def test_supplier_arguments():
    target = eagle_target("llama")
    head = specdec.EagleHead.initialize(target, draft_vocab=torch.arange(10))
    with pytest.raises(TypeError, match="head: expected a specdec EagleHead"):
        specdec.EagleSupplier(target)
    with pytest.raises(ValueError, match="mode: expected 'chain' or 'tree'"):
        specdec.EagleSupplier(head, mode="star")
    with pytest.raises(ValueError, match="topk: 11 exceeds the draft's vocabulary of 10"):
        specdec.EagleSupplier(head, topk=11)
    with pytest.raises(ValueError, match="head: built for another target"):
        specdec.SpeculativeGenerator(eagle_target("llama", seed=5), specdec.EagleSupplier(head))
