"""`agentmem bench KIND --data FILE [--policy P] [--json OUT]` and `agentmem bench overhead`."""

from __future__ import annotations

from pathlib import Path

import typer

from agentmem.bench.formats import READERS, BenchDataError
from agentmem.bench.results import emit

bench_app = typer.Typer(help="Benchmarks (formats: ../shared/bench/FORMATS.md).",
                        no_args_is_help=True, rich_markup_mode=None)


def _kind_command(kind: str):
    def command(data: Path = typer.Option(..., exists=True, dir_okay=False, help="Benchmark file."),
                policy: str = typer.Option("default", help="Policy preset or YAML path."),
                json_out: Path | None = typer.Option(None, "--json", help="Write the result here."),
                checkpoint: str | None = typer.Option(None, help="Pruner checkpoint folder (prune)."),
                dev: Path | None = typer.Option(None, help="Dev file for baseline thresholds (prune)."),
                floor: float | None = typer.Option(None, min=0, max=1, help="Share of each passage's "
                                                   "tokens always kept (prune; default: the "
                                                   "checkpoint's calibrated floor)."),
                limit: int | None = typer.Option(None, help="Evaluate at most N questions (history)."),
                compare: str = typer.Option("", help="Further policies run on the same sessions, "
                                            "comma-separated (history)."),
                scaling: bool = typer.Option(True, help="Add latency by conversation length "
                                             "(history)."),
                captions: bool = typer.Option(True, help="Render a shared photo's caption in its "
                                              "turn, as LoCoMo's own evaluation does (history)."),
                names: bool = typer.Option(True, help="Send each turn's speaker as its message's "
                                           "name (OpenAI's participant field), as LoCoMo's own "
                                           "retrieval evaluation names each turn's speaker "
                                           "(history)."),
                answers: Path | None = typer.Option(
                    None, exists=True, dir_okay=False, help="Raw SQuAD JSON of the prune file's "
                    "questions (prune): adds token-level compression's savings and answers kept.")):
        try:
            records = READERS[kind](data)
        except BenchDataError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(2) from None
        runner = _runner(kind, checkpoint=checkpoint, dev=dev, limit=limit, answers=answers,
                         floor=floor, scaling=scaling, captions=captions, names=names,
                         compare=tuple(p.strip() for p in compare.split(",") if p.strip()))
        emit(f"bench {kind}", runner(records, policy=policy), json_out)

    command.__doc__ = f"Run the {kind} benchmark on a file in its FORMATS.md format."
    return command


def _runner(kind: str, **options):
    """The runner of a benchmark kind (every kind of FORMATS.md has one)."""
    if kind == "prune":
        from agentmem.bench.prune import run_prune

        return lambda records, policy: run_prune(records, checkpoint=options.get("checkpoint"),
                                                 dev_file=options.get("dev"),
                                                 answers_file=options.get("answers"),
                                                 floor=options.get("floor"))
    if kind == "history":
        from agentmem.bench.history import run_history

        return lambda samples, policy: run_history(samples, policy=policy, limit=options.get("limit"),
                                                   compare=options.get("compare", ()),
                                                   scaling=options.get("scaling", True),
                                                   captions=options.get("captions", True),
                                                   names=options.get("names", True))
    if kind == "tools":
        from agentmem.bench.tools import run_tools

        return lambda records, policy: run_tools(records, policy=policy)
    if kind == "clash":
        from agentmem.bench.clash import run_clash

        return lambda records, policy: run_clash(records, policy=policy)
    if kind == "poison":
        from agentmem.bench.poison import run_poison

        return lambda records, policy: run_poison(records, policy=policy)
    raise ValueError(f"no runner for {kind!r}")


for _kind in READERS:
    if _kind != "tools":  # tools has its own command below (--warm)
        bench_app.command(_kind)(_kind_command(_kind))


@bench_app.command("tools")
def tools(data: Path = typer.Option(..., exists=True, dir_okay=False, help="Benchmark file."),
          policy: str = typer.Option("default", help="Policy preset or YAML path."),
          json_out: Path | None = typer.Option(None, "--json", help="Write the result here."),
          warm: Path | None = typer.Option(None, exists=True, dir_okay=False, help="Traffic file "
                                           "(past queries and the tools called) to warm the usage "
                                           "memory with first; the result then has both runs."),
          follow_up: bool = typer.Option(False, "--follow-up", help="Give each record's step a "
                                         "second call (the model called a tool and its result came "
                                         "back) and report whether the second offers the same tools.")):
    """Run the tools benchmark on a file in its FORMATS.md format (with --warm: before and after
    warming the usage memory, learning frozen while measuring)."""
    from agentmem.bench.tools import read_traffic, run_tools

    try:
        records = READERS["tools"](data)
        traffic = read_traffic(warm) if warm is not None else None
    except BenchDataError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    emit("bench tools" + (" (warmed)" if warm else ""),
         run_tools(records, policy=policy, warm=traffic, follow_up=follow_up), json_out)


