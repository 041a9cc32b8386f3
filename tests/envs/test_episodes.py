"""Multi-turn episodes: token-in/token-out trajectories, masks, log-probs and failing environments."""

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from grpokit.envs.base import ENVIRONMENTS, environment_factory
from grpokit.envs.episodes import EpisodeBackend, episode_metrics
from grpokit.envs.pool import EnvironmentFailure
from grpokit.envs.templates import TurnTemplate
from grpokit.policies.causal_lm import CausalLMPolicy
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer

ROWS = [{"prompt": "hi", "answer": "1"}, {"prompt": "count to three", "answer": "2"}]


SCRIPTED = f"{Path(__file__).parent / '_scripted.py'}:Scripted"


def env_cfg(**kw):
    base = dict(name=SCRIPTED, options={}, max_turns=8, max_episode_tokens=400,
                step_timeout_s=0.0, on_error="fail_episode", observation_role="user")
    return SimpleNamespace(**{**base, **kw})


def prompts(tok):
    return [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True)
            for r in ROWS]


@pytest.fixture(scope="module")
def tiny():
    model, tok = tiny_model_and_tokenizer(seed=0)
    return model, tok


def episodes(tiny, group=2, params=SamplingParams(max_new_tokens=5, temperature=1.0), **kw):
    model, tok = tiny
    torch.manual_seed(0)
    backend = EpisodeBackend(HFBackend(model, tok), env_cfg(**kw), None, seed=0)
    return backend, backend.generate(prompts(tok), ROWS, group, params)


def test_observation_and_template_tokens_carry_action_mask_0_and_sampled_tokens_1(tiny):
    _, tok = tiny
    backend, batch = episodes(tiny)
    assert batch.action_mask is not None and batch.unit_mask is batch.action_mask
    for r in range(len(batch)):
        n = int(batch.completion_mask[r].sum())
        ids, act = batch.completion_ids[r, :n].tolist(), batch.action_mask[r, :n].tolist()
        ep = batch.episodes[r]
        assert ep["turns"] == 3 and ep["env_terminated"] and ep["env_return"] == 3.0
        # the unsampled tokens, in order, are the template's text for obs1 and obs2 after each turn
        obs_text = tok.decode([i for i, a in zip(ids, act) if a == 0])
        assert "<|im_start|>user\nobs1<|im_end|>\n<|im_start|>assistant\n" in obs_text and "obs2" in obs_text
        assert "obs3" not in obs_text  # the episode ended at turn 3: no observation after it
        # sampled tokens have a sampler log-prob, the others exactly 0 and no entropy
        logp, ent = batch.sampling_logp[r, :n], batch.entropy[r, :n]
        assert bool((logp[torch.tensor(act) == 1] < 0).all()) and not logp[torch.tensor(act) == 0].any()
        assert not ent[torch.tensor(act) == 0].any()
        # each assistant message is the decoded text of its turn's sampled tokens
        turns = [m["content"] for m in ep["messages"] if m["role"] == "assistant"]
        assert len(turns) == 3 and batch.completions[r] == turns[-1]
        assert ep["env_action_len"] == len(turns[-1])  # the environment saw this row's own turn text
    assert len({len(m["content"]) for ep in batch.episodes for m in ep["messages"] if m["role"] == "assistant"}) > 1
    m = episode_metrics(batch)
    assert m["env/turns"] == 3 and m["env/return"] == 3 and m["env/t"] == 3 and m["env/failed_episodes"] == 0
    assert m["env/observation_tokens"] > 0 and m["env/action_tokens"] > 0


def test_per_turn_sampler_logprobs_equal_a_full_sequence_recompute(tiny):
    model, tok = tiny
    params = SamplingParams(max_new_tokens=6, temperature=0.7)
    _, batch = episodes(tiny, group=3, params=params)
    policy = CausalLMPolicy(model, tok, HFBackend(model, tok), temperature=0.7)
    with torch.no_grad():
        rescored = policy.score(batch)
    act = batch.action_mask.bool()
    assert int(act.sum()) > 20 and int((batch.completion_mask.bool() & ~act).sum()) > 20
    torch.testing.assert_close(rescored[act], batch.sampling_logp[act], atol=1e-5, rtol=0)


