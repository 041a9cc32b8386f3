"""Fingerprints of built models (grpokit.model.fingerprint): the digest, the record, the loader's line, the pinned child."""

import hashlib
import json
import logging
from pathlib import Path

import pytest
import torch

from grpokit.model import fingerprint as fp

# A 4-step build of the v1-sized tiny VLM (seconds): enough to make the weights depend on the seed.
TINY = {"steps": 4, "clean_steps": 2, "batch": 4, "sizes": {}}


def test_weights_digest_is_sha256_of_sorted_names_dtypes_shapes_and_bytes():
    tensors = {"b": torch.tensor([1.0], dtype=torch.float32), "a": torch.tensor([2], dtype=torch.int16)}
    # by hand: "a" first; int16 2 is b"\x02\x00" (little-endian), float32 1.0 is 0x3f800000 -> b"\x00\x00\x80\x3f"
    expected = hashlib.sha256(b"a|torch.int16|(1,)|\x02\x00" + b"b|torch.float32|(1,)|\x00\x00\x80\x3f").hexdigest()[:12]
    assert fp.weights_digest(tensors) == expected
    assert fp.weights_digest(dict(reversed(list(tensors.items())))) == expected  # insertion order does not matter
    bumped = {**tensors, "b": torch.tensor([1.0000001])}  # one ulp: another digest
    assert fp.weights_digest(bumped) != expected


def test_pinned_env_sets_the_pins_and_drops_the_mkl_shim():
    env = fp.pinned_env({"LD_PRELOAD": "/x/libgrpokit_mkl_amd_1.so", "ATEN_CPU_CAPABILITY": "avx512",
                         "MKL_ENABLE_INSTRUCTIONS": "AVX2", "HOME": "/h"})
    assert "LD_PRELOAD" not in env and "MKL_ENABLE_INSTRUCTIONS" not in env and env["HOME"] == "/h"
    assert env["ATEN_CPU_CAPABILITY"] == "default" and env["MKL_CBWR"] == "COMPATIBLE" and env["OMP_NUM_THREADS"] == "1"
    assert fp.is_pinned(env)
    assert not fp.is_pinned({**env, "LD_PRELOAD": "/x/libgrpokit_mkl_amd_1.so"})


def test_vision_builds_same_seed_same_fingerprint_other_seed_another(tmp_path):
    from grpokit.families.vision_lm.pretrain import build

    entries = [fp.read(build(tmp_path / name, seed=seed, **TINY)) for name, seed in (("a", 0), ("b", 0), ("c", 1))]
    assert entries[0]["fingerprint"] == entries[1]["fingerprint"] != entries[2]["fingerprint"]
    assert entries[0]["model"] == "tiny-qwen2vl" and entries[0]["settings"]["seed"] == 0 and entries[2]["settings"]["seed"] == 1
    assert entries[0]["settings"]["steps"] == 4 and entries[0]["build"]["torch"] == torch.__version__
    # the record is of the saved weights: recomputing from the folder gives the same digest
    assert fp.weights_digest(fp.saved_tensors(tmp_path / "a")) == entries[0]["fingerprint"]
    assert fp.main([str(tmp_path / "a")]) == 0


def test_a_vision_build_that_did_not_learn_to_see_is_refused_not_saved(tmp_path, monkeypatch):
    """A clean phase ending above BLIND_LOSS (0.69 = the answer prior) is a blind model: no folder is written."""
    from grpokit.families.vision_lm import pretrain

    monkeypatch.setattr(pretrain, "BLIND_CHECK_STEPS", 2)  # judge this 4-step build's clean phase (loss ~4, untrained)
    with pytest.raises(RuntimeError, match="did not learn to read its images"):
        pretrain.build(tmp_path / "blind", seed=0, **{**TINY, "clean_steps": 3})
    assert not (tmp_path / "blind").exists()


def test_loader_logs_the_fingerprint(tmp_path, caplog):
    from grpokit.families.vision_lm.loading import load_vision_model
    from grpokit.families.vision_lm.pretrain import build

    folder = build(tmp_path / "m", seed=3, **TINY)
    digest = fp.read(folder)["fingerprint"]
    with caplog.at_level(logging.INFO, logger="grpokit.model.fingerprint"):
        load_vision_model(str(folder))
    lines = [r.getMessage() for r in caplog.records if r.name == "grpokit.model.fingerprint"]
    assert len(lines) == 1 and lines[0].startswith(f"model {folder} fingerprint {digest} (built with ")
    assert "seed=3" in lines[0] and "steps=4" in lines[0]


def test_main_refuses_a_folder_whose_weights_changed(tmp_path):
    from grpokit.families.vision_lm.pretrain import build

    folder = build(tmp_path / "m", seed=0, **TINY)
    entry = fp.read(folder)
    (folder / fp.FILE).write_text(json.dumps({**entry, "fingerprint": "000000000000"}))
    assert fp.main([str(folder)]) == 1


