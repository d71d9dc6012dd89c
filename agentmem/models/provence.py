"""The Provence pruner: a cross-encoder that reranks a passage and keeps or drops each sentence.

Architecture (../shared/reference/provence.md): a backbone over
``[CLS] query [SEP] s0 s1 ... [SEP]``, a rerank head on CLS (``pooler`` -> ``classifier``, one
logit) and a token keep/drop head (``token_classifier``, two logits). Module names match the
official checkpoints, so ``naver/provence-reranker-debertav3-v1`` loads from its folder into
the same state-dict keys without ``trust_remote_code``. The same heads sit on a BERT/MiniLM
backbone for agentmem's own small checkpoint (``backbone_prefix = "bert"``) or on XLM-R.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from agentmem.models.keep_rule import CONFIG_KEYS, SentenceRule

__all__ = ["BACKBONES", "ProvenceModel", "SentenceRule", "load_model"]

# model_type in config.json -> (attribute holding the backbone, transformers class name)
BACKBONES = {
    "Provence": ("deberta", "DebertaV2Model", "DebertaV2Config"),
    "deberta-v2": ("deberta", "DebertaV2Model", "DebertaV2Config"),
    "bert": ("bert", "BertModel", "BertConfig"),
    "xlm-roberta": ("roberta", "XLMRobertaModel", "XLMRobertaConfig"),
    "XProvence": ("roberta", "XLMRobertaModel", "XLMRobertaConfig"),
}


class ContextPooler(nn.Module):
    """CLS state -> dropout -> dense -> gelu (DeBERTa's ContextPooler, same parameter names)."""

    def __init__(self, hidden_size: int, pooler_size: int, dropout: float = 0.0):
        super().__init__()
        self.dense = nn.Linear(hidden_size, pooler_size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.dense(self.dropout(hidden[:, 0])))


class ProvenceModel(nn.Module):
    """Backbone + rerank head + token head; ``forward`` returns (rank logits [B], token logits [B,T,2]).

    Two rerank-head layouts exist. Provence (and agentmem's checkpoints): a top-level
    ``pooler`` (dense + gelu on CLS) and ``classifier`` with one logit. XProvence (naver/bergen's
    ``XLMRobertaForCompressionAndRanking``): the backbone's own pooler (``roberta.pooler.dense``,
    tanh) and ``classifier`` with ``num_labels`` logits, the first being the score.
    ``backbone_pooler`` and ``rank_outputs`` select the second; ``load_model`` reads them off
    the checkpoint's weights, so both load by name without ``trust_remote_code``.
    """

    def __init__(self, config, backbone_prefix: str | None = None, backbone: nn.Module | None = None,
                 *, backbone_pooler: bool = False, rank_outputs: int = 1):
        super().__init__()
        import transformers

        model_type = getattr(config, "agentmem_model_type", None) or config.model_type
        prefix, class_name, _ = BACKBONES[model_type]
        self.backbone_prefix = backbone_prefix or prefix
        if backbone is None:
            backbone_class = getattr(transformers, class_name)
            kwargs = {} if class_name == "DebertaV2Model" else {"add_pooling_layer": backbone_pooler}
            backbone = backbone_class(config, **kwargs)
        setattr(self, self.backbone_prefix, backbone)
        hidden = config.hidden_size
        pooled = getattr(config, "pooler_hidden_size", None) or hidden
        self.pooler: ContextPooler | None = None
        if not backbone_pooler:
            self.pooler = ContextPooler(hidden, pooled, getattr(config, "pooler_dropout", 0.0) or 0.0)
        else:
            pooled = hidden
        self.dropout = nn.Dropout(getattr(config, "hidden_dropout_prob", 0.1))
        self.classifier = nn.Linear(pooled, rank_outputs)
        self.token_dropout = nn.Dropout(getattr(config, "hidden_dropout_prob", 0.1))
        self.token_classifier = nn.Linear(hidden, 2)
        self.config = config

    @property
    def backbone(self) -> nn.Module:
        return getattr(self, self.backbone_prefix)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        outputs = self.backbone(input_ids=input_ids, attention_mask=attention_mask)
        hidden = outputs[0]
        pooled = outputs.pooler_output if self.pooler is None else self.pooler(hidden)
        ranking = self.classifier(self.dropout(pooled))[:, 0]
        tokens = self.token_classifier(self.token_dropout(hidden))
        return ranking, tokens


def head_layout(config, state: dict[str, torch.Tensor]) -> tuple[bool, int]:
    """(backbone_pooler, rank_outputs): the rerank-head layout a checkpoint's weights
    describe (see ``ProvenceModel``)."""
    model_type = getattr(config, "agentmem_model_type", None) or config.model_type
    prefix = BACKBONES[model_type][0]
    backbone_pooler = f"{prefix}.pooler.dense.weight" in state and "pooler.dense.weight" not in state
    classifier = state.get("classifier.weight")
    return backbone_pooler, int(classifier.shape[0]) if classifier is not None else 1


def load_config(folder: Path):
    """config.json as a transformers config of the backbone's class (no remote code)."""
    import transformers

    data = json.loads((folder / "config.json").read_text())
    model_type = data.get("agentmem_model_type") or data.get("model_type")
    if model_type not in BACKBONES:
        raise ValueError(f"{folder}: unsupported model_type {model_type!r}; "
                         f"supported: {sorted(BACKBONES)}")
    config_class = getattr(transformers, BACKBONES[model_type][2])
    extra = {k: data[k] for k in ("agentmem_model_type", *CONFIG_KEYS.values()) if k in data}
    clean = {k: v for k, v in data.items() if k not in {"auto_map", "architectures", "model_type"}}
    config = config_class(**clean)
    for key, value in extra.items():
        setattr(config, key, value)
    if not hasattr(config, "agentmem_model_type"):
        config.agentmem_model_type = model_type
    return config


def resolve_folder(name_or_path: str | os.PathLike, *, allow_network: bool | None = None) -> Path:
    """A local folder as is; a hub name only when the user allows the network."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if allow_network is None:
        allow_network = os.environ.get("AGENTMEM_ALLOW_NETWORK") == "1"
    if not allow_network:
        raise FileNotFoundError(
            f"{name_or_path!r} is not a local folder. agentmem loads models from disk only; to "
            "download a hub model by name, set AGENTMEM_ALLOW_NETWORK=1 (or allow_network=True).")
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(name_or_path)))


def load_state(folder: Path) -> dict[str, torch.Tensor]:
    safetensors_file = folder / "model.safetensors"
    if safetensors_file.exists():
        from safetensors.torch import load_file

        return load_file(str(safetensors_file))
    return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)


def load_model(name_or_path: str | os.PathLike, *, allow_network: bool | None = None):
    """(model in eval mode, tokenizer, config) from a checkpoint folder in any supported layout."""
    from transformers import AutoTokenizer

    folder = resolve_folder(name_or_path, allow_network=allow_network)
    config = load_config(folder)
    state = load_state(folder)
    backbone_pooler, rank_outputs = head_layout(config, state)
    model = ProvenceModel(config, backbone_pooler=backbone_pooler, rank_outputs=rank_outputs)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing:
        raise ValueError(f"{folder}: checkpoint lacks {len(missing)} weights, e.g. {missing[:3]}")
    unexpected = [k for k in unexpected if not k.endswith("position_ids")]
    if unexpected:
        raise ValueError(f"{folder}: checkpoint has unknown weights, e.g. {unexpected[:3]}")
    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return model.eval(), tokenizer, config