@bench_app.command("chats")
def chats(data: list[Path] = typer.Option([], exists=True, dir_okay=False, help="Chat file "
                                          "(JSONL: system, messages, contradictions); repeatable."),
          locomo: Path | None = typer.Option(None, exists=True, dir_okay=False, help="A LoCoMo "
                                             "file (the history bench's) read as chats instead."),
          conversations: str = typer.Option("0,1", help="The LoCoMo conversations (--locomo)."),
          turns: int = typer.Option(300, min=2, help="Messages of each LoCoMo conversation."),
          policy: str = typer.Option("default", help="Policy preset or YAML path."),
          json_out: Path | None = typer.Option(None, "--json", help="Write the result here.")):
    """Replay chats with a general assistant through the policy: the written self-contradictions
    its clash records catch, and the false records it makes (sentences of ordinary chats
    withheld); agentmem/bench/chats.py."""
    from agentmem.bench.chats import locomo_chats, read_chats, run_chats

    try:
        if locomo is not None:
            records = locomo_chats(locomo, [int(c) for c in conversations.split(",")], turns)
        elif data:
            records = read_chats(data)
        else:
            raise ValueError("give --data FILE (repeatable) or --locomo FILE")
    except (ValueError, KeyError, IndexError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    emit("bench chats", run_chats(records, policy=policy), json_out)


@bench_app.command("agent-history")
def agent_history(data: Path = typer.Option(..., exists=True, dir_okay=False, help="Prune-format "
                                            "file (passages with per-question sentence labels)."),
                  policy: str = typer.Option("default", help="Policy preset or YAML path."),
                  compare: str = typer.Option("", help="Further policies run on the same "
                                              "sessions, comma-separated."),
                  steps: int = typer.Option(40, min=4, help="Search steps per session."),
                  sessions: int = typer.Option(4, min=1, help="Sessions."),
                  per_session: int = typer.Option(20, min=1, help="Final questions per session."),
                  results: int = typer.Option(3, min=1, help="Passages each search returns."),
                  rerun_every: int = typer.Option(0, min=0, help="After every Nth step, run an "
                                                  "earlier search again (0: never)."),
                  seed: int = typer.Option(0, help="Seed of the sessions' draw."),
                  result_format: str = typer.Option("prose", "--result-format", help="How the "
                                                    "search tool answers: prose (paragraphs) or "
                                                    "json (a search API's results list)."),
                  follow_up: bool = typer.Option(False, "--follow-up", help="Give each final "
                                                 "question's step a second call (a search with "
                                                 "new results): is the history before the step "
                                                 "sent as on the first call?"),
                  back_to_back: bool = typer.Option(False, "--back-to-back", help="With "
                                                    "--follow-up: send the second call as soon "
                                                    "as the first returns, not after its "
                                                    "background work (a tool that answers at "
                                                    "once)."),
                  max_prompt_tokens: int | None = typer.Option(
                      None, "--max-prompt-tokens", min=1, help="Every policy's prompt budget "
                      "(an agent near its model's window: the budget stage drops older turns)."),
                  json_out: Path | None = typer.Option(None, "--json", help="Write the result here.")):
    """Agent sessions built from passages: does the answer in an older tool output reach the
    model (agentmem/bench/agent_history.py)?"""
    from agentmem.bench.agent_history import run_agent_history

    if result_format not in ("prose", "json"):
        typer.echo(f"error: --result-format must be prose or json, not {result_format!r}", err=True)
        raise typer.Exit(2)
    if back_to_back and not follow_up:
        typer.echo("error: --back-to-back times the second call: it needs --follow-up", err=True)
        raise typer.Exit(2)
    try:
        records = READERS["prune"](data)
    except BenchDataError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    emit("bench agent-history", run_agent_history(
        records, policy=policy, compare=tuple(p.strip() for p in compare.split(",") if p.strip()),
        steps=steps, sessions=sessions, per_session=per_session, results=results,
        rerun_every=rerun_every, seed=seed,
        result_format="json" if result_format == "json" else "prose", follow_up=follow_up,
        back_to_back=back_to_back, max_prompt_tokens=max_prompt_tokens), json_out)


@bench_app.command("code-reads")
def code_reads(folder: Path | None = typer.Option(None, exists=True, file_okay=False, help="Folder "
                                                  "of Python files (default: the installed "
                                                  "agentmem package)."),
               policy: str = typer.Option("default", help="Policy preset or YAML path."),
               files: int = typer.Option(60, min=1, help="Files read (one session each)."),
               older: int = typer.Option(0, min=0, help="Exchanges between the read and the "
                                         "question (2 or more: the read is older history)."),
               edit: bool = typer.Option(False, "--edit", help="The agent edits the function and "
                                         "reads the file again before the question."),
               seed: int = typer.Option(0, help="Seed of the files' and functions' draw."),
               json_out: Path | None = typer.Option(None, "--json", help="Write the result here.")):
    """A coding agent reads a file and asks about one of its functions: does the function reach
    the model whole (agentmem/bench/code_reads.py)?"""
    import agentmem
    from agentmem.bench.code_reads import run_code_reads

    folder = folder or Path(agentmem.__file__).parent
    emit("bench code-reads", run_code_reads(folder, policy=policy, files=files, older=older,
                                            edit=edit, seed=seed), json_out)


@bench_app.command("doc-reads")
def doc_reads(folder: Path = typer.Option(..., exists=True, file_okay=False, help="Folder of "
                                          "prose files (READMEs, design notes, changelogs)."),
              pattern: str = typer.Option("**/*.md", "--glob", help="Files to read, under the folder."),
              policy: str = typer.Option("default", help="Policy preset or YAML path."),
              files: int = typer.Option(60, min=1, help="Files read (one session each)."),
              older: int = typer.Option(0, min=0, help="Exchanges between the read and the question."),
              read_only: bool = typer.Option(False, "--read-only", help="Offer read_file alone "
                                             "(an agent that cannot edit files)."),
              seed: int = typer.Option(0, help="Seed of the files' and paragraphs' draw."),
              json_out: Path | None = typer.Option(None, "--json", help="Write the result here.")):
    """An agent reads a prose file and is asked to rewrite one paragraph: does the paragraph
    reach the model whole (agentmem/bench/doc_reads.py)?"""
    from agentmem.bench.doc_reads import run_doc_reads

    emit("bench doc-reads", run_doc_reads(folder, pattern=pattern, policy=policy, files=files,
                                          older=older, read_only=read_only, seed=seed), json_out)


@bench_app.command("text-kinds")
def text_kinds(patterns: list[str] = typer.Argument(..., help="Glob patterns ('**' recurses)."),
               expect: str = typer.Option(..., help="The kind these files are: machine or prose."),
               limit: int = typer.Option(600, min=1, help="Files read at most."),
               seed: int = typer.Option(0, help="Seed of the files' draw."),
               json_out: Path | None = typer.Option(None, "--json", help="Write the result here.")):
    """Is each file called what it is, machine text or prose (agentmem/bench/text_kinds.py)?"""
    from agentmem.bench.text_kinds import run_text_kinds

    if expect not in ("machine", "prose"):
        raise typer.BadParameter("machine or prose", param_hint="--expect")
    emit("bench text-kinds", run_text_kinds(patterns, "machine" if expect == "machine" else "prose",
                                            limit=limit, seed=seed), json_out)


@bench_app.command("tools-cv")
def tools_cv(data: Path = typer.Option(..., exists=True, dir_okay=False, help="Benchmark file: "
                                       "its tool list, and its queries, which are never used."),
             warm: Path = typer.Option(..., exists=True, dir_okay=False, help="Traffic file "
                                       "(past queries and the tools called), split into folds."),
             policy: str = typer.Option("default", help="Policy preset or YAML path."),
             folds: int = typer.Option(5, min=2, help="Folds."),
             seed: int = typer.Option(0, help="Seed of the fold split and of --hide's draw."),
             hide: float = typer.Option(0.0, min=0.0, max=0.95, help="Share of the tools whose "
                                        "history every fold's memory leaves out."),
             json_out: Path | None = typer.Option(None, "--json", help="Write the result here.")):
    """Cross-validate the usage memory on the warm-up traffic alone (choose tools.memory.*
    with this, never with the evaluation file); see agentmem/bench/tools_cv.py."""
    from agentmem.bench.formats import ToolsRecord, read_jsonl
    from agentmem.bench.tools import read_traffic
    from agentmem.bench.tools_cv import cross_validate

    try:
        records = read_jsonl(data, ToolsRecord)
        traffic = read_traffic(warm)
    except BenchDataError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None
    emit("bench tools-cv", cross_validate(records, traffic, policy=policy, folds=folds, seed=seed,
                                          hide=hide), json_out)


@bench_app.command()
def overhead(json_out: Path | None = typer.Option(None, "--json", help="Write the result here."),
             calls: int = typer.Option(200, help="Measured calls per policy."),
             turn_calls: int = typer.Option(30, help="Measured calls per session length."),
             turns: str = typer.Option("10,100,1000", help="Session lengths, comma-separated."),
             policies: str = typer.Option("off,default", help="Presets to compare, comma-separated "
                                          "(the session-length sweep uses the last).")):
    """Proxy overhead over a direct litellm call, per preset, and by session length."""
    from agentmem.bench.overhead import run_overhead

    sizes = tuple(int(t) for t in turns.split(",") if t.strip())
    names = tuple(p.strip() for p in policies.split(",") if p.strip())
    emit("bench overhead (ms)", run_overhead(calls=calls, turn_calls=turn_calls, sizes=sizes,
                                             policies=names), json_out)


@bench_app.command()
def reliability(json_out: Path | None = typer.Option(None, "--json", help="Write the result here."),
                scale: str = typer.Option("small", help="'small' (CI, about two minutes) or "
                                          "'full' (issue 13's sizes: 200 sessions x 20 turns, ...)."),
                scenarios: str = typer.Option("abcdefg", help="Which to run: letters a-g (a "
                                              "concurrent sessions, b one session many clients, c "
                                              "proxy kill -9, d redis kill -9, e upstream faults, "
                                              "f soak, g noisy neighbour)."),
                seed: int = typer.Option(13, help="Seed of the random kill moments and delays.")):
    """The real proxy under load, crashes and upstream faults: calls, errors by kind, acknowledged
    turns lost or duplicated, p50/p99, peak RSS, per scenario."""
    from agentmem.bench.reliability import SCALES, SCENARIOS, run_reliability

    if scale not in SCALES:
        raise typer.BadParameter(f"use one of {sorted(SCALES)}", param_hint="--scale")
    letters = tuple(letter for letter in scenarios if letter.strip(", "))
    unknown = sorted(set(letters) - set(SCENARIOS))
    if unknown or not letters:
        raise typer.BadParameter(f"unknown scenario(s) {unknown}; use letters of "
                                 f"{''.join(SCENARIOS)}", param_hint="--scenarios")
    emit(f"bench reliability ({scale})", run_reliability(scale=scale, scenarios=letters, seed=seed),
         json_out)


@bench_app.command()
def noisy(json_out: Path | None = typer.Option(None, "--json", help="Write the result here."),
          paste_mb: float = typer.Option(1.0, help="Size of session A's paste, in MB."),
          calls: int = typer.Option(30, help="Session B's calls per phase."),
          history_turns: int = typer.Option(30, help="Session B's history."),
          pause: float = typer.Option(0.05, help="Seconds between B's calls."),
          drain: bool = typer.Option(True, help="Wait for A's background work at the end."),
          as_tool: str | None = typer.Option(
              None, help="A's text arrives as this tool's answer to a question (web_fetch: "
              "an untrusted page), not as a user's paste.")):
    """The noisy neighbour in process: one session's hygiene latency alone and while another
    session's large paste is prepared and its after-reply work runs."""
    from agentmem.bench.noisy import run_noisy

    emit("bench noisy", run_noisy(paste_mb, calls, history_turns, pause, drain, as_tool), json_out)


@bench_app.command()
def load(json_out: Path | None = typer.Option(None, "--json", help="Write the result here."),
         concurrency: str = typer.Option("1,8,32", help="Clients at once (comma-separated)."),
         calls: int = typer.Option(300, min=1, help="Calls per concurrency level."),
         workers: str = typer.Option("1,2", help="`agentmem serve --workers` values to compare."),
         policy: str = typer.Option("default", help="The proxy's policy.")):
    """Throughput and latency of the real proxy under concurrent sessions, per worker count,
    next to the same load on the bare upstream; peak RSS of the proxy's processes."""
    from agentmem.bench.load import run_load

    def numbers(text: str, name: str) -> tuple[int, ...]:
        try:
            values = tuple(int(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise typer.BadParameter("use comma-separated whole numbers", param_hint=name) from None
        if not values or min(values) < 1:
            raise typer.BadParameter("use comma-separated numbers >= 1", param_hint=name)
        return values

    emit("bench load", run_load(concurrency=numbers(concurrency, "--concurrency"), calls=calls,
                                workers=numbers(workers, "--workers"), policy=policy), json_out)


@bench_app.command()
def plot(results: list[Path] = typer.Argument(..., exists=True, help="history bench JSON files."),
         out: Path = typer.Option(Path("bench-results/history_recall_vs_tokens.png"), help="PNG to write.")):
    """Plot evidence recall against token fraction from `bench history --json` results."""
    from agentmem.bench.plot import plot_history

    plot_history(results, out)
    typer.echo(f"wrote {out}")
