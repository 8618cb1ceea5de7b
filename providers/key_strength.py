"""How many guesses a given API key costs an attacker who tries the guessable patterns first,
in the spirit of zxcvbn (Wheeler, "zxcvbn: Low-Budget Password Strength Estimation", USENIX
Security 2016, https://www.usenix.org/conference/usenixsecurity16/technical-sessions/presentation/wheeler):
runs, alphabet or digit sequences, keyboard walks, repeated blocks and common words are each
priced as one pattern (a start, a length, a direction, a word index); every other character at
the size of the smallest standard alphabet the key is drawn from. Pure; no I/O."""

from __future__ import annotations

import math
import re
import string

ALPHABETS = (
    string.digits,
    "0123456789abcdef",
    "0123456789ABCDEF",
    string.digits + string.ascii_lowercase,
    string.digits + string.ascii_letters,
    string.digits + string.ascii_letters + "-_",
    string.digits + string.ascii_letters + "+/=",
    string.digits + string.ascii_letters + string.punctuation,
)
"""Smallest first: the alphabets keys are generated from (decimal, ``openssl rand -hex``, base36,
letters and digits, URL-safe and standard base64, printable ASCII)."""
KEYBOARD_ROWS = ("1234567890", "qwertyuiop", "asdfghjkl", "zxcvbnm", "qazwsxedcrfvtgbyhnujmikolp")
"""QWERTY rows and the column walk, each also walked backwards."""
COMMON_WORDS = (
    "password",
    "passwd",
    "secret",
    "super",
    "apikey",
    "api",
    "key",
    "token",
    "admin",
    "root",
    "login",
    "letmein",
    "welcome",
    "hello",
    "master",
    "dragon",
    "monkey",
    "shadow",
    "sunshine",
    "princess",
    "football",
    "baseball",
    "iloveyou",
    "trustno",
    "changeme",
    "default",
    "example",
    "test",
    "testing",
    "demo",
    "sample",
    "my",
    "our",
    "your",
    "for",
    "the",
    "and",
    "gpufit",
    "llama",
    "model",
    "serve",
    "server",
    "prod",
    "production",
    "staging",
    "dev",
    "openai",
    "access",
    "private",
    "public",
    "user",
    "guest",
    "qwerty",
    "abc",
    "xyz",
    "foo",
    "bar",
)
"""Words people put in made-up keys (the top of the leaked-password lists zxcvbn ranks, and the
project's own vocabulary); none is made only of hex digits, so no random hex key holds one."""
MIN_PATTERN = 3
_BIGRAMS = (
    "th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io le ve co "
    "me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur ca el ta la ns di fo ho pe ec pr no ct us "
    "ac ot il tr ly nc et ut ss so rs un lo wa ge ie wh ee wi em ad ol rt po we na ul ni ts mo ow pa "
    "im mi ai sh ir su id os iv ia am fi ci vi pl ig tu ev ld ry mp fe bl ab gh ty op wo sa ay ex ke "
    "fr oo av ag if ap gr od bo sp rd do uc bu ei ov by rm ep tt oc fa ef cu rn sc gi da yo cr cl du "
    "ga qu ue ff ba ey ls va um pp ua up lu go ht ru ug ds lt pi rc rr eg au ck ew mu br bi pt ak pu "
    "ui rg ib tl ny ki rk ys ob mm fu ph og ms ye ud mb ip ub oi rl gu dr hr cc tw ft wn nu"
)
ENGLISH_BIGRAMS = frozenset(_BIGRAMS.split())
"""About 220 common letter pairs of English text, hand-listed after the ranking in Norvig,
"English Letter Frequency Counts: Mayzner Revisited" (https://norvig.com/mayzner.html), an
approximation: a run of letters made mostly of them reads as words."""
PASSPHRASE_SEPARATORS = " -_."
WORD_BITS = 15.0
"""A word of a passphrase is priced as one pick from 32,768 words, more than the Diceware list
(7,776, https://theworld.com/~reinhold/diceware.html) or zxcvbn's English frequency lists hold."""
WALKS = {
    walk[s : s + length]: len(row)
    for row in KEYBOARD_ROWS
    for walk in (row, row[::-1])
    for length in range(MIN_PATTERN + 1, len(walk) + 1)
    for s in range(len(walk) - length + 1)
}
WALK_MAX = max(map(len, WALKS))
WORD_RANK = {word: rank for rank, word in reversed(list(enumerate(COMMON_WORDS)))}
WORD_LENGTHS = sorted({len(w) for w in COMMON_WORDS})


