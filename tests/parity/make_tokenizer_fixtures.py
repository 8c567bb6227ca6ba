#!/usr/bin/env python3
"""Records what Hugging Face `tokenizers` returns for a mixed corpus, for tests/parity/test_tokenizer_parity.cpp.

References (each a tokenizers.Tokenizer; ids, decodes and partial decodes are recorded per corpus line):
  smollm2_gguf    transformers.AutoTokenizer.from_pretrained(dir, gguf_file=name): transformers' own GGUF ->
                  tokenizers conversion of the embedded model. transformers does not map tokenizer.ggml.pre =
                  "smollm" to a split regex (it is not in GGUF_PRE_TOKENIZER_SPLITS), so this one pre-tokenizes with
                  plain ByteLevel, i.e. the GPT-2 regex. kvscope's "gpt2" preset must match it.
  smollm2_smollm  the same tokenizer with SmolLM2's own pre-tokenizer, as its Hub tokenizer.json (and llama.cpp's
                  "smollm" pre-type) has it: Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)].
                  kvscope's "smollm" preset (what the GGUF names) must match it. The two differ only where
                  whitespace meets a digit ("  1" is [ĠĠ, 1] here, [Ġ, Ġ, 1] above); the count is recorded.
  trained_*       a 500-token byte-level BPE trained here with tokenizers, saved with the gpt2, smollm, llama3,
                  qwen2 and gpt-4o (o200k, gpt-oss's) pre-tokenizers (llama3 also with ignore_merges and a BOS template, qwen2 with "a b" merges,
                  gpt2 with a normalized added token and an lstrip/rstrip special token): a second tokenizer family
                  through the tokenizer.json path.
  sp_*            SentencePiece-style BPE as Llama 2 / Mistral / TinyLlama ship it in tokenizer.json: a ~400-token BPE
                  trained here on Metaspace words, with <unk> <s> </s> and the 256 <0xNN> byte tokens in the model
                  vocabulary (ids 0..258, as in Llama 2), byte_fallback and fuse_unk, a "<s> $A" template, and:
                    sp_llama2    the older layout: normalizer Sequence[Prepend("▁"), Replace(" " -> "▁")], no
                                 pre-tokenizer, decoder Sequence[Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ",
                                 1, 0)], "a b" merges (Llama 2, TinyLlama, Mistral 7B v0.1)
                    sp_mistral   the newer layout: no normalizer, Metaspace(prepend_scheme "first", split false), the
                                 same decoder, [a, b] merges (transformers 5's LlamaTokenizer, Mistral v0.3)
                    sp_metaspace Metaspace(prepend_scheme "always", split true) as pre-tokenizer and as decoder (no
                                 byte fallback in decoding: <0xNN> stay text, as tokenizers does)
                    sp_unk       sp_llama2 with byte_fallback false: unknown characters become one fused <unk>
                    sp_partial   sp_mistral without the <0x80>..<0xFF> tokens: non-ASCII characters outside the
                                 vocabulary fall to <unk> while unknown ASCII controls still fall back to bytes
                  Added tokens on top: <|im_start|> <|im_end|> (special), <think> (normalized: in sp_llama2 it
                  only matches as "▁<think>"), </think>, <mask> (lstrip/rstrip special). Emoji and rare CJK are
                  outside the alphabet, so they go through byte fallback.

Also: the GGUF's tokenizer parts (read with the gguf package, the keys fromGguf reads), every token's bytes, and the
chat template rendered by transformers' apply_chat_template.

When $KVSCOPE_MODEL is unset or missing, only the trained references are written (the C++ test skips the rest).
"""
import argparse
import json
import os
import random
import shutil
import sys
import warnings

warnings.filterwarnings("ignore")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


# tiktoken's o200k (gpt-oss's tokenizer.json Split; llama.cpp's gpt-4o pre-tokenizer): words split at case changes.
O200K_SPLIT = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
               r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def qwen2_split():
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX
    return PRETOKENIZE_REGEX


