"""Multi-turn episodes: token-in/token-out trajectories, masks, log-probs and failing environments."""

import time
from pathlib import Path

import pytest
import torch

from grpokit.config.schema import EnvironmentConfig
from grpokit.envs.base import ENVIRONMENTS, environment_factory
from grpokit.envs.episodes import EpisodeBackend, episode_metrics
from grpokit.envs.pool import EnvironmentFailure
from grpokit.envs.templates import TurnTemplate
from grpokit.families.causal_lm.policy import CausalLMPolicy
from grpokit.rollout.hf import HFBackend
from grpokit.rollout.types import SamplingParams
from grpokit.testing import tiny_model_and_tokenizer

ROWS = [{"prompt": "hi", "answer": "1"}, {"prompt": "count to three", "answer": "2"}]


SCRIPTED = f"{Path(__file__).parent / '_scripted.py'}:Scripted"


def env_cfg(**kw):
    base = dict(name=SCRIPTED, options={}, max_turns=8, max_episode_tokens=400,
                step_timeout_s=0.0, on_error="fail_episode", observation_role="user")
    return EnvironmentConfig(**{**base, **kw})


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
    # max_failed_fraction above 1 is refused by the config; a stand-in shows the per-episode failures themselves
    backend, batch = episodes(tiny, options={"raise_at": 2}, max_failed_fraction=1.0 + 1e-9)
    assert all(ep["env_failed"] and ep["turns"] == 2 and not ep["env_terminated"] for ep in batch.episodes)
    assert episode_metrics(batch)["env/failed_episodes"] == 4 and bool(batch.truncated.all())
    assert batch.episodes[0]["env_error"] == f"environment '{SCRIPTED}' step() at turn 2 raised KeyError: 'broken env'"
    with pytest.raises(EnvironmentFailure) as err:
        episodes(tiny, options={"raise_at": 2}, on_error="raise")
    msg = str(err.value)
    assert SCRIPTED in msg and "KeyError" in msg and "\n" not in msg


def test_a_batch_whose_every_episode_failed_stops_the_run_naming_the_most_common_error(tiny):
    """Rows 0 and 1 lack the column reset() reads (4 episodes fail there), row 2 breaks at its first step (2 more):
    all 6 failed, and the one line names the reset error (4 of them), not a reward's missing column downstream."""
    model, tok = tiny
    rows = [{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c", "world": 1}]
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    backend = EpisodeBackend(HFBackend(model, tok), env_cfg(options={"needs": "world", "raise_at": 1}), None, seed=0)
    with pytest.raises(EnvironmentFailure) as err:
        backend.generate(texts, rows, 2, SamplingParams(max_new_tokens=3))
    assert str(err.value) == (
        f"6 of 6 episodes failed (environment.max_failed_fraction=1); 4 of them: environment '{SCRIPTED}' reset() raised "
        "KeyError: \"the row has no 'world' column\". Fix the environment or the rows, or raise environment.max_failed_fraction")


@pytest.mark.parametrize("fraction,stops", [(1.0, False), (0.5, True)])
def test_max_failed_fraction_stops_a_batch_at_that_share_of_failed_episodes(tiny, fraction, stops):
    model, tok = tiny
    rows = [{"prompt": "a"}, {"prompt": "b", "world": 1}]  # row 0's 2 episodes fail at reset: 2 of 4 = 0.5
    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True) for r in rows]
    backend = EpisodeBackend(HFBackend(model, tok), env_cfg(options={"needs": "world"}, max_failed_fraction=fraction), None, seed=0)
    if stops:
        with pytest.raises(EnvironmentFailure, match="2 of 4 episodes failed"):
            backend.generate(texts, rows, 2, SamplingParams(max_new_tokens=3))
        return
    batch = backend.generate(texts, rows, 2, SamplingParams(max_new_tokens=3))
    assert [ep["env_failed"] for ep in batch.episodes] == [True, True, False, False]
    assert episode_metrics(batch)["env/failed_frac"] == 0.5


