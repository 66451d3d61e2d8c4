"""The step planner: whether to draft this step, how deep, and what it will cost (docs/smart.md).

Before a step a supplier asks `StepPlanner.plan` for a depth cap D* in its choices (SMART: 0 .. max_depth;
retrieval and prompt lookup: 0 or their tree depth) maximising the predicted speedup of the step::

    R(D) = L(D) * c_T / C(D)          D = 0: a plain AR step (L = 1, C = c_T), the draft does not run

with L(D) from `specdec.estimates` (measured acceptance and tree growth by depth) and C(D) from
`specdec.online_costs` (the step cost model corrected by the loop's timers), and drafts only when R(D*) beats
1 by a margin (`MARGIN` to start drafting, half of it to go on: hysteresis). While drafting pays by the full
margin, once `QUICK_DRAFT` drafting steps in a row were learned from, a full plan comes every `QUICK_DRAFT`-th
step: the steps between take its cap and are learned from, in order, at the next. A longer catch-up after
plain steps is paid once when drafting resumes: the decision amortises what it exceeds the usual one by over
`RESUME_HORIZON` steps. Every
`probe_every` steps a probe keeps the estimates fresh: while plain decoding pays, `PROBE_STEPS` drafting
steps at the best cap, weighed by a full plan right after them with the half margin of drafting on (is
drafting paying again? its steps after the first are steady and move the realised rate; each probe that
says no doubles the interval, up to `BACKOFF` times, or `BACKOFF_FAR` times while the last probe's steady
steps measured drafting more than `FAR` below plain decoding on `FAR_ROWS` rows or more, the next then
waiting `BACKOFF` intervals at once; a probe whose draft is cold in the call, and so pays its whole prompt
prefill, waits at least `BACKOFF` intervals); while drafting pays, one at D* + 2 (how far deeper trees go).
The first `WARMUP` drafting steps of a planner are probes at the best cap, to calibrate it, unless the
draft is cold and its prompt costly while plain decoding is predicted to win (then probes come only when
due); once `WARMUP_EVIDENCE` of them measured `EVIDENCE_ROWS` rows, the rest wait while plain decoding is
predicted to win by the margin. When drafting could not pay
even if every candidate were accepted (`_hopeless`), the draft never runs, probes included.

Inside a step the planner prices what the supplier asks: the step's spending so far (`spent`), the
corrected verify curve and how wide the next draft layer should be (`frontier_width`, which also says when
no layer pays); SMART's rule on host-side tries (`suppliers.trie.plan_trie`) reads the same prices and
calibration. Everything is decided from host numbers:
the loop's own timers (`StepRecord`) and what the supplier brought to the host anyway (`TreeFacts`, the
tested nodes for `Calibration`); the planner adds no sync.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .cost import CostModel
from .estimates import Calibration, DepthStats, TreeFacts, tested_nodes
from .online_costs import C_T_FIRST, OnlineCosts
from .realised import RealisedRate
from .spread import CallTokens, by_cap, fold, in_call, predicted, shapes
from .stages import PlanStats, StepRecord
from .step_pricing import StepPricing

__all__ = ["StepRecord", "TreeFacts", "Plan", "PlanStats", "StepPlanner", "MARGIN"]

MARGIN = 0.05  # a plan must beat plain decoding by 5% to start drafting (2.5% to go on)
WARMUP = 8  # the first drafting steps of a planner are probes at the best cap (its calibration learns first); not
# the deepest: a fresh planner's deep trees at batch 4 cost 2-3 AR steps each for ~2 tokens, and its one-call
# demo cell ran 0.81-0.83x AR with them, 0.93x at the best cap (bench/results/2026-12-07-cpu-warmup-cap/)
WARMUP_EVIDENCE = 2  # warm-up probes after which the rest wait while plain decoding is predicted to win by
# the margin (then probes come when due, at the best cap), once they also measured EVIDENCE_ROWS rows:
EVIDENCE_ROWS = 8  # a batch-1 step accepts 1 to 6 tokens, and two of them are no evidence. On the demo pair at
# HumanEval batch 1 a fresh EAGLE-3 + SMART planner's first five probes accepted 3, 2, 5, 1 and 1 tokens, and it
# decoded plainly for the next ~100 steps where the head's 4:2:8 tree ran 1.57x AR
# (bench/results/2026-12-07-cpu-evidence/)
BACKOFF = 8  # while plain decoding keeps paying, the probe interval doubles up to this many times
BACKOFF_FAR = 32  # ... up to this many times while the last probe measured drafting more than FAR below plain:
FAR_ROWS = 8  # ... measured on at least this many rows (a batch-1 probe's 3 steady steps, or one unlucky
# warm-up step, say little: read as far, they sent the probe interval to its BACKOFF-th multiple at once)
FAR = 0.1  # a probe costs 4-8 AR steps where drafting loses (at Spec-Bench batch 8 on the 2-core CPU, 2-3%
# of plain decoding at 256 steps between probes); one that measured drafting near paying keeps the shorter
# interval, since there a planner that turned plain on an unlucky stretch must soon find drafting paying again
# (bench/results/2026-12-05-cpu-smart-c337dfc/: a longest interval of 32 for every probe cost HumanEval batch 1
# 6%). Measured, not predicted: the plans of a planner decoding plainly price its cold catch-ups and carry no
# fresh acceptance, and at HumanEval batch 1 they put drafting at 0.75-0.85x where it ran 1.08x
# (bench/results/2026-12-06-cpu-smart-probes/)
PROBE_STEPS = 4  # drafting steps in a probe from plain decoding: the first resumes (its long catch-up is the
# catch-up's estimate), the rest are steady and say what drafting realises now. One step measured nothing
# the realised rate could use, and a planner that had turned plain on a hard prompt stayed plain on the
# prompts after it (the same HumanEval batch 1 run: 2 drafting steps in 32 calls)
WARM_AFTER = 2  # plain steps in a row before one counts for c_T (the first after drafting run cold)
REPLAN_EVERY = 8  # while plain decoding pays, the full plan runs every 8 steps (0.1-0.4 ms saved on the others)
REPLAN_FAR = 32  # ... every 32 while the last one put drafting more than FAR below plain decoding: only c_T moves
# between probes, and it would have to move that far to turn the decision (a full plan costs ~0.3 ms inside the
# loop on the 2-core CPU, 7 plain steps' learning included: at every 8th step, 0.8% of a plain step at batch 1).
# Not while a call's c_T is being measured: a fresh planner's first plan prices plain steps at the profile's
# c_T, which can be 20% off (the demo pair at HumanEval batch 4 on the Xeon 2-core CPU: 4.6 ms, 5.5 measured)
RESUME_HORIZON = 8  # steps over which a longer catch-up after plain steps is amortised when deciding
C_T_EVERY = 64  # drafting steps in a row before a few plain ones re-measure c_T (the first after WARMUP) ...
C_T_STRETCH = 4  # ... this many times as many while a c_T C_T_DOUBT lower would not turn drafting plain: each
C_T_DOUBT = 0.2  # re-measure is WARM_AFTER + C_T_FIRST plain steps, 7% of the steps at C_T_EVERY, and where
# drafting ran 1.5x AR (the demo pair's EAGLE-3 head at HumanEval batch 1) each plain step gave up ~2.8 ms: 3-4%
# of the run, to refine a unit the decision did not hinge on (bench/results/2026-12-07-cpu-c-t-stretch/)
C_T_AGREEING = 2  # ... else twice as many for each of the last measurements (up to this many) that found c_T where it
# was (`OnlineCosts.c_t_agreed`): a call holding a c_T probe ran 0.90x the 4:2:8 tree at HumanEval batch 4 on the
# EPYC 2-core CPU, calls drafting throughout 1.015x (bench/results/2026-12-08-cpu-c-t-agree/)
COLD_PROBE = 4  # a cold draft's probe waits BACKOFF intervals or more only if its catch-up costs more AR steps
QUICK_DRAFT = 4  # while drafting pays by the full margin, after this many drafting steps in a row learned from, a
# full plan every 4th drafting step; the steps between reuse its cap and are learned from at the next (`plan`). A
# full plan and its learning cost an EAGLE-3 + SMART drafting step 0.17 ms at HumanEval batch 1 on the 2-core CPU,
# 2% of the step, where SMART's host work left it behind the head's 4:2:8 tree while accepting 14% more tokens a
# step (bench/results/2026-12-07-cpu-quick-draft/)


@dataclass(frozen=True)
class Plan:
    """depth: the cap (0: plain step, nothing drafted); length: predicted tokens per row, bonus included;
    seconds: predicted step time; probe: taken to refresh the estimates, not because it pays; warmup: one of
    a planner's first WARMUP drafting steps (the best cap, priced mostly by priors); gain: the best
    drafting plan's predicted speedup over a plain step as the decision weighed it (0 when not weighed)."""

    depth: int
    length: float
    seconds: float
    probe: bool = False
    warmup: bool = False
    gain: float = 0.0
    shape: float = 0.0  # the cap's shape (`spread.shapes`), by which its steps' spread is measured


