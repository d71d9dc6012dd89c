"""Prometheus metrics and one structured log line per call, both fed by the finished report.

The report already holds everything an operator asks about (tokens in and out, what each stage
removed, how long it took), so metrics are derived from it in one place when a call ends
instead of being counted along the call path. Each engine has its own registry: two engines in
one process (tests, a library user next to the proxy) never share or double-count.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from agentmem.report import Action, Report, decision_removals

CONTENT_TYPE = CONTENT_TYPE_LATEST
call_log = logging.getLogger("agentmem.calls")

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0)
_REMOVALS = {Action.DROP_MESSAGE, Action.PRUNE_SPANS, Action.DROP_TOOL, Action.QUARANTINE}


class Metrics:
    """The counters and histograms of one engine."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.calls = Counter("agentmem_calls", "Calls that went through the engine.",
                             ["policy", "status"], registry=r)
        self.tokens_in = Counter("agentmem_tokens_in", "Tokens the client sent (messages + tools).",
                                 ["policy"], registry=r)
        self.tokens_out = Counter("agentmem_tokens_out", "Tokens sent on to the provider.",
                                  ["policy"], registry=r)
        self.tools_offered = Counter("agentmem_tools_offered", "Tools the client offered.",
                                     ["policy"], registry=r)
        self.tools_kept = Counter("agentmem_tools_kept", "Tools sent on to the provider.",
                                  ["policy"], registry=r)
        self.removals = Counter("agentmem_removals", "Changes to outgoing requests, per stage "
                                "and action (a prune_spans decision counts its spans).",
                                ["stage", "action"], registry=r)
        self.quarantined = Counter("agentmem_quarantined", "Quarantine records applied to calls.",
                                   ["kind"], registry=r)
        self.faults = Counter("agentmem_faults", "Calls sent unchanged or failed because of a "
                              "fault of agentmem's (Redis, a model, a stage).", ["policy"],
                              registry=r)
        self.stage_latency = Histogram("agentmem_stage_latency_seconds", "Time spent per stage.",
                                       ["stage"], buckets=_LATENCY_BUCKETS, registry=r)
        self.hygiene_latency = Histogram("agentmem_hygiene_latency_seconds",
                                         "Time from request to clean request (the overhead).",
                                         ["policy"], buckets=_LATENCY_BUCKETS, registry=r)
        self.upstream_latency = Histogram("agentmem_upstream_latency_seconds",
                                          "Time from clean request to the provider's last byte.",
                                          ["policy"], buckets=_LATENCY_BUCKETS, registry=r)
        self.after_reply = Histogram(
            "agentmem_after_reply_seconds", "Background work after a reply, per phase: "
            "'embeddings' (the new turns' sentence vectors, computed and stored: the ingest), "
            "then each stage's after-reply work by stage name (quarantine's detection, the tools "
            "stage's usage memory).",
            ["phase"], buckets=_LATENCY_BUCKETS, registry=r)

    def observe(self, report: Report) -> None:
        """Count a finished call (ok, partial, error); never raises into the call."""
        try:
            self._observe(report)
        except Exception:  # noqa: BLE001 - bookkeeping must not fail a call
            logging.getLogger("agentmem").exception("metrics failed for report %s", report.id)

    def _observe(self, report: Report) -> None:
        policy = report.policy
        self.calls.labels(policy, report.status).inc()
        self.tokens_in.labels(policy).inc(report.tokens_before)
        self.tokens_out.labels(policy).inc(report.tokens_after)
        self.tools_offered.labels(policy).inc(report.tools_before)
        self.tools_kept.labels(policy).inc(report.tools_after)
        if report.warnings:
            self.faults.labels(policy).inc()
        quarantined: Tally[str] = Tally()
        removals: Tally[tuple[str, str]] = Tally()
        for run in report.stages:  # summed first: a long session's call drops ~2,000 turns
            self.stage_latency.labels(run.stage).observe(run.latency_ms / 1000)
            for decision in run.decisions:
                if decision.action is Action.QUARANTINE:
                    quarantined[str(decision.detail.get("kind", "unknown"))] += 1
                if decision.action in _REMOVALS:
                    removals[run.stage, decision.action] += decision_removals(decision)
        for kind, count in quarantined.items():
            self.quarantined.labels(kind).inc(count)
        for (stage, action), count in removals.items():
            self.removals.labels(stage, action).inc(count)
        if "hygiene" in report.latency_ms:
            self.hygiene_latency.labels(policy).observe(report.latency_ms["hygiene"] / 1000)
        if "upstream" in report.latency_ms:
            self.upstream_latency.labels(policy).observe(report.latency_ms["upstream"] / 1000)
        log_call(report)

    def observe_after_reply(self, phase: str, seconds: float) -> None:
        """One reply's background work of one phase (wall time, queue waits included)."""
        self.after_reply.labels(phase).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def log_call(report: Report) -> None:
    """One line per call; with ``JsonFormatter`` its fields become JSON keys."""
    call_log.info(
        "call %s session=%s status=%s tokens %d->%d tools %d->%d", report.id, report.session_id,
        report.status, report.tokens_before, report.tokens_after, report.tools_before,
        report.tools_after,
        extra={"agentmem": {
            "event": "call", "report_id": report.id, "tenant": report.tenant,
            "session_id": report.session_id, "policy": report.policy, "model": report.model,
            "status": report.status, "tokens_before": report.tokens_before,
            "tokens_after": report.tokens_after, "tools_before": report.tools_before,
            "tools_after": report.tools_after, "latency_ms": report.latency_ms,
            "warnings": report.warnings, "error": report.error,
            "stages": {run.stage: len(run.decisions) for run in report.stages}}})


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the call's fields."""

    def format(self, record: logging.LogRecord) -> str:
        import orjson

        data = {"time": round(record.created, 3), "level": record.levelname.lower(),
                "logger": record.name, "message": record.getMessage()}
        data.update(getattr(record, "agentmem", None) or {})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(data, default=str).decode()


def configure_logging(fmt: str = "text", level: str = "info") -> None:
    """``agentmem serve --log-format json`` sends the engine's logs to stderr as JSON lines."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("agentmem")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def uvicorn_log_config(fmt: str) -> dict[str, Any] | None:
    """uvicorn's own loggers (start-up lines, access log) in the same JSON lines as the
    engine's when ``fmt`` is "json"; None keeps uvicorn's text format."""
    if fmt != "json":
        return None
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"json": {"()": "agentmem.metrics.JsonFormatter"}},
            "handlers": {"json": handler},
            "loggers": {name: {"handlers": ["json"], "propagate": False}
                        for name in ("uvicorn", "uvicorn.error", "uvicorn.access")}}
