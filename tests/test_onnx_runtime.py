"""The ONNX Runtime backend against the torch path, and the light install's import hygiene.

Parity: the same inputs through both runtimes, on the shipped checkpoints. The ONNX files
store float16 weights (the pruner and NLI checkpoints are float16 already; the embedder's
float32 weights are rounded), so the tolerances are float rounding, not quantisation error:
cosine >= 0.999 per embedding (measured 0.9999998), token and NLI probabilities within
2e-3 (measured ~2e-7), the same keep decision for every sentence of the sample.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from agentmem.config import Settings
from agentmem.errors import PolicyError
from agentmem.models import backend
from agentmem.models.export_onnx import ONNX_FILE, RECORD_FILE, sha256_of
from agentmem.models.registry import (
    default_embedder_onnx_path,
    default_nli_path,
    default_nli_screen_path,
    default_pruner_int8_path,
    default_pruner_path,
    pruner_path,
)

ROOT = Path(__file__).resolve().parents[1]

LONG = " ".join(f"Step {i}: the deploy script copied build {i} to host-{i % 7} and restarted "
                "the worker pool, which logged a warning about stale sockets." for i in range(60))

TEXTS = ["The cat sat on the mat.", "Redis keeps the vectors as float16 rows.", "x" * 7000, LONG,
         "Ünïcödé テキスト and an emoji 🎉 in one line", "def f(x):\n    return x + 1", "",
         "Q3 revenue was $4.2M, up 12% year on year.", "ok"]
TEXTS += [f"Sentence {i} about deployment logs, retries and error budgets." for i in range(40)]

PASSAGES = [
    ("what port does the server listen on",
     "The server listens on port 8080. It was deployed on Tuesday. Logs rotate daily. "
     "The weather was nice. Port 9090 serves metrics only."),
    ("who won the 1998 world cup",
     "France hosted the 1998 FIFA World Cup. France beat Brazil 3-0 in the final in Saint-Denis. "
     "Zinedine Zidane scored twice. Tickets sold out in weeks. The mascot was Footix."),
    ("how do I reset my password",
     "Open Settings and choose Account. Click 'Reset password' and follow the e-mail link. "
     "Our office is closed on public holidays. The link expires after one hour."),
    ("which database stores the sessions", LONG + " Sessions are stored in Redis under the "
     "agentmem prefix. Postgres holds billing data only."),
    ("what is the capital of australia",
     "Sydney is the largest city in Australia. Canberra is the capital. Melbourne was the "
     "temporary seat of government until 1927. Kangaroos are marsupials."),
    ("error when installing torch",
     "pip resolved the newest torch with CUDA packages. Pinning torch==2.13.0 takes the CPU "
     "build. The disk filled up at 12 GB. Lunch was at noon."),
]

NLI_PAIRS = [
    ("The meeting is on Monday.", "The meeting is on Friday."),
    ("I live in Paris.", "I live in France."),
    ("He likes tea.", "The sky is blue."),
    ("My budget is 500 dollars.", "My budget is 500 dollars."),
    ("The flight leaves at 9 am.", "The flight was cancelled."),
    ("Alice is vegetarian.", "Alice ordered a steak."),
    ("The API key expired yesterday.", "The API key is still valid."),
    (LONG, "The deploy script never restarted the worker pool."),
    ("She has two children.", LONG),
    ("", "Something."),
] + [(f"The invoice number is {n}.", f"The invoice number is {n + k}.") for n, k in
     [(1042, 0), (1042, 1), (77, 0), (77, 10)]]


def _need_torch() -> None:
    if not backend.torch_available():
        pytest.skip("the torch path is not installed (agentmem-hygiene[torch])")


@pytest.fixture
def runtime_reset():
    yield
    backend.configure(None)


# -- the seam ---------------------------------------------------------------------------------

def test_runtime_choice_order(monkeypatch, runtime_reset):
    monkeypatch.delenv(backend.ENV, raising=False)
    monkeypatch.setattr(backend, "torch_available", lambda: False)
    assert backend.runtime() == "onnx"  # auto without torch
    monkeypatch.setenv(backend.ENV, "onnx")
    assert backend.runtime() == "onnx"
    monkeypatch.setenv(backend.ENV, "torch")
    with pytest.raises(RuntimeError, match="agentmem-hygiene\\[torch\\]"):
        backend.runtime()
    monkeypatch.setattr(backend, "torch_available", lambda: True)
    monkeypatch.setenv(backend.ENV, "auto")
    assert backend.runtime() == "torch"  # auto with torch
    backend.configure("onnx")  # the server's setting wins over the environment
    monkeypatch.setenv(backend.ENV, "torch")
    assert backend.runtime() == "onnx"
    monkeypatch.setenv(backend.ENV, "tensorflow")
    backend.configure(None)
    with pytest.raises(PolicyError, match="auto, torch, onnx"):  # one line from the CLI
        backend.runtime()
    with pytest.raises(PolicyError):
        backend.configure("gpu")


def test_auto_runs_exported_models_on_onnx_and_others_on_torch(tmp_path, monkeypatch,
                                                                runtime_reset):
    """Under auto, the shipped checkpoints (each has its ONNX export) run on ONNX Runtime
    even with torch installed; a folder without model.onnx or a hub name goes to torch."""
    from agentmem.models.registry import default_nli_path, default_pruner_path

    monkeypatch.delenv(backend.ENV, raising=False)
    monkeypatch.setattr(backend, "torch_available", lambda: True)
    for shipped in (None, default_pruner_path(), default_nli_path()):
        assert backend.runtime_for(shipped) == "onnx"
    assert backend.runtime_for(tmp_path) == "torch"  # no export there
    assert backend.runtime_for("someone/hub-model") == "torch"
    backend.configure("torch")  # a named runtime decides for every model with torch weights
    assert backend.runtime_for(None) == "torch"
    assert backend.runtime_for(default_nli_path()) == "torch"
    assert backend.runtime_for(default_nli_screen_path()) == "onnx"  # int8: ONNX is all it is
    backend.configure(None)
    monkeypatch.setattr(backend, "torch_available", lambda: False)
    assert backend.runtime_for(tmp_path) == "onnx"  # nothing else to run it on: a clear error later


def test_settings_name_the_runtime():
    assert Settings().model_runtime == "auto"
    assert Settings(model_runtime="onnx").model_runtime == "onnx"
    with pytest.raises(ValueError):
        Settings(model_runtime="gpu")


def test_settings_choose_the_runtime_for_the_library(tmp_path, monkeypatch, runtime_reset):
    from agentmem.api import Hygiene

    monkeypatch.delenv(backend.ENV, raising=False)
    Hygiene(settings=Settings(data_dir=tmp_path, model_runtime="onnx"))
    assert backend.runtime() == "onnx"
    Hygiene(settings=Settings(data_dir=tmp_path))  # auto leaves a named runtime in place
    assert backend.runtime() == "onnx"


# -- the shipped ONNX files --------------------------------------------------------------------

@pytest.mark.parametrize("folder", [default_embedder_onnx_path(), default_pruner_path(),
                                    default_pruner_int8_path(), default_nli_path(),
                                    default_nli_screen_path()])
def test_shipped_onnx_files_match_their_weights(folder):
    """A checkpoint retrained without ``agentmem export-onnx`` fails here, not in production
    (the int8 screen records the float NLI weights it was made from, in their folder)."""
    from agentmem.models.embedder import WEIGHTS_SHA256

    record = json.loads((Path(folder) / RECORD_FILE).read_text())
    onnx_path = Path(folder) / ONNX_FILE
    assert sha256_of(onnx_path) == record["onnx_sha256"]
    assert onnx_path.stat().st_size <= 50 * 1024 * 1024  # the bound per file
    weights = Path(folder) / record["source"]
    expected = sha256_of(weights) if weights.exists() else WEIGHTS_SHA256
    assert record["source_sha256"] == expected, f"re-run `agentmem export-onnx` for {folder}"


@pytest.mark.parametrize("folder", [default_pruner_path(), default_nli_path()])
def test_checkpoint_onnx_files_read_the_shipped_weights(folder, tmp_path):
    """The pruner's and NLI's graphs hold no weights of their own (the package carries them
    once, in model.safetensors); weights other than the exported ones are refused, since the
    graph reads them at fixed offsets."""
    from agentmem.models.ort import OnnxProvence, onnx_file

    record = json.loads((Path(folder) / RECORD_FILE).read_text())
    assert record["weights_file"] == "model.safetensors" and record["shared_tensors"] >= 40
    assert (Path(folder) / ONNX_FILE).stat().st_size < 2 * 1024 * 1024
    copy = tmp_path / "checkpoint"
    copy.mkdir()
    for name in (ONNX_FILE, RECORD_FILE, "model.safetensors"):
        (copy / name).write_bytes((Path(folder) / name).read_bytes())
    assert onnx_file(copy, verify=True) == copy / ONNX_FILE
    weights = bytearray((copy / "model.safetensors").read_bytes())
    weights[-2:] = b"\x00\x3c"  # one float16 changed
    (copy / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(RuntimeError, match="export-onnx"):
        OnnxProvence(copy)


def test_a_damaged_onnx_file_is_refused(tmp_path):
    from agentmem.models.ort import MissingOnnxModel, onnx_file

    with pytest.raises(MissingOnnxModel, match="export-onnx"):
        onnx_file(tmp_path)
    (tmp_path / ONNX_FILE).write_bytes(b"not a model")
    (tmp_path / RECORD_FILE).write_text(json.dumps({"onnx_sha256": "0" * 64}))
    with pytest.raises(RuntimeError, match="reinstall"):
        onnx_file(tmp_path, verify=True)


# -- parity with the torch path ---------------------------------------------------------------

def test_embedder_parity_with_torch(runtime_reset):
    _need_torch()
    from agentmem.models.embedder import Embedder

    backend.configure("torch")
    torch_vectors = Embedder().encode(TEXTS)
    backend.configure("onnx")
    onnx_embedder = Embedder()
    onnx_vectors = onnx_embedder.encode(TEXTS)
    assert not hasattr(onnx_embedder.load(), "preprocess")  # really the ONNX encoder
    assert onnx_vectors.shape == torch_vectors.shape == (len(TEXTS), 384)
    assert onnx_vectors.dtype == np.float32
    cosine = (torch_vectors * onnx_vectors).sum(axis=1)
    assert cosine.min() >= 0.999, cosine.min()
    np.testing.assert_allclose(np.linalg.norm(onnx_vectors, axis=1), 1.0, atol=1e-4)
    # batch composition (padding) must not change a row
    alone = Embedder(batch_size=1)
    backend.configure("onnx")
    np.testing.assert_allclose(alone.encode(TEXTS[:5]), onnx_vectors[:5], atol=1e-5)


def test_pruner_parity_with_torch():
    _need_torch()
    from agentmem.models.ort import load_pruner
    from agentmem.models.pruner import Pruner

    torch_pruner, onnx_pruner = Pruner.load(default_pruner_path()), load_pruner(default_pruner_path())
    questions = [q for q, _ in PASSAGES]
    contexts = [[c] for _, c in PASSAGES]
    by_torch = torch_pruner.process(questions, contexts, batch_size=4)
    by_onnx = onnx_pruner.process(questions, contexts, batch_size=4)
    decisions = 0
    for qi in range(len(PASSAGES)):
        assert by_onnx["pruned_context"][qi] == by_torch["pruned_context"][qi]
        assert by_onnx["reranking_score"][qi][0] == pytest.approx(by_torch["reranking_score"][qi][0],
                                                                   abs=2e-3)
        for ours, theirs in zip(by_onnx["sentences"][qi][0], by_torch["sentences"][qi][0]):
            assert ours["kept"] == theirs["kept"]
            assert ours["probability"] == pytest.approx(theirs["probability"], abs=2e-3)
            decisions += 1
    assert decisions >= 30
    # token-level: the tokenizer adapter yields the same ids and offsets as transformers'
    sentence = "Zinedine Zidane scored twice in Saint-Denis."
    ours = onnx_pruner.tokenizer(sentence, add_special_tokens=False, return_offsets_mapping=True)
    theirs = torch_pruner.tokenizer(sentence, add_special_tokens=False, return_offsets_mapping=True)
    assert ours["input_ids"] == list(theirs["input_ids"])
    assert ours["offset_mapping"] == [tuple(pair) for pair in theirs["offset_mapping"]]
    assert onnx_pruner.tokenizer.convert_ids_to_tokens(ours["input_ids"]) \
        == torch_pruner.tokenizer.convert_ids_to_tokens(theirs["input_ids"])


def test_the_int8_pruner_reads_each_block_alone_and_close_to_the_float_one():
    """The int8 copy quantises activations per run, so it runs block by block: a passage's
    scores are the same alone and batched with others. Smoothed before quantising, its
    sentence probabilities stay within a few thousandths of the float model's (the copy made
    without smoothing: 0.0094 on these passages) and it makes the same decisions on nearly
    all of them (the model card gives the dev-file F1 of both)."""
    from agentmem.models.ort import load_pruner

    int8, float32 = load_pruner(default_pruner_int8_path()), load_pruner(default_pruner_path())
    assert int8.model.one_block_per_run and not float32.model.one_block_per_run
    record = json.loads((Path(default_pruner_int8_path()) / RECORD_FILE).read_text())
    assert record["smoothing"]["alpha"] > 0 and record["smoothing"]["calibration_blocks"] >= 100
    question, passage = PASSAGES[1]
    alone = int8.score_batch([(question, passage.split(". "))])[0]
    batched = int8.score_batch([(q, p.split(". ")) for q, p in PASSAGES], batch_size=8)[1]
    assert alone.probabilities == batched.probabilities
    questions = [q for q, _ in PASSAGES]
    contexts = [[c] for _, c in PASSAGES]
    by_int8 = int8.process(questions, contexts, batch_size=4)
    by_float = float32.process(questions, contexts, batch_size=4)
    gaps, agree, total = [], 0, 0
    for qi in range(len(PASSAGES)):
        for ours, theirs in zip(by_int8["sentences"][qi][0], by_float["sentences"][qi][0]):
            gaps.append(abs(ours["probability"] - theirs["probability"]))
            agree += ours["kept"] == theirs["kept"]
            total += 1
    assert total >= 30 and agree / total >= 0.95
    # ONNX Runtime's int8 kernels differ by CPU: under 0.006 where the card was measured,
    # 0.0084 on an AVX2 machine without VNNI (AMD EPYC, stop 52); the unsmoothed copy was 0.0094
    # on the former, and a broken copy is off by tenths
    assert float(np.mean(gaps)) < 0.012


def test_smoothing_keeps_the_float_model_and_flattens_what_int8_rounds(tmp_path):
    """``smooth`` moves the input channels' outliers into the weights: the float model's
    outputs do not change, and the largest channel of every quantised product's input is far
    nearer its median (the one scale per tensor of dynamic int8 then rounds the rest finer)."""
    _need_torch()
    import torch

    from agentmem.models.provence import load_model
    from agentmem.models.pruner import Pruner
    from agentmem.models.smoothing import block_inputs, calibration_passages, input_maxima, smooth

    model, tokenizer, config = load_model(default_pruner_path())
    model = model.float().eval()
    reader = Pruner(model, tokenizer, config)
    blocks = [b.input_ids for q, p in PASSAGES for b in reader.blocks(q, p.split(". "))]
    ids = torch.tensor([blocks[0]])
    with torch.inference_mode():
        rank, tokens = model(ids, torch.ones_like(ids))
    maxima = input_maxima(model, block_inputs(blocks))
    smooth(model, maxima)
    with torch.inference_mode():
        rank_after, tokens_after = model(ids, torch.ones_like(ids))
    assert torch.allclose(rank, rank_after, atol=1e-4) and torch.allclose(tokens, tokens_after, atol=1e-4)

    def spread(found):
        return max(float(v.max() / v.median()) for layer in found for v in layer.values())

    assert spread(maxima) > 10 and spread(input_maxima(model, block_inputs(blocks))) < spread(maxima) / 3
    with pytest.raises(ValueError, match="smoothed already"):  # it would scale twice
        smooth(model, maxima)

    # the calibration passages: paragraphs as they are, then runs of one article's paragraphs
    rows = [{"id": f"r{i}", "question": f"q{i}", "title": "A" if i < 7 else "B",
             "sentences": [f"s{i}.", f"t{i}."], "labels": [1, 0]} for i in range(10)]
    source = tmp_path / "train.jsonl"
    source.write_text("".join(json.dumps(row) + "\n" for row in rows + rows[:2]))  # repeats: once
    passages = calibration_passages(source, single=3, joined=5, paragraphs=3)
    assert passages[:3] == [("q0", ["s0.", "t0."]), ("q1", ["s1.", "t1."]), ("q2", ["s2.", "t2."])]
    assert passages[3:] == [("q0", ["s0.", "t0.", "s1.", "t1.", "s2.", "t2."]),
                            ("q3", ["s3.", "t3.", "s4.", "t4.", "s5.", "t5."]),
                            ("q7", ["s7.", "t7.", "s8.", "t8.", "s9.", "t9."])]


def test_the_pruner_reads_mixed_lengths_in_small_passes_and_answers_in_order():
    """The float pruner runs a batch of blocks as several short passes, shortest first
    (``agentmem.models.runs``; a 512-token block alone): each pair's scores are the ones it
    gets alone, in its place."""
    from agentmem.models.ort import load_pruner

    pruner = load_pruner(default_pruner_path())
    assert not pruner.model.one_block_per_run
    long_question, long_passage = PASSAGES[1]
    pairs = [(q, p.split(". ")) for q, p in PASSAGES]
    pairs.insert(1, (long_question, [long_passage] * 24))
    assert len(pruner.blocks(*pairs[1])) > 1  # the long pair spans blocks
    together = pruner.score_batch(pairs, batch_size=8)
    for pair, scores in zip(pairs, together):
        alone = pruner.score_batch([pair])[0]
        assert len(alone.probabilities) == len(pair[1])
        assert np.allclose(scores.probabilities, alone.probabilities, atol=1e-5)
        assert scores.ranking_score == pytest.approx(alone.ranking_score, abs=1e-4)


def test_a_policy_names_the_int8_pruner_by_its_folder_name(monkeypatch, runtime_reset):
    """``prune.checkpoint: pruner-minilm-int8`` is the shipped int8 copy, which runs on ONNX
    Runtime whatever the setting (it has no torch weights); null is the float checkpoint."""
    monkeypatch.delenv(backend.ENV, raising=False)
    assert pruner_path(None) == default_pruner_path()
    assert pruner_path("pruner-minilm-int8") == default_pruner_int8_path()
    assert pruner_path("naver/provence-reranker-debertav3-v1") == \
        "naver/provence-reranker-debertav3-v1"
    backend.configure("torch")
    assert backend.runtime_for(default_pruner_int8_path()) == "onnx"


def test_nli_parity_with_torch():
    _need_torch()
    from agentmem.models.nli import NLIModel
    from agentmem.models.ort import OnnxNLIModel

    by_torch = NLIModel.load(default_nli_path()).predict(NLI_PAIRS, batch_size=4)
    by_onnx = OnnxNLIModel(default_nli_path()).predict(NLI_PAIRS, batch_size=4)
    assert by_onnx.shape == (len(NLI_PAIRS), 3)
    np.testing.assert_allclose(by_onnx, by_torch, atol=2e-3)
    assert (by_onnx.argmax(axis=1) == by_torch.argmax(axis=1)).all()


# -- the light install: nothing heavy is imported ----------------------------------------------

LIGHT_RUN = textwrap.dedent("""
    import importlib.abc, json, sys, tempfile, httpx

    HEAVY = ("torch", "transformers", "sentence_transformers")

    class NotInstalled(importlib.abc.MetaPathFinder):
        '''The light install: these packages are not there.'''
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HEAVY:
                raise ImportError(f"{name} is not installed")

    sys.meta_path.insert(0, NotInstalled())
    from agentmem.models import backend
    assert backend.runtime() == "onnx", backend.runtime()   # auto, nothing configured

    import agentmem.cli  # the command line's imports
    from agentmem.config import Settings
    from agentmem.echo import create_echo_app
    from agentmem.models.nli import cached_nli
    from agentmem.models.pruner import cached_pruner
    from agentmem.models.registry import default_pruner_path
    from agentmem.proxy import create_app
    from tests.servers import ThreadServer

    upstream = ThreadServer(create_echo_app()).start()
    routes = [{"name": "echo", "litellm_params": {"model": "openai/echo",
               "api_base": upstream.url + "/v1", "api_key": "sk-test"}}]
    proxy = ThreadServer(create_app(Settings(data_dir=tempfile.mkdtemp(), models=routes))).start()
    turns = []
    for i in range(6):
        turns += [{"role": "user", "content": f"Note {i}: the staging host is db-{i}. " * 40},
                  {"role": "assistant", "content": f"Noted host db-{i}."}]
    turns.append({"role": "user", "content": "Which host is staging?"})
    reply = httpx.post(proxy.url + "/v1/chat/completions", timeout=120,
                       headers={"X-Agentmem-Session": "light-1"},
                       json={"model": "echo", "messages": turns})
    health = httpx.get(proxy.url + "/healthz").json()
    pruned = cached_pruner(default_pruner_path()).process(
        "which port", "It listens on port 80. The day was nice.")
    probabilities = cached_nli(None).predict([("It is on Monday.", "It is on Friday.")])
    proxy.stop(); upstream.stop()
    print(json.dumps({"status": reply.status_code, "report": reply.headers.get("x-agentmem-report"),
                      "health": health, "kept": [s["kept"] for s in pruned["sentences"]],
                      "nli_rows": len(probabilities),
                      "heavy": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)}))
