"""Shared by the synth tests: the SmolLM2 tokenizer (from the local cache) and fake writer callables."""

import pytest

from grpokit.synth import Generator, SynthConfig


@pytest.fixture(scope="session")
def smol_tok():
    from grpokit.model.loading import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


def draft_of(messages):
    """The draft a writer is asked to rewrite (after the last ``Text:`` line of the user message)."""
    return messages[-1]["content"].rsplit("Text:\n", 1)[1]


class Parrot:
    """A deterministic fake writer: returns the draft unchanged; records each call's seed."""

    name = "parrot"

    def __init__(self):
        self.seeds = []

    def __call__(self, messages, params):
        self.seeds.append(params.seed)
        return draft_of(messages)


@pytest.fixture
def run_synth(smol_tok, tmp_path):
    """``run_synth(paradigm, out_name, writer=None, tokenizer=smol_tok, **cfg)`` -> (manifest, out folder)."""

    def run(paradigm, name="out", writer=None, tokenizer=None, **kw):
        kw.setdefault("n", 2)
        kw.setdefault("target_tokens", 1024)
        cfg = SynthConfig(paradigm=paradigm, out=str(tmp_path / name), writer="none" if writer is None else "fake", progress=False, **kw)
        return Generator(cfg, writer, tokenizer or smol_tok).run(), tmp_path / name

    return run


@pytest.fixture
def fakes():
    """The fake writers' helpers: ``fakes.Parrot``, ``fakes.draft_of``."""
    import types

    return types.SimpleNamespace(Parrot=Parrot, draft_of=draft_of)