@dataclass
class _BatchState:
    """What the planner keeps per batch size: corrected costs and whether plain decoding currently wins."""

    costs: OnlineCosts
    drafting: bool = True
    since_probe: int = 0
    probe_turn: int = 0
    plain_run: int = 0  # plain steps in a row before the current one
    quiet: int = 0  # plain steps left before the next full plan
    backoff: int = 1  # the probe interval's multiple while plain decoding pays
    rate: RealisedRate = field(default_factory=RealisedRate)  # drafting steps' measured over predicted
    drafted_run: int = 0  # drafting steps since the last plain step
    c_t_probe: int = 0  # plain steps left in a c_T probe
    probe_left: int = 0  # drafting steps left in a probe from plain decoding (PROBE_STEPS in all)
    probe_sums: tuple[float, float, int] = (0.0, 0.0, 0)  # that probe's steady steps: tokens per row, seconds, rows
    far: bool = False  # the last probe measured drafting more than FAR below plain decoding
    probe_ended: bool = False  # the last step was a probe's last: the draft is caught up
    spread: float = 1.0  # drafting steps' batch progress over their rows' mean accepted length (`spread.fold`)
    spread_calls: int = 0  # calls that measured it
    call_steps: float = 0.0  # ... and their drafting steps per call (`spread.fold`)
    shape: float = 0.0  # ... and their steps' mean shape (`spread.fold`; 0: none): each cap's spread

    @property
    def realised(self) -> float:
        """Drafting steps' measured tokens per second over their predicted (`specdec.realised`); 1 before any
        drafting step."""
        return self.rate.value


