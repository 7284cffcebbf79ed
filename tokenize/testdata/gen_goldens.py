#!/usr/bin/env python3
"""Generates the tokenizer goldens in this directory with the real Rust
`tokenizers` library (PyPI `tokenizers`, the library transformers and vLLM use).

Usage (from tokenize/testdata):
    python gen_goldens.py FAMILY=PATH/tokenizer.json [FAMILY=PATH ...]

For every FAMILY it writes
    models/FAMILY/tokenizer.json.gz   the tokenizer file (deterministic gzip)
    expected/FAMILY.jsonl.gz          {"name", "special", "ids"} per input
and once, shared by all families,
    inputs.jsonl.gz                   {"name", "text"}: named hard strings and
                                      10,000+ seeded random strings
    corpus_1mb.txt.gz                 the 1 MB mixed benchmark corpus
Inputs named "named/..." are also encoded with add_special_tokens=True.
Deterministic: same library version, same output.
"""
import gzip, io, json, os, sys
import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))


def gz_write(path, data: bytes):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode='wb', mtime=0, compresslevel=9) as f:
        f.write(data)
    with open(path, 'wb') as f:
        f.write(buf.getvalue())


# ---------------------------------------------------------------- named strings
MULTI = (
    "Русский текст: Съешь же ещё этих мягких французских булок, да выпей чаю.\n"
    "Ελληνικά: Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.\n"
    "العربية: نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر.\n"
    "עברית: דג סקרן שט בים מאוכזב ולפתע מצא חברה.\n"
    "हिन्दी: ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम।\n"
    "ไทย: เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน\n"
    "Tiếng Việt: Tôi có thể ăn thủy tinh mà không hại gì.\n"
    "日本語: いろはにほへと ちりぬるを わかよたれそ つねならむ。漢字とカタカナ、ひらがな。\n"
    "한국어: 키스의 고유조건은 입술끼리 만나야 하고 특별한 기술은 필요치 않다.\n"
    "中文：我能吞下玻璃而不伤身体。這是繁體中文。\n"
    "Emoji: 😀😃😄 👩‍👩‍👧‍👦 🇫🇷🇯🇵 👍🏽 ❤️ 🧑🏿‍💻\n"
)
CJK = (
    "天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。寒来暑往，秋收冬藏。闰余成岁，律吕调阳。"
    "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。床前明月光，疑是地上霜。举头望明月，低头思故乡。"
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。何でも薄暗いじめじめした所で"
    "ニャーニャー泣いていた事だけは記憶している。カタカナ・ひらがな・漢字が混ざった文章。"
    "대한민국은 민주공화국이다. 대한민국의 주권은 국민에게 있고, 모든 권력은 국민으로부터 나온다. "
    "繁體中文與簡體中文並存，標點符號「引號」『雙引號』（括號）【方括號】——破折號……省略號。\n"
)


