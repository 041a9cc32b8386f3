"""Thinkquel in miniature: TS-SQL-style records, their plan/answer spans, TS-GRPO on them, the ts_sql preset."""

import json

import pytest
import torch

from grpokit.algos.losses import POLICY_LOSSES, LossInputs
from grpokit.config import load_config
from grpokit.data.tasks import TASKS
from grpokit.data.ts_sql import PLAN_DELIMITER, result_hash
from grpokit.rewards import REWARDS
from grpokit.rewards.sql import has_top_level_order_by, run_sql_readonly
from grpokit.trainer.spans import span_mask_through_text


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    import os

    old = os.environ.get("GRPOKIT_CACHE")
    os.environ["GRPOKIT_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield TASKS.get("ts_sql")(0, 24, 8)
    finally:
        os.environ.pop("GRPOKIT_CACHE") if old is None else os.environ.__setitem__("GRPOKIT_CACHE", old)


def test_records_execute_and_their_reference_is_plan_then_sql(splits):
    rows = splits.train + splits.heldout
    assert not {r["prompt"] for r in splits.train} & {r["prompt"] for r in splits.heldout}
    for r in rows:
        gold, error = run_sql_readonly(r["db_path"], r["answer"])
        assert error is None and gold  # kept only if it executes and returns rows
        assert r["exec_result_hash"] == result_hash(gold, has_top_level_order_by(r["answer"]))
        assert r["reference"] == f"{r['plan']}\n```sql\n{r['answer']}\n```" and r["plan"].startswith("1. Tables:")
    refs = [r["reference"] for r in rows]
    columns = {"answer": [r["answer"] for r in rows], "db_path": [r["db_path"] for r in rows]}
    for reward in load_config(preset="ts_sql").rewards:  # the preset's rewards, with their options (sql_format: plan)
        scores = REWARDS.get(reward.name)([r["prompt"] for r in rows], refs, **columns, **reward.kwargs)
        assert scores == [1.0] * len(rows), reward.name


def test_result_hash_is_order_free_unless_ordered():
    assert result_hash([(1, "a"), (2, "b")], ordered=False) == result_hash([(2, "b"), (1, "a")], ordered=False)
    assert result_hash([(1, "a"), (2, "b")], ordered=True) != result_hash([(2, "b"), (1, "a")], ordered=True)
    assert result_hash([(0.1 + 0.2,)], ordered=True) == result_hash([(0.3,)], ordered=True)  # rounded to 6 decimals


def encode(tok, texts):
    enc = [tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id] for t in texts]
    width = max(map(len, enc))
    ids = torch.tensor([e + [tok.pad_token_id] * (width - len(e)) for e in enc])
    mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in enc])
    return enc, ids, mask


def test_plan_span_is_the_plan_through_the_fence_on_smollm2_tokens(splits):
    """The preset's delimiter on real SmolLM2 tokens: plan = numbered steps + the opening fence, answer = query + closing fence."""
    from grpokit.model.loading import load_tokenizer

    delimiter = load_config(preset="ts_sql").algorithm.plan_delimiter
    assert delimiter == PLAN_DELIMITER
    tok = load_tokenizer("smollm2-135m-instruct")
    rows = splits.train[:6]
    texts = [r["reference"] for r in rows] + ["SELECT 1 without a block"]
    enc, ids, mask = encode(tok, texts)
    plan = span_mask_through_text(tok, ids, mask, delimiter)
    for i, r in enumerate(rows):
        n = int(plan[i].sum())
        assert plan[i, :n].all() and not plan[i, n:].any()
        # the span's tokens decode to the plan and the fence: not one token more or less
        assert tok.decode(enc[i][:n]) == r["plan"] + "\n" + PLAN_DELIMITER
        assert PLAN_DELIMITER not in tok.decode(enc[i][: n - 1])
        answer = tok.decode(enc[i][n:], skip_special_tokens=True)
        assert answer == "\n" + r["answer"] + "\n```"
    assert not plan[-1].any()  # no fence, no plan: the whole completion is the answer span


