"""Prometheus metrics and one structured log line per call, both fed by the finished report.

The report already holds everything an operator asks about (tokens in and out, what each stage
removed, how long it took), so metrics are derived from it in one place when a call ends
instead of being counted along the call path. Each engine has its own registry: two engines in
one process (tests, a library user next to the proxy) never share or double-count.

``agentmem serve --workers N`` uses prometheus_client's multiprocess mode instead: the supervisor
gives its workers one fresh directory (``PROMETHEUS_MULTIPROC_DIR``, set before they import
prometheus_client, so each worker's values live in files there) and every worker's ``/metrics``
answers the sum over all workers, exited ones included (``WorkerMetrics``, ``Metrics.share``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from agentmem.report import Action, Report, decision_removals

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own variable
LOG_FORMAT = "AGENTMEM_LOG_FORMAT"  # what ``serve --workers N`` tells its workers
LOG_LEVEL = "AGENTMEM_LOG_LEVEL"
call_log = logging.getLogger("agentmem.calls")
TRACE = 5  # uvicorn's level below debug, which the logging module does not name

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0)
_REMOVALS = {Action.DROP_MESSAGE, Action.PRUNE_SPANS, Action.DROP_TOOL, Action.QUARANTINE}


class Metrics:
    """The counters and histograms of one engine."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.shared_dir: str | None = None  # see ``share``
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

    def watch(self, background_jobs: Callable[[], int | None]) -> None:
        """Also expose, read when scraped, this process' backlog and resources: the engine's
        unfinished after-reply jobs (``background_jobs``; None when the engine is gone), the
        inference queues, the background sentences shed, and prometheus_client's ``process_*``
        metrics (memory, CPU, open files). A backlog that outgrows the CPU shows here first."""
        self.registry.register(_Backlog(background_jobs))
        ProcessCollector(registry=self.registry)

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

    def share(self, path: str) -> None:
        """Expose the sum over all processes writing to prometheus_client's multiprocess
        directory ``path`` (``serve --workers N``) instead of this process' registry alone.
        The metrics here must already be backed by files there: ``PROMETHEUS_MULTIPROC_DIR``
        was set before prometheus_client was imported."""
        self.shared_dir = path

    def exposition(self) -> bytes:
        if self.shared_dir is not None:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=self.shared_dir)
            return generate_latest(registry)
        return generate_latest(self.registry)


class _Backlog:
    """Gauges read at scrape time (a prometheus_client custom collector)."""

    def __init__(self, background_jobs: Callable[[], int | None]) -> None:
        self.background_jobs = background_jobs

    def collect(self) -> Iterator[Metric]:
        from agentmem.models.runtime import scheduler_if_started

        jobs = self.background_jobs()
        if jobs is not None:
            yield GaugeMetricFamily(
                "agentmem_background_jobs", "After-reply jobs of this process not finished yet "
                "(running, or waiting for a turn as a backlog's or an adopted job).", value=jobs)
        pools = scheduler_if_started()
        queued = GaugeMetricFamily("agentmem_inference_queued_jobs", "Model jobs waiting for "
                                   "an inference worker, per pool (call_path, background).",
                                   labels=["pool"])
        shed = CounterMetricFamily("agentmem_background_shed_sentences", "Background sentences "
                                   "not embedded because the bounded queue was full "
                                   "(recomputed on demand later).")
        queued.add_metric(["call_path"], pools.call_path.queue.jobs if pools else 0)
        queued.add_metric(["background"], pools.background.queue.jobs if pools else 0)
        shed.add_metric([], pools.shed if pools else 0)
        yield queued
        yield shed


class WorkerMetrics:
    """The supervisor's side of ``serve --workers N``'s metrics: a fresh private directory per
    run for the workers' files (``PROMETHEUS_MULTIPROC_DIR``, inherited by the processes started
    after this), exited workers marked dead in it, and the directory removed at the end.

    An exited worker's counters and histograms stay in the sums (a restarted worker does not
    reset the server's counters); ``mark_process_dead`` drops what must not outlive a process
    (live gauges, should one be added with a ``live*`` multiprocess_mode)."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="agentmem-metrics-")  # mode 0700
        os.environ[MULTIPROCESS_DIR] = self.path
        self._workers: set[int] = set()

    def workers_now(self, pids: Iterable[int | None]) -> None:
        """The supervisor's current worker processes; those no longer among them are dead."""
        now = {pid for pid in pids if pid is not None}
        for pid in self._workers - now:
            mark_process_dead(pid, self.path)
        self._workers = now

    def close(self) -> None:
        self.workers_now(())
        if os.environ.get(MULTIPROCESS_DIR) == self.path:
            del os.environ[MULTIPROCESS_DIR]
        shutil.rmtree(self.path, ignore_errors=True)


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
    """``agentmem serve --log-format json`` sends the engine's logs to stderr as JSON lines
    (in each worker of ``serve --workers N`` too: see ``configure_worker_logging``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("agentmem")
    root.handlers[:] = [handler]
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric if isinstance(numeric, int) else TRACE)  # uvicorn's "trace" is 5
    root.propagate = False


def pass_logging_to_workers(fmt: str, level: str) -> None:
    """``serve --workers N``: the workers started after this configure the engine's logs as
    the supervisor did (``configure_worker_logging``)."""
    os.environ[LOG_FORMAT] = fmt
    os.environ[LOG_LEVEL] = level


def configure_worker_logging() -> None:
    """A worker's logs as its supervisor configured its own; nothing when it set nothing."""
    fmt, level = os.environ.get(LOG_FORMAT), os.environ.get(LOG_LEVEL)
    if fmt or level:
        configure_logging(fmt or "text", level or "info")


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
