"""app.metrics writes what prometheus_client would have written: the same requests fed to
``Metrics`` and to prometheus_client's own ``Counter``, ``Summary`` and ``Histogram`` (in a
fresh ``CollectorRegistry``) give the same families (name, type, help) and samples (labels,
``le`` as written, values), in one process and in multiprocess mode (processes that exited,
marked dead or not, and a live one).  Also: a scrape reading a process's files while it
writes them."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, Summary, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.parser import text_string_to_metric_families

from app import metrics
from app.metrics import Metrics

PROVIDERS = ["p", "q"]
CODES = ["upstream_timeout"]
KEYS = [f"k{i}" for i in range(8)]
ROUTES = ["/v1/chat/completions", "/v1/responses", "/v1/messages"]
CLIENTS = ["chat", "responses", "messages"]
BOUNDS = sorted({*metrics.DURATION_BUCKETS, *metrics.TPOT_BUCKETS})


def ours() -> Metrics:
    return Metrics(PROVIDERS, CODES, public_models=["m"], keys=KEYS)


def seconds(rng: random.Random) -> float:
    """A time: on a bucket bound (``le`` includes it), past the last one, or a multiple of
    1/64 (sums exact in any order)."""
    pick = rng.random()
    if pick < 0.3:
        return rng.choice(BOUNDS)
    if pick < 0.35:
        return 100.0 + rng.randrange(64) / 64
    return rng.randrange(0, 64 * 12) / 64


def calls(seed: int, n: int = 300) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    out: list[tuple[Any, ...]] = []
    for _ in range(n):
        client = rng.choice(CLIENTS)
        provider = rng.choice(PROVIDERS)
        error = rng.choice(["", "", "", "upstream_timeout", "client_cancel"])
        status = 200 if not error else rng.choice([499, 504])
        stream = rng.random() < 0.6
        ttft = seconds(rng) if stream and rng.random() < 0.9 else None
        outcome = ("completed" if not error else "client_cancel") if stream else None
        duration = seconds(rng)
        out.append(("answered", rng.choice(ROUTES), client, provider, status, duration, ttft, outcome))

        def count() -> int | None:
            return None if rng.random() < 0.1 else rng.choice([0, 1, 2, 4, 5, 1024, 70_000_000, rng.randrange(9000)])

        tokens = None if rng.random() < 0.1 else tuple(count() for _ in metrics.TOKEN_TYPES)
        estimated = rng.random() < 0.2
        out.append(("turn", client, provider, "m", rng.choice(KEYS), error, duration, ttft, tokens, estimated))
        if rng.random() < 0.3:
            out.append(("inc", "switchboard_upstream_attempts_total", 1.0, {"provider": provider, "outcome": "ok"}))
        if rng.random() < 0.1:
            out.append(("inc", "switchboard_usage_records_total", float(rng.randrange(1, 50)), {}))
    return out


class Reference:
    """The same requests on prometheus_client's metric classes (what app.metrics used to do)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.made: dict[str, Any] = {}

    def series(self, name: str, **labels: str) -> Any:
        names = sorted(labels)
        m = self.made.get(name)
        if m is None:
            kind, doc, buckets = metrics.METRICS[name]
            if kind == "counter":
                m = Counter(name, doc, names, registry=self.registry)
            elif kind == "summary":
                m = Summary(name, doc, names, registry=self.registry)
            else:
                m = Histogram(name, doc, names, registry=self.registry, buckets=buckets)
            self.made[name] = m
        return m.labels(*[labels[n] for n in names]) if names else m

    def answered(
        self, route: str, client: str, provider: str, status: int, dur: float, ttfb: float | None, outcome: str | None
    ) -> None:
        self.series(
            "switchboard_requests_total", route=route, client=client, provider=provider, status=str(status)
        ).inc()
        self.series("switchboard_request_duration_seconds", route=route).observe(dur)
        if ttfb is not None:
            self.series("switchboard_ttfb_seconds", route=route).observe(ttfb)
        if outcome is not None:
            self.series("switchboard_stream_outcomes_total", outcome=outcome, client=client).inc()

    def turn(
        self,
        op: str,
        provider: str,
        model: str,
        key: str,
        error: str,
        dur: float,
        ttft: float | None,
        tokens: tuple[int | None, ...] | None,
        estimated: bool,
    ) -> None:
        labels = {"gen_ai_operation_name": op, "gen_ai_provider_name": provider}
        labels |= {"gen_ai_request_model": model, "key_name": key}
        self.series("gen_ai_server_request_duration_seconds", **labels, error_type=error).observe(dur)
        if ttft is not None and not error:
            self.series("gen_ai_server_time_to_first_token_seconds", **labels).observe(ttft)
            out = tokens[1] if tokens is not None and not estimated else None
            if out is not None and out > 1 and dur > ttft:
                self.series("gen_ai_server_time_per_output_token_seconds", **labels).observe((dur - ttft) / (out - 1))
        for i, n in enumerate(tokens or ()):
            if n is not None and (n or i < 2):
                kind = metrics.TOKEN_TYPES[i]
                est = "true" if estimated else "false"
                usage = self.series(
                    "gen_ai_client_token_usage", **labels, gen_ai_token_type=kind, gen_ai_token_estimated=est
                )
                usage.observe(n)

    def inc(self, name: str, value: float, **labels: str) -> None:
        self.series(name, **labels).inc(value)


