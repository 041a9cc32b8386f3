"""Which family claims which model: every built-in's embedded name and folder, model objects, explicit choices, ties."""

import pytest

from grpokit.config import load_config
from grpokit.families import FAMILIES, Claim, family_of
from grpokit.testing import save_tiny_model, tiny_model_and_tokenizer


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from grpokit.families.flow_matching.pretrain import build
    from grpokit.families.masked_diffusion.model import MDMTokenizer, build_mdm, save_mdm
    from grpokit.families.palette.images import PaletteTokenizer, build_palette_predictor
    from grpokit.families.vision_lm.tiny_qwen2vl import save_tiny_qwen2vl

    root = tmp_path_factory.mktemp("families")
    return {
        "causal_lm": save_tiny_model(root / "lm"),
        "vision_lm": str(save_tiny_qwen2vl(root / "vlm")),
        "masked_diffusion": str(save_mdm(build_mdm(len(MDMTokenizer()), hidden=32, layers=1, heads=2), MDMTokenizer(), root / "mdm")),
        "palette": str(save_mdm(build_palette_predictor(hidden=32, layers=1), PaletteTokenizer(), root / "pal")),
        "flow_matching": str(build(root / "flow", steps=0, channels=(8, 16))),
    }


def test_the_five_builtin_families_are_registered_each_with_a_description():
    assert FAMILIES.names() == ["causal_lm", "flow_matching", "masked_diffusion", "palette", "vision_lm"]
    assert all(f.description for f in FAMILIES)


@pytest.mark.parametrize("name,family", [("smollm2-135m-instruct", "causal_lm"), ("tiny-qwen2vl", "vision_lm"), ("tiny-mdm", "masked_diffusion"),
                                         ("tiny-palette-mdm", "palette"), ("tiny-flow", "flow_matching")])
def test_each_embedded_name_is_claimed_by_its_family_alone(name, family):
    claims = {f.name: f.claim(name) for f in FAMILIES}
    assert claims.pop(family) == Claim.SPECIFIC and set(claims.values()) == {Claim.NO}
    assert FAMILIES.for_name(name).name == family


def test_each_family_folder_goes_to_its_family_and_a_plain_folder_to_the_causal_lm(folders):
    for family, folder in folders.items():
        assert FAMILIES.for_name(folder).name == family, family
    # a Qwen2-VL folder is also a Hugging Face folder the causal-LM family could try: the specific claim wins
    assert FAMILIES.get("causal_lm").claim(folders["vision_lm"]) == Claim.GENERIC


def test_a_model_object_is_claimed_by_what_it_is():
    model, tokenizer = tiny_model_and_tokenizer()
    cfg = load_config(preset="demo", overrides=["model.name=not-used-when-a-model-is-given"])
    assert family_of(cfg, model, tokenizer).name == "causal_lm"


def test_model_family_names_a_family_or_is_refused_in_one_line(folders):
    cfg = load_config(preset="demo", overrides=[f"model.name={folders['causal_lm']}", "model.family=vision"])
    with pytest.raises(ValueError, match=r"model.family 'vision' is not a registered family; choose auto, one of causal_lm, .*vision_lm"):
        family_of(cfg)
    cfg.model.family = "causal_lm"
    assert family_of(cfg).name == "causal_lm"


def test_a_name_no_family_claims_says_what_each_form_is(tmp_path):
    with pytest.raises(ValueError, match=r"model.name 'org/absent' does not exist: .*as a Hub id: .*not in the Hugging Face cache"):
        FAMILIES.for_name("org/absent")
    (tmp_path / "empty").mkdir()
    assert FAMILIES.for_name(str(tmp_path / "empty")).name == "causal_lm"  # a folder: the causal LM tries it and says what is missing


def test_auto_is_recorded_in_the_config_and_an_unresolvable_name_fails_before_any_load():
    from grpokit.trainer.inputs import RunContractError, run_family

    cfg = load_config(preset="demo", overrides=["model.name=tiny-qwen2vl"])
    assert run_family(cfg).name == "vision_lm" and cfg.model.family == "vision_lm"
    with pytest.raises(RunContractError, match="model.name 'no-such-model' does not exist"):
        run_family(load_config(preset="demo", overrides=["model.name=no-such-model"]))


def test_a_cached_hub_id_of_a_qwen2_vl_goes_to_the_vision_family(tmp_path, monkeypatch):
    from grpokit.families.vision_lm.loading import resolve
    from grpokit.families.vision_lm.tiny_qwen2vl import save_tiny_qwen2vl

    cache = tmp_path / "hub"
    snap = cache / "models--org--tiny-vl" / "snapshots" / "abc123"
    save_tiny_qwen2vl(snap)
    (cache / "models--org--tiny-vl" / "refs").mkdir()
    (cache / "models--org--tiny-vl" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert FAMILIES.for_name("org/tiny-vl").name == "vision_lm"  # not the causal LM's generic claim
    assert FAMILIES.for_name(str(cache / "models--org--tiny-vl")).name == "vision_lm"
    assert resolve("org/tiny-vl") == snap


@pytest.mark.parametrize("field,owner", [("vision.mask_probability=0.9", "vision_lm"), ("diffusion.steps=4", "masked_diffusion / palette"),
                                         ("flow.steps=3", "flow_matching")])
def test_a_field_of_another_familys_section_is_refused_at_load(field, owner):
    from grpokit.trainer.inputs import RunContractError, check_run

    with pytest.raises(RunContractError, match=rf"{field.split('=')[0]} is set, but .* read only by the {owner} famil.*policy is 'causal_lm'"):
        check_run(load_config(preset="demo", overrides=[field]))
    check_run(load_config(preset="demo"))  # the same run without it passes


def test_a_familys_own_section_is_accepted_for_its_own_model():
    from grpokit.trainer.inputs import check_run

    check_run(load_config(preset="demo", overrides=["model.name=tiny-qwen2vl", "vision.mask_probability=0.9", "data.task=vision_qa"]))
