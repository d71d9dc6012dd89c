"""Context assembly: how kept context is laid out for the model, after pruning chose it.

Pure text functions, one job each (``ordering``: documents of a search result, most relevant
at the edges; ``formatting``: XML-tagged blocks with a note of what was removed;
``compression``: low-value tokens inside kept sentences). The ``assembly`` stage
(``agentmem/stages/assembly.py``) applies them when a policy turns them on.
"""