""")


def test_light_install_serves_without_torch(tmp_path):
    """With torch, transformers and sentence-transformers unimportable (as in ``pip install
    agentmem-hygiene``), the proxy serves a real call through the echo upstream with the
    default policy, the three models load on ONNX Runtime, and none of them is imported."""
    env = {**os.environ, "AGENTMEM_MODEL_RUNTIME": "",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "LITELLM_LOCAL_MODEL_COST_MAP": "True", "AGENTMEM_INFERENCE_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", LIGHT_RUN], cwd=ROOT, env=env, timeout=300,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == 200
    assert result["report"]
    assert result["heavy"] == []
    assert result["kept"] and result["nli_rows"] == 1


def test_the_embedder_batches_shortest_first_and_returns_rows_in_order():
    """Mixed lengths are encoded sorted (less padding) and handed back in the caller's order."""
    from agentmem.models.embedder import default_embedder

    embedder = default_embedder()
    texts = ["A long sentence about the blue kettle that ships to Lyon on Monday morning.",
             "Hi.", "The parcel is at a UPS Access Point near the customer's address.", "Ok"]
    together = embedder.encode(texts)
    alone = np.vstack([embedder.encode([text]) for text in texts])
    assert together.shape == (4, 384) and np.allclose(together, alone, atol=1e-5)


def test_the_prune_speed_bench_times_each_checkpoint_on_the_same_records():
    from agentmem.bench.formats import PruneRecord
    from agentmem.bench.prune_speed import read_times

    records = [PruneRecord(id=f"r{i}", question=q, title=None, sentences=c.split(". "),
                           labels=[0] * len(c.split(". "))) for i, (q, c) in enumerate(PASSAGES[:3])]
    result = read_times(records, ["pruner-minilm", "pruner-minilm-int8"], passes=1)
    assert result["records"] == 3 and result["median_sentences"] == 5
    for name in ("pruner-minilm", "pruner-minilm-int8"):
        timing = result["checkpoints"][name]
        assert 0 < timing["p50_ms"] <= timing["p90_ms"]
    staged = read_times(records, ["pruner-minilm"], passes=1, stage=True)
    assert staged["stage"] and staged["checkpoints"]["pruner-minilm"]["p50_ms"] > 0
