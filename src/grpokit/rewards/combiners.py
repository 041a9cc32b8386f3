"""Reward combiners: turn K objective scores per completion into one reward, with adaptive weights.

Every combiner is ``fn(scores [B, K], group_ids [B], *, weights [K], state=None, **opts)
-> (reward [B], state, metrics)``. ``scores`` may hold NaN where an objective did not apply
(None from a reward): NaN counts as 0 in sums and is left out of group statistics. Stateful
combiners take and return an explicit state object (``weights`` tensor for logging,
``state_dict()`` / ``load_state_dict()`` for checkpoints; :func:`new_combiner_state` makes an
empty one); the trainer owns it and passes it back every step. Options meant for other
combiners are ignored, so one option dict fits all.

Why ``normalize_sum`` exists: GRPO standardises the combined reward within each group, which
cancels any multiplier common to a group's rewards. In a group where only objective k varies,
Σ_j w_j s_j standardises to the z-score of s_k whatever w_k is, so the weights only act through
how objectives mix inside one group. Standardising each objective first and weighting after
(MO-GRPO / GDPO style) keeps w_k as the scale of objective k's contribution — use it with an
advantage that does not re-divide by the std (``dr_grpo`` / ``scale: none``) to keep weights
and multipliers (the hypervolume meta-reward) from cancelling across groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import torch

from grpokit.registry import Registry

COMBINERS = Registry(
    "combiner",
    # make_state: a state factory (the trainer creates, passes and checkpoints the state);
    # step_scale: what the combiner adds is one number per step multiplying every reward, which an
    #   advantage that divides by a reward std cancels (the run refuses that pairing at load)
    # reads_if: {option: (switch, values)}, see Registry.context_taken
    properties={"make_state": None, "step_scale": False, "reads_if": None},
    # influence: mirror_descent's precomputed alternative to objective_grads, for callers outside the
    #   trainer; not a config option (the trainer always passes objective_grads, which replace it)
    context=("weights", "state", "objective_grads", "validation", "lr", "influence"),
)


def group_zscore(
    scores: torch.Tensor, group_ids: torch.Tensor, std_mode: str = "unbiased", std_eps: float = 1e-6
) -> torch.Tensor:
    """Per-objective group z-score ``(s_ik − mean_g s_k) / (std_g s_k + eps)``, ``[B, K]``.

    NaN entries are left out of the statistics and get z = 0; a group where an objective is
    constant (or has one valid entry) gets z = 0 for it. ``std_mode``: 'unbiased' (n − 1, as
    ``torch.std``) or 'population' (n).
    """
    if std_mode not in ("unbiased", "population"):
        raise ValueError(f"std_mode must be 'unbiased' or 'population', got {std_mode!r}")
    x = scores.to(torch.float64)
    valid = ~x.isnan()
    xv = torch.nan_to_num(x, nan=0.0)
    _, idx = torch.unique(torch.as_tensor(group_ids, device=x.device), return_inverse=True)  # [B] in 0..n_groups-1
    num = int(idx.max()) + 1 if idx.numel() else 0
    zeros = torch.zeros(num, x.shape[1], dtype=x.dtype, device=x.device)
    count = zeros.index_add(0, idx, valid.to(x.dtype))  # [n_groups, K]
    mean = zeros.index_add(0, idx, xv) / count.clamp(min=1)
    centred = (xv - mean[idx]) * valid
    denom = count - 1 if std_mode == "unbiased" else count
    std = (zeros.index_add(0, idx, centred**2) / denom.clamp(min=1)).sqrt()
    big, small = torch.full_like(xv, math.inf), torch.full_like(xv, -math.inf)
    rows = idx[:, None].expand_as(xv)
    gmax = zeros.scatter_reduce(0, rows, torch.where(valid, xv, small), "amax", include_self=False)
    gmin = zeros.scatter_reduce(0, rows, torch.where(valid, xv, big), "amin", include_self=False)
    constant = (gmax == gmin)[idx]  # exact check: mean arithmetic can leave 1e-17 residue
    z = centred / (std[idx] + std_eps)
    return torch.where(constant | ~valid, torch.zeros_like(z), z).to(scores.dtype)


def _check(scores: torch.Tensor, weights: Any, name: str) -> torch.Tensor:
    """``weights`` as a float64 ``[K]`` tensor matching ``scores [B, K]`` (on its device); one-line errors otherwise."""
    if scores.dim() != 2:
        raise ValueError(f"combiner '{name}': scores must be [B, K], got shape {tuple(scores.shape)}")
    w = torch.as_tensor(weights, dtype=torch.float64, device=scores.device).flatten()
    if w.numel() != scores.shape[1]:
        raise ValueError(
            f"combiner '{name}': {w.numel()} weights for {scores.shape[1]} objectives; give one weight per reward"
        )
    return w


def _weighted(
    scores: torch.Tensor, group_ids: torch.Tensor, w: torch.Tensor, normalize: bool, std_mode: str, std_eps: float
) -> torch.Tensor:
    """Σ_k w_k s_k (NaN → 0), on per-objective group z-scores when ``normalize``; ``[B]`` float32."""
    s = group_zscore(scores, group_ids, std_mode, std_eps) if normalize else scores
    return (torch.nan_to_num(s.to(torch.float64), nan=0.0) @ w.to(s.device)).to(torch.float32)


def _weight_metrics(w: torch.Tensor) -> dict[str, torch.Tensor]:
    return {f"combiner/w{k}": w[k].to(torch.float32) for k in range(w.numel())}


@COMBINERS.register("fixed")
def fixed(scores, group_ids, *, weights, state=None):
    """Weighted sum r_i = Σ_k w_k s_ik with fixed weights (NaN scores count as 0).

    E.g. CRPO (Clinical-R1, arXiv 2512.00601): r = 10·r_acc + r_fmt + 0.5·r_lang; HydroX
    multi-label safety reward (arXiv 2503.21819): w_k = 1/K over the K aspect scores.
    """
    w = _check(scores, weights, "fixed")
    return _weighted(scores, group_ids, w, False, "unbiased", 0.0), state, _weight_metrics(w)


@COMBINERS.register("normalize_sum")
def normalize_sum(
    scores, group_ids, *, weights, state=None, std_mode: str = "unbiased", std_eps: float = 1e-6
):
    """Weighted sum of per-objective group z-scores r_i = Σ_k w_k (s_ik − μ_gk)/(σ_gk + eps).

    Keeps each weight's effect where a plain sum followed by group standardisation cancels it
    (see the module docstring); also stops the objective with the largest within-group spread
    from dominating (MO-GRPO / GDPO style). For CRPO (Clinical-R1, arXiv 2512.00601) this is a
    departure: the paper sums the raw rewards with fixed weights (``fixed``) and standardises
    the sum with GRPO's advantage; ``normalize_sum`` is an opt-in alternative there.
    """
    w = _check(scores, weights, "normalize_sum")
    return _weighted(scores, group_ids, w, True, std_mode, std_eps), state, _weight_metrics(w)


# ----------------------------------------------------------------------------- hypervolume


def hypervolume(points: torch.Tensor | Sequence[Sequence[float]], reference: Sequence[float]) -> float:
    """Exact hypervolume (maximisation) dominated by ``points [N, M]`` and bounded below by ``reference [M]``.

    Recursive slicing along the last coordinate (Fonseca et al. 2006); only the part of each
    point's box above the reference counts, so a point worse than the reference in any
    coordinate adds nothing. E.g. reference (0,0), points (1,2),(2,1) → 3.
    """
    ref = [float(r) for r in reference]
    pts = [[float(v) for v in p] for p in (points.tolist() if isinstance(points, torch.Tensor) else points)]
    pts = [p for p in pts if all(v > r for v, r in zip(p, ref))]
    if not pts:
        return 0.0
    if len(ref) == 1:
        return max(p[0] for p in pts) - ref[0]
    total, lower = 0.0, ref[-1]
    for level in sorted({p[-1] for p in pts}):
        active = [p[:-1] for p in pts if p[-1] >= level]
        total += (level - lower) * hypervolume(active, ref[:-1])
        lower = level
    return total


@dataclass
class HypervolumeState:
    """Pareto buffer of validation vectors and the meta-reward multiplier (arXiv 2509.11452, hypervolume-guided weighting).

    ``buffer [N, M]`` holds points in maximisation coordinates; row 0 is the initial model's
    validation vector, which is also the reference point. ``multiplier`` m multiplies the next
    rewards (1 until a second validation arrives).
    """

    weights: torch.Tensor = field(default_factory=lambda: torch.zeros(0, device="cpu"))  # [K], fixed user weights
    maximize: list[bool] = field(default_factory=list)  # [M]
    buffer: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0, dtype=torch.float64, device="cpu"))  # [N, M]
    multiplier: float = 1.0
    delta_hv: float = 0.0

    def observe(self, validation: Sequence[float] | torch.Tensor, maximize: Optional[Sequence[bool]] = None) -> None:
        """Add validation vector p_t: ΔHV = HV(B ∪ {p_t}) − HV(B), m = 0.5 + 1.5·tanh(ΔHV); keep p_t if ΔHV > 0.

        The first vector becomes the reference (row 0) and leaves m = 1. ``maximize [M]`` is
        read on the first call only (default all True); minimised metrics are negated.
        """
        p = torch.as_tensor(validation, dtype=torch.float64, device="cpu").flatten()  # a few numbers: the buffer lives on CPU
        if not self.maximize:
            self.maximize = [True] * p.numel() if maximize is None else [bool(m) for m in maximize]
        if len(self.maximize) != p.numel():
            raise ValueError(
                f"hypervolume: validation has {p.numel()} metrics but maximize has {len(self.maximize)}"
            )
        p = torch.where(torch.tensor(self.maximize, device=p.device), p, -p)
        if self.buffer.numel() == 0:
            self.buffer = p[None].clone()  # the initial model: reference point, m stays 1
            return
        ref = self.buffer[0].tolist()
        before = hypervolume(self.buffer[1:], ref)
        self.delta_hv = max(hypervolume(torch.cat([self.buffer[1:], p[None]]), ref) - before, 0.0)
        self.multiplier = 0.5 + 1.5 * math.tanh(self.delta_hv)
        if self.delta_hv > 0:
            self.buffer = torch.cat([self.buffer, p[None]])

    def state_dict(self) -> dict[str, Any]:
        return {"weights": self.weights.clone(), "maximize": list(self.maximize), "buffer": self.buffer.clone(),
                "multiplier": self.multiplier, "delta_hv": self.delta_hv}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights = torch.as_tensor(state["weights"], dtype=torch.float64, device="cpu").clone()
        self.maximize = [bool(m) for m in state["maximize"]]
        self.buffer = torch.as_tensor(state["buffer"], dtype=torch.float64, device="cpu").clone()
        self.multiplier, self.delta_hv = float(state["multiplier"]), float(state["delta_hv"])


_Z_SCORES_ONLY = {"std_mode": ("normalize", (True,)), "std_eps": ("normalize", (True,))}  # std options of normalize=True


@COMBINERS.register("hypervolume", inputs=("validation",), make_state=HypervolumeState, step_scale=True, reads_if=_Z_SCORES_ONLY)
def hypervolume_combiner(
    scores, group_ids, *, weights, state: Optional[HypervolumeState] = None, validation=None, maximize=None,
    normalize: bool = False, std_mode: str = "unbiased", std_eps: float = 1e-6,
):
    """Hypervolume-guided reward r_i = m · Σ_k w_k s_ik, m = 0.5 + 1.5·tanh(ΔHV), user weights w fixed.

    ``validation [M]``: the per-objective means of a held-out validation batch, measured with
    the weights of the previous update (the trainer's producer: greedy completions of held-out
    prompts, ``trainer/producers.validation_means``; None = no new validation, m stays). The
    first vector is the initial model's and becomes the reference (m = 1 for step 1); each
    later one updates the Pareto buffer and m *before* this call's reward is computed, so m
    from the validation after step t scales step t+1's rewards, as in the authors' code (which
    validates after every update and multiplies the next batch's rewards). ``maximize [M]``
    (first call): direction per metric, minimised ones are negated.

    What group normalisation cancels: m is one scalar for the whole step, so with GRPO's
    std-normalised advantage (m·R_i − m·μ)/(m·σ + ε) = (R_i − μ)/(σ + ε/m) — the meta-reward
    is cancelled up to ε and the update is the unweighted-m one. It only changes updates for
    advantages that do not divide by the group std: mean-only (``dr_grpo`` / ``scale: none``),
    RLOO, REINFORCE, which scale by m; ``normalize=True`` weights per-objective z-scores
    instead of raw scores (the weights w then survive too). Paper: Lu et al., "Learning to
    Optimize Multi-Objective Alignment Through Dynamic Reward Weighting", arXiv 2509.11452
    (code: yining610/dynamic-reward-weighting).
    """
    w = _check(scores, weights, "hypervolume")
    state = state if state is not None else HypervolumeState()
    state.weights = w.clone()
    if validation is not None:
        state.observe(validation, maximize)
    reward = state.multiplier * _weighted(scores, group_ids, w, normalize, std_mode, std_eps)
    metrics = {
        **_weight_metrics(w),
        "combiner/meta_reward": torch.tensor(state.multiplier, device="cpu"),
        "combiner/delta_hv": torch.tensor(state.delta_hv, device="cpu"),
        "combiner/pareto_size": torch.tensor(float(state.buffer.shape[0]), device="cpu"),
    }
    return reward, state, metrics


# ----------------------------------------------------------------------------- mirror descent


@dataclass
class MirrorDescentState:
    """Simplex weights and the influence accumulated since the last update (arXiv 2509.11452, gradient-based weighting)."""

    weights: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64, device="cpu"))  # [K], on the simplex
    influence_sum: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64, device="cpu"))  # [K]
    accumulated: int = 0
    updates: int = 0

    def state_dict(self) -> dict[str, Any]:
        return {"weights": self.weights.clone(), "influence_sum": self.influence_sum.clone(),
                "accumulated": self.accumulated, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights = torch.as_tensor(state["weights"], dtype=torch.float64, device="cpu").clone()
        self.influence_sum = torch.as_tensor(state["influence_sum"], dtype=torch.float64, device="cpu").clone()
        self.accumulated, self.updates = int(state["accumulated"]), int(state["updates"])


def gradient_influence(objective_grads: torch.Tensor) -> torch.Tensor:
    """Influence I_k = ⟨g_k, Σ_j g_j⟩ of each objective's flat policy gradient, ``[K]`` from ``[K, P]``."""
    g = objective_grads.detach().to(torch.float64)
    return g @ g.sum(0)


@COMBINERS.register("mirror_descent", inputs=("objective_grads",), make_state=MirrorDescentState, reads_if=_Z_SCORES_ONLY)
def mirror_descent(
    scores, group_ids, *, weights, state: Optional[MirrorDescentState] = None, objective_grads=None, influence=None,
    lr: float = 1e-6, rho: float = 1e-5, accumulation_steps: int = 1, normalize: bool = False,
    std_mode: str = "unbiased", std_eps: float = 1e-6,
):
    """Gradient-weighted reward r_i = Σ_k w_k s_ik with w ← softmax(log w + lr · Ī / ρ) on the simplex.

    The trainer supplies, each step, either ``objective_grads [K, P]`` — g_k = the flattened
    gradient of the policy surrogate (same loss as training) on this batch with the advantage
    computed from s_k alone, restricted to a parameter subset (authors: layers 10–25 of
    Qwen3-8B) — or ``influence [K]`` = I_k = ⟨g_k, Σ_j g_j⟩ precomputed (see
    :func:`gradient_influence`), plus ``lr`` = the actor's current learning rate η_t. Influence
    is averaged over ``accumulation_steps`` calls, then the weights move (effective step
    η_t/ρ = 0.1 with the paper's 1e-6 / 1e-5) and the accumulator resets; this call's reward
    uses the updated weights. Without grads/influence the weights stay. ``weights`` only
    initialise a fresh state (must be > 0; rescaled to sum 1). Paper: Lu et al., arXiv
    2509.11452 (authors' code ``ray_trainer_optimization.py``).
    """
    w0 = _check(scores, weights, "mirror_descent")
    if accumulation_steps < 1:
        raise ValueError(f"mirror_descent: accumulation_steps must be >= 1, got {accumulation_steps}")
    state = state if state is not None else MirrorDescentState()
    if state.weights.numel() == 0:
        if not bool((w0 > 0).all()):
            raise ValueError("mirror_descent: initial weights must all be > 0 (they live on the simplex)")
        state.weights, state.influence_sum = w0 / w0.sum(), torch.zeros_like(w0)
    if objective_grads is not None:
        grads = objective_grads if isinstance(objective_grads, torch.Tensor) else torch.tensor(objective_grads, device="cpu")
        influence = gradient_influence(grads)  # [K] on the gradients' device, moved to the state's below
    metrics: dict[str, torch.Tensor] = {}
    if influence is not None:
        step_influence = torch.as_tensor(influence, dtype=torch.float64, device=state.weights.device).flatten()
        if step_influence.numel() != state.weights.numel():
            raise ValueError(
                f"mirror_descent: influence has {step_influence.numel()} entries "
                f"for {state.weights.numel()} objectives"
            )
        state.influence_sum = state.influence_sum + step_influence
        state.accumulated += 1
        metrics.update({f"combiner/influence{k}": v.to(torch.float32) for k, v in enumerate(step_influence)})
        if state.accumulated >= accumulation_steps:
            mean_influence = state.influence_sum / state.accumulated
            state.weights = torch.softmax(state.weights.log() + lr * mean_influence / rho, dim=-1)
            state.influence_sum, state.accumulated = torch.zeros_like(state.influence_sum), 0
            state.updates += 1
    reward = _weighted(scores, group_ids, state.weights, normalize, std_mode, std_eps)
    return reward, state, {**_weight_metrics(state.weights), **metrics}




def new_combiner_state(name: str) -> Optional[HypervolumeState | MirrorDescentState]:
    """An empty state for combiner ``name`` (to ``load_state_dict`` into on resume); None if stateless."""
    make_state = COMBINERS.spec(name).make_state  # unknown names raise with the valid list
    return make_state() if make_state is not None else None

