"""data.order_seed: the prompt order varies between runs that share a split (the efficacy study's seeds)."""

from grpokit.testing import tiny_model_and_tokenizer
from grpokit.trainer.loop import Trainer


def _trainer(tiny_cfg, **sets):
    return Trainer(tiny_cfg(**sets), *tiny_model_and_tokenizer(seed=5))


def test_order_seed_changes_the_prompt_order_not_the_split(tiny_cfg):
    default, same, other = _trainer(tiny_cfg), _trainer(tiny_cfg, **{"data.order_seed": 0}), _trainer(tiny_cfg, **{"data.order_seed": 1})
    ids = lambda t: [r["prompt"] for r in t.splits.train]  # noqa: E731
    assert ids(default) == ids(same) == ids(other)  # the split follows data.seed alone
    assert [r["prompt"] for r in default.splits.heldout] == [r["prompt"] for r in other.splits.heldout]
    order = lambda t: [r["prompt"] for r in t.sampler.next_batch(20)]  # noqa: E731  one epoch of the 20 training rows
    a, b, c = order(default), order(same), order(other)
    assert a == b  # null = data.seed (0): the order every earlier run had
    assert a != c and sorted(a) == sorted(c)  # another order of the same rows
