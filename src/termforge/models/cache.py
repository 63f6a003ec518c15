"""Content-addressed response cache: reruns and resumes never pay for the same call twice.

A key is the hash of everything that determines a reply: the model's identity (backend, model and
output-affecting options, never credentials or URLs), the sampling parameters including the seed,
the messages and n. Each entry is one JSON file `<root>/<k[:2]>/<k[2:4]>/<k>.json` (sharded so no
directory grows to millions of entries), written atomically, holding the prompt, the raw replies
and token counts: the provenance record the design asks for.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any, Sequence

from termforge.io import atomic_write_json, stable_hash
from termforge.models.base import (
    ChatModel,
    Completion,
    Messages,
    SamplingParams,
    check_messages,
    check_n,
)

log = logging.getLogger(__name__)

CACHE_FORMAT = 1


def cache_key(identity: dict[str, Any], sampling: SamplingParams, messages: Messages, n: int) -> str:
    return stable_hash(
        {
            "format": CACHE_FORMAT,
            "identity": identity,
            "sampling": sampling.to_dict(),
            "messages": messages,
            "n": n,
        },
        length=40,
    )


class ResponseCache:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / key[2:4] / f"{key}.json"

    def get(self, key: str) -> list[Completion] | None:
        path = self.path(key)
        try:
            with open(path, encoding="utf-8") as fh:
                record = json.load(fh)
            return [Completion.from_dict(c, cached=True) for c in record["completions"]]
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            # Writes are atomic, so this is outside damage; a miss re-asks and overwrites it.
            log.warning("ignoring unreadable cache entry %s: %s", path, exc)
            return None

    def put(
        self,
        key: str,
        identity: dict[str, Any],
        sampling: SamplingParams,
        messages: Messages,
        n: int,
        completions: Sequence[Completion],
    ) -> Path:
        path = self.path(key)
        atomic_write_json(
            path,
            {
                "format": CACHE_FORMAT,
                "key": key,
                "identity": identity,
                "sampling": sampling.to_dict(),
                "n": n,
                "messages": messages,
                "completions": [c.to_dict() for c in completions],
            },
        )
        return path


class CachedChatModel(ChatModel):
    """Wraps any backend; hits come back with cached=True and cost no request or forward pass."""

    def __init__(self, inner: ChatModel, cache: ResponseCache | str | os.PathLike) -> None:
        super().__init__(inner.model_name, inner.default_sampling)
        self.inner = inner
        self.backend = inner.backend
        self.cache = cache if isinstance(cache, ResponseCache) else ResponseCache(cache)
        self.hits = 0
        self.misses = 0

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    def _key(self, messages: Messages, n: int, sampling: SamplingParams) -> str:
        return cache_key(self.inner.identity(), sampling, messages, n)

    def _lookup(self, conversations: Sequence[Messages], n: int, sampling: SamplingParams):
        check_n(n)
        keys = [self._key(check_messages(m), n, sampling) for m in conversations]
        results: list[list[Completion] | None] = [self.cache.get(k) for k in keys]
        missing = [i for i, r in enumerate(results) if r is None]
        self.hits += len(conversations) - len(missing)
        self.misses += len(missing)
        return keys, results, missing

    def _store(
        self, key: str, messages: Messages, n: int, sampling: SamplingParams, completions: list[Completion]
    ) -> list[Completion]:
        self.cache.put(key, self.inner.identity(), sampling, messages, n, completions)
        return completions

    def chat_many(
        self, conversations: Sequence[Messages], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[list[Completion]]:
        if not self.inner.batched:
            return asyncio.run(self.achat_many(conversations, n=n, sampling=sampling))
        sampling = self._sampling(sampling)
        keys, results, missing = self._lookup(conversations, n, sampling)
        if missing:
            # Only the misses go to the backend, still as one batch.
            fresh = self.inner.chat_many([conversations[i] for i in missing], n=n, sampling=sampling)
            for i, completions in zip(missing, fresh):
                results[i] = self._store(keys[i], conversations[i], n, sampling, completions)
        return [r for r in results if r is not None]

    async def achat(
        self, messages: Messages, n: int = 1, sampling: SamplingParams | None = None
    ) -> list[Completion]:
        return (await self.achat_many([messages], n=n, sampling=sampling))[0]

    async def achat_many(
        self, conversations: Sequence[Messages], n: int = 1, sampling: SamplingParams | None = None
    ) -> list[list[Completion]]:
        sampling = self._sampling(sampling)
        keys, results, missing = self._lookup(conversations, n, sampling)
        if not missing:
            return [r for r in results if r is not None]
        if self.inner.batched:
            fresh = await self.inner.achat_many([conversations[i] for i in missing], n=n, sampling=sampling)
            for i, completions in zip(missing, fresh):
                results[i] = self._store(keys[i], conversations[i], n, sampling, completions)
            return [r for r in results if r is not None]

        # Independent requests: each reply is stored the moment it arrives, so a run that dies on a
        # later failure (budget, retries exhausted) has still paid for, and kept, the earlier ones.
        async def one(i: int) -> None:
            completions = await self.inner.achat(conversations[i], n=n, sampling=sampling)
            results[i] = self._store(keys[i], conversations[i], n, sampling, completions)

        outcomes = await asyncio.gather(*(one(i) for i in missing), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return [r for r in results if r is not None]

    def stats(self) -> dict[str, Any]:
        return {"cache_hits": self.hits, "cache_misses": self.misses, **self.inner.stats()}

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # Backend-specific handles (e.g. the transformers model/tokenizer) stay reachable.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"CachedChatModel({self.inner!r}, cache={str(self.cache.root)!r})"
