"""Planning spans are found in the decoded text, so a delimiter written with its context still counts."""

import torch

from grpokit.testing import tiny_tokenizer
from grpokit.trainer.spans import span_mask_through_text


class WordPieces:
    """A tokenizer whose ids decode to fixed strings: id 45 is "=" alone, id 446 is " =" as written after a space
    (SmolLM2 writes "3 + 4 = 7" as 35 1232 216 36 446 216 39)."""

    pieces = {35: "3", 1232: " +", 216: " ", 36: "4", 446: " =", 39: "7", 45: "=", 2: ""}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.pieces[i] for i in ids)


def test_delimiter_written_with_context_is_found_where_its_standalone_ids_never_occur():
    ids = torch.tensor([[35, 1232, 216, 36, 446, 216, 39], [35, 1232, 216, 36, 2, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]])
    assert 45 not in ids  # the standalone "=" id: searching for it finds no span
    # row 0: "3 + 4 =" ends inside token 4 (" ="), so tokens 0..4 are the span; row 1 has no "="
    assert span_mask_through_text(WordPieces(), ids, mask, "=").tolist() == [[1, 1, 1, 1, 1, 0, 0], [0] * 7]


def test_character_tokenizer_span_ends_at_the_first_occurrence():
    tok = tiny_tokenizer()
    rows = ["ab=cd=e", "xyz", "==q"]
    enc = [tok(r, add_special_tokens=False).input_ids for r in rows]
    width = max(map(len, enc))
    ids = torch.tensor([e + [0] * (width - len(e)) for e in enc])
    mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in enc])
    # "ab=" is 3 characters -> 3 tokens; "xyz" has none; "=" is the first character of "==q"
    assert span_mask_through_text(tok, ids, mask, "=").tolist() == [
        [1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0],
    ]


def test_smollm2_tokenizer_plan_span_through_the_equals_sign_written_in_context():
    """The real tokenizer: "=" alone is one id, but a completion writes " =" as another, so only the text search finds it."""
    from grpokit.model.loading import load_tokenizer

    tok = load_tokenizer("smollm2-135m-instruct")
    texts = ["3 + 4 = 7", "The answer is 12", "12 * 3 = 36 so 36"]
    enc = [tok(t, add_special_tokens=False).input_ids for t in texts]
    standalone = tok("=", add_special_tokens=False).input_ids
    assert len(standalone) == 1 and all(standalone[0] not in e for e in enc)  # d3cb0f9 searched for these ids: no span, ever
    width = max(map(len, enc))
    ids = torch.tensor([e + [tok.pad_token_id] * (width - len(e)) for e in enc])
    mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in enc])
    spans = span_mask_through_text(tok, ids, mask, "=")
    for row, e, text in zip(spans.tolist(), enc, texts):
        n = sum(row)
        assert row[:n] == [1] * n and not any(row[n:])  # a prefix of the completion
        if "=" in text:  # the span's tokens decode to the text through the first "=", not one token more or less
            assert tok.decode(e[:n]).rstrip().endswith("=") and "=" not in tok.decode(e[: n - 1])
        else:
            assert n == 0