def replay(target: Any, seed: int) -> None:
    for what, *args in calls(seed):
        if what == "inc":
            name, value, labels = args
            target.inc(name, value, **labels)
        else:
            getattr(target, what)(*args)


def parsed(text: str) -> dict[str, tuple[str, str, dict[tuple[Any, ...], float]]]:
    """name → (type, help, {(sample name, labels): value})."""
    return {
        f.name: (f.type, f.documentation, {(s.name, *sorted(s.labels.items())): s.value for s in f.samples})
        for f in text_string_to_metric_families(text)
    }


def assert_same(got: str, want: str) -> None:
    g, w = parsed(got), parsed(want)
    assert sorted(g) == sorted(w)
    for name, (kind, doc, samples) in w.items():
        assert g[name][:2] == (kind, doc), name
        assert sorted(g[name][2]) == sorted(samples), name
        for sample, value in samples.items():
            # (a sum of several processes' sums: added in another order, it may differ in its last bit)
            assert g[name][2][sample] == pytest.approx(value, rel=1e-12), sample
    # and the text itself, line for line, once sorted (the order of the families may differ)
    if "_sum" not in got:
        assert sorted(got.splitlines()) == sorted(want.splitlines())


@pytest.mark.parametrize("seed", [1, 2])
def test_one_process_writes_what_prometheus_client_writes(seed: int) -> None:
    m = ours()
    registry = CollectorRegistry(auto_describe=False)
    ref = Reference(registry)
    replay(m, seed)
    replay(ref, seed)
    got, want = m.render().decode(), generate_latest(registry).decode()
    assert_same(got, want)
    # the lines are those prometheus_client writes (the order of the families aside)
    assert sorted(got.splitlines()) == sorted(want.splitlines())
    # and this process's reads agree with the scrape
    labels = {"route": "/v1/responses", "client": "responses", "provider": "p", "status": "200"}
    requests = parsed(want)["switchboard_requests"][2]
    assert m.get("switchboard_requests_total", **labels) == requests.get(
        ("switchboard_requests_total", *sorted(labels.items())), 0.0
    )


CHILD = """
import os, sys
from prometheus_client import CollectorRegistry
from tests.unit.test_metrics_exposition import Reference, ours, replay
seed = int(sys.argv[2])
replay(ours() if sys.argv[1] == "ours" else Reference(CollectorRegistry()), seed)
print(os.getpid())
"""


def child(kind: str, d: Path, seed: int) -> int:
    """A process that records ``calls(seed)`` into ``d`` and exits: its pid."""
    env = {**os.environ, metrics.MULTIPROC_ENV: str(d)}
    r = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(seed)], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def test_multiprocess_mode_writes_what_prometheus_client_writes(tmp_path: Path) -> None:
    """Two processes that exited and a live one (this one) against prometheus_client's
    multiprocess mode fed the same requests by three processes."""
    mine, theirs = tmp_path / "ours", tmp_path / "reference"
    mine.mkdir()
    theirs.mkdir()
    exited = [(child("ours", mine, seed), child("reference", theirs, seed)) for seed in (1, 2)]
    child("reference", theirs, 3)
    reference = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(reference, str(theirs))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(metrics, "MULTIPROC_DIR", str(mine))
        live = ours()
        replay(live, 3)
        assert_same(live.render().decode(), generate_latest(reference).decode())
        # the processes that exited, marked dead as app/workers.py does: their counts stay
        for a, b in exited:
            mark_process_dead(a, str(mine))
            mark_process_dead(b, str(theirs))
        assert_same(ours().render().decode(), generate_latest(reference).decode())
    # each process wrote its own two files, beside nothing of prometheus_client's (no gauges)
    names = sorted(p.name for p in mine.iterdir())
    assert len(names) == 6 and all(n.startswith(metrics.FILE_PREFIX) for n in names), names
    # (more than one chunk of values: the token histograms alone take up to 7,680 slots)
    assert all(p.stat().st_size > 8 * 4096 for p in mine.glob("*.values"))


