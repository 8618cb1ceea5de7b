"""How many guesses a given API key costs an attacker who tries the guessable patterns first,
in the spirit of zxcvbn (Wheeler, "zxcvbn: Low-Budget Password Strength Estimation", USENIX
Security 2016, https://www.usenix.org/conference/usenixsecurity16/technical-sessions/presentation/wheeler):
runs, alphabet or digit sequences, keyboard walks, repeated blocks and common words are each
priced as one pattern (a start, a length, a direction, a word index); every other character at
the size of the smallest standard alphabet the key is drawn from. Pure; no I/O."""

from __future__ import annotations

import math
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
    for length in range(n // 2, 3, -1):  # a block of 4+ characters seen before
        for s in range(length, n - length + 1):
            if key[s : s + length] in key[:s]:
                found.append((s, s + length, 2 * math.log2(n)))
    return found


def estimated_bits(key: str) -> float:
    """log2 of the guesses the cheapest reading of ``key`` needs: patterns are taken longest
    (most characters saved per bit) first where they do not overlap; each pattern costs its
    bits, each other character the bits of the key's alphabet."""
    per_char = _alphabet_bits(key)
    covered = [False] * len(key)
    bits = 0.0
    spans = sorted(_spans(key), key=lambda s: (s[2] - (s[1] - s[0]) * per_char, s[0]))
    for start, end, cost in spans:
        if cost < (end - start) * per_char and not any(covered[start:end]):
            covered[start:end] = [True] * (end - start)
            bits += cost
    return bits + covered.count(False) * per_char
