"""Settings of the quarantine stage and its detectors (the policy's ``quarantine`` section)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


# Tools that read the open web. Not "*search*": a support bot's help-centre search or an
# order search states the operator's own facts, and distrusting them withheld true answers the
# bot repeated ("gift cards never expire", from the company's faq_search: audit 11, Stop 72).
UNTRUSTED_TOOLS = (
    "web_*", "untrusted_*", "search", "*web_search*", "*websearch*", "*search_web*", "*internet*",
    "*google*", "*bing*", "*tavily*", "*duckduckgo*", "*brave*", "*serp*", "*exa_search*",
    "*perplexity*", "*wikipedia*", "*scrape*", "*browse*", "*browser*", "*crawl*", "*fetch_url*",
    "*fetch_page*", "*fetch_web*",
)


class QuarantineSettings(BaseModel):
    """The quarantine stage: context clash and context poisoning (see agentmem/quarantine/)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clash: bool = Field(True, description="Detect statements that contradict earlier ones.")
    poison: bool = Field(True, description="Detect recurring unsupported claims.")
    clash_tools: bool = Field(
        False, description="Also look for clashes between results of one tool (off: a tool's "
        "results differ because its calls differ; people and the assistant are always checked).")
    supersede_repeated_calls: bool = Field(
        True, description="A tool call answered again (same tool, same arguments) supersedes "
        "its older answer, which is withheld whole when most of it is in the newer one "
        "(agentmem/quarantine/superseded.py). Needs clash; off under keep_both.")
    respect_cache_marks: bool = Field(
        True, description="An older answer in the prefix a client marked for the provider's "
        "prompt cache (`cache_control`, up to the last marked message) is not superseded: "
        "withholding it would change that prefix each time a call repeats, and the provider "
        "would bill the prompt again as a cache write (agentmem/cache_marks.py). Poison and "
        "clashes are still withheld there.")
    supersede_overlap: float = Field(
        0.5, ge=0, le=1, description="Share of the older answer's characters (its lines, or "
        "its words for a line or two) the newer answer must have for the older to be superseded.")
    resolution: Literal["newer_wins", "trust_wins", "keep_both"] = Field(
        "newer_wins", description="Who loses a clash: the older statement, the less trusted "
        "source (ties: the older), or nobody (a short note states both).")
    nli_model: str | None = Field(
        None, description="NLI checkpoint folder, a shipped checkpoint's name, or a Hugging "
        "Face cross-encoder name (needs allow_hub); null: the shipped one.")
    allow_hub: bool = Field(False, description="Allow nli_model to name a hub model.")
    nli_screen: str | None = Field(
        "nli-minilm-int8", description="A cheaper NLI model that scores every candidate pair "
        "first; only pairs it scores at nli_screen_threshold or above reach nli_model (a shipped "
        "checkpoint's name or a local folder; null: every pair goes to nli_model).")
    nli_screen_threshold: float = Field(
        0.3, ge=0, le=1, description="The screen's P(contradiction) from which a pair goes on "
        "to nli_model.")
    contradiction_threshold: float = Field(
        0.85, ge=0, le=1, description="NLI contradiction probability that makes a clash (chosen "
        "for the shipped model, Stop 66: the fewest clash records on ordinary chats with a "
        "general assistant with the clash dev files' mean F1 kept and DECODE dev at F1 >= 0.50 "
        "under 10% false positives; rule verdicts do not depend on it).")
    nli_both_ways: bool = Field(
        True, description="Chit-chat pairs (no typed fact on either side) must read as a "
        "contradiction both ways: the pair is scored again swapped and the lower P counts. The "
        "small model's false alarms concentrate there (feelings, thanks, encouragement); pairs "
        "about facts keep one reading. Only pairs that reach the decision threshold (or "
        "judge_threshold with a judge) are scored twice.")
    nli_questions: bool = Field(
        True, description="Questions that speak of their asker (first person, six words or "
        "more: \"since we'll be in Denmark, what ...?\") reach the NLI model as the newer "
        "side; off: questions are never NLI candidates.")
    clash_similarity: float = Field(
        0.2, ge=-1, le=1, description="Cosine above which two statements are about the same "
        "subject and worth an NLI check.")
    nli_shared_terms: int = Field(
        1, ge=0, description="Content words (stemmed) a pair must share to reach the NLI model.")
    nli_shared_terms_assistant: int = Field(
        0, ge=0, description="The same for the assistant's own statements. A model restates "
        "itself in other words more than people do, so its pairs need no shared word (DECODE "
        "dev: F1 0.442 -> 0.512 at 3.5% -> 6.8% false positives; the chat sets unchanged).")
    nli_assistant_pairs: Literal["all", "persona"] = Field(
        "persona", description="Which pairs of the assistant's own statements reach the NLI "
        "model in a task session (a system prompt or a tool's result in it): persona, only pairs "
        "that both speak of the assistant itself (\"I have two cats\"); all, every pair, as in "
        "a chat with no system prompt and no tool. A task assistant restates its tools in "
        "other words, which the small model reads as contradicting (the 145 poison sessions: "
        "NLI clash records 39 -> 4, none of the 39 a contradiction; the clash benches unchanged).")
    clash_candidates: int = Field(
        3, ge=1, description="Earlier statements NLI checks per statement, the most similar "
        "first. 6 -> 3 halved the NLI pairs of a chat session grown a turn at a time (LoCoMo "
        "text: 18 -> 10 a reply) at the same F1 (DECODE dev 0.512 -> 0.511 with 6.8% -> 6.1% "
        "false positives; the chat dev sets unchanged); 2 lost DECODE recall (0.484).")
    nli_pairs_per_reply: int = Field(
        96, ge=0, description="NLI pairs one reply's background check may score, the newest "
        "statements' first (~4 ms a pair on one core). A client that sends a long history "
        "the proxy never saw gets the rules on all of it and NLI on its newest statements: "
        "300 imported turns took 27 s of NLI after the reply, unbounded.")
    call_path_similarity: float = Field(
        0.5, ge=-1, le=1, description="The call-path check of the newest user message only "
        "looks at earlier user statements this similar (the background looks wider).")
    call_path_candidates: int = Field(
        0, ge=0, description="NLI pairs the call path may spend on the newest user message "
        "(0: rules only on the call path; the NLI backstop runs after the reply).")
    judge_model: str | None = Field(
        None, description="A litellm model string (or a configured route) asked, after the reply, "
        "about clash candidates the rules left and NLI scored above judge_threshold; null: no judge.")
    judge_threshold: float = Field(
        0.3, ge=0, le=1, description="NLI contradiction probability above which a candidate goes "
        "to the judge (the judge's verdict then replaces NLI's).")
    judge_budget: int = Field(
        50, ge=0, description="Most pairs one session may send to the judge (cached verdicts are free).")
    untrusted_tools: list[str] = Field(
        default_factory=lambda: list(UNTRUSTED_TOOLS),
        description="Glob patterns of tool names whose results are untrusted (case-insensitive). "
        "The default names the web: search engines, browsers, scrapers; an operator's own "
        "searches (faq_search, kb_search, search_orders) are trusted like its other tools.")
    min_occurrences: int = Field(
        3, ge=2, description="Occurrences of an unsupported claim that make it poison.")
    recurrence_similarity: float = Field(
        0.5, ge=-1, le=1, description="Cosine above which two claims are the same claim.")
    poison_window_turns: int = Field(
        200, ge=2, description="Recent turns the call path searches for new poison (records "
        "found earlier keep applying).")
    support_similarity: float = Field(
        0.7, ge=-1, le=1, description="Cosine above which a trusted statement supports a claim.")
    poison_open_domain: bool = Field(
        False, description="Also judge a general assistant's recurring claims. In a chat with no "
        "tool and a system prompt that gives a role but no facts (no number but dates and "
        "times: \"You are a friendly travel assistant.\"), or no system prompt in a chat that "
        "does not read as people talking (no date-stamped sittings, nobody named), nothing in "
        "the session could support what the assistant knows, and its answers recur with the "
        "topic the user asks about; off, its statements there are not poison candidates. A tool "
        "brings the check back; so does a prompt with facts, for the replies that speak of "
        "those facts, of the business's terms (a price, a fee, a refund, a policy) or of the "
        "organisation (\"our\"), not for the advice, formulas or plans the assistant gives "
        "on request (Stop 72). On: judged as everywhere else, which also withholds most of a "
        "general assistant's recurring answers (README, Benchmarks: Stop 65).")