@pytest.mark.parametrize("fused", [True, False])
def test_the_kv_cache_kept_across_turns_samples_what_a_full_prefill_samples_and_prefills_only_new_tokens(tiny, fused):
    """Greedy episodes with kv_cache on and off: the same trajectories and log-probs (to float rounding);
    with the cache, the prefills after the first turn take only the tokens each episode gained. (Sampled
    episodes draw their random numbers in another order with the cache: finished rows stay in its batch.)"""
    model, tok = tiny
    params = SamplingParams(max_new_tokens=6, greedy=True)
    prefilled = []
    hook = model.register_forward_hook(
        lambda m, args, kwargs, out: prefilled.append(int(kwargs["attention_mask"][:, -kwargs["input_ids"].shape[1]:].sum()))
        if kwargs.get("input_ids") is not None and kwargs["input_ids"].shape[1] > 1 else None, with_kwargs=True)
    out = {}
    try:
        for cached in (True, False):
            prefilled.clear()
            torch.manual_seed(0)
            backend = EpisodeBackend(HFBackend(model, tok, fused_decode=fused), env_cfg(kv_cache=cached), None, seed=0)
            out[cached] = (backend.generate(prompts(tok), ROWS, 3, params), sum(prefilled))
    finally:
        hook.remove()
    (on, on_tokens), (off, off_tokens) = out[True], out[False]
    assert torch.equal(on.completion_ids, off.completion_ids) and torch.equal(on.action_mask, off.action_mask)
    torch.testing.assert_close(on.sampling_logp, off.sampling_logp, atol=1e-5, rtol=0)
    turns = [ep["turns"] for ep in on.episodes]
    assert min(turns) == 3
    # without the cache every turn re-prefills the whole context; with it, the contexts are prefilled once
    context = int(on.completion_mask.sum()) - int(on.action_mask.sum())  # observation tokens over all episodes
    assert on_tokens < off_tokens and on_tokens <= int(on.prompt_mask.sum()) + context + int(on.action_mask.sum())


def test_trained_ids_are_the_sampled_ids_even_when_decode_then_encode_would_change_them(tiny, monkeypatch):
    """The turn's sampled characters spell "<|im_end|>" as 10 single-character tokens: re-encoding the
    text would give the one special id 2; the trajectory keeps the 10 sampled ids."""
    model, tok = tiny
    spelled = tok("<|im_end|>", add_special_tokens=False).input_ids
    chars = [tok.convert_tokens_to_ids(c) for c in "<|im_end|>"]
    assert spelled == [tok.eos_token_id] and len(chars) == 10  # the round trip differs
    inner = HFBackend(model, tok)
    scripted = torch.tensor(chars + [tok.eos_token_id])

    def decode(input_ids, attention, group_size, params):
        b = input_ids.shape[0] * group_size
        return scripted.repeat(b, 1), torch.full((b, len(scripted)), -0.5), torch.ones(b, len(scripted))

    monkeypatch.setattr(inner, "decode", decode)
    backend = EpisodeBackend(inner, env_cfg(options={"turns": 2}, kv_cache=False), None, seed=0)
    batch = backend.generate(prompts(tok), ROWS, 2, SamplingParams(max_new_tokens=11))
    for r in range(len(batch)):
        n = int(batch.completion_mask[r].sum())
        sampled = [i for i, a in zip(batch.completion_ids[r, :n].tolist(), batch.action_mask[r, :n].tolist()) if a]
        assert sampled == (chars + [tok.eos_token_id]) * 2


def test_an_environment_that_raises_ends_its_episode_or_stops_the_run_by_name(tiny):
    backend, batch = episodes(tiny, options={"raise_at": 2})
    assert all(ep["env_failed"] and ep["turns"] == 2 and not ep["env_terminated"] for ep in batch.episodes)
    assert episode_metrics(batch)["env/failed_episodes"] == 4 and bool(batch.truncated.all())
    with pytest.raises(EnvironmentFailure) as err:
        episodes(tiny, options={"raise_at": 2}, on_error="raise")
    msg = str(err.value)
    assert SCRIPTED in msg and "KeyError" in msg and "\n" not in msg


