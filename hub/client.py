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
import json
import os
import re
from pathlib import Path
from typing import Any

from catalog.store import cache_dir
from selector.spec import HubModel

DEFAULT_ENDPOINT = "https://huggingface.co"
CACHE_SCHEMA = 1


class HubError(ValueError):
    """The Hub could not give a config, with what to do about it (one line)."""


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def cache_file(repo: str, revision: str | None) -> Path:
    """Where the summary of ``repo`` at ``revision`` is kept: one file per repo and revision,
    under a folder per endpoint host so a test hub never answers for the real one."""
    host = re.sub(r"[^A-Za-z0-9.-]+", "_", endpoint().split("://", 1)[-1])
    rev = re.sub(r"[^A-Za-z0-9._-]+", "_", revision or "main")
    return cache_dir() / "hf" / host / repo.replace("/", "--") / f"{rev}.json"


def _read_cached(path: Path) -> HubModel | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("schema_version") != CACHE_SCHEMA:
        return None
    config, parameters = doc.get("config"), doc.get("parameters")
    if not isinstance(config, dict) or not isinstance(parameters, dict):
        return None
    return HubModel(
        repo=str(doc.get("repo")),
        revision=doc.get("revision"),
        commit=doc.get("commit"),
        config=config,
        parameters={str(k): int(v) for k, v in parameters.items()},
    )


def _write_cached(path: Path, model: HubModel) -> None:
    doc = {
        "schema_version": CACHE_SCHEMA,
        "repo": model.repo,
        "revision": model.revision,
        "commit": model.commit,
        "config": model.config,
        "parameters": model.parameters,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True), encoding="utf-8")
    tmp.replace(path)  # readers see the old file or the new one, never half of one


def fetch_model(repo: str, revision: str | None) -> HubModel:
    """``repo``'s config and safetensors counts at ``revision`` (default: main), from the cache
    when it holds them, else from the Hub (then cached). HubError says why not."""
    path = cache_file(repo, revision)
    cached = _read_cached(path)
    if cached is not None:
        return cached
    model = _from_hub(repo, revision)
    with contextlib.suppress(OSError):  # a read-only cache costs the next plan a fetch, nothing else
        _write_cached(path, model)
    return model


def _from_hub(repo: str, revision: str | None) -> HubModel:
    from huggingface_hub import HfApi
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
    try:
        info = api.model_info(repo, revision=revision, expand=["sha", "safetensors"])
        commit = info.sha
        config_path = api.hf_hub_download(
            repo, "config.json", revision=commit or revision, cache_dir=cache_dir() / "hf" / "hub"
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
    except OSError:
        raise HubError(offline) from None
    except Exception as err:  # httpx transport errors (no network, DNS, TLS) are not OSErrors
        if type(err).__module__.split(".")[0] in ("httpx", "httpcore", "httpx2", "httpcore2"):
            raise HubError(offline) from None
        raise
    try:
        config: Any = json.loads(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise HubError(f"{where}'s config.json is not JSON") from None
    if not isinstance(config, dict):
        raise HubError(f"{where}'s config.json is not a JSON object")
    parameters: dict[str, int] = {}
    safetensors = getattr(info, "safetensors", None)
    if safetensors is not None and isinstance(safetensors.parameters, dict):
        parameters = {str(k): int(v) for k, v in safetensors.parameters.items()}
    return HubModel(repo=repo, revision=revision, commit=commit, config=config, parameters=parameters)
