"""Models: the sentence embedder, the Provence pruner, the NLI cross-encoder.

Loading is quiet: the hub's "Loading weights" progress bars and transformers' info lines
would otherwise land in a server's logs and in every example's output. ``AGENTMEM_VERBOSE=1``
(``agentmem serve --verbose``) keeps them.
"""

import os
import threading

# One model loads at a time, process-wide: transformers resolves its classes by lazy imports,
# and two threads importing at once (a server's MiniLM warm-up, a call loading the pruner)
# fail with "cannot import name 'AutoTokenizer'". Loads are rare; waiting costs nothing.
LOADING = threading.RLock()

if os.environ.get("AGENTMEM_VERBOSE", "").lower() not in {"1", "true", "yes"}:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
