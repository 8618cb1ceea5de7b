"""Model configs from the Hugging Face Hub: a repo's ``config.json`` and its safetensors
parameter counts (per dtype), read through ``huggingface_hub`` and kept in gpufit's cache.

A second plan of the same repo and revision reads one small JSON file from the cache and
never imports ``huggingface_hub``: it is offline and fast. The Hub is reached at
``$HF_ENDPOINT`` (default https://huggingface.co) with ``$HF_TOKEN`` for gated or private
repos, both read when the call is made. Every failure is one ``HubError`` line that says what
to do; the selector turns it into a spec problem on ``model.hf``.

What is asked: ``GET /api/models/{repo}[/revision/{rev}]?expand=sha&expand=safetensors`` (the
commit the revision points at, and the Hub's per-dtype count of the safetensors weights), then
``config.json`` at that commit (``hf_hub_download``: a HEAD, then a GET).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from catalog.store import cache_dir
from hub.cache import entry_path, is_commit, parameter_problems, read_entry, write_entry
from selector.datafile import loads_json
from selector.hf_validate import limit, shown
from selector.spec import HubModel

DEFAULT_ENDPOINT = "https://huggingface.co"


class HubError(ValueError):
    """The Hub could not give a config, with what to do about it (one line)."""


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def cache_file(repo: str, revision: str | None) -> Path:
    """Where the summary of ``repo`` at ``revision`` from today's endpoint is kept
    (``hub.cache``: named by a hash of the three, checked on read)."""
    return entry_path(endpoint(), repo, revision)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def fetch_model(
    repo: str,
    revision: str | None,
    *,
    refresh: bool = False,
    clock: Callable[[], datetime] = _utc_now,
) -> HubModel:
    """``repo``'s config and safetensors counts at ``revision`` (default: main), from the cache
    when it holds a fresh entry for them (a branch's for ``hub.cache.BRANCH_TTL``, a commit's
    for ever) and ``refresh`` is not asked, else from the Hub (then cached). HubError says why
    not."""
    where = endpoint()
    path = entry_path(where, repo, revision)
    now = clock()
    cached = None if refresh else read_entry(path, where, repo, revision, now)
    if cached is not None:
        return cached
    model = _from_hub(repo, revision)
    with contextlib.suppress(OSError):  # a read-only cache costs the next plan a fetch, nothing else
        write_entry(path, where, model, now)
    return model


def _from_hub(repo: str, revision: str | None) -> HubModel:
    from huggingface_hub import HfApi, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{repo}" + (f"@{revision}" if revision else "")
    offline = (
        f"cannot reach the Hugging Face Hub at {endpoint()} to read {where}'s config.json, and it "
        "is not cached; download config.json and give its path as model.config"
    )
    api = HfApi(endpoint=endpoint(), token=os.environ.get("HF_TOKEN") or None)
    most = limit("config_bytes")
    try:
        info = api.model_info(repo, revision=revision, expand=["sha", "safetensors"])
        commit = info.sha
        pinned = is_commit(revision)
        if not isinstance(commit, str) or not is_commit(commit) or (pinned and commit != revision):
            raise HubError(
                f"the Hub answered commit {shown(commit)} for {where}: expected the full 40-hex commit "
                f"{'asked for' if pinned else 'the revision points at'}"
            )
        url = hf_hub_url(repo, "config.json", revision=commit, endpoint=endpoint())
        meta = api.get_hf_file_metadata(url=url)
        if meta.commit_hash not in (None, commit):
            raise HubError(
                f"{where}'s config.json: the Hub served commit {shown(meta.commit_hash)} for commit {commit}"
            )
        if meta.size is None or meta.size > most:
            raise HubError(
                f"{where}'s config.json: expected at most {most:,} bytes, "
                f"the Hub announced {shown(meta.size)}"
            )
        config_path = api.hf_hub_download(
            repo, "config.json", revision=commit, cache_dir=cache_dir() / "hf" / "hub"
        )
    except GatedRepoError:
        raise HubError(
            f"{repo} is gated: accept its licence on the Hub, then set HF_TOKEN to a token that may read it"
        ) from None
    except RepositoryNotFoundError:
        raise HubError(
            f"no model {repo} on the Hub, or it is private (set HF_TOKEN to a token that may read it)"
        ) from None
    except RevisionNotFoundError:
        raise HubError(f"{repo} has no revision {revision!r}") from None
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        raise HubError(offline) from None
    except EntryNotFoundError:
        raise HubError(
            f"{where} has no config.json (a diffusers pipeline or a GGUF repo?): use a preset, or "
            "model.kind diffusion or custom"
        ) from None
    except HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else "?"
        raise HubError(f"the Hub answered HTTP {status} for {where}") from None
    except OSError as err:
        if err.errno is None and not isinstance(err, ConnectionError | TimeoutError):
            # the client's own checks (a body unlike what the HEAD announced): not a network fault
            raise HubError(f"the Hub's answer for {where} failed a check: {shown(str(err))}") from None
        raise HubError(offline) from None
    except HubError:
        raise
    except Exception as err:  # httpx transport errors (no network, DNS, TLS) are not OSErrors
        if type(err).__module__.split(".")[0] in ("httpx", "httpcore", "httpx2", "httpcore2"):
            raise HubError(offline) from None
        # an answer the client cannot read (a hostile or broken endpoint): refused, no traceback
        raise HubError(
            f"the Hub at {endpoint()} answered {where} with what its client cannot read "
            f"({type(err).__name__}: {shown(str(err))})"
        ) from None
    try:
        if Path(config_path).stat().st_size > most:  # the file, whatever the HEAD announced
            raise HubError(f"{where}'s config.json is over {most:,} bytes")
        config: Any = loads_json(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        if isinstance(err, HubError):
            raise
        raise HubError(f"{where}'s config.json is not JSON ({shown(str(err))})") from None
    if not isinstance(config, dict):
        raise HubError(f"{where}'s config.json is not a JSON object")
    parameters: dict[str, int] = {}
    safetensors = getattr(info, "safetensors", None)
    if safetensors is not None:
        counts = getattr(safetensors, "parameters", None)
        problems = parameter_problems(counts)
        if problems:
            raise HubError(f"the Hub's safetensors metadata of {where}: " + "; ".join(problems[:3]))
        assert isinstance(counts, dict)
        parameters = dict(counts)
    return HubModel(repo=repo, revision=revision, commit=commit, config=config, parameters=parameters)