def fixed_corpus():
    return [
        "",
        " ",
        "Hello world",
        "The quick brown fox jumps over the lazy dog.",
        "I'm sure they'll say it's fine, don't you think? We've seen it. You'd know. I'M SHOUTING, IT'S OK, She'S",
        "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
        "CamelCaseWords and HTTPServer, iPhone's IDs: JSONDecodeError/path/to 12345 ÉCOLE naïveÉtude",
        "int main() {\n\tfor (int i = 0; i < 10; ++i) {\n\t\tprintf(\"%d\\n\", i);\n\t}\n}",
        "    indented with spaces\n\ttabbed\n  \t mixed  \n",
        "trailing spaces   ",
        "   leading spaces",
        "a  b   c    d\t\te\n\n\nf\r\ng\r\n\r\nh",
        "\n\n\n",
        "   \t \n ",
        "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ✨",
        "中文分词测试，这是一个句子。日本語のテキストとカタカナ。한국어 텍스트입니다.",
        "Café naïve résumé façade Ångström Zürich São Paulo Œuvre ÆØÅ æøå ß",
        "Русский текст, ελληνικά, עברית, العربية, हिन्दी भाषा, ภาษาไทย",
        "Numbers: 1234567890123456789 3.14159 1,000,000 -42 +7e10 0x1F 007",
        "Digits and spaces:  123   4567\n 89\t0",
        "x² ½ ¾ ٣٤٥ ۱۲۳ १२३ Ⅻ ① ⑳ 𝟙𝟚",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
        "<|endoftext|>",
        "text<|im_end|>more text<|im_start|>",
        "<|im_start|><|im_end|><|im_start|>",
        "<|im_start <|im_start| < |im_start|> <|IM_START|>",
        " <|im_start|> spaced <|im_end|> ",
        "<think>reasoning</think> <mask> a <mask>b",
        "Unicode spaces: a\u00a0b\u00a0\u00a0c\u3000d\u2009e\u0085f\u180e\u180eg \u180e.\u200bh\x0bi\x0cj\x1ck\u2028l\u2029m",
        "Combining: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 Z\u0351\u0367\u0324",
        "Punctuation!!! ??? ... --- *** ((())) [[]] {{}} <<>> ''' \"\"\" ``` ~~~ @#$%^&",
        "URLs: https://example.com/path?q=1&r=2#frag user@example.org C:\\Windows\\System32",
        "Mixed123abc456DEF789 snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
        "It's 5 o'clock; the year's 2024 and it'll be 2025's turn.",
        "Zero-width\u200djoiner and\u200cnon-joiner, BOM\ufeffhere, replacement \ufffd char",
        "Private use \ue000\uf8ff and astral 𐍈 𓀀 🀄 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
        "A" * 300,
        "ab " * 200,
        " " * 100 + "x" + "\n" * 50 + "y" + "\t" * 30,
        "1" * 64 + " " + "9876543210" * 10,
        "Byte fallback then unknown: 😀j 分词j\x0b 𝔘\x0bx ŋj ŋ😀ŋ jjj",
    ]


def random_corpus(count, seed):
    """Random mixtures of the character classes the regexes care about."""
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u0085\u180e\u2028\x0b",
        "'s't're've'm'll'd'S'T",
        ".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"",
        "éèêëàâäôöùûüçñÉÀÇØåæœß",
        "中文日本語한국어",
        "😀👍🏽🇫🇷❤️",
        "²½٣१Ⅻ①",
        "\u0301\u0308\u094d",
        "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    ]
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 25)):
            pool = rng.choice(pools)
            if pool.startswith("<|"):
                parts.append(pool)
            else:
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        lines.append("".join(parts))
    return lines


