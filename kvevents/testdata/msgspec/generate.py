"""Generate KV-event payloads with msgspec, vLLM's own encoder.

The structs below mirror vLLM's `vllm/distributed/kv_events.py` field order
and msgspec options for each wire era (written from the field tables in
warmpath's vLLM spec, not copied). Each case is written as one JSON line
with the payload (base64) and the values a decoder must produce, hashes
already folded to uint64 as warmpath folds them.

Run: /work/venvs/kvevents/bin/python generate.py > cases.jsonl
(needs `pip install msgspec`; the output is deterministic).
"""

import base64
import hashlib
import json
import sys
from typing import Any, Optional, Union

import msgspec

Hash = Union[int, bytes]


def fold(h):
    """warmpath's 64-bit view of a wire hash."""
    if h is None:
        return None
    if isinstance(h, bytes):
        return int.from_bytes(h[-8:].rjust(8, b"\0"), "big")
    return h & 0xFFFFFFFFFFFFFFFF


# ---- v0.9.0: envelope [ts, events]; BlockStored with lora_id, no medium.
class Batch090(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list


class Ev090(msgspec.Struct, array_like=True, omit_defaults=True, tag=True):
    pass


class BlockStored090(Ev090, tag="BlockStored"):
    block_hashes: list[Hash]
    parent_block_hash: Optional[Hash]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]


class BlockRemoved090(Ev090, tag="BlockRemoved"):
    block_hashes: list[Hash]


class AllBlocksCleared090(Ev090, tag="AllBlocksCleared"):
    pass


# ---- v0.11: envelope gains data_parallel_rank; events gain medium.
class Batch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list
    data_parallel_rank: Optional[int] = None


class Ev011(msgspec.Struct, array_like=True, omit_defaults=True, tag=True):
    pass


class BlockStored011(Ev011, tag="BlockStored"):
    block_hashes: list[Hash]
    parent_block_hash: Optional[Hash]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str]


class BlockRemoved011(Ev011, tag="BlockRemoved"):
    block_hashes: list[Hash]
    medium: Optional[str]


class AllBlocksCleared011(Ev011, tag="AllBlocksCleared"):
    pass


# ---- v0.2x (≈0.21–0.23): array era with lora_name, extra_keys, group_idx,
# kv_cache_spec_kind and an optional sliding window.
def v2x(array_like):
    class Ev(msgspec.Struct, array_like=array_like, omit_defaults=True, tag=True):
        pass

    class BlockStored(Ev, tag="BlockStored"):
        block_hashes: list[Hash]
        parent_block_hash: Optional[Hash]
        token_ids: list[int]
        block_size: int
        lora_id: Optional[int]
        medium: Optional[str]
        lora_name: Optional[str]
        extra_keys: Optional[list[Optional[tuple]]]
        group_idx: int
        kv_cache_spec_kind: str
        kv_cache_spec_sliding_window: Optional[int] = None

    class BlockRemoved(Ev, tag="BlockRemoved"):
        block_hashes: list[Hash]
        medium: Optional[str]
        group_idx: int

    class AllBlocksCleared(Ev, tag="AllBlocksCleared"):
        pass

    # A later engine's event with a field this decoder does not know.
    class BlockStoredFuture(Ev, tag="BlockStored"):
        block_hashes: list[Hash]
        parent_block_hash: Optional[Hash]
        token_ids: list[int]
        block_size: int
        lora_id: Optional[int]
        medium: Optional[str]
        lora_name: Optional[str]
        extra_keys: Optional[list[Optional[tuple]]]
        group_idx: int
        kv_cache_spec_kind: str
        kv_cache_spec_sliding_window: Optional[int] = None
        locality: Optional[str] = None

    class BlockPinned(Ev, tag="BlockPinned"):
        block_hashes: list[Hash]

    return BlockStored, BlockRemoved, AllBlocksCleared, BlockStoredFuture, BlockPinned


S2x, R2x, C2x, F2x, P2x = v2x(True)
Smap, Rmap, Cmap, Fmap, Pmap = v2x(False)

enc = msgspec.msgpack.Encoder()


def digest(i):
    return hashlib.sha256(b"block-%d" % i).digest()


def toks(start, n):
    return [start + 7 * i for i in range(n)]


def exp_stored(hashes, parent, tokens, bs, lora_id=None, medium=None, lora_name=None,
               extra=None, group=0, kind="", window=0):
    return {"type": "BlockStored", "block_hashes": [fold(h) for h in hashes],
            "parent": fold(parent), "token_ids": tokens, "block_size": bs,
            "lora_id": lora_id, "medium": (medium or "").upper(), "lora_name": lora_name or "",
            "extra_nil": None if extra is None else [e is None for e in extra],
            "group_idx": group, "kind": kind, "window": window}


def exp_removed(hashes, medium=None, group=0):
    return {"type": "BlockRemoved", "block_hashes": [fold(h) for h in hashes],
            "medium": (medium or "").upper(), "group_idx": group}


def exp_cleared():
    return {"type": "AllBlocksCleared"}


cases = []


