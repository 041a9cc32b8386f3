"""LLM-judge preference: P(A) from one forward pass, symmetry, caching, win_rate plumbing.

Fast tests use a saved tiny random Llama with a character-level ChatML tokenizer as the judge;
the slow test loads the embedded SmolLM2-135M-Instruct.
"""

import functools
import string
import threading

import pytest
import torch

from grpokit.data.chat import render_prompt
from grpokit.rewards import REWARDS
from grpokit.rewards import judge as judge_module
from grpokit.rewards.group import PREFERENCES
from grpokit.rewards.judge import (
    DEFAULT_TEMPLATE,
    JudgeError,
    answer_token_ids,
    clear_judge_cache,
    llm_judge_prefer,
    llm_judge_prefer_batch,
    load_judge,
)
from grpokit.testing import save_tiny_model, tiny_tokenizer

PAIRS = [("What is 2+3?", "5", "It is 7."), ("Greet me.", "Hello there, friend!", "no"), ("q", "", "x")]


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("judge"), seed=1)


@pytest.fixture(autouse=True)
def fresh_cache():
    clear_judge_cache()
    yield
    clear_judge_cache()


def test_llm_judge_is_a_builtin_preference():
    assert PREFERENCES["llm_judge"] is llm_judge_prefer


def test_answer_tokens_of_a_character_tokenizer():
    tok = tiny_tokenizer()
    rendered = render_prompt(tok, "Which? Answer A or B.")
    # ids: 4 specials, then string.printable; "A" is printable[36] -> 40, "B" -> 41. " A" and " B"
    # both start with the token " ", so that spelling cannot tell them apart and is dropped.
    assert string.printable.index("A") == 36
    assert answer_token_ids(tok, rendered) == ((40,), (41,))


def test_prefer_is_softmax_over_the_answer_logits(tiny_judge):
    from grpokit.model.loading import load_model

    model, tok = load_model(tiny_judge)
    for prompt, a, b in PAIRS:
        text = render_prompt(tok, DEFAULT_TEMPLATE.format(prompt=prompt, a=a, b=b))
        ids = tok(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = model(ids).logits[0, -1]  # [V]
        expected = torch.softmax(logits[[40, 41]].double(), -1)[0].item()  # P(A) over {A, B}
        p = llm_judge_prefer(prompt, a, b, judge_model=tiny_judge, device="cpu")
        assert isinstance(p, float) and 0.0 < p < 1.0
        assert p == pytest.approx(expected, abs=1e-6)


def test_symmetric_cancels_position_bias(tiny_judge):
    for prompt, a, b in PAIRS:
        p_ab = llm_judge_prefer(prompt, a, b, judge_model=tiny_judge)
        p_ba = llm_judge_prefer(prompt, b, a, judge_model=tiny_judge)
        s_ab = llm_judge_prefer(prompt, a, b, judge_model=tiny_judge, symmetric=True)
        s_ba = llm_judge_prefer(prompt, b, a, judge_model=tiny_judge, symmetric=True)
        assert s_ab == pytest.approx((p_ab + 1.0 - p_ba) / 2.0, abs=1e-6)
        assert s_ab + s_ba == pytest.approx(1.0, abs=1e-9)
    assert llm_judge_prefer("q", "same", "same", judge_model=tiny_judge, symmetric=True) == pytest.approx(0.5)


def test_batch_with_left_padding_matches_single_calls(tiny_judge):
    prompts, firsts, seconds = map(list, zip(*PAIRS))
    batched = llm_judge_prefer_batch(prompts, firsts, seconds, judge_model=tiny_judge, batch_size=3)
    singles = [llm_judge_prefer(q, a, b, judge_model=tiny_judge) for q, a, b in PAIRS]
    assert batched == pytest.approx(singles, abs=1e-5)


def test_judge_loads_once_per_source_across_threads(tiny_judge, monkeypatch):
    calls = []
    real = judge_module.load_model
    monkeypatch.setattr(judge_module, "load_model", lambda src: calls.append(src) or real(src))
    threads = [threading.Thread(target=llm_judge_prefer, args=("q", "a", "b"), kwargs={"judge_model": tiny_judge})
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    llm_judge_prefer("q", "c", "d", judge_model=tiny_judge + "/")  # same folder, other spelling
    assert len(calls) == 1
    judge = load_judge(tiny_judge)
    assert not judge.model.training and not any(p.requires_grad for p in judge.model.parameters())


def test_win_rate_with_llm_judge(tiny_judge):
    fn = REWARDS.get("win_rate")
    completions = ["5", "It is 7.", "five", "x", "yy"]
    prompts = ["What is 2+3?"] * 3 + ["Spell"] * 2
    # judge_model is a scalar option: win_rate hands it to prefer (as a YAML kwargs binding would)
    bound = functools.partial(fn, prefer="llm_judge", judge_model=tiny_judge)
    w = bound(prompts, completions, group_ids=[0, 0, 0, 1, 1], answer=[5, 5, 5, 0, 0])
    assert sum(w[:3]) == pytest.approx(1.5) and sum(w[3:]) == pytest.approx(1.0)  # Σ w = G/2
    p01, p02, p12 = (llm_judge_prefer(prompts[0], completions[i], completions[j], judge_model=tiny_judge)
                     for i, j in [(0, 1), (0, 2), (1, 2)])
    assert w[0] == pytest.approx((p01 + p02) / 2, abs=1e-9)  # w_i = Σ_{j≠i} P(o_i ≻ o_j) / (G − 1)
    assert w[1] == pytest.approx((1 - p01 + p12) / 2, abs=1e-9)


def test_bad_template_and_lengths_name_the_problem(tiny_judge):
    with pytest.raises(JudgeError, match="template"):
        llm_judge_prefer("q", "a", "b", judge_model=tiny_judge, template="Rate {answer}")
    with pytest.raises(JudgeError, match="2 prompts"):
        llm_judge_prefer_batch(["q", "r"], ["a"], ["b"], judge_model=tiny_judge)


@pytest.mark.slow
def test_embedded_smollm2_judge():
    judge = load_judge("smollm2-135m-instruct", device="cpu")
    assert len(judge.a_ids) == 2 and judge.a_ids != judge.b_ids  # "A" and " A" are both single tokens
    q, good, bad = "What is 2 + 3?", "2 + 3 = 5.", "2 + 3 = 7."
    p = llm_judge_prefer(q, good, bad, device="cpu")
    assert 0.0 < p < 1.0
    s_ab = llm_judge_prefer(q, good, bad, symmetric=True, device="cpu")
    s_ba = llm_judge_prefer(q, bad, good, symmetric=True, device="cpu")
    assert s_ab + s_ba == pytest.approx(1.0, abs=1e-9)
    w = REWARDS.get("win_rate")([q] * 3, [good, bad, "I don't know."], prefer="llm_judge", symmetric=True)
    assert sum(w) == pytest.approx(1.5) and all(0.0 <= x <= 1.0 for x in w)
