"""Server and library settings: a YAML file (optional) plus environment variables.

Nothing is required: with no file and no variables agentmem runs the ``default`` policy on
an embedded Redis under ``~/.agentmem`` and forwards any litellm model string. Provider keys
and base URLs are read by litellm from its usual variables (``OPENAI_API_KEY``,
``OPENAI_BASE_URL``, ...) or set per model in ``models``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from agentmem.errors import ModelNotFound, PolicyError


class ModelRoute(BaseModel):
    """A model name clients may send, mapped to litellm parameters (LiteLLM proxy style)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    litellm_params: dict[str, Any]

    @field_validator("litellm_params")
    @classmethod
    def _has_model(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("model"), str) or not value["model"]:
            raise ValueError("litellm_params.model is required")
        return value

    def resolved_params(self) -> dict[str, Any]:
        """``os.environ/NAME`` values are read from the environment at call time."""
        out = {}
        for key, value in self.litellm_params.items():
            if isinstance(value, str) and value.startswith("os.environ/"):
                value = os.environ.get(value.removeprefix("os.environ/"))
            out[key] = value
        return out


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (PyYAML's own text spans lines and
    draws a caret under the place)."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"invalid YAML{where}: {problem}"


# A tenant name has no ':' (it joins tenant and session in a session's Redis hash tag, so
# tenants "acme" and "acme:payroll" would share keys) and no '=' (it ends a key in
# AGENTMEM_API_KEYS).
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9._@+-]{1,200}$")
TENANT_RULE = "1-200 letters, digits and . _ @ + - (no ':' or '=')"


def checked_tenant(name: Any) -> Any:
    if not isinstance(name, str) or not TENANT_PATTERN.match(name):
        raise ValueError(f"tenant {name!r}: a tenant name is {TENANT_RULE}")
    return name


def _key_and_tenant(entry: str) -> tuple[str, str]:
    """``KEY=TENANT`` split at the last ``=`` (a tenant name has none; a key may, as base64
    padding does); an entry that ends in ``=`` or has none is a key of the default tenant."""
    key, _, tenant = entry.strip().rpartition("=")
    if not key or not tenant.strip():
        return entry.strip(), "default"
    return key.strip(), tenant.strip()


REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")


def redacted_url(url: str) -> str:
    """The URL with its password (and user) hidden, for banners, logs and warnings."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    return f"{scheme}://***@{rest.split('@', 1)[1]}"


def yaml_preset_name(value: Any) -> Any:
    """YAML reads an unquoted ``off`` (the preset) as ``false``: take it as the name meant."""
    return "off" if value is False else value


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: Annotated[str, BeforeValidator(yaml_preset_name)] = "default"
    redis_url: str | None = None

    data_dir: Path | None = None
    api_keys: dict[str, Annotated[str, AfterValidator(checked_tenant)]] = Field(
        default_factory=dict, description="Proxy API key -> tenant name. Empty: no auth, one tenant.")
    models: list[ModelRoute] = Field(default_factory=list)
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    allow_policy_header: bool = Field(
        True, description="Let clients pick a preset per request with X-Agentmem-Policy.")
    forward_params: list[str] = Field(
        default_factory=list, description="Request fields the proxy forwards to litellm besides the "
        "OpenAI chat parameters (which are always forwarded). Credentials and URLs (api_base, "
        "api_key) belong in `models:` routes, never in a client's request.")
    policy_dirs: list[Path] = Field(
        default_factory=list, description="Folders of the operator's own policy files: a client "
        "may name one (file name without .yaml) in X-Agentmem-Policy, as it names a preset.")
    default_tenant: Annotated[str, AfterValidator(checked_tenant)] = "default"
    model_runtime: Literal["auto", "torch", "onnx"] = Field(
        "auto", description="Where the models run: 'torch', 'onnx' (ONNX Runtime, no torch "
        "needed), or 'auto': the shipped models (which come with their ONNX export) on ONNX "
        "Runtime, any other on torch when it is installed, else onnx. 'auto' defers to "
        "AGENTMEM_MODEL_RUNTIME when that is set (agentmem.models.backend).")
    allow_any_model: bool | None = Field(
        None, description="Forward model names not listed in `models:`. Default: false when "
        "`models:` lists any (they are the allow-list), true when it is empty.")

    @field_validator("redis_url")
    @classmethod
    def _a_redis_url(cls, value: str | None) -> str | None:
        """A URL whose scheme no Redis client takes is a configuration mistake, refused at
        start (an unreachable Redis is a fault at run time, served by passthrough)."""
        if value is None:
            return value
        if "://" not in value or value.split("://", 1)[0].lower() not in REDIS_SCHEMES:
            raise ValueError(f"expected a URL starting {', '.join(s + '://' for s in REDIS_SCHEMES)}"
                             f", got {redacted_url(value)!r}")
        return value

    @field_validator("models")
    @classmethod
    def _one_route_a_name(cls, value: list[ModelRoute]) -> list[ModelRoute]:
        names = [route.name for route in value]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"each model name is routed once; given more than once: {twice}")
        return value

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> Settings:
        """File values first, then ``AGENTMEM_*`` variables, then explicit overrides."""
        data: dict[str, Any] = {}
        path = path or os.environ.get("AGENTMEM_CONFIG")
        if path:
            try:
                data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
            except OSError as error:
                raise PolicyError(f"config {path}: {error.strerror or error}") from None
            except yaml.YAMLError as error:
                raise PolicyError(f"config {path}: {yaml_problem(error)}") from None
            if not isinstance(data, dict):
                raise PolicyError(f"config {path}: expected a mapping")
        env = os.environ
        if env.get("AGENTMEM_POLICY"):
            data["policy"] = env["AGENTMEM_POLICY"]
        if env.get("AGENTMEM_REDIS_URL"):
            data["redis_url"] = env["AGENTMEM_REDIS_URL"]
        if env.get("AGENTMEM_DATA_DIR"):
            data["data_dir"] = env["AGENTMEM_DATA_DIR"]
        if env.get("AGENTMEM_API_KEYS"):  # "key1=tenant1,key2=tenant2"
            data["api_keys"] = dict(_key_and_tenant(entry)
                                    for entry in env["AGENTMEM_API_KEYS"].split(",") if entry.strip())
        data.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            from agentmem.policy import field_errors

            raise PolicyError(f"config: {field_errors(error)}") from None

    def route(self, model: str) -> ModelRoute | None:
        return next((r for r in self.models if r.name == model), None)

    def check_model(self, model: Any) -> None:
        """Refuse (404 model_not_found) a model name the configured allow-list does not hold.
        Non-string names are left to the request's own validation."""
        allow_any = self.allow_any_model if self.allow_any_model is not None else not self.models
        if not allow_any and isinstance(model, str) and self.route(model) is None:
            raise ModelNotFound(model)