def token_bytes(tok):
    """Raw bytes of every id, as tokenizers' ByteLevel decoder maps a single token (added tokens: their text)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    back = {c: b for b, c in bytes_to_unicode().items()}
    added = {i: t.content for i, t in tok.get_added_tokens_decoder().items()}
    out = []
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        if i in added:
            out.append(added[i].encode("utf-8").hex())
            continue
        t = tok.id_to_token(i)
        if t is None:
            out.append("")
        elif all(c in back for c in t):
            out.append(bytes(back[c] for c in t).hex())
        else:
            out.append(t.encode("utf-8").hex())
    return out


def record(tok, corpus):
    """ids (with and without the post-processor's special tokens), ids with special tokens left as text, decodes."""
    ref = {"ids": [], "ids_no_special": [], "ids_plain": [], "decode": [], "decode_skip": [], "decode_half": []}
    for text in corpus:
        ids = tok.encode(text, add_special_tokens=True).ids
        plain = tok.encode(text, add_special_tokens=False).ids
        ref["ids"].append(ids)
        ref["ids_no_special"].append(plain)
        ref["decode"].append(tok.decode(plain, skip_special_tokens=False))
        ref["decode_skip"].append(tok.decode(plain, skip_special_tokens=True))
        ref["decode_half"].append(tok.decode(plain[: len(plain) // 2], skip_special_tokens=False))
    tok.encode_special_tokens = True
    try:
        ref["ids_plain"] = [tok.encode(text, add_special_tokens=False).ids for text in corpus]
    finally:
        tok.encode_special_tokens = False
    return ref


def smollm_pre_tokenizer():
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])


def split_pre_tokenizer(regex):
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def save(tok, directory):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tokenizer.json")
    tok.save(path)
    return path


def smollm2(model_path, out, corpus, cases):
    import gguf
    from transformers import AutoTokenizer

    reader = gguf.GGUFReader(model_path)

    def field(key):
        f = reader.fields.get(key)
        if f is None:
            return None
        if len(f.types) > 1 or f.types[0] == gguf.GGUFValueType.ARRAY:
            return [f.contents(i) for i in range(len(f.data))]
        return f.contents()

    parts = {key.split(".")[-1]: field(key) for key in [
        "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token",
        "tokenizer.chat_template"]}
    with open(os.path.join(out, "smollm2_parts.json"), "w", encoding="utf-8") as f:
        json.dump(parts, f, ensure_ascii=False)

    hf = AutoTokenizer.from_pretrained(os.path.dirname(model_path), gguf_file=os.path.basename(model_path))
    backend = hf.backend_tokenizer
    gguf_dir = os.path.join(out, "smollm2_gguf")
    hf.save_pretrained(gguf_dir)  # tokenizer.json (== backend.save) + tokenizer_config.json + chat_template.jinja
    cases["references"]["smollm2_gguf"] = {"tokenizer_json": "smollm2_gguf/tokenizer.json", **record(backend, corpus)}

    own = Tokenizer.from_str(backend.to_str())
    own.pre_tokenizer = smollm_pre_tokenizer()
    save(own, os.path.join(out, "smollm2_smollm"))
    cases["references"]["smollm2_smollm"] = {"tokenizer_json": "smollm2_smollm/tokenizer.json", **record(own, corpus)}
    g, s = cases["references"]["smollm2_gguf"]["ids"], cases["references"]["smollm2_smollm"]["ids"]
    cases["smollm2_pre_differs"] = [i for i in range(len(corpus)) if g[i] != s[i]]

    cases["smollm2_token_bytes"] = token_bytes(backend)
    cases["smollm2_special"] = {"bos": hf.bos_token_id, "eos": hf.eos_token_id, "unk": hf.unk_token_id,
                                "pad": hf.pad_token_id}

    conversations = [
        [{"role": "user", "content": "hi"}],
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
        [{"role": "user", "content": "Write a haiku.\nAbout rain."},
         {"role": "assistant", "content": "Rain on the tin roof"}, {"role": "user", "content": "Another  one "}],
        [{"role": "assistant", "content": "I start."}],
        [{"role": "user", "content": ""}],
    ]  # transformers refuses an empty conversation
    chat = []
    for conv in conversations:
        for gen in (True, False):
            text = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
            chat.append({"messages": [[m["role"], m["content"]] for m in conv], "generation_prompt": gen,
                         "text": text, "ids": backend.encode(text, add_special_tokens=False).ids})
    cases["chat"] = chat
    cases["chat_template"] = hf.chat_template


def trained(out, corpus, cases):
    rng = random.Random(7)
    words = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "with", "as", "was", "on", "token", "cache",
             "quantized", "model", "def", "return", "self", "int", "float", "print", "import", "café", "naïve", "日本",
             "中文", "😀", "1234", "2024", "x²"]
    train = list(corpus) * 3
    for _ in range(3000):
        sep = rng.choice([" ", " ", " ", "  ", "\n", "\t", ", ", ". ", "'s ", "\n    "])
        train.append(sep.join(rng.choice(words) for _ in range(rng.randint(3, 20))))
    base = Tokenizer(models.BPE())
    base.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    base.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    base.train_from_iterator(train, trainer=trainer)

    variants = {}
    gpt2 = Tokenizer.from_str(base.to_str())
    gpt2.add_tokens([AddedToken("<think>", special=False, normalized=True),
                     AddedToken("</think>", special=False, normalized=False)])
    gpt2.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, rstrip=True, normalized=False)])
    variants["gpt2"] = gpt2

    smollm = Tokenizer.from_str(base.to_str())
    smollm.pre_tokenizer = smollm_pre_tokenizer()
    variants["smollm"] = smollm

    llama3 = json.loads(base.to_str())
    llama3["model"]["ignore_merges"] = True
    llama3 = Tokenizer.from_str(json.dumps(llama3))
    llama3.pre_tokenizer = split_pre_tokenizer(LLAMA3_SPLIT)
    bos = llama3.token_to_id("<|im_start|>")
    llama3.post_processor = processors.TemplateProcessing(single="<|im_start|> $A", pair="<|im_start|> $A $B",
                                                          special_tokens=[("<|im_start|>", bos)])
    variants["llama3"] = llama3

    qwen2 = Tokenizer.from_str(base.to_str())
    qwen2.pre_tokenizer = split_pre_tokenizer(qwen2_split())
    variants["qwen2"] = qwen2

    o200k = Tokenizer.from_str(base.to_str())
    o200k.pre_tokenizer = split_pre_tokenizer(O200K_SPLIT)
    variants["gpt-4o"] = o200k

    for name, tok in variants.items():
        path = save(tok, os.path.join(out, "trained_" + name))
        if name == "qwen2":
            # The older "a b" merges form, still read by tokenizers; checked to load to the same tokenizer.
            data = json.load(open(path, encoding="utf-8"))
            data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
            with open(path, "w", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=False)
            reread = Tokenizer.from_file(path)
            assert [reread.encode(t).ids for t in corpus] == [tok.encode(t).ids for t in corpus]
            tok = reread
        cases["references"]["trained_" + name] = {"tokenizer_json": "trained_" + name + "/tokenizer.json",
                                                   "preset": name, **record(tok, corpus)}