def case(name, batch, events, rank, unknown_events=0, unknown_fields=0):
    cases.append({"name": name, "payload_b64": base64.b64encode(enc.encode(batch)).decode(),
                  "ts": batch.ts, "dp_rank": rank, "events": events,
                  "unknown_events": unknown_events, "unknown_fields": unknown_fields})


T = 1750000000.5
t32 = toks(100, 32)

# v0.9.0 with signed (builtin hash()) ints, one of them negative.
h = [-3, -(1 << 62), 0x7FFFFFFFFFFFFFFF]
case("v0.9.0-builtin-negative-ints",
     Batch090(T, [BlockStored090(h[:2], None, t32, 16, None),
                  BlockStored090([h[2]], h[1], toks(5000, 16), 16, 3),
                  BlockRemoved090([h[0]]), AllBlocksCleared090()]),
     [exp_stored(h[:2], None, t32, 16), exp_stored([h[2]], h[1], toks(5000, 16), 16, lora_id=3),
      exp_removed([h[0]]), exp_cleared()], None)

# v0.11 with uint64 ints (some >= 2^63) and DP rank 1.
u = [(1 << 64) - 5, 1 << 63, 12345, 0x7B0BF7BF7FD01682]
case("v0.11-uint64",
     Batch(T, [BlockStored011(u[:2], None, t32, 16, None, "GPU"),
               BlockStored011(u[2:], u[1], toks(9000, 32), 16, None, "cpu"),
               BlockRemoved011([u[0]], "GPU"), BlockRemoved011([u[2]], "CPU")], 1),
     [exp_stored(u[:2], None, t32, 16, medium="GPU"), exp_stored(u[2:], u[1], toks(9000, 32), 16, medium="cpu"),
      exp_removed([u[0]], "GPU"), exp_removed([u[2]], "CPU")], 1)

# v0.11 with raw digest bytes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
d = [digest(i) for i in range(4)]
case("v0.11-bytes",
     Batch(T, [BlockStored011(d[:3], None, toks(1, 48), 16, None, "GPU"),
               BlockRemoved011([d[2]], "GPU"), AllBlocksCleared011()], 0),
     [exp_stored(d[:3], None, toks(1, 48), 16, medium="GPU"), exp_removed([d[2]], "GPU"), exp_cleared()], 0)

# xxhash digests are 16 bytes.
x = [hashlib.md5(b"x%d" % i).digest() for i in range(2)]
case("v0.11-bytes16",
     Batch(T, [BlockStored011(x, None, toks(1, 32), 16, None, "GPU")], 0),
     [exp_stored(x, None, toks(1, 32), 16, medium="GPU")], 0)

# v0.2x array era, LoRA name and cache salt in block 0's extra keys, a
# multimodal item in block 1, sliding window group skipped by the index.
extra = [("sql", "tenant-a"), ("sql", ("mm-abc", 4)), ("sql",)]
for mode, hh in (("ints", u[:3]), ("bytes", d[:3])):
    case(f"v0.2x-array-{mode}",
         Batch(T, [S2x(hh, None, toks(300, 48), 16, None, "GPU", "sql", extra, 0, "full_attention"),
                   S2x(hh[:1], None, toks(300, 32), 32, None, "GPU", None, None, 1, "sliding_window", 1024),
                   R2x(hh[2:], "GPU", 0), C2x()], 2),
         [exp_stored(hh, None, toks(300, 48), 16, medium="GPU", lora_name="sql", extra=extra,
                     kind="full_attention"),
          exp_stored(hh[:1], None, toks(300, 32), 32, medium="GPU", group=1, kind="sliding_window", window=1024),
          exp_removed(hh[2:], "GPU", 0), exp_cleared()], 2)
    case(f"map-era-{mode}",
         Batch(T, [Smap(hh, None, toks(300, 48), 16, None, "GPU", "sql", extra, 0, "full_attention"),
                   Smap(hh[:1], None, toks(300, 32), 32, None, "GPU", None, None, 1, "sliding_window", 1024),
                   Rmap(hh[2:], "GPU", 0), Cmap()], 0),
         [exp_stored(hh, None, toks(300, 48), 16, medium="GPU", lora_name="sql", extra=extra,
                     kind="full_attention"),
          exp_stored(hh[:1], None, toks(300, 32), 32, medium="GPU", group=1, kind="sliding_window", window=1024),
          exp_removed(hh[2:], "GPU", 0), exp_cleared()], 0)

# Unknown tags and fields are skipped and counted.
for era, F, P, R in (("array", F2x, P2x, R2x), ("map", Fmap, Pmap, Rmap)):
    case(f"{era}-unknown-tag-and-field",
         Batch(T, [P([u[0]]), F([u[1]], None, toks(1, 16), 16, None, "GPU", None, [None], 0,
                               "full_attention", None, "rack-7"), R([u[1]], "GPU", 0)], 0),
         [exp_stored([u[1]], None, toks(1, 16), 16, medium="GPU", extra=[None], kind="full_attention"),
          exp_removed([u[1]], "GPU", 0)], 0, unknown_events=1, unknown_fields=1)

for c in cases:
    sys.stdout.write(json.dumps(c, sort_keys=True) + "\n")