def named_cases():
    c = []
    add = lambda n, t: c.append({"name": "named/" + n, "text": t})
    add("empty", "")
    add("single_space", " ")
    add("english_sentence", "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see!")
    add("contractions_upper", "I'M sure YOU'RE right, WE'VE SEEN IT'S DONE. They'd've said 'tis ok. don't")
    add("contraction_long_s", "it'ſ x'ſt x'St x'st x'STx 'S 'K 'k x'KELVIN")
    add("contraction_fold", "'K 'ß 'ﬆ 'İ 'ı x'LL'Ll'lL'RE'Re'VE'vE'D'M")
    add("numbers", "1234567890 3.14159 -42 1e10 0x1F ١٢٣ ²³ Ⅻ ½ ①")
    add("code_python_tabs", "def f(x):\n\tif x:\n\t\treturn x  # comment\n\treturn None\n\n\nclass A:\n    def g(self):\n        pass\n")
    add("code_go", "func main() {\n\tfmt.Println(\"hi\")\n\tfor i := 0; i < 10; i++ {\n\t\tx[i] = i*2 + 1\n\t}\n}\n")
    add("json_blob", json.dumps({"name": "get_weather", "arguments": {"city": "Paris", "units": ["c", "f"], "n": 3}}, ensure_ascii=False))
    add("cjk_chinese", "我能吞下玻璃而不伤身体。這是繁體中文，包含標點符號！")
    add("cjk_japanese", "いろはにほへと ちりぬるを。カタカナとひらがなと漢字。")
    add("cjk_korean", "키스의 고유조건은 입술끼리 만나야 하고 특별한 기술은 필요치 않다.")
    add("emoji", "😀 hi👋🏽 👩‍👩‍👧‍👦 family 🇫🇷 flag ❤️ heart 🧑🏿‍💻")
    add("mixed_whitespace", "a  b   c\t\td \t e\u00a0f\u3000g\u2028h\u0085i\x1cj\x0bk\x0cl")
    add("trailing_spaces", "hello world   ")
    add("leading_spaces", "    indented text")
    add("newline_runs", "para one\n\n\n\npara two\r\n\r\nthree\n \n  \n")
    add("spaces_then_newline", "a   \n   b \n\n  ")
    add("only_newlines", "\n\n\n\n\n")
    add("special_tokens_chatml", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    add("special_tokens_adjacent", "<|im_start|><|im_end|><|endoftext|>x<|im_end|> <|im_start|>")
    add("added_nonspecial", "<think>\nreasoning\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call><tool_response>ok</tool_response>")
    add("llama3_special_tokens", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n")
    add("deepseek_special_tokens", "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜><think>\nok</think>done<｜end▁of▁sentence｜>")
    add("gptoss_special_tokens", "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>")
    add("sp_special_tokens", "<s>[INST] Hi [/INST] ok</s><bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n<unk><pad>")
    add("special_like_partial", "<|im_start| <|im_end <|IM_START|> < |im_start|> <<|im_end|>>")
    add("nfc_combining", "e\u0301 cafe\u0301 A\u030a \u1100\u1161\u11a8 \u212b \u2126 n\u0303")
    add("nfc_compat_ideographs", "\uf900\uf901\uf981\ufa00 \u2f800\u2fa1d \u0958\u0344\u0340 \u1e9b\u0323")
    add("nfc_long_marks", "a" + "\u0301" * 40 + " o" + "\u0323\u0302" * 20 + " x" + "\u0308\u0323" * 35 + "y")
    add("nfc_reorder", "a\u0301\u0323 a\u0323\u0301 e\u0302\u0323 \u1ea1\u0302 \u0041\u030a\u0327")
    add("devanagari_marks", "नमस्ते दुनिया क्षत्रिय")
    add("punctuation_runs", "!!! ??? ... --- *** ``` ~~~ ((()))  {{{ }}} :) ;-) <=> != == ===\n\n")
    add("url_email", "Visit https://example.com/path?q=1&r=2#frag or mail foo.bar+baz@example.co.uk.")
    add("long_space_run", " " * 1000 + "x" + "\t" * 300)
    add("long_word", "a" * 3000 + " " + "ab" * 1500)
    add("base64", "QmFzZTY0IGVuY29kZWQgdGV4dCBoZXJlIQ==" * 40)
    add("multilingual", MULTI)
    add("cjk_block", CJK)
    add("case_runs", "HTTPServer XMLHttpRequest iPhone McDONALD'S ǅungla ǈ ǋ Ǳ ʰʱʲ ꜰ DŽ camelCaseWord SHOUTING'LL")
    add("marks_letters", "\u0301abc \u0301 \u064eعربي \u0e31ไทย a\u20ddb ᄀ\u1161")
    add("digits_mixed", "12345678901234 ١٢٣٤٥ ５６７８ 𝟎𝟏𝟐 abc123def 1,234,567.89")
    add("cr_only", "a\rb\r\rc\r\n\rd \r e")
    add("slash_newline", "path/to/\nx //\n\n// y /\r\n")
    return c


# ---------------------------------------------------------------- random strings
class Mulberry32:
    def __init__(self, seed):
        self.s = seed & 0xffffffff

    def __call__(self):
        self.s = (self.s + 0x6D2B79F5) & 0xffffffff
        t = self.s
        t = ((t ^ (t >> 15)) * (t | 1)) & 0xffffffff
        t ^= (t + (((t ^ (t >> 7)) * (t | 61)) & 0xffffffff)) & 0xffffffff
        return ((t ^ (t >> 14)) & 0xffffffff) / 4294967296


def cp(*xs):
    return [chr(x) for x in xs]


POOLS = {
    'ascii': list('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'),
    'quote': ["'", "'s", "'S", "'t", "'re", "'RE", "'Ve", "'m", "'ll", "'LL", "'d", "'ſ", "'K", "'x"],
    'space': [' ', ' ', ' ', '  ', '\t', '\n', '\r', '\r\n', '\n\n', '\v', '\f'],
    'uspace': cp(0xa0, 0x85, 0x1680, 0x2000, 0x2003, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000),
    'notspace': cp(0x1c, 0x1d, 0x1e, 0x1f, 0x180e, 0x200b, 0xfeff, 0x00ad),
    'letters': cp(0xe9, 0x17f, 0x212a, 0xdf, 0x130, 0x3b1, 0x3a9, 0x436, 0x416, 0x4e2d, 0x6587, 0x3042, 0x30ab,
                  0xac00, 0xd55c, 0xe01, 0x915, 0x627, 0x5d0, 0x1e9e, 0x2c6, 0x2b0, 0x3005, 0x1c5, 0x2160, 0xaa70),
    'marks': cp(0x301, 0x308, 0x323, 0x20dd, 0x200d, 0xfe0f, 0x93f, 0x94d, 0x64e, 0xe31, 0x302),
    'numbers': cp(0x661, 0xb2, 0xbd, 0x216b, 0x2460, 0xff10, 0x966, 0x1d7ce, 0x3007, 0x2070),
    'emoji': cp(0x1f600, 0x1f44d, 0x1f3fd, 0x1f1eb, 0x1f1f7, 0x2764, 0x1f9d1, 0x1f4bb, 0x1f468),
    'nfc': ['e\u0301', 'A\u030a', '\u1100\u1161\u11a8', '\u212b', '\u2126', 'n\u0303', '\uf981', '\uf900', '\u0344',
            '\u0958', 'a\u0323\u0302', 'o\u0302\u0323'],
    'special': ['<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>', '</tool_response>',
                '<|begin_of_text|>', '<|eot_id|>', '<|start_header_id|>', '<|', '|>', '<', '>', '<|im_start|',
                '<<|im_end|>', '<s>', '</s>', '<bos>', '<start_of_turn>', '<｜User｜>', '<｜Assistant｜>',
                '<|start|>', '<|message|>', '<unk>', '▁', '▁▁'],
    'words': ['the', ' the', ' quick', 'Hello', ' world', 'function', ' return', 'import', ' numpy', ' 12345', '3.14',
              '0x1F', '    ', '\t\t', '\n    ', 'func', '(){', '});', ' => ', '// TODO', '### ', '**bold**', 'http://',
              '.com', ' 我们', '的', 'こんにちは', ' 안녕하세요', ' привет', ' مرحبا', 'ñandú', ' naïve', 'Zürich',
              'HTTPServer', "DON'T", ' ÉCOLE'],
}
WEIGHTS = [('ascii', 20), ('quote', 5), ('space', 15), ('uspace', 3), ('notspace', 2), ('letters', 8), ('marks', 3),
           ('numbers', 4), ('emoji', 3), ('nfc', 3), ('special', 3), ('words', 15)]


def random_cases(n, seed):
    rnd = Mulberry32(seed)
    total = sum(w for _, w in WEIGHTS)

    def atom():
        r = rnd() * total
        for k, w in WEIGHTS:
            r -= w
            if r < 0:
                p = POOLS[k]
                return p[int(rnd() * len(p))]
        return 'x'

    out = []
    for i in range(n):
        ln = int(rnd() * 40)
        s = ''
        for _ in range(ln):
            a = atom()
            if rnd() < 0.02:
                a = a * (20 + int(rnd() * 300))
            s += a
        out.append({"name": "random/%d" % i, "text": s})
    probes = [
        ('u14_toto', ''.join(cp(0x1e290, 0x1e291, 0x1e2ae))),
        ('u15_kawi', 'x' + ''.join(cp(0x11f04, 0x11f05, 0x11f50, 0x11f51)) + ' y'),
        ('u15_cjk_ext_h', ''.join(cp(0x31350, 0x31351)) + 'a'),
        ('u15_emoji', ''.join(cp(0x1fae8, 0x1fa77)) + ' z'),
        ('u15_1_ideo', ''.join(cp(0x2ebf0, 0x2ebf1)) + '1'),
        ('u16_garay', ''.join(cp(0x10d50, 0x10d51, 0x10d40, 0x10d41)) + ' k'),
        ('u16_digits', ''.join(cp(0x116d0, 0x116d1, 0x1e5f1)) + 'q'),
    ]
    for n_, t in probes:
        out.append({"name": "probe/" + n_, "text": t})
    return out


# ---------------------------------------------------------------- 1 MB corpus
def corpus():
    opticks = open('/usr/local/go/src/testdata/Isaac.Newton-Opticks.txt', encoding='utf-8').read()
    gosrc = ''.join(open(os.path.join('/usr/local/go/src/strings', p), encoding='utf-8').read()
                    for p in sorted(os.listdir('/usr/local/go/src/strings')) if p.endswith('.go'))
    rnd = Mulberry32(7)
    ws = ''.join(' ' * int(rnd() * 9) + '\t' * int(rnd() * 3) + '\n' * int(rnd() * 4) + 'w%d' % i for i in range(4000))
    marks = ''.join('e\u0301a\u0308o\u0323\u0302 ' + 'n\u0303' * (i % 5) + ' ' for i in range(3000))
    parts = [opticks, gosrc, CJK * 120, MULTI * 200, ws, marks,
             json.dumps([{"id": i, "text": "item %d" % i, "v": i * 1.5} for i in range(3000)])]
    b = "\n".join(parts).encode('utf-8')
    return b[:1_000_000].decode('utf-8', errors='ignore')


def main():
    fams = dict(a.split('=', 1) for a in sys.argv[1:])
    named = named_cases()
    cases = named + random_cases(10000, 12345)
    text = corpus()
    cases_all = cases + [{"name": "corpus_1mb", "text": text}]
    gz_write(os.path.join(HERE, 'inputs.jsonl.gz'),
             ''.join(json.dumps(c, ensure_ascii=False) + '\n' for c in cases).encode('utf-8'))
    gz_write(os.path.join(HERE, 'corpus_1mb.txt.gz'), text.encode('utf-8'))
    for fam, path in sorted(fams.items()):
        raw = open(path, 'rb').read()
        gz_write(os.path.join(HERE, 'models', fam, 'tokenizer.json.gz'), raw)
        tk = tokenizers.Tokenizer.from_str(raw.decode('utf-8'))
        lines = []
        for c in cases_all:
            lines.append({"name": c["name"], "special": False, "ids": tk.encode(c["text"], add_special_tokens=False).ids})
            if c["name"].startswith("named/"):
                lines.append({"name": c["name"], "special": True, "ids": tk.encode(c["text"], add_special_tokens=True).ids})
        gz_write(os.path.join(HERE, 'expected', fam + '.jsonl.gz'),
                 ''.join(json.dumps(l, separators=(',', ':')) + '\n' for l in lines).encode('utf-8'))
        print(fam, len(lines), 'lines; corpus ids', len(lines[-1]["ids"]), file=sys.stderr)
    print('tokenizers', tokenizers.__version__, 'cases', len(cases), 'corpus bytes', len(text.encode()), file=sys.stderr)


if __name__ == '__main__':
    main()
