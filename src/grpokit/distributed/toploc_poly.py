"""TOPLOC's polynomial commitment of top-k bf16 activations and its exponent/mantissa check.

Ong et al., "TOPLOC: A Locality Sensitive Hashing Scheme for Trustless Verifiable Inference",
arXiv 2501.16007, §3 (the polynomial encoding and the validation statistics), as implemented in
the authors' ``toploc`` package (PyPI ``toploc`` 0.1.6, MIT; ``toploc/poly.py``,
``toploc/C/csrc/ndd.cpp``, ``poly.cpp``, ``utils.cpp``). The package ships a C++ extension built
against an older libtorch that does not import with the torch grpokit locks (undefined symbol
``at::TensorBase::const_data_ptr``), so the same scheme is written here in vectorised torch (blocks batched);
``tests/distributed/test_toploc_poly.py`` checks it against a line-by-line port of ``ndd.cpp``.

Commit, per block of activations (flattened to one vector a of bf16 values):

1. x_i = the indices of the k entries of largest |a| (``topk``), y_i = the uint16 bit patterns of
   a[x_i];
2. m = the largest modulus <= 65497 under which the x_i stay distinct (``injective_modulus``);
3. the proof is the unique polynomial P of degree < k over GF(65497) with P(x_i mod m) = y_i,
   as its k coefficients (Newton divided differences expanded to the monomial basis, as
   ``ndd.cpp``); bytes: m, then the coefficients, 2 big-endian bytes each (258 bytes for k = 128).

Verify: the validator takes the top-k indices x'_j of its own activations a', evaluates
y'_j = P(x'_j mod m), reads y'_j as bf16 and compares with a'[x'_j]: exp_mismatches = #(exponent
bits differ); mant_err_mean / mant_err_median = mean / median of |mantissa bits difference| over
the entries whose exponents agree (2^64 when none do). An index the worker did not commit gives a
pseudo-random P(x'), whose exponent almost never matches. The sign bit is not compared (as the
package). The authors' thresholds (``vllm_validate_poly.py``: at least 90 of 128 exponents
match, mean <= 10, median <= 8) are :data:`PAPER_THRESHOLDS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean, median

import torch

PRIME = 65497  # the field of the interpolation (``ndd.cpp`` MOD_N)
NO_MATCH = float(2**64)  # the package's mantissa statistics when no exponent matches


@dataclass(frozen=True)
class Thresholds:
    """Acceptance of one block: every statistic at or below its bound.

    exp_mismatch_frac: exponent mismatches / k (the package's absolute 38 of 128, as a fraction so
    that blocks with fewer than k entries keep the same rule); mant_mean, mant_median: in units of
    the bf16 mantissa's last bit (7 mantissa bits).
    """

    exp_mismatch_frac: float = 38 / 128
    mant_mean: float = 10.0
    mant_median: float = 8.0


PAPER_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class BlockCheck:
    """The three statistics of one block (``toploc``'s ``VerificationResult``) and the block's k."""

    exp_mismatches: int
    mant_err_mean: float
    mant_err_median: float
    k: int

    def passes(self, t: Thresholds) -> bool:
        return (self.exp_mismatches <= t.exp_mismatch_frac * self.k and self.mant_err_mean <= t.mant_mean
                and self.mant_err_median <= t.mant_median)


def _mod(v: torch.Tensor) -> torch.Tensor:
    return torch.remainder(v, PRIME)


def _inverse(a: torch.Tensor) -> torch.Tensor:
    """a^(p-2) mod p elementwise (Fermat), a in [1, p); int64 products stay below 2^32."""
    out = torch.ones_like(a)
    base, e = _mod(a), PRIME - 2
    while e:
        if e & 1:
            out = _mod(out * base)
        base = _mod(base * base)
        e >>= 1
    return out


def injective_modulus(x: list[int]) -> int:
    """The largest m <= 65497 with x_i mod m pairwise distinct (``poly.cpp`` ``from_points``)."""
    for m in range(PRIME, 0, -1):
        if len({v % m for v in x}) == len(x):
            return m
    raise ValueError("TOPLOC: no injective modulus for the committed indices")  # pragma: no cover


def interpolate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Monomial coefficients c [N, n] (ascending) of the P with P(x_i) = y_i over GF(p), per row.

    x, y: int64 [N, n] (N blocks of n points, x distinct mod p within a row). Newton divided
    differences dd_i = f[x_0..x_i], then P = dd_0 + (X - x_0)(dd_1 + (X - x_1)(...)) expanded
    inside out; the interpolant of degree < n is unique, so these are ``ndd.cpp``'s coefficients.
    """
    x, dd = _mod(x.long()), _mod(y.long())
    n = x.shape[-1]
    for k in range(1, n):  # level k: dd_i <- (dd_i - dd_{i-1}) / (x_i - x_{i-k}) for i >= k
        dd[:, k:] = _mod(_mod(dd[:, k:] - dd[:, k - 1 : -1]) * _inverse(x[:, k:] - x[:, : n - k]))
    coeffs = torch.zeros_like(x)
    coeffs[:, 0] = dd[:, n - 1]
    for i in range(n - 2, -1, -1):  # poly <- poly * (X - x_i) + dd_i
        shifted = torch.cat([coeffs.new_zeros(coeffs.shape[0], 1), coeffs[:, :-1]], dim=1)
        coeffs = _mod(shifted - x[:, i : i + 1] * coeffs)
        coeffs[:, 0] = _mod(coeffs[:, 0] + dd[:, i])
    return coeffs


def evaluate(coeffs: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """P(x) mod p by Horner's rule, x int64 [n] -> int64 [n]."""
    x = _mod(x.long())
    out = torch.full_like(x, int(coeffs[-1]))
    for c in coeffs.flip(0)[1:].tolist():
        out = _mod(out * x + c)
    return out


def bf16_bits(values: torch.Tensor) -> torch.Tensor:
    """The uint16 bit patterns of ``values`` rounded to bf16, as int64 in [0, 65536)."""
    return values.to(torch.bfloat16).view(torch.int16).long() & 0xFFFF


def fp_parts(bits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(exponent bits, mantissa bits) of bf16 bit patterns (``utils.cpp`` masks 0x7F80 >> 7, 0x007F)."""
    return (bits & 0x7F80) >> 7, bits & 0x007F


@dataclass(frozen=True)
class ProofPoly:
    """One block's proof: modulus m and the k coefficients (``toploc.ProofPoly``)."""

    modulus: int
    coeffs: tuple[int, ...]

    def to_bytes(self) -> bytes:
        out = bytearray(self.modulus.to_bytes(2, "big"))
        for c in self.coeffs:
            out += int(c).to_bytes(2, "big")
        return bytes(out)

    @staticmethod
    def from_bytes(data: bytes) -> "ProofPoly":
        if len(data) < 4 or len(data) % 2:
            raise ValueError(f"TOPLOC proof of {len(data)} bytes: expected 2 + 2k bytes")
        words = [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
        return ProofPoly(words[0], tuple(words[1:]))


def commit_blocks(blocks: list[torch.Tensor], k: int) -> list[bytes]:
    """The proof bytes of each block of activations (any shape; flattened, rounded to bf16).

    Blocks with at least k entries are interpolated together; a smaller block commits all its entries.
    """
    flats = [b.detach().reshape(-1).to(torch.bfloat16).cpu() for b in blocks]  # proofs leave the device as bytes
    proofs: list[bytes] = [b""] * len(flats)
    for size in sorted({min(k, f.numel()) for f in flats}):
        members = [i for i, f in enumerate(flats) if min(k, f.numel()) == size]
        idx = [flats[i].abs().topk(size).indices for i in members]
        moduli = [injective_modulus(ix.tolist()) for ix in idx]
        x = torch.stack([ix % m for ix, m in zip(idx, moduli)])  # [N, size]
        y = torch.stack([bf16_bits(flats[i][ix]) for i, ix in zip(members, idx)])  # [N, size]
        for i, m, c in zip(members, moduli, interpolate(x, y).tolist()):
            proofs[i] = ProofPoly(m, tuple(c)).to_bytes()
    return proofs


def check_block(proof: bytes, block: torch.Tensor, k: int) -> BlockCheck:
    """The statistics of the validator's ``block`` against one proof (``toploc.verify_proofs``)."""
    flat = block.detach().reshape(-1).to(torch.bfloat16).cpu()
    k = min(k, flat.numel())
    try:
        poly = ProofPoly.from_bytes(proof)
    except ValueError:
        return BlockCheck(k, NO_MATCH, NO_MATCH, k)
    if poly.modulus == 0 or len(poly.coeffs) != k:  # a null proof, or one for another k: nothing matches
        return BlockCheck(k, NO_MATCH, NO_MATCH, k)
    idx = flat.abs().topk(k).indices
    claimed = evaluate(torch.tensor(poly.coeffs, dtype=torch.long), idx % poly.modulus)
    exp_c, mant_c = fp_parts(claimed)
    exp_v, mant_v = fp_parts(bf16_bits(flat[idx]))
    match = exp_c == exp_v
    errs = (mant_c - mant_v).abs()[match].tolist()
    if not errs:
        return BlockCheck(k - int(match.sum()), NO_MATCH, NO_MATCH, k)
    return BlockCheck(k - int(match.sum()), float(mean(errs)), float(median(errs)), k)
