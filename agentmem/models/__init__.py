"""Models: the sentence embedder now; the Provence pruner and NLI join here."""
