"""Masking of configured secrets in text that leaves the proxy (client errors, log lines).

Theory of operation
-------------------
The app collects every secret its configuration holds (provider API keys, credential
headers, values read from the environment, the reasoning envelope key, client keys) and
builds one ``SecretMask``.  Calling it on a text replaces each occurrence of any secret by
``[redacted]``.  The secrets are matched as literal strings, longest first, in one regex
pass; a value shorter than ``MIN_LEN`` is not treated as a secret (masking "8080" or "v1"
everywhere would garble messages and protects nothing).  A credential header value such as
``Bearer sk-…`` also registers the part after its scheme, which is what an upstream that
echoes its headers usually prints.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MIN_LEN = 6
REDACTED = "[redacted]"


class SecretMask:
    __slots__ = ("_re", "shortest", "secrets")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        found: set[str] = set()
        for s in secrets:
            if not isinstance(s, str):
                continue
            s = s.strip()
            if len(s) >= MIN_LEN:
                found.add(s)
            scheme, _, rest = s.partition(" ")
            if rest and scheme.isalpha() and len(rest.strip()) >= MIN_LEN:
                found.add(rest.strip())
        self.secrets = frozenset(found)
        ordered = sorted(found, key=len, reverse=True)
        self._re = re.compile("|".join(re.escape(s) for s in ordered)) if ordered else None
        # a text shorter than every secret holds none: most of a log line's values (names,
        # protocols, outcomes) are returned without a regex pass
        self.shortest = len(ordered[-1]) if ordered else 0

    def __call__(self, text: str) -> str:
        if self._re is None or len(text) < self.shortest:
            return text
        return self._re.sub(REDACTED, text)

    def __bool__(self) -> bool:
        return self._re is not None

    def error(self, err: dict[str, Any]) -> dict[str, Any]:
        """An upstream's error object with every secret masked in its text fields."""
        if self._re is None:
            return err
        return {k: self(v) if isinstance(v, str) else v for k, v in err.items()}


NO_SECRETS = SecretMask()
