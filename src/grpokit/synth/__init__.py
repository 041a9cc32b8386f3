"""Synthetic long-context data for SFT, DPO and GRPO ("Modular Techniques for Synthetic Long-Context Data
Generation in Language Model Training and Evaluation", arXiv 2509.01185): ``grpokit synth``.

documents (procedural sources and distractors) -> context (assembly to a token target, offsets) ->
paradigms (templates, parsers) -> writer (the LM that rewrites drafts) -> validators -> formats
(the SFT / DPO / GRPO rows); verify + constraints: the checkers stored with every item.
"""

from grpokit.synth.generator import Generator, SynthConfig, SynthError

__all__ = ["Generator", "SynthConfig", "SynthError"]