def test_an_environment_that_hangs_is_abandoned_after_the_step_timeout(tiny):
    t = time.perf_counter()
    with pytest.raises(EnvironmentFailure, match=r"4 of 4 episodes failed .* did not return within 0.3 s \(environment.step_timeout_s\)"):
        episodes(tiny, options={"hang_at": 1}, step_timeout_s=0.3)
    assert time.perf_counter() - t < 4  # not the 5 s sleep of each of the 4 hanging steps


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


def test_heldout_episodes_play_fixed_seeds_of_their_own_and_leave_the_training_seeds_alone(tiny):
    model, tok = tiny
    params = SamplingParams(max_new_tokens=3)

    def backend(**kw):
        b = EpisodeBackend(HFBackend(model, tok), env_cfg(options={"turns": 1}, **kw), None, seed=5)
        b.learner_step = 3
        return b

    fresh = [ep["env_seed"] for ep in backend().generate(prompts(tok), ROWS, 2, params).episodes]
    b = backend()
    held = [ep["env_seed"] for ep in b.generate(prompts(tok), ROWS, 2, params, seeds=b.heldout_seeds(0, 2)).episodes]
    assert held == [2**31, 2**31, 2**31 + 1, 2**31 + 1]  # row i: heldout_seed + i, shared by its group
    train = [ep["env_seed"] for ep in b.generate(prompts(tok), ROWS, 2, params).episodes]
    assert train == fresh  # the held-out call did not advance the step's call counter
    assert max(train) < 2**31 and set(train).isdisjoint(held)
    assert b.heldout_seeds(5, 2) == [2**31 + 5, 2**31 + 6]  # a chunk of the held-out set keeps its rows' seeds
    assert backend(heldout_seed=2**31 + 100).heldout_seeds(0, 1) == [2**31 + 100]


def test_info_values_of_every_json_type_reach_the_columns_and_numbers_and_bools_the_metrics(tiny):
    """Scripted: 3 turns of reward 1, so grpokit's return is 3 and its turns 3, whatever info says."""
    extra = {"is_success": True, "turns": 99, "return": 5, "label": "x", "nothing": None, "path": [1, 2], "meta": {"a": 1}}
    _, batch = episodes(tiny, options={"extra_info": extra})
    ep = batch.episodes[0]
    assert ep["env_info"] == {"t": 3, "action_len": ep["env_action_len"], "seed": ep["env_seed"], **extra}  # the last step's values
    assert ep["env_is_success"] is True and ep["env_label"] == "x" and ep["env_path"] == [1, 2]
    assert ep["env_return"] == 3.0 and ep["turns"] == 3  # info["return"] / info["turns"] do not shadow grpokit's
    cols = batch.columns()
    assert cols["env_return"] == [3.0] * 4 and cols["env_info"][0]["return"] == 5
    m = episode_metrics(batch)
    assert m["env/is_success"] == 1.0  # True -> 1
    assert m["env/turns"] == 3 and m["env/info/turns"] == 99 and m["env/return"] == 3 and m["env/info/return"] == 5
    assert not {"env/label", "env/nothing", "env/path", "env/meta", "env/info/label"} & set(m)
    from grpokit.rewards.builtin import REWARDS

    assert REWARDS.get("env_info")(batch.prompts, batch.completions, key="is_success", **cols) == [1.0] * 4


def test_observation_role_is_the_chat_role_of_text_observations(tiny):
    _, tok = tiny
    for role in ("user", "tool"):
        _, batch = episodes(tiny, observation_role=role)
        assert [m["role"] for m in batch.episodes[0]["messages"]] == ["assistant", role, "assistant", role, "assistant"]
        n = int(batch.completion_mask[0].sum())
        assert f"<|im_start|>{role}\nobs1<|im_end|>" in tok.decode(batch.completion_ids[0, :n].tolist())


def test_an_option_the_environments_constructor_refuses_fails_its_episodes_by_name(tiny):
    """A file.py:Class environment's options are not checked by a registry: its constructor's TypeError is the episodes'
    failure, and the batch, all failed, stops in one line instead of a traceback out of the rollout."""
    with pytest.raises(EnvironmentFailure) as err:
        episodes(tiny, options={"turn": 3})
    assert f"4 of them: environment '{SCRIPTED}' __init__() raised TypeError: Scripted.__init__() got an unexpected keyword " \
           "argument 'turn'" in str(err.value)
