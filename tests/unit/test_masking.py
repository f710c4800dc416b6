"""transformers/masking.py: a text is returned with every configured secret replaced, the
same whether or not it is shorter than the shortest secret (the pass the mask skips)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from transformers.masking import REDACTED, SecretMask

SECRETS = ["abc123", "sk-live-0123", "Bearer tok-abcdefghijklmnop"]  # 6, 12 and 27 characters
MASK = SecretMask(SECRETS)
# every secret and the credential's part after its scheme, longest first, in one pass
_ALL = sorted({*SECRETS, "tok-abcdefghijklmnop"}, key=len, reverse=True)
_REFERENCE = re.compile("|".join(re.escape(s) for s in _ALL))


def test_texts_at_and_under_the_shortest_secrets_length() -> None:
    assert MASK("abc123") == REDACTED
    assert MASK("abc12") == "abc12"  # shorter than every secret: returned as it is
    assert MASK("") == ""
    assert MASK("xsk-live-0123x") == f"x{REDACTED}x"
    assert MASK("Bearer tok-abcdefghijklmnop") == REDACTED
    assert SecretMask()("abc123") == "abc123"  # no secrets configured


@given(st.lists(st.sampled_from([*SECRETS, "tok-abcdefghijklmnop", "a", "bc", "12", " ", "sk-", "ab"]), max_size=6))
def test_the_mask_replaces_what_one_pass_over_every_secret_replaces(parts: list[str]) -> None:
    text = "".join(parts)
    assert MASK(text) == _REFERENCE.sub(REDACTED, text)