def _alphabet_bits(key: str) -> float:
    for alphabet in ALPHABETS:
        if set(key) <= set(alphabet):
            return math.log2(len(alphabet))
    return math.log2(len(set(key)) + 95)  # beyond ASCII: at least the printable set and its own


def _spans(key: str) -> list[tuple[int, int, float]]:
    """(start, end, bits) of each guessable pattern found in ``key``."""
    low = key.lower()
    found: list[tuple[int, int, float]] = []
    n = len(key)
    i = 0
    while i < n:  # runs and steady sequences ("aaaa", "abcd", "9876", "aceg")
        j = i + 1
        step = ord(key[j]) - ord(key[i]) if j < n else 0
        while j < n and ord(key[j]) - ord(key[j - 1]) == step and abs(step) <= 2:
            j += 1
        if j - i >= MIN_PATTERN:
            found.append((i, j, math.log2(95) + math.log2(j - i) + 2))
            i = j - 1 if j - i > MIN_PATTERN else j
        else:
            i += 1
    for at in range(n):
        for length in range(min(n - at, WALK_MAX), MIN_PATTERN, -1):  # walks of 4 and more
            walk = WALKS.get(low[at : at + length])
            if walk is not None:
                found.append((at, at + length, math.log2(walk) + math.log2(length) + 2))
                break
        for length in WORD_LENGTHS:
            rank = WORD_RANK.get(low[at : at + length])
            if rank is not None:
                found.append((at, at + length, math.log2(rank + 2) + 1))
    for year in re.finditer(r"(?=((?:19|20)[0-9]{2}))", key):  # a year: 200 choices
        found.append((year.start(), year.start() + 4, math.log2(200)))
    for length in range(n // 2, 3, -1):  # a block of 4+ characters seen before
        for s in range(length, n - length + 1):
            if key[s : s + length] in key[:s]:
                found.append((s, s + length, 2 * math.log2(n)))
    return found


def _reads_as_words(letters: str) -> bool:
    pairs = [letters[i : i + 2] for i in range(len(letters) - 1)]
    vowels = sum(c in "aeiouy" for c in letters) / len(letters)
    common = sum(p in ENGLISH_BIGRAMS for p in pairs) / len(pairs)
    return common >= 0.75 and 0.25 <= vowels <= 0.6 and not set(letters) <= set("abcdef")


def _passphrases(key: str) -> list[tuple[int, int, float]]:
    """Stretches of 12+ letters (words joined, or split by spaces, dashes, underscores, dots;
    capitals at most one a word) that read as English, each priced as its words (``WORD_BITS``
    each; without separators one per 4.7 letters, the mean length of English words in running
    text)."""
    found = []
    for match in re.finditer(r"[A-Za-z]+(?:[ ._-][A-Za-z]+)*", key):
        text = match.group()
        letters = re.sub(r"[ ._-]", "", text)
        parts = re.split(r"[ ._-]", text)
        words = len(parts) if len(parts) > 1 else max(1, round(len(letters) / 4.7))
        capitals = sum(c.isupper() for c in letters)
        if len(letters) >= 12 and capitals <= words and _reads_as_words(letters.lower()):
            found.append((match.start(), match.end(), words * WORD_BITS))
    return found


def estimated_bits(key: str) -> float:
    """log2 of the guesses the cheaper reading of ``key`` needs, with or without its
    passphrase stretches: patterns are taken most bits saved first where they do not overlap;
    each pattern costs its bits, each other character the bits of the key's alphabet."""
    spans = _spans(key)
    phrases = _passphrases(key)
    return min(_reading_bits(key, spans), _reading_bits(key, spans + phrases))


def _reading_bits(key: str, found: list[tuple[int, int, float]]) -> float:
    per_char = _alphabet_bits(key)
    covered = [False] * len(key)
    bits = 0.0
    spans = sorted(found, key=lambda s: (s[2] - (s[1] - s[0]) * per_char, s[0]))
    for start, end, cost in spans:
        if cost < (end - start) * per_char and not any(covered[start:end]):
            covered[start:end] = [True] * (end - start)
            bits += cost
    return bits + covered.count(False) * per_char
