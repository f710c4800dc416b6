"""``store.cluster``: what the config accepts, the seed nodes read from ``store.url``, and the
hash tags that keep each script's keys in one slot (the cluster itself is exercised in
tests/system/test_redis_cluster.py)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest
from pydantic import ValidationError
from redis.crc import key_slot

from app.limits import MemoryCounters, RedisCounters
from app.store import RedisStore
from providers.config import StoreCfg, cluster_seeds


def test_cluster_needs_redis_and_database_0() -> None:
    with pytest.raises(ValidationError, match="store.cluster needs store.backend: redis"):
        StoreCfg(cluster=True)
    with pytest.raises(ValidationError, match="only database 0, not '3'"):
        StoreCfg(backend="redis", cluster=True, url="redis://10.0.0.1:6379/3")
    with pytest.raises(ValidationError, match="'b:x' is not host:port"):
        StoreCfg(backend="redis", cluster=True, url="redis://a:1,b:x/0")
    for url in ("redis://a:6379", "redis://a:6379/", "redis://a:6379/0", "rediss://:pw@a:1,b:2/0?ssl_cert_reqs=none"):
        assert StoreCfg(backend="redis", cluster=True, url=url).cluster
    assert StoreCfg(backend="redis", url="redis://a:6379/3").url.endswith("/3")  # (one Redis: any database)


def test_several_seed_nodes_in_the_url() -> None:
    assert cluster_seeds("redis://a:6379/0") == ("redis://a:6379/0", [])
    url, seeds = cluster_seeds("rediss://u:p@a:7000,b:7001,[::1]:7002,c,[fe80::1]/0?x=1")
    assert url == "rediss://u:p@a:7000/0?x=1"
    assert seeds == [("b", 7001), ("::1", 7002), ("c", 6379), ("fe80::1", 6379)]


def test_a_cluster_store_is_a_redis_cluster_client_with_every_seed() -> None:
    from redis.asyncio.cluster import RedisCluster

    store = RedisStore(StoreCfg(backend="redis", cluster=True, url="redis://127.0.0.1:1,127.0.0.1:2/0"))
    assert isinstance(store.redis, RedisCluster)
    assert sorted(n.port for n in store.redis.nodes_manager.startup_nodes.values()) == [1, 2]
    assert store.put_timeout == store.timeout + 30
    assert store.shared("keys") == "switchboard:resp:{keys}:"
    assert len({key_slot(k.encode()) for k in store._sizes}) == 1
    single = RedisStore(StoreCfg(backend="redis"))
    assert single.shared("keys") == "switchboard:resp:keys:"  # (one Redis: the names of before)
    assert single._sizes[0] == "switchboard:resp:meta:bytime"


@pytest.mark.parametrize("name", ["alice", "}x", "a{b}c", "{", "ünï", "x" * 64])
def test_a_keys_counters_share_one_slot_whatever_its_name(name: str) -> None:
    counters = RedisCounters(_FakeRedis(), "sb:", cluster=True)
    keys = ["sb:" + counters.key(name, rest) for rest in ("requests:m1", "tokens_day:d20250101", "concurrent")]
    assert len({key_slot(k.encode()) for k in keys}) == 1
    assert name in keys[0]  # (the name stays readable)
    assert RedisCounters(_FakeRedis(), "sb:").key(name, "concurrent") == f"lim:{name}:concurrent"
    assert MemoryCounters().key(name, "concurrent") == f"lim:{name}:concurrent"


class _FakeRedis:
    def register_script(self, body: str) -> SimpleNamespace:
        return SimpleNamespace(sha=hashlib.sha1(body.encode()).hexdigest())