def test_a_scrape_skips_what_a_process_is_still_writing(tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(metrics, "MULTIPROC_DIR", str(tmp_path))
        m = Metrics(["p"])
        m.inc("switchboard_upstream_attempts_total", 3, provider="p", outcome="ok")
        (index,) = tmp_path.glob("*.index")
        # a line cut short (the write is under way), one naming slots the values file lacks,
        # and a line no write could finish (a full disk)
        with index.open("ab") as f:
            f.write(orjson.dumps([10**6, "switchboard_fallbacks_total", [["provider", "p"]]]) + b"\n")
            f.write(b'[8, "switchboard_fa\n')
            f.write(b'[7, "switchboard_fallb')
        got = metrics.read_dir(str(tmp_path))
        assert got == {"switchboard_upstream_attempts_total": {(("outcome", "ok"), ("provider", "p")): [3.0]}}
        assert "switchboard_upstream_attempts_total" in m.render().decode()
        assert metrics.read_dir(str(tmp_path), os.getpid()) == got
        assert metrics.read_dir(str(tmp_path), os.getpid() + 1) == {}


def test_exited_processes_fold_into_one_file_and_the_sums_stay(tmp_path: Path) -> None:
    """Two processes exit one after the other and are folded as app/workers.py does: the
    scrape is the same as before each fold, and the directory holds the live process's
    files and one file of exited ones."""
    exited = [child("ours", tmp_path, seed) for seed in (1, 2)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(metrics, "MULTIPROC_DIR", str(tmp_path))
        live = ours()
        replay(live, 4)
        want = live.render().decode()
        for pid in exited:
            metrics.fold_exited(str(tmp_path), pid)
            assert_same(live.render().decode(), want)
            assert not list(tmp_path.glob(f"{metrics.FILE_PREFIX}{pid}_*"))
        metrics.fold_exited(str(tmp_path), exited[0])  # (again: nothing left of it to add)
        assert_same(live.render().decode(), want)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 3 and metrics.EXITED in names, names
    assert all(n.startswith(f"{metrics.FILE_PREFIX}{os.getpid()}_") for n in names if n != metrics.EXITED)


@pytest.mark.parametrize("when", ["before the folded file is read", "after it is read"])
def test_a_scrape_during_a_fold_counts_the_exited_process_once(tmp_path: Path, when: str) -> None:
    """A fold lands between a scrape's listing of the files and its read of the folded file,
    or between that read and the exited process's files: either way the scrape counts the
    exited process once (never twice, never not at all)."""
    pid = child("ours", tmp_path, 1)
    want = metrics.read_dir(str(tmp_path))
    load = metrics._load_exited
    folds: list[int] = []

    def racing(path: str) -> Any:
        if not folds and when == "before the folded file is read":
            folds.append(pid)
            metrics.fold_exited(path, pid)
        got = load(path)
        if not folds:
            folds.append(pid)
            metrics.fold_exited(path, pid)
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(metrics, "_load_exited", racing)
        assert metrics.read_dir(str(tmp_path)) == want
    assert folds == [pid] and (tmp_path / metrics.EXITED).exists()
    assert metrics.read_dir(str(tmp_path)) == want


def test_files_a_fold_could_not_remove_are_counted_once(tmp_path: Path) -> None:
    a, b = child("ours", tmp_path, 1), child("ours", tmp_path, 2)
    want = metrics.read_dir(str(tmp_path))
    stay = {p.name: p.read_bytes() for p in tmp_path.glob(f"{metrics.FILE_PREFIX}{a}_*")}
    metrics.fold_exited(str(tmp_path), a)
    for name, data in stay.items():  # (as if the removal had failed)
        (tmp_path / name).write_bytes(data)
    assert metrics.read_dir(str(tmp_path)) == want
    metrics.fold_exited(str(tmp_path), b)
    assert metrics.read_dir(str(tmp_path)) == want