SP = "\u2581"


def sp_train(corpus):
    """A small BPE trained on Metaspace words (merges never cross a ▁, as SentencePiece's), limited alphabet."""
    rng = random.Random(11)
    words = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "with", "as", "was", "on", "token", "cache",
             "quantized", "model", "def", "return", "self", "int", "float", "print", "import", "café", "naïve", "日本",
             "中文", "1234", "2024", "Hello", "world", "The", "quick", "brown", "fox", "numbers", "spaces", "leading"]
    train = [line for line in corpus[:40] if line.isascii()]
    for _ in range(4000):
        sep = rng.choice([" ", " ", " ", "  ", "\n", "\t", ", ", ". ", "'s ", "\n    "])
        train.append(sep.join(rng.choice(words) for _ in range(rng.randint(3, 20))))
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], limit_alphabet=90,
                                  show_progress=False)
    tok.train_from_iterator(train, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    trained = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    return [t for t, _ in trained if t not in ("<unk>", "<s>", "</s>")], [list(m) for m in model["merges"]]


def sp_file(pieces, merges, layout, byte_range=range(256), byte_fallback=True, string_merges=False):
    """A tokenizer.json laid out as the real Llama 2 / Mistral files are."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in byte_range:
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t in pieces:
        vocab.setdefault(t, len(vocab))
    n = len(vocab)

    def added(i, content, special=True, normalized=False, lstrip=False, rstrip=False):
        return {"id": i, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
                "normalized": normalized, "special": special}

    added_tokens = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>"), added(n, "<|im_start|>"),
                    added(n + 1, "<|im_end|>"), added(n + 2, "<think>", special=False, normalized=True),
                    added(n + 3, "</think>", special=False), added(n + 4, "<mask>", lstrip=True, rstrip=True)]
    strip_decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    if layout == "legacy":
        normalizer = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SP},
                                                         {"type": "Replace", "pattern": {"String": " "},
                                                          "content": SP}]}
        pre, decoder = None, strip_decoder
    elif layout == "gemma":  # Gemma's (transformers' GemmaTokenizer): spaces replaced, a Split with nothing to split
        normalizer = {"type": "Replace", "pattern": {"String": " "}, "content": SP}
        pre = {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False}
        decoder = {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": SP}, "content": " "},
                                                    {"type": "ByteFallback"}, {"type": "Fuse"}]}
    elif layout == "first":
        normalizer, decoder = None, strip_decoder
        pre = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False}
    else:
        normalizer = None
        pre = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "always", "split": True}
        decoder = dict(pre)
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
        "normalizer": normalizer, "pre_tokenizer": pre,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": decoder,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": byte_fallback,
                  "ignore_merges": False, "vocab": vocab,
                  "merges": [" ".join(m) for m in merges] if string_merges else merges},
    }


def sentencepiece(out, corpus, cases):
    pieces, merges = sp_train(corpus)
    variants = {
        "sp_llama2": sp_file(pieces, merges, "legacy", string_merges=True),
        "sp_mistral": sp_file(pieces, merges, "first"),
        "sp_metaspace": sp_file(pieces, merges, "always"),
        "sp_unk": sp_file(pieces, merges, "legacy", byte_fallback=False, string_merges=True),
        "sp_partial": sp_file(pieces, merges, "first", byte_range=range(128)),
        "sp_gemma": sp_file(pieces, merges, "gemma"),
    }
    for name, data in variants.items():
        directory = os.path.join(out, name)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        tok = Tokenizer.from_file(path)  # the reference is what tokenizers makes of this very file
        ref = record(tok, corpus)
        vocab = data["model"]["vocab"]
        ref["byte_fallback_lines"] = sum(any(vocab.get(f"<0x{b:02X}>") in ids for b in range(128, 256))
                                         for ids in ref["ids_no_special"])
        ref["unk_lines"] = sum(0 in ids for ids in ref["ids_no_special"])
        cases["references"][name] = {"tokenizer_json": name + "/tokenizer.json", "bos": tok.token_to_id("<s>"),
                                     **ref}
    # The layouts really differ: the same words, other ids.
    r = cases["references"]
    cases["sp_layouts_differ"] = sum(a != b for a, b in zip(r["sp_llama2"]["ids"], r["sp_mistral"]["ids"]))


def spm_gguf(out, corpus, cases, llama_tokenize):
    """A SentencePiece vocabulary as llama.cpp reads one from a GGUF (tokenizer.ggml.model "llama": Llama 2, Mistral,
    Gemma): the trained pieces with scores falling in merge order, byte tokens, <unk>/<s>/</s>, control tokens and
    user-defined ones (Gemma's whitespace runs among them); its reference is llama.cpp's own tokenizer
    (llama-tokenize, vocab only) on every corpus line: with BOS and special tokens parsed, without BOS, and with
    special tokens left as text."""
    import subprocess
    import gguf
    pieces, _ = sp_train(corpus)
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    for i, t in enumerate(pieces):
        if t not in tokens:
            tokens.append(t)
            scores.append(-float(i))
            types.append(1)
    for t, kind in (("<start_of_turn>", 3), ("<end_of_turn>", 3), ("<think>", 4), ("  ", 4), ("\t\t", 4)):
        tokens.append(t)
        scores.append(0.0)
        types.append(kind)
    path = os.path.join(out, "spm_llama.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("spm-vocab")
    for key, value in (("context_length", 512), ("embedding_length", 64), ("block_count", 1),
                       ("feed_forward_length", 128), ("attention.head_count", 2)):
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if not (llama_tokenize and os.access(llama_tokenize, os.X_OK)):
        cases["spm_missing"] = f"no llama-tokenize at {llama_tokenize!r}: the GGUF SentencePiece reference was not recorded"
        print(cases["spm_missing"], file=sys.stderr)
        return

    def ids(text, *flags):
        r = subprocess.run([llama_tokenize, "-m", path, "--stdin", "--ids", "--no-escape", "--log-disable", *flags],
                           input=text.encode("utf-8"), capture_output=True, check=True)
        return json.loads(r.stdout.decode().strip().splitlines()[-1])

    # The corpus, and lines with this vocabulary's control and user-defined tokens (Gemma's turns, whitespace runs).
    lines = corpus + ["<start_of_turn>user\nHello there<end_of_turn>\n<start_of_turn>model\n",
                      "<s> the model</s><unk>  cache  ", "x<start_of_turn><end_of_turn>y", "\t\tquantized<think>"]
    ref = {"gguf": "spm_llama.gguf", "lines": lines, "ids": [], "ids_no_special": [], "ids_plain": []}
    for text in lines:
        ref["ids"].append(ids(text))
        ref["ids_no_special"].append(ids(text, "--no-bos"))
        ref["ids_plain"].append(ids(text, "--no-bos", "--no-parse-special"))
    cases["spm_gguf"] = ref


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)

    corpus = fixed_corpus() + random_corpus(300, seed=1234)
    long_text = ""
    while len(long_text.encode("utf-8")) < 100 * 1024:
        long_text += "\n".join(fixed_corpus()) + "\n"
    corpus.append(long_text)
    cases = {"corpus": corpus, "long_index": len(corpus) - 1, "references": {}}

    trained(args.out, corpus, cases)
    sentencepiece(args.out, corpus, cases)
    spm_gguf(args.out, corpus, cases, os.environ.get("KVSCOPE_LLAMA_TOKENIZE", ""))
    model = os.environ.get("KVSCOPE_MODEL", "")
    if model and os.path.isfile(model):
        smollm2(model, args.out, corpus, cases)
    else:
        cases["model_missing"] = f"KVSCOPE_MODEL={model!r} is not a file: SmolLM2 references were not recorded"
        print(cases["model_missing"], file=sys.stderr)
    with open(os.path.join(args.out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False)
    refs = ", ".join(sorted(cases["references"]))
    sp = {k: (v["byte_fallback_lines"], v["unk_lines"]) for k, v in cases["references"].items() if k.startswith("sp_")}
    print(f"sentencepiece lines with byte fallback (>= 0x80) / <unk>: {sp}; "
          f"llama2 vs mistral layout ids differ on {cases['sp_layouts_differ']} lines")
    print(f"{len(corpus)} corpus lines; references: {refs}; "
          f"gguf vs smollm pre-tokenizer differ on {len(cases.get('smollm2_pre_differs', []))} lines")


if __name__ == "__main__":
    main()
