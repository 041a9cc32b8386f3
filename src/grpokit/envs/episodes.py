"""Multi-turn episodes as a generation backend: the policy acts, the environment answers, repeat.

A trajectory is one token sequence: the prompt (the chat-rendered first observation), then model
turns and, between them, the chat template's tokens for each observation (a user or tool
message). Token-in/token-out: model turns are kept as the sampled ids, observations are appended
as the template's ids (:mod:`grpokit.envs.templates`), so the learner trains exactly the
sampled tokens. ``action_mask`` is 1 on sampled tokens only; ``completion_mask`` (attention) is 1
on every token; ``sampling_logp`` is the sampler's log-prob on sampled tokens and 0 elsewhere.

The G rollouts of a group are G episodes of the same environment seed ("G rollouts of the same
episode", as ActiveVLN, arXiv 2509.12618, §IV); their return (the sum of step rewards) reaches
the rewards as the ``env_return`` column, the trajectory's messages as ``messages`` (from the
first observation reset() returned, else from the first model turn) and the whole conversation,
the system message and the row's prompt before those, with roles, as ``conversation``, so a reward
function can judge all of it (and the logged samples show all of it). An episode ends when the environment
terminates or truncates it, at ``environment.max_turns`` model turns, or when the next turn
would not fit ``environment.max_episode_tokens`` (a turn cut there ends the episode unsent).

The first turn of a group is prefilled once and shared by its G rows. With
``environment.kv_cache`` (default, on backends that can continue a cache: hf) each episode's KV
cache is kept from one turn to the next and a turn prefills only what the episode gained since
(the last sampled token, the observation's template tokens): a turn costs its new tokens, not its
whole context. Rows of finished episodes leave the cache between turns, and columns no row
attends to any more are dropped. Without it, every turn re-prefills each episode's whole context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from grpokit.data.chat import render_prompt
from grpokit.envs.base import Message, StepResult, environment_factory, environment_label, reset_result
from grpokit.envs.info import episode_metrics  # noqa: F401  (re-exported: the trainer's env/* metrics)
from grpokit.envs.info import episode_columns
from grpokit.envs.pool import EnvironmentFailure, call_all, check_outcome
from grpokit.envs.templates import TurnTemplate, observation_messages
from grpokit.rollout.hf import completion_mask_from_eos
from grpokit.rollout.types import RolloutBatch, SamplingParams


@dataclass
class _Episode:
    """One trajectory while it is sampled."""

    env: Any
    env_name: str
    row_index: int
    prompt: str  # the rendered prompt text
    ids: list[int] = field(default_factory=list)  # every token after the prompt
    action: list[int] = field(default_factory=list)  # 1 = sampled by the policy
    logp: list[float] = field(default_factory=list)
    entropy: list[float] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    opening: list[Message] = field(default_factory=list)  # what comes before `messages` in the conversation (system, row prompt)
    ret: float = 0.0
    turn_rewards: list[float] = field(default_factory=list)  # the environment's reward of each answered turn
    cached: int = 0  # ids[:cached] are in the KV cache kept across turns (environment.kv_cache)
    turns: int = 0
    done: bool = False
    terminated: bool = False
    env_done: bool = False  # the environment itself ended the episode (terminated or truncated), not a grpokit cap
    error: Optional[str] = None  # why the environment failed the episode (raised, hung)
    info: dict[str, Any] = field(default_factory=dict)  # the last value of each info key

    def add(self, ids: list[int], action: int, logp: Optional[list[float]] = None, entropy: Optional[list[float]] = None) -> None:
        self.ids += ids
        self.action += [action] * len(ids)
        self.logp += logp if logp is not None else [0.0] * len(ids)
        self.entropy += entropy if entropy is not None else [0.0] * len(ids)


class EpisodeBackend:
    """A GenerationBackend whose "completion" is a multi-turn episode (see the module docstring).

    ``backend``: an in-process backend with ``decode(input_ids, attention, group_size, params)``
    (:class:`~grpokit.rollout.hf.HFBackend`). ``env``: the run's ``environment`` config section;
    ``system_prompt``: ``data.system_prompt``; ``seed``: an episode's seed is a function of it, the
    learner step (``learner_step``, set by the policy before each step's sampling), the call
    within the step and the group, so a run resumed at a step boundary replays the same episodes
    without any state in the checkpoint.
    """

    def __init__(self, backend: Any, env: Any, system_prompt: Optional[str], seed: int) -> None:
        self.backend, self.env_cfg, self.system_prompt, self.seed = backend, env, system_prompt, seed
        self.tokenizer, self.model = backend.tokenizer, backend.model
        self.pad_id, self.eos_ids, self.engine = backend.pad_id, backend.eos_ids, backend.engine
        eos_text = self.tokenizer.convert_ids_to_tokens(self.eos_ids[0])
        self.template = TurnTemplate(self.tokenizer, eos_text)
        self._step, self._calls = 0, 0
        # the KV cache across turns needs a backend that can continue one (hf's decode_turn)
        self.kv_cache = env.kv_cache and callable(getattr(backend, "decode_turn", None))
        self.max_failed_fraction, self.heldout_seed = env.max_failed_fraction, env.heldout_seed
        self._cache, self._cache_rows = None, []

    @property
    def learner_step(self) -> int:
        return self._step

    @learner_step.setter
    def learner_step(self, step: int) -> None:
        """The policy's ``begin_step``: episodes of this step get seeds of their own."""
        self._step, self._calls = step, 0

    def episode_seed(self, group: int) -> int:
        """A training episode's seed: 31 bits of a hash of (run seed, learner step, call within the step, group).

        Below 2^31, so never one of the held-out seeds (``environment.heldout_seed`` + i >= 2^31) [grpokit's choice].
        """
        import hashlib

        key = f"{self.seed}/{self._step}/{self._calls}/{group}".encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=4).digest(), "little") & 0x7FFFFFFF

    def heldout_seeds(self, start: int, n: int) -> list[int]:
        """The seeds of held-out rows ``start .. start + n - 1``: ``environment.heldout_seed + i``, the same at every evaluation."""
        return [self.heldout_seed + i for i in range(start, start + n)]

    # ------------------------------------------------------------------ episodes
    def _new_episodes(self, prompt_texts: list[str], rows: list[dict], group_size: int, seeds: Optional[list[int]]) -> list[_Episode]:
        c = self.env_cfg
        episodes, resets = [], []
        for g, row in enumerate(rows):
            name = row.get("environment") or c.name
            factory = environment_factory(name)
            seed = self.episode_seed(g) if seeds is None else seeds[g]
            for _ in range(group_size):
                ep = _Episode(None, environment_label(name), g, prompt_texts[g])
                episodes.append(ep)
                resets.append(lambda ep=ep, factory=factory, row=row, seed=seed: self._start(ep, factory, row, seed))
        self._calls += seeds is None  # held-out episodes leave the training seeds' sequence alone
        for ep, out in zip(episodes, call_all(resets, c.step_timeout_s)):
            ep.error = check_outcome(out, ep.env_name, "reset()" if ep.env is not None else "__init__()", ep.row_index,
                                     c.on_error, c.step_timeout_s)
            ep.opening = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            if ep.error is not None:
                ep.done = True
                continue
            if out.value:  # the first observation is the prompt; none: the row's own prompt
                first = observation_messages(out.value, "user")
                ep.prompt = render_prompt(self.tokenizer, first, self.system_prompt)
                ep.messages = list(first)
            else:
                ep.opening += observation_messages(rows[ep.row_index]["prompt"], "user")
        return episodes

    def _start(self, ep: _Episode, factory: Any, row: dict, seed: int) -> Any:
        """Build ``ep``'s environment with ``environment.options`` and reset it (in a pool thread: an option the
        constructor refuses fails the episode, named, like a reset that raises)."""
        ep.env = factory(**self.env_cfg.options)
        observation, info = reset_result(ep.env.reset(row, seed))
        ep.info.update(info)  # reset's info, as gymnasium's: later steps' values of the same key replace it
        return observation

    def _decode_turn(self, episodes: list[_Episode], live: list[int], shared_group: int, params: SamplingParams):
        """Sampled ids, log-probs and entropies ``[len(live), T]`` of one turn of the ``live`` episodes."""
        if self.kv_cache:
            return self._decode_cached(episodes, live, shared_group, params)
        tok = self.tokenizer
        if shared_group:  # first turn, identical prompts per group: prefill each prompt once
            texts = [episodes[i].prompt for i in live[::shared_group]]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            ids, att = enc.input_ids, enc.attention_mask
        else:
            contexts = [tok(episodes[i].prompt, add_special_tokens=False).input_ids + episodes[i].ids for i in live]
            width = max(len(c) for c in contexts)
            ids = torch.full((len(live), width), self.pad_id, dtype=torch.long, device="cpu")
            att = torch.zeros((len(live), width), dtype=torch.long, device="cpu")
            for r, c in enumerate(contexts):  # left padding, as the prompt prefill expects
                ids[r, width - len(c):] = torch.tensor(c, dtype=torch.long, device="cpu")
                att[r, width - len(c):] = 1
        device = next(self.model.parameters()).device
        return self.backend.decode(ids.to(device), att.to(device), shared_group or 1, params)

    def _decode_cached(self, episodes: list[_Episode], live: list[int], shared_group: int, params: SamplingParams):
        """:meth:`_decode_turn` over the cache the last turn left: only each episode's tokens since then are prefilled.

        Every live episode was decoded last turn (episodes only ever leave), so its cache row holds
        the prompt and ``ids[:cached]``; this turn prefills ``ids[cached:]`` (the sampled tokens
        not yet fed, the observation), left-padded into one chunk.
        """
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        if self._cache is None:  # first turn: the prompts (once per group when the group shares it)
            texts = [episodes[i].prompt for i in (live[::shared_group] if shared_group else live)]
            chunks = tok(texts, add_special_tokens=False).input_ids
            past = None
        else:
            where = {e: r for r, e in enumerate(self._cache_rows)}
            past = self._cache.select(torch.tensor([where[i] for i in live], device=device))
            chunks = [episodes[i].ids[episodes[i].cached:] for i in live]
        width = max(len(c) for c in chunks)
        ids = torch.full((len(chunks), width), self.pad_id, dtype=torch.long, device="cpu")
        att = torch.zeros((len(chunks), width), dtype=torch.long, device="cpu")
        for r, c in enumerate(chunks):  # left padding: every row's last column is real
            ids[r, width - len(c):] = torch.tensor(c, dtype=torch.long, device="cpu")
            att[r, width - len(c):] = 1
        tokens, logps, ents, cache = self.backend.decode_turn(ids.to(device), att.to(device), shared_group or 1, params, past)
        self._cache, self._cache_rows = cache, list(live)
        for i in live:
            episodes[i].cached = len(episodes[i].ids)  # before this turn's tokens are added (see _turn)
        return tokens, logps, ents

    def _turn(self, episodes: list[_Episode], params: SamplingParams, first: bool) -> None:
        """One model turn of every live episode, then one environment step of each."""
        c = self.env_cfg
        live = [i for i, ep in enumerate(episodes) if not ep.done]
        g = len(episodes) // max(len({ep.row_index for ep in episodes}), 1)
        shared = g if first and len(live) == len(episodes) and self._prompts_shared(episodes, g) else 0
        tokens, logps, ents = self._decode_turn(episodes, live, shared, params)
        mask, cut = completion_mask_from_eos(tokens, self.eos_ids)
        tokens, mask, logps, ents = tokens.cpu(), mask.cpu(), logps.cpu(), ents.cpu()
        acting = []
        for r, i in enumerate(live):
            ep, n = episodes[i], int(mask[r].sum())
            room = c.max_episode_tokens - len(ep.ids)
            ep.add(tokens[r, :min(n, room)].tolist(), 1, logps[r, :min(n, room)].tolist(), ents[r, :min(n, room)].tolist())
            if self._cache is not None:  # the sampled tokens fed back into the cache: through EOS, at most `fed`
                ep.cached += min(n, self._cache.fed)
            ep.turns += 1
            text = self.tokenizer.decode(tokens[r, :n].tolist(), skip_special_tokens=True)
            ep.messages.append({"role": "assistant", "content": text})
            if n > room:  # the turn does not fit the episode's token cap: it ends here, unsent
                ep.done = True
                continue
            acting.append((i, text, not bool(cut[r])))
        outcomes = call_all([lambda e=episodes[i].env, a=text: e.step(a) for i, text, _ in acting], c.step_timeout_s)
        for (i, _, ended), out in zip(acting, outcomes):
            ep = episodes[i]
            ep.error = check_outcome(out, ep.env_name, f"step() at turn {ep.turns}", ep.row_index, c.on_error, c.step_timeout_s)
            if ep.error is not None:
                ep.done = True
                continue
            res = StepResult.of(out.value)
            ep.ret += res.reward
            ep.turn_rewards.append(float(res.reward))
            ep.info.update(res.info)  # every value, any type: the columns and metrics sort them (grpokit.envs.info)
            if res.terminated or res.truncated or ep.turns >= c.max_turns:
                ep.done, ep.terminated, ep.env_done = True, res.terminated, res.terminated or res.truncated
                continue
            obs = observation_messages(res.observation, c.observation_role)
            between = self.template.between_ids(obs, ended)
            if len(ep.ids) + len(between) + 1 > c.max_episode_tokens:
                ep.done = True  # no room for another turn
                continue
            ep.add(between, 0)
            ep.messages += obs

    @staticmethod
    def _prompts_shared(episodes: list[_Episode], g: int) -> bool:
        return all(episodes[k].prompt == episodes[k - k % g].prompt for k in range(len(episodes)))

    @torch.no_grad()
    def generate(self, prompt_texts: list[str], rows: list[dict], group_size: int, params: SamplingParams,
                 seeds: Optional[list[int]] = None) -> RolloutBatch:
        """``group_size`` episodes per row, prompt-major, as one RolloutBatch with ``action_mask`` and ``episodes``.

        ``seeds``: one episode seed per row (held-out rows: :meth:`heldout_seeds`); None = training
        seeds (:meth:`episode_seed`). Raises :class:`EnvironmentFailure` (one line, the most common
        error) when the environment failed at least ``environment.max_failed_fraction`` of the episodes.
        """
        episodes = self._new_episodes(prompt_texts, rows, group_size, seeds)
        self._cache, self._cache_rows = None, []
        was_training = self.model.training
        self.model.eval()
        try:
            for t in range(self.env_cfg.max_turns):
                if all(ep.done for ep in episodes):
                    break
                self._turn(episodes, params, first=t == 0)
        finally:
            self.model.train(was_training)
            self._cache, self._cache_rows = None, []  # the memory goes with the call
            closers = [ep.env.close for ep in episodes if callable(getattr(ep.env, "close", None))]
            if closers:  # an environment holding a connection or a process lets it go (errors are its own)
                call_all(closers, self.env_cfg.step_timeout_s)
        check_failures(episodes, self.max_failed_fraction)
        return self._batch(episodes, rows, group_size)

    def _batch(self, episodes: list[_Episode], rows: list[dict], group_size: int) -> RolloutBatch:
        tok, device = self.tokenizer, next(self.model.parameters()).device
        b, width = len(episodes), max([len(ep.ids) for ep in episodes] + [1])
        enc = tok([ep.prompt for ep in episodes], return_tensors="pt", padding=True, add_special_tokens=False)
        out = {k: torch.zeros((b, width), dtype=dt, device="cpu") for k, dt in
               (("ids", torch.long), ("mask", torch.long), ("action", torch.long), ("logp", torch.float32), ("entropy", torch.float32))}
        out["ids"].fill_(self.pad_id)
        for r, ep in enumerate(episodes):
            n = len(ep.ids)
            out["ids"][r, :n] = torch.tensor(ep.ids, dtype=torch.long, device="cpu")
            out["mask"][r, :n] = 1
            out["action"][r, :n] = torch.tensor(ep.action, dtype=torch.long, device="cpu")
            out["logp"][r, :n] = torch.tensor(ep.logp, dtype=torch.float32, device="cpu")
            out["entropy"][r, :n] = torch.tensor(ep.entropy, dtype=torch.float32, device="cpu")
        on = lambda x: x.to(device)  # noqa: E731
        return RolloutBatch(
            prompt_ids=on(enc.input_ids), prompt_mask=on(enc.attention_mask), completion_ids=on(out["ids"]),
            completion_mask=on(out["mask"]), group_ids=torch.arange(len(rows), device=device).repeat_interleave(group_size),
            sampling_logp=on(out["logp"]), truncated=torch.tensor([not ep.terminated for ep in episodes], device=device),
            entropy=on(out["entropy"]), prompts=[rows[ep.row_index]["prompt"] for ep in episodes],
            completions=[next((m["content"] for m in reversed(ep.messages) if m["role"] == "assistant"), "") for ep in episodes],
            rows=[rows[ep.row_index] for ep in episodes], engine=self.engine, action_mask=on(out["action"]),
            episodes=[episode_columns(ep.ret, ep.messages, ep.turns, ep.terminated, ep.env_done, ep.error, ep.turn_rewards, ep.info,
                                      conversation=ep.opening + ep.messages) for ep in episodes],
        )


def check_failures(episodes: list[_Episode], max_failed_fraction: float) -> None:
    """Stop the run, in one line naming the most common error, when at least ``max_failed_fraction`` of ``episodes`` failed.

    An episode fails when its environment raised or hung (not when it ends the episode as a loss):
    such a batch trains on nothing (every reward 0, no advantage), and the rewards would only
    report a column the episodes never filled.
    """
    errors = [ep.error for ep in episodes if ep.error is not None]
    if not errors or len(errors) < max_failed_fraction * len(episodes):
        return
    common = max(set(errors), key=lambda e: (errors.count(e), e))
    raise EnvironmentFailure(
        f"{len(errors)} of {len(episodes)} episodes failed (environment.max_failed_fraction={max_failed_fraction:g}); "
        f"{errors.count(common)} of them: {common}. Fix the environment or the rows, or raise environment.max_failed_fraction")


def episode_backend(backend: Any, cfg: Any) -> Any:
    """The sampler of a run: ``backend`` itself, or for an environment run the :class:`EpisodeBackend` around it."""
    if not cfg.environment.name:
        return backend
    return EpisodeBackend(backend, cfg.environment, cfg.data.system_prompt, seed=cfg.train.seed)