def test_ts_grpo_routes_one_answer_token_change_to_the_whole_answer_span(splits):
    """A +0.1 log-prob change on one answer token moves the span ratio s = exp(0.1/|S|) past GSPO's clip: the
    answer span's gradient vanishes while the plan's token-level terms keep theirs, -A/(G|P|) per token."""
    from grpokit.model.loading import load_tokenizer

    cfg = load_config(preset="ts_sql").algorithm
    tok = load_tokenizer("smollm2-135m-instruct")
    enc, ids, mask = encode(tok, [r["reference"] for r in splits.train[:2]])
    plan = span_mask_through_text(tok, ids, mask, cfg.plan_delimiter)
    old = torch.full(ids.shape, -1.0, dtype=torch.float64)
    logp = old.clone()
    answer_start = int(plan[0].sum())
    logp[0, answer_start + 1] += 0.1  # one token of row 0's answer span
    logp.requires_grad_(True)
    adv = torch.tensor([1.0, -1.0], dtype=torch.float64)
    inp = LossInputs(logp=logp, old_logp=old, adv=adv, mask=mask.double(), plan_mask=plan.double())
    per_token, metrics = POLICY_LOSSES.get("ts_grpo")(
        inp, epsilon_low=cfg.epsilon_low, epsilon_high=cfg.epsilon_high, **cfg.loss_options,
    )
    length = mask.sum(-1, keepdim=True).double()
    loss = ((per_token * mask).sum(-1, keepdim=True) / length).mean()  # seq_mean_token_mean over G = 2 rows
    loss.backward()
    g = logp.grad
    n_plan, n_ans = plan.sum(-1).double(), (mask - plan).sum(-1).double()
    assert n_plan.min() > 0 and n_ans.min() > 0
    s0 = float(torch.exp(torch.tensor(0.1) / n_ans[0]))
    assert s0 - 1 > cfg.loss_options["seq_epsilon_high"]  # past the sequence clip (|S| is ~40 tokens)
    p0, a0 = plan[0].bool(), (mask[0] - plan[0]).bool()
    # row 0 (A = +1): plan tokens -1/(2|P|) each; the clipped span ratio leaves every answer token at 0
    assert torch.allclose(g[0][p0], torch.full_like(g[0][p0], -1 / (2 * n_plan[0])), atol=1e-12)
    assert torch.all(g[0][a0] == 0)
    # row 1 (A = -1, untouched): plan +1/(2|P|), answer +1/(2|S|) per token, as on-policy GRPO
    p1, a1 = plan[1].bool(), (mask[1] - plan[1]).bool()
    assert torch.allclose(g[1][p1], torch.full_like(g[1][p1], 1 / (2 * n_plan[1])), atol=1e-12)
    assert torch.allclose(g[1][a1], torch.full_like(g[1][a1], 1 / (2 * n_ans[1])), atol=1e-12)
    assert float(metrics["ts/plan_frac"]) == pytest.approx(int(plan.sum()) / int(mask.sum()), abs=1e-12)


TINY_TEMPLATE = "Question: {question}"


def tiny_model_that_writes_a_plan_and_a_query(directory, questions):
    """The tiny random Llama taught, by full-batch Adam steps on one fixed completion after each of ``questions``,
    to answer them with a numbered plan and a ```sql block (a random character model never writes the fence)."""
    from grpokit.data.chat import render_prompt
    from grpokit.testing import tiny_model_and_tokenizer

    model, tok = tiny_model_and_tokenizer(seed=0, hidden=64)
    target = tok("1. Plan.\n```sql\nSELECT id FROM orders\n```", add_special_tokens=False).input_ids + [tok.eos_token_id]
    prompts = [tok(render_prompt(tok, TINY_TEMPLATE.format(question=q)), add_special_tokens=False).input_ids for q in questions]
    width = max(map(len, prompts)) + len(target)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p) - len(target)) + p + target for p in prompts])
    labels = torch.full_like(ids, -100)
    labels[:, -len(target):] = ids[:, -len(target):]  # loss on the completion only
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _ in range(120):
            opt.zero_grad()
            model(input_ids=ids, attention_mask=(ids != tok.pad_token_id).long(), labels=labels).loss.backward()
            opt.step()
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return str(directory)


def test_ts_sql_preset_trains_two_steps_with_both_spans(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path / "cache"))
    from grpokit.testing import implicit_device_recorder
    from grpokit.trainer.loop import Trainer

    questions = [r["question"] for r in TASKS.get("ts_sql")(0, 8, 2).train]  # the run's training rows (seed 0)
    model_dir = tiny_model_that_writes_a_plan_and_a_query(tmp_path / "tiny", questions)
    overrides = [
        f"model.name={model_dir}", f"logging.output_dir={tmp_path / 'run'}", "logging.progress=false",
        "logging.log_samples_every=0", "data.n_train=8", "data.n_heldout=2", f"data.task_options.template='{TINY_TEMPLATE}'",
        "rollout.group_size=4", "rollout.prompts_per_step=2", "rollout.max_new_tokens=64", "train.micro_batch_size=8",
        "train.steps=2", "train.max_minutes=0", "eval.before=false", "eval.after=false",
    ]
    cfg = load_config(preset="ts_sql", overrides=overrides)
    cfg.model.lora.target_modules = ["q_proj", "v_proj"]
    with implicit_device_recorder() as rec:
        Trainer(cfg).train()
    assert not rec.hits, f"tensors created without a device: {rec.report()}"
    rows = [json.loads(l) for l in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert 0 < r["spans/plan_frac"] < 1 and 0 < r["ts/plan_frac"] < 1  # both spans in the loss
        assert r["reward/sql_format/mean"] > 0 and r["reward/sql_executes/mean"] > 0  # it wrote runnable SQL
        assert r["loss"] == r["loss"] and r["grad_norm"] == r["grad_norm"]
