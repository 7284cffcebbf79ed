#!/usr/bin/env python3
"""Builds small synthetic tokenizers that exercise tokenizer.json features the
real model files in models/ do not use (added tokens with lstrip, rstrip,
single_word and normalized; a TemplateProcessing suffix; merges written as
"a b" strings), and their goldens from the Rust `tokenizers` library.

Usage (from tokenize/testdata): python gen_synthetic.py
Writes synthetic/flags.json, synthetic/flags_strmerges.json and
synthetic/flags_expected.jsonl.gz (with the same inputs as inputs.jsonl.gz's
named/* strings plus strings aimed at the flags).

It also writes synthetic/metaspace_VARIANT_expected.jsonl.gz: ids of the
named/* and the first 3,000 random/* inputs for models/llama2 with its
normalizer removed and a Metaspace pre-tokenizer and decoder instead, the
form newer Llama 2 / Mistral tokenizer.json files take (METASPACE below;
metaspace_test.go applies the same patch).
"""
import gzip, io, json, os
import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

HERE = os.path.dirname(os.path.abspath(__file__))
PAT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def build():
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("Ġwor", "d"),
                 ("w", "or"), ("wor", "d"), ("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("e", "r"), ("Ġ", "a"), ("a", "n"), ("Ġa", "n")]:
        merges.append((a, b))
        vocab.setdefault(a + b, len(vocab))
    tk = Tokenizer(models.BPE(vocab, merges))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PAT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken("<s>", special=True, normalized=False),
                           AddedToken("</s>", special=True, normalized=False),
                           AddedToken("<mask>", lstrip=True, special=True, normalized=False),
                           AddedToken("[R]", rstrip=True, special=True, normalized=False),
                           AddedToken("<both>", lstrip=True, rstrip=True, special=True, normalized=False)])
    tk.add_tokens([AddedToken("word", single_word=True, normalized=True),
                   AddedToken("café", normalized=True),
                   AddedToken("<plain>", normalized=False),
                   AddedToken("<plainer>", normalized=False)])
    tk.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", tk.token_to_id("<s>")), ("</s>", tk.token_to_id("</s>"))])
    return tk


def main():
    tk = build()
    os.makedirs(os.path.join(HERE, 'synthetic'), exist_ok=True)
    js = json.loads(tk.to_str())
    with open(os.path.join(HERE, 'synthetic', 'flags.json'), 'w') as f:
        json.dump(js, f, ensure_ascii=False, indent=1)
    js2 = json.loads(tk.to_str())
    js2['model']['merges'] = [' '.join(m) if isinstance(m, list) else m for m in js2['model']['merges']]
    with open(os.path.join(HERE, 'synthetic', 'flags_strmerges.json'), 'w') as f:
        json.dump(js2, f, ensure_ascii=False, indent=1)
    tk2 = Tokenizer.from_str(json.dumps(js2))
    texts = [
        "the word in the world", "a word", "words sword word_ word1 (word) wordy", "x <mask> y", "x   <mask>y",
        "<mask><mask>  <mask>", "a [R]   b", "[R]\n\nz", " <both>  c", "cafe\u0301 café CAFÉ", "<plain><plainer><plain",
        "<s>hi</s>", "the<mask>  [R]  word", "é word\u0301", "  ", "", "w ord", "\tword\t", "word's",
    ]
    inputs = [json.loads(l) for l in gzip.open(os.path.join(HERE, 'inputs.jsonl.gz'), 'rt', encoding='utf-8')]
    texts += [c['text'] for c in inputs if c['name'].startswith('named/')]
    out = []
    for i, t in enumerate(texts):
        for special in (False, True):
            ids = tk.encode(t, add_special_tokens=special).ids
            assert ids == tk2.encode(t, add_special_tokens=special).ids
            out.append({"text": t, "special": special, "ids": ids, "decoded": tk.decode(ids, skip_special_tokens=False)})
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode='wb', mtime=0) as f:
        f.write(''.join(json.dumps(o, ensure_ascii=False) + '\n' for o in out).encode('utf-8'))
    open(os.path.join(HERE, 'synthetic', 'flags_expected.jsonl.gz'), 'wb').write(buf.getvalue())
    print(len(out), 'cases; tokenizers', tokenizers.__version__)


METASPACE = {
    "first": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
    "always_split": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
    "never": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "never", "split": False},
}


def metaspace():
    base = json.loads(gzip.open(os.path.join(HERE, 'models', 'llama2', 'tokenizer.json.gz')).read())
    inputs = [json.loads(l) for l in gzip.open(os.path.join(HERE, 'inputs.jsonl.gz'), 'rt', encoding='utf-8')]
    cases = [c for c in inputs if c['name'].startswith('named/')]
    cases += [c for c in inputs if c['name'].startswith('random/')][:3000]
    for name, pre in METASPACE.items():
        js = dict(base)
        js['normalizer'] = None
        js['pre_tokenizer'] = pre
        js['decoder'] = pre
        tk = Tokenizer.from_str(json.dumps(js))
        out = []
        for c in cases:
            ids = tk.encode(c['text'], add_special_tokens=True).ids
            out.append({"name": c['name'], "ids": ids, "decoded": tk.decode(ids, skip_special_tokens=False)})
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode='wb', mtime=0) as f:
            f.write(''.join(json.dumps(o, ensure_ascii=False) + '\n' for o in out).encode('utf-8'))
        open(os.path.join(HERE, 'synthetic', 'metaspace_%s_expected.jsonl.gz' % name), 'wb').write(buf.getvalue())
        print(name, len(out), 'cases')


if __name__ == '__main__':
    metaspace()
    main()