@pytest.mark.parametrize("outer", [{}, {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}])
def test_pinned_build_runs_the_builder_in_a_pinned_child(tmp_path, monkeypatch, outer):
    for k, v in outer.items():
        monkeypatch.setenv(k, v)
    folder = fp.pinned_build("grpokit.families.vision_lm.pretrain:build", tmp_path / "m", seed=0, **TINY)
    build = fp.read(folder)["build"]
    # the child saw the pins, whatever the parent's environment: ATen ran its DEFAULT (non-vectorised) kernels
    assert build["pinned"]["MKL_CBWR"] == "COMPATIBLE" and build["aten_capability"] == "DEFAULT"
    assert build["threads"] == 1 and build["mkl_shim"] is False and build["mkldnn"] is False and build["nnpack"] is False


def test_pinned_build_names_the_builder_when_the_child_fails(tmp_path):
    with pytest.raises(RuntimeError, match="grpokit.families.vision_lm.pretrain:build"):
        fp.pinned_build("grpokit.families.vision_lm.pretrain:build", tmp_path / "m", no_such_option=1)


def _flow(out, seed):
    from grpokit.families.flow_matching.pretrain import build

    return build(out, seed=seed, steps=0, channels=(8, 16))  # random weights: the seed alone sets them


def _mdm(out, seed):
    from grpokit.families.masked_diffusion.pretrain import build

    return build(out, seed=seed, steps=2, clean_steps=1)


def _palette(out, seed):
    from grpokit.families.palette.policy import build_palette

    return build_palette(out, seed=seed, steps=2)


@pytest.mark.parametrize("builder,name", [(_flow, "tiny-flow"), (_mdm, "tiny-mdm"), (_palette, "tiny-palette-mdm")])
def test_every_builder_records_a_seeded_fingerprint(tmp_path, builder, name):
    entries = [fp.read(builder(tmp_path / f"m{i}", seed)) for i, seed in enumerate((0, 0, 1))]
    assert entries[0]["model"] == name and entries[0]["settings"]["seed"] == 0
    assert entries[0]["fingerprint"] == entries[1]["fingerprint"] != entries[2]["fingerprint"]


def test_embedded_models_are_built_by_a_pinned_child_with_a_real_builder(tmp_path, monkeypatch):
    import importlib

    from grpokit.families.masked_diffusion import pretrain as mdm_pretrain
    from grpokit.families.palette import policy as cogrpo_policy
    from grpokit.families.flow_matching import pretrain as flow_pretrain
    from grpokit.families.vision_lm import pretrain as vision_pretrain

    monkeypatch.setenv("GRPOKIT_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(fp, "pinned_build", lambda target, out, **kw: calls.append((target, Path(out), kw)) or Path(out))
    vision_pretrain.ensure_tiny_vlm(seed=2)
    mdm_pretrain.ensure_tiny_mdm()
    flow_pretrain.ensure_tiny_flow()
    cogrpo_policy.palette_folder("tiny-palette-mdm")
    builders = [vision_pretrain.build, mdm_pretrain.build, flow_pretrain.build, cogrpo_policy.build_palette]
    assert [getattr(importlib.import_module(t.split(":")[0]), t.split(":")[1]) for t, _, _ in calls] == builders
    assert calls[0][1] == tmp_path / "models" / f"tiny-qwen2vl-{vision_pretrain.VERSION}-seed2" and calls[0][2] == {"seed": 2}
    assert all(str(out).startswith(str(tmp_path)) for _, out, _ in calls)


def test_build_optimizer_is_the_fused_adamw():
    """The default (foreach) AdamW's float32 sqrt rounds differently with and without AVX-512."""
    p = torch.nn.Parameter(torch.ones(3))
    opt = fp.build_optimizer([p], lr=0.1, weight_decay=0.0)
    assert isinstance(opt, torch.optim.AdamW) and opt.param_groups[0]["fused"] is True
    p.grad = torch.tensor([1.0, -2.0, 0.5])
    opt.step()  # AdamW's first step moves every weight by lr * sign(g) (m / sqrt(v) = g / |g|)
    assert torch.allclose(p.detach(), torch.tensor([0.9, 1.1, 0.9]), atol=1e-6)


def _flow_trained(out, seed):
    from grpokit.families.flow_matching.pretrain import build

    return build(out, seed=seed, steps=1, channels=(8, 16))


def _vision(out, seed):
    from grpokit.families.vision_lm.pretrain import build

    return build(out, seed=seed, **TINY)


@pytest.mark.parametrize("builder", [_vision, _flow_trained, _mdm, _palette])
def test_every_builder_trains_with_the_fused_adamw(tmp_path, builder, monkeypatch):
    made = []
    real = fp.build_optimizer
    monkeypatch.setattr(fp, "build_optimizer", lambda params, **kw: made.append(kw) or real(params, **kw))
    builder(tmp_path / "m", 0)
    assert made, "the builder made its optimizer without grpokit.model.fingerprint.build_optimizer"
