"""BERT and MobileBERT for sequence classification (HuggingFace layouts, eval-only).

Inputs are token ids ``[batch, seq]`` (int64); the attention mask is all ones and the token types
are all zero, so neither is an input. Parameter names differ from HuggingFace's but every weight
has the same shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BertConfig:
    """The subset of HuggingFace's ``BertConfig`` / ``MobileBertConfig`` the zoo needs."""

    hidden_size: int = 768
    num_layers: int = 12
    num_heads: int = 12
    intermediate_size: int = 3072
    vocab_size: int = 30522
    max_position: int = 512
    type_vocab_size: int = 2
    num_labels: int = 2
    layer_norm_eps: float = 1e-12
    # MobileBERT only
    embedding_size: int = 128
    bottleneck_size: int = 128
    num_ffn: int = 4


class NoNorm(nn.Module):
    """MobileBERT's replacement for LayerNorm: an elementwise affine ``x * weight + bias``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight + self.bias


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product attention without a mask; returns the context only.

    ``value_in`` lets MobileBERT feed values of a different width than queries / keys.
    """

    def __init__(self, dim: int, num_heads: int, value_in: int | None = None) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(value_in or dim, dim)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        query = self._heads(self.query(q))
        key = self._heads(self.key(k))
        scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(self.head_dim)
        context = torch.matmul(scores.softmax(-1), self._heads(self.value(v)))
        b, _, s, _ = context.shape
        return context.transpose(1, 2).reshape(b, s, self.num_heads * self.head_dim)


class DenseResidualNorm(nn.Module):
    """``norm(dense(x) + residual)`` (HF's ``*Output`` modules; dropout is a no-op in eval)."""

    def __init__(self, in_dim: int, out_dim: int, norm: nn.Module) -> None:
        super().__init__()
        self.dense = nn.Linear(in_dim, out_dim)
        self.norm = norm

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(self.dense(x) + residual)


class FeedForward(nn.Module):
    """``norm(W2 act(W1 x) + x)``."""

    def __init__(self, dim: int, inner: int, act: nn.Module, norm: nn.Module) -> None:
        super().__init__()
        self.intermediate = nn.Sequential(nn.Linear(dim, inner), act)
        self.output = DenseResidualNorm(inner, dim, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.intermediate(x), x)


class BertLayer(nn.Module):
    """Post-LN transformer encoder layer with exact (erf) GELU."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.attention = SelfAttention(h, cfg.num_heads)
        self.attention_output = DenseResidualNorm(h, h, nn.LayerNorm(h, eps=cfg.layer_norm_eps))
        self.ffn = FeedForward(
            h, cfg.intermediate_size, nn.GELU(), nn.LayerNorm(h, eps=cfg.layer_norm_eps)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ffn(self.attention_output(self.attention(x, x, x), x))


class MobileBertLayer(nn.Module):
    """MobileBERT layer: 512 -> 128 bottlenecks, shared key/query bottleneck, 4 FFNs, NoNorm.

    Matches HF ``MobileBertLayer`` with ``use_bottleneck=True``,
    ``key_query_shared_bottleneck=True``, ``use_bottleneck_attention=False`` and ReLU.
    """

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        h, b = cfg.hidden_size, cfg.bottleneck_size
        self.input_bottleneck = nn.Sequential(nn.Linear(h, b), NoNorm(b))
        self.qk_bottleneck = nn.Sequential(nn.Linear(h, b), NoNorm(b))
        self.attention = SelfAttention(b, cfg.num_heads, value_in=h)
        self.attention_output = DenseResidualNorm(b, b, NoNorm(b))
        self.ffns = nn.Sequential(
            *(
                FeedForward(b, cfg.intermediate_size, nn.ReLU(), NoNorm(b))
                for _ in range(cfg.num_ffn)
            )
        )
        self.output_bottleneck = DenseResidualNorm(b, h, NoNorm(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layer_input = self.input_bottleneck(x)
        qk = self.qk_bottleneck(x)
        attn = self.attention_output(self.attention(qk, qk, x), layer_input)
        return self.output_bottleneck(self.ffns(attn), x)


class BertForSequenceClassification(nn.Module):
    """Embeddings -> encoder layers -> [CLS] pooler -> classifier.

    ``mobile=True`` builds MobileBERT: 128-d word embeddings with trigram input projected to the
    hidden size, NoNorm, MobileBERT layers, and no pooler dense (``classifier_activation=False``).
    """

    def __init__(self, cfg: BertConfig, mobile: bool = False) -> None:
        super().__init__()
        self.config = cfg
        self.mobile = mobile
        h = cfg.hidden_size
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.embedding_size if mobile else h)
        self.position_embeddings = nn.Embedding(cfg.max_position, h)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, h)
        self.register_buffer("position_ids", torch.arange(cfg.max_position)[None], persistent=False)
        if mobile:
            self.embedding_transformation: nn.Module = nn.Linear(3 * cfg.embedding_size, h)
            self.embedding_norm: nn.Module = NoNorm(h)
            layer: type[nn.Module] = MobileBertLayer
            self.pooler: nn.Module = nn.Identity()
        else:
            self.embedding_transformation = nn.Identity()
            self.embedding_norm = nn.LayerNorm(h, eps=cfg.layer_norm_eps)
            layer = BertLayer
            self.pooler = nn.Sequential(nn.Linear(h, h), nn.Tanh())
        self.layers = nn.Sequential(*(layer(cfg) for _ in range(cfg.num_layers)))
        self.classifier = nn.Linear(h, cfg.num_labels)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        x = self.word_embeddings(input_ids)
        if self.mobile:  # trigram input: [next token, token, previous token], zero-padded
            x = torch.cat([F.pad(x[:, 1:], (0, 0, 0, 1)), x, F.pad(x[:, :-1], (0, 0, 1, 0))], 2)
        x = self.embedding_transformation(x)
        x = x + self.position_embeddings(self.position_ids[:, :seq_len])
        x = x + self.token_type_embeddings.weight[0]  # token type ids are all zero
        return self.embedding_norm(x)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.layers(self.embed(input_ids))
        return self.classifier(self.pooler(hidden[:, 0]))


def _bert(**kwargs: int) -> BertForSequenceClassification:
    return BertForSequenceClassification(BertConfig(**kwargs))


def bert_base(num_labels: int = 2) -> BertForSequenceClassification:
    """bert-base-uncased: L=12, H=768, A=12."""
    return _bert(num_labels=num_labels)


def bert_medium(num_labels: int = 2) -> BertForSequenceClassification:
    """google/bert_uncased_L-8_H-512_A-8."""
    return _bert(
        hidden_size=512, num_layers=8, num_heads=8, intermediate_size=2048, num_labels=num_labels
    )


def bert_tiny(num_labels: int = 2) -> BertForSequenceClassification:
    """google/bert_uncased_L-2_H-128_A-2."""
    return _bert(
        hidden_size=128, num_layers=2, num_heads=2, intermediate_size=512, num_labels=num_labels
    )


def mobilebert(num_labels: int = 2) -> BertForSequenceClassification:
    """google/mobilebert-uncased: L=24, H=512, bottleneck 128, A=4, intermediate 512, 4 FFNs."""
    cfg = BertConfig(
        hidden_size=512,
        num_layers=24,
        num_heads=4,
        intermediate_size=512,
        num_labels=num_labels,
        embedding_size=128,
        bottleneck_size=128,
        num_ffn=4,
    )
    return BertForSequenceClassification(cfg, mobile=True)