class StepPlanner(StepPricing):
    """Plans each step of one supplier (module docstring).

    max_depth: the deepest cap; choices: the caps it may plan (default 0 .. max_depth); host: the supplier
    drafts on the host (retrieval, prompt lookup): its draft cost is its measured query, not catch-up and
    layers; margin, probe_every: see the module docstring; online: False freezes the costs at the profile's;
    realise: scale the drafting decision's predicted gain by the drafting steps' realised rate (`_realise`).
    Attribute call_spread (True): correct the batch size's spread by the current call's rows so far
    (`spread.in_call`); False prices every call at the batch size's.
    """

    def __init__(self, max_depth: int, *, choices: tuple[int, ...] | None = None, host: bool = False,
                 margin: float = MARGIN, probe_every: int = 32, online: bool = True, realise: bool = True):
        self.max_depth, self.host, self.margin, self.realise = max_depth, host, margin, realise
        self.choices = tuple(choices) if choices is not None else tuple(range(max_depth + 1))
        self.probe_every, self.online = probe_every, online
        self.depths = DepthStats(max_depth)
        self.drafted_rows = 0  # rows the planner's drafting steps measured (EVIDENCE_ROWS)
        self.calibration = Calibration()
        self._batches: dict[int, _BatchState] = {}
        self.state: _BatchState | None = None
        self.stats = PlanStats()
        self._plan: Plan | None = None
        # steps taken and not learned from yet, each with its plan and context (`record`, `_learn`)
        self._pending: list[tuple[Plan, float | None, StepRecord, TreeFacts | None]] = []
        self.context: float | None = None
        self._quick = 0  # plain steps `quick_plain` may still plan without a full plan, with this plan:
        self._quiet_plan = Plan(0, 1.0, 0.0)
        self._quick_draft = 0  # drafting steps `plan` may still take with this full plan's cap (QUICK_DRAFT):
        self._quick_plan = self._quiet_plan
        self._call = CallTokens()
        # the widest row's tokens in the call's previous counted step; before one, the most a drafting step
        # can emit (a longer catch-up then holds a cold draft's prompt)
        self._last_tokens = max_depth + 1
        self.call_spread = True

    @property
    def costs(self) -> OnlineCosts:
        return self.state.costs

    def start(self, cost: CostModel) -> None:
        """A new `generate` call at `cost.batch_size` (its corrections and mode persist per batch size)."""
        self._learn()  # the last step of the previous call
        self._finish_call()
        self._plan, self._last_tokens, self._quick, self._quick_draft = None, self.max_depth + 1, 0, 0
        state = self._batches.get(cost.batch_size)
        if state is None or state.costs.model is not cost:
            state = self._batches[cost.batch_size] = self._new_state(cost)
        if not state.spread_calls:  # not measured at this batch size yet: what the others predict for it
            measured = [(b, s.spread, s.spread_calls) for b, s in self._batches.items()]
            state.spread = predicted(cost.batch_size, measured)
        self.state = state
        state.probe_left, state.probe_ended = 0, False  # a probe does not run on into a new call's cold draft
        # A call's first plannable step gets a full plan, not the last call's quiet stretch (new rows, a cold draft:
        # bench/results/2026-12-08-cpu-call-start/); its c_T measurement (below) is weighed REPLAN_EVERY later
        state.quiet = 0
        self.stats = PlanStats()
        # c_T carried from the last call can be far from this one's: calls differ in speed beyond what the
        # context scaling says (Spec-Bench batch 4 on the 2-core CPU: 15-17 ms a plain step for one batch,
        # 19-21 for the others), and a window of C_T_WINDOW members took half a call to follow, pricing
        # drafting up to 35% too well. Its first warm plain steps are one measurement (`measure_ar`).
        state.costs.measure_ar(C_T_FIRST)

    def _new_state(self, cost: CostModel) -> _BatchState:
        """The state of a batch size met for the first time: from the nearest batch size already planned
        (its cost corrections, its realised rate, and its drafting mode when the new batch is not larger:
        drafting pays less the larger the batch, so a larger one starts plain and needs the full margin; the
        probe schedule starts afresh), else the profile's. A server's batch sizes vary, and a prompt set's
        ragged last batch is one (learned from scratch, its first two calls ran 1.30x and 1.13x as long as AR:
        docs/smart.md, "The planner"). Its spread is predicted from every measured batch size (`start`), not
        copied."""
        state = _BatchState(OnlineCosts(cost, self.online))
        known = [b for b in self._batches if b != cost.batch_size]
        if known:
            near_size = min(known, key=lambda b: (abs(b - cost.batch_size), -b))
            near = self._batches[near_size]
            state.costs.seed(near.costs)
            state.drafting = near.drafting and cost.batch_size <= near_size
            state.rate = replace(near.rate)
            state.shape = near.shape
        return state

    def predict(self, backlog: int, context: float | None) -> tuple[np.ndarray, np.ndarray]:
        """(L(D), C(D)) for every depth D = 0 .. max_depth at this backlog and context."""
        c, e = self.costs, self.depths.estimates()
        seconds = c.rest + c.verify(e.width, context)
        if self.host:
            seconds = seconds + c.query
        else:
            seconds = seconds + c.catch_up(backlog) + e.forwards * c.layer(e.layer_width)
        seconds[0] = c.ar(context)
        return e.length, seconds

    def _batch_rates(self, length: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each cap's predicted batch tokens per second (`length` / `seconds` at the cap's own spread,
        `spread.by_cap`) and the caps' shapes (`spread.shapes`)."""
        state, cap_shapes = self.state, shapes(self.depths.estimates().rate)
        spread = by_cap(state.spread, state.shape, cap_shapes)
        if self.call_spread:  # this call's rows so far (`spread.in_call`)
            spread = spread * in_call(state.spread, state.call_steps, self._call)
        return length / seconds * spread, cap_shapes

    def plan(self, backlog: int = 1, context: float | None = None, cold: bool = False) -> Plan:
        """The cap of the next step (0: plain decoding). backlog: the draft's pending tokens (widest row),
        its queued prompt prefill included; cold: the draft has not run in this call yet (a probe would pay
        its whole prompt prefill, so while plain decoding wins none is taken)."""
        state = self.state
        if self._quick_draft > 0 and not cold and backlog <= self.max_depth + 1:
            # Drafting pays by the full margin: the last full plan's cap, nothing weighed or learned (its steps
            # are learned from in order at the next full plan; the cap would not move in a few steps)
            self._quick_draft -= 1
            state.since_probe += 1
            self.context = context
            self._plan = self._quick_plan
            return self._plan
        self._quick_draft = 0
        self._learn()
        self.context = context
        if state.c_t_probe > 0:  # re-measuring c_T: plain steps until one runs in its steady state
            state.c_t_probe -= 1
            self._plan = Plan(0, 1.0, self.costs.ar(context), probe=True)
            return self._plan
        if state.probe_left > 0 and not state.drafting:  # a probe's later steps: drafting at the best cap
            state.probe_left -= 1
            state.probe_ended = state.probe_left == 0
            length, seconds = self.predict(backlog, context)
            rate, cap_shapes = self._batch_rates(length, seconds)
            best = max((d for d in self.choices if d > 0), key=rate.__getitem__)
            self._plan = Plan(best, float(length[best]), float(seconds[best]), probe=True,
                              shape=float(cap_shapes[best]))
            return self._plan
        state.since_probe += 1
        # A cold draft's probe pays its whole prompt prefill: while plain decoding pays, it waits at least
        # BACKOFF intervals (without any, a planner that turned plain would never draft again: every call
        # starts cold), when that costs more than a few plain steps. A cheap one (the EAGLE head over a
        # batch-1 prompt: one layer) keeps the usual interval: waiting longest there kept a planner that had
        # turned plain on an unlucky stretch from probing again in the next calls, at 1.08x AR where the
        # head's trees ran 1.5x.
        ar = self.costs.ar(context)
        cold = cold and self.costs.catch_up(backlog) > COLD_PROBE * ar
        probe_due = state.since_probe >= self.probe_every * (max(BACKOFF, state.backoff) if cold else state.backoff)
        if not state.drafting and state.quiet > 0 and not probe_due:
            state.quiet -= 1  # plain decoding pays and nothing but c_T moved: no need to weigh it again yet
            self._plan = Plan(0, 1.0, ar)
            self._arm_quick(cold)  # a call's first step: the rest of the quiet stretch is quick
            return self._plan
        length, seconds = self.predict(backlog, context)
        decide = seconds
        if not self.host:  # a long catch-up is paid once when drafting resumes: amortise what exceeds the usual
            usual = self.costs.catch_up(max(1, round(float(length[-1]))))
            extra = max(self.costs.catch_up(backlog) - usual, 0.0) * (1 - 1 / RESUME_HORIZON)
            decide = seconds - np.where(np.arange(len(seconds)) > 0, extra, 0.0)
        rate, cap_shapes = self._batch_rates(length, decide)
        best = max((d for d in self.choices if d > 0), key=rate.__getitem__)
        gain = rate[best] * seconds[0] * state.realised
        # to go on drafting, half the margin; so too right after a probe, whose steps paid the resume's
        # catch-up already: drafting on from there costs what drafting on costs
        going_on = state.drafting or state.probe_ended
        state.probe_ended = False
        state.drafting = 0 not in self.choices or gain > 1 + (self.margin / 2 if going_on else self.margin)
        # A call's first plain steps measure c_T (`start`): the plan after them weighs drafting by it
        state.quiet = (REPLAN_FAR if gain < 1 - FAR and not self.costs.measuring else REPLAN_EVERY) - 1
        tokens, spent, rows = state.probe_sums
        if spent > 0:  # a probe just ended: how far from paying its steady steps measured drafting
            state.far = rows >= FAR_ROWS and tokens / spent * self.costs.ar(context) * state.spread < 1 - FAR
            state.probe_sums = (0.0, 0.0, 0)
            if state.far and not state.drafting:
                # measured far from paying: the next probe waits BACKOFF intervals at once, not after doubling
                # up to them (on the Xeon 2-core CPU at batch 8, where the draft's trees ran 0.6-0.8x AR, a
                # probe every 32-128 steps cost each round 2-4%: bench/results/2026-12-07-cpu-smart-334e230/)
                state.backoff = max(state.backoff, BACKOFF)
        longest = BACKOFF_FAR if state.far else BACKOFF
        state.backoff = min(state.backoff, longest)  # drafting came near paying: probe at the shorter interval
        deepest, warmup = self.choices[-1], False
        if not state.drafting and self._hopeless(context):
            depth, probe = 0, False  # not even every candidate accepted would pay: no probe either
            state.since_probe = 0  # nor is one due: the next full plan comes after the quiet steps
        elif self.depths.steps < WARMUP and (state.drafting or not cold) and \
                (self.depths.steps < WARMUP_EVIDENCE or self.drafted_rows < EVIDENCE_ROWS
                 or gain >= 1 - self.margin):
            # The rest of the warm-up waits while its first probes say plain decoding wins by the margin: at
            # HumanEval batch 16 over the EAGLE head (predicted 0.78-0.85x) its 7 deep probes cost 2-5 AR
            # steps each, one episode every few calls; where drafting pays, the warm-up runs through.
            depth, probe, warmup = best, True, True
        elif 0 in self.choices and (state.drafting and state.since_probe >= self.probe_every or probe_due):
            # Plain decoding pays: is a tree of the best depth paying again? (Each such probe that finds no
            # drafting worth it doubles the interval to the next.) Drafting pays: how far deeper trees go.
            state.since_probe = 0
            state.backoff = 1 if state.drafting else min(2 * state.backoff, longest)
            depth, probe = (min(best + 2, deepest) if state.drafting else best), True
            if not state.drafting:  # weigh the probe's evidence right after it, not after the quiet steps
                state.quiet, state.probe_left = 0, PROBE_STEPS - 1
        else:
            depth, probe = (best if state.drafting else 0), False
        if depth and not probe and 0 in self.choices and self.online and state.drafted_run >= self._c_t_every(gain):
            # Drafting every step measures no plain step, and c_T, the unit of every decision, would stay the
            # profile's (the EAGLE head's profile on the demo pair: 9.1 ms at batch 1 against the AR run's
            # 6.4, so each plan looked 1.4x better than it was): WARM_AFTER + 1 plain steps re-measure it
            # (frozen costs would learn nothing from them: none then).
            # Each probe measures C_T_FIRST warm steps: the first sets c_T (their median, not one step's
            # reading); a later one that disagrees with c_T by over C_T_RESET restarts it (`measure_ar`).
            state.c_t_probe, depth, probe = WARM_AFTER + C_T_FIRST - 1, 0, True
            self.costs.measure_ar(C_T_FIRST)
        self._plan = Plan(depth, float(length[depth]), float(seconds[depth]), probe, warmup, float(gain),
                          float(cap_shapes[depth]))
        self._quick = 0
        if not depth and not state.drafting and not probe:
            self._arm_quick(cold)
        elif depth and not probe and gain > 1 + self.margin and state.drafted_run >= QUICK_DRAFT:
            # Only inside a stretch of drafting steps learned from (a first step after plain ones is weighed
            # before the next); the quick steps end before a probe is due (`since_probe` counts them)
            self._quick_draft = max(min(QUICK_DRAFT, self.probe_every - state.since_probe) - 1, 0)
            self._quick_plan = self._plan
        return self._plan

    def _c_t_every(self, gain: float) -> int:
        """Drafting steps in a row before plain steps re-measure c_T: WARMUP before its first measurement at this
        batch size, then C_T_EVERY, or C_T_STRETCH times as many while the best plan's gain (`plan`) would keep
        drafting on (half the margin) with a c_T C_T_DOUBT lower than the one it was priced at; else C_T_EVERY
        doubled for each of the last C_T_AGREEING measurements that agreed with c_T (`OnlineCosts.c_t_agreed`)."""
        if not self.costs.ar_seen:
            return WARMUP
        sure = gain * (1 - C_T_DOUBT) > 1 + self.margin / 2
        return C_T_EVERY * (C_T_STRETCH if sure else 2 ** min(self.costs.c_t_agreed, C_T_AGREEING))

    def _arm_quick(self, cold: bool) -> None:
        """After a plain step planned by `plan` while plain decoding pays: the quiet steps before the next
        full plan or due probe can be planned by `quick_plain`, with this step's plan."""
        state = self.state
        threshold = self.probe_every * (max(BACKOFF, state.backoff) if cold else state.backoff)
        self._quick = max(min(state.quiet, threshold - state.since_probe - 1), 0)
        self._quiet_plan = self._plan

    def quick_plain(self) -> bool:
        """Plan the next step here if it is one of the quiet plain steps after a full plan that chose plain
        decoding (no full plan and no probe due before it: what `plan` would decide without weighing
        anything) and return True; else False (the supplier calls `plan`). The steps' learning waits for
        the next full plan, which runs it for all of them in one go: a plain step then costs its supplier
        almost nothing beyond what an AR step costs: right after the target's forward, with the host's
        caches cold, `plan` and its learning cost each plain step ~70 us on the 2-core CPU (1.5% at batch 1),
        four times what they cost in a tight loop; a quick step costs ~5 us, the learning in one go ~15 us a
        step (bench/results/2026-12-07-cpu-plain-steps/). The context is the full plan's, one token more
        per step."""
        if self._quick <= 0:
            return False
        self._quick -= 1
        state = self.state
        state.since_probe += 1
        state.quiet -= 1
        if self.context is not None:
            self.context += 1.0
        self._plan = self._quiet_plan  # its seconds are not read: a plain step is priced at c_T when learned
        return True

    def _realise(self, plan: Plan | None, tokens: float = 0.0, seconds: float = 0.0) -> None:
        """Age the realised rate by one step and, for a drafting step (`plan`), fold its measured tokens and
        seconds in beside its plan's (`specdec.realised`; nothing with ``realise=False``)."""
        if self.realise:
            self.state.rate.step(plan.length if plan else 0.0, plan.seconds if plan else 0.0, tokens, seconds)

    def _hopeless(self, context: float | None) -> bool:
        """Whether drafting cannot pay even if every candidate were accepted: a chain of D tokens accepting
        all D, at its cheapest (catch-up of one token, one-node layers), against D + 1 plain steps."""
        c = self.costs
        depth = np.array([d for d in self.choices if d > 0], dtype=np.float64)
        cheapest = c.rest + c.verify(depth + 1, context)
        cheapest = cheapest + (c.query if self.host else c.catch_up(1) + (depth - 1) * c.layer(1))
        return bool(np.all((depth + 1) * c.ar(context) <= (1 + self.margin) * cheapest))

    def record(self, step: StepRecord, facts: TreeFacts | None) -> None:
        """Keep what the step just taken measured (facts: None for a plain step); the planner learns from it
        at the next `plan` or `report`, so its own work falls inside the loop's propose timer."""
        if self._plan is not None:
            self._pending.append((self._plan, self.context, step, facts))
            self._plan = None

    def _learn(self) -> None:
        """Learn from the steps recorded since the last time, in order."""
        if self._pending:
            pending, self._pending = self._pending, []
            for plan, context, step, facts in pending:
                self._learn_step(plan, context, step, facts)

    def _learn_step(self, plan: Plan, context: float | None, step: StepRecord, facts: TreeFacts | None) -> None:
        c = self.costs
        rows = np.asarray(step.accepted)
        plain = facts is None or plan.depth == 0
        # A plain step emits one token a row: no reduction to run (each numpy call costs a few us after the
        # target's forward, on top of what an AR step pays). Else a sum, not ndarray.mean: the same float
        # for these integer counts, at a tenth of mean's ~15-30 us.
        measured = 1.0 if plain or not rows.size else float(rows.sum()) / rows.size
        if plain:
            c.observe_ar(step, context, warm=self.state.plain_run >= WARM_AFTER)
            self.stats.steps_ar += 1
            self._realise(None)
        else:
            depth = facts.row_depth
            if depth is not None and step.active is not None:
                depth = depth[step.active]
            self.depths.record(facts, rows - 1, depth)
            # Only a steady drafting step (its catch-up no longer than the previous step's tokens) tells
            # whether drafting realises its plans; a resume's catch-up over plain steps' tokens or a cold
            # prompt is mostly the catch-up's estimate (`_realise`), and its verification runs cold.
            steady = facts.backlog <= self._last_tokens
            c.observe_draft(step, facts, context, self.host, steady=steady or self.host)
            self.stats.steps_drafted += 1
            self._realise(plan if steady and not plan.warmup else None, measured, step.seconds)
            self.drafted_rows += rows.size
            if plan.probe and steady and not self.state.drafting:
                tokens, seconds, counted = self.state.probe_sums
                self.state.probe_sums = (tokens + measured, seconds + step.seconds, counted + rows.size)
        self._last_tokens = 1 if plain or not rows.size else int(rows.max())
        self.state.plain_run = self.state.plain_run + 1 if plain else 0
        self.state.drafted_run = 0 if plain else self.state.drafted_run + 1
        # A drafting step whose tree ended root-only (width 1) moved every row by one token, as a plain step
        # does: counted as drafting, it diluted the spread's measurement toward 1 (Spec-Bench batch 4 on the
        # 2-core CPU: a call of 9 such steps and one tree measured a spread of 1.0 where the prior said 0.83,
        # and the next call drafted 13 trees on plans that read 1.04-1.17x: 0.98x AR by the rows' mean
        # tokens, about 0.8x by the batch's; bench/results/2026-12-06-cpu-smart-spread/)
        self._call.add(rows, step.active, measured, drafted=not plain and step.width > 1, shape=plan.shape)
        s = self.stats
        s.probes += plan.probe
        s.predicted_tokens += plan.length
        s.measured_tokens += measured
        ar = c.ar(context)
        s.ar_seconds_predicted += ar * plan.length * (1.0 if plain else self.state.spread)
        s.ar_seconds_measured += ar * measured
        # a plain step is predicted at c_T, the unit: as of now, not of its plan (a quiet one's plan can be
        # a few steps older than what was learned since, `quick_plain`)
        s.seconds_predicted += ar if plan.depth == 0 else plan.seconds
        s.seconds_measured += step.seconds

    def report(self) -> PlanStats:
        self._learn()
        self._finish_call()
        return self.stats

    def _finish_call(self) -> None:
        """Close the call's batch accounting and fold its spread into the batch size's (`spread.fold`)."""
        call, self._call = self._call, CallTokens()
        if call.rows is None:
            return
        self.stats.batch_tokens += float(call.rows.max())
        state = self.state
        state.spread, state.shape, state.call_steps, state.spread_calls = fold(
            state.spread, state.shape, state.call_steps, state.spread_calls, call)

    def observe_tree(self, tokens: np.ndarray, parents: np.ndarray, num_nodes: np.ndarray, edge: np.ndarray,
                     acc_tokens: np.ndarray, num_accepted: np.ndarray) -> None:
        """Calibrate on the step's host-side tree (tokens, parents [B, T], num_nodes [B], edge [B, T]: each
        node's conditional probability under the drafter) and what the target accepted (acc_tokens [B, A],
        num_accepted [B]: `Acceptance.host_tokens`, `host_num_accepted`)."""
        tested, accepted = tested_nodes(tokens, parents, num_nodes, acc_tokens, num_accepted)
        self.calibration.observe(edge[tested], accepted[tested])