def test_an_environment_that_hangs_is_abandoned_after_the_step_timeout(tiny):
    t = time.perf_counter()
    _, batch = episodes(tiny, options={"hang_at": 1}, step_timeout_s=0.3)
    assert time.perf_counter() - t < 4  # not the 5 s sleep of each of the 4 hanging steps
    assert all(ep["env_failed"] and ep["turns"] == 1 for ep in batch.episodes)


def test_turn_and_token_caps_truncate_the_episode(tiny):
    _, batch = episodes(tiny, options={"turns": 10}, max_turns=2)
    assert all(ep["turns"] == 2 and not ep["env_terminated"] for ep in batch.episodes) and bool(batch.truncated.all())
    _, batch = episodes(tiny, options={"turns": 10}, max_episode_tokens=30)
    assert int(batch.completion_mask.sum(-1).max()) <= 30 and bool(batch.truncated.all())


def test_turn_template_between_text_for_chatml_after_an_ended_and_a_cut_turn(tiny):
    _, tok = tiny
    t = TurnTemplate(tok, "<|im_end|>")
    obs = [{"role": "user", "content": "Higher."}]
    assert t.between(obs, ended=True) == "\n<|im_start|>user\nHigher.<|im_end|>\n<|im_start|>assistant\n"
    assert t.between(obs, ended=False) == "<|im_end|>\n<|im_start|>user\nHigher.<|im_end|>\n<|im_start|>assistant\n"


def test_guess_number_environment_rewards_finding_the_secret_less_a_penalty_per_extra_guess():
    env = environment_factory("guess_number")(max_guesses=4, turn_penalty=0.1)
    assert env.reset({"answer": "7"}, seed=0) == ""
    assert env.step("5").observation == "Higher."
    assert env.step("my guess: 9").observation == "Lower."
    r = env.step("7")
    assert r.terminated and r.reward == pytest.approx(0.8) and r.info["solved"] == 1.0  # 1 - 0.1 * (3 - 1)
    env.reset({"answer": "7"})
    assert env.step("no idea").observation == "Reply with just one number."
    for guess in ("1", "2"):
        env.step(guess)
    r = env.step("3")
    assert r.truncated and not r.terminated and r.reward == 0.0 and r.info["valid_guess"] == 0.75
    assert "guess_number" in ENVIRONMENTS


def test_episode_seeds_are_shared_in_a_group_and_replayed_at_the_same_step(tiny):
    model, tok = tiny

    def seeds(step):
        backend = EpisodeBackend(HFBackend(model, tok), env_cfg(options={"turns": 1}), None, seed=5)
        backend.learner_step = step
        first = [ep["env_seed"] for ep in backend.generate(prompts(tok), ROWS, 2, SamplingParams(max_new_tokens=3)).episodes]
        second = [ep["env_seed"] for ep in backend.generate(prompts(tok), ROWS, 2, SamplingParams(max_new_tokens=3)).episodes]
        return first, second

    first, second = seeds(3)
    assert first[0] == first[1] and first[2] == first[3] and first[0] != first[2]  # one seed per group
    assert set(first).isdisjoint(second)  # a second call in the step (a dynamic-sampling round) draws new episodes
    assert seeds(3) == (first, second)  # a resumed run at step 3 replays them
    assert seeds(4)[0] != first


def test_guess_number_rows_hold_their_secret_inside_the_range_of_the_prompt():
    from grpokit.data.tasks import TASKS

    splits = TASKS.get("guess_number")(0, 30, 10)
    for row in splits.train + splits.heldout:
        assert f"from {row['lo']} to {row['hi']}" in row["prompt"] and row["lo"] <= int(row["answer"]) <= row["hi"]
        assert row["environment"] == "guess_number" and 4 <= row["hi"] - row["lo"] + 1 <= 16
