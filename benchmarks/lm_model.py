"""A nanoGPT-style causal language model (Karpathy's nanoGPT model.py, trimmed), shared by
benchmarks/lm_step.py, benchmarks/lm_parity.py and tests/parity/lm_parity_test.py.

Token + learned position embedding, pre-LN blocks (LayerNorm -> causal self-attention ->
residual, LayerNorm -> Linear 4C -> GELU (erf) -> Linear -> residual), final LayerNorm and a
bias-free lm_head, with biases in every Linear and LayerNorm as GPT-2 has them; no dropout.
The lm_head is untied by default (its own [V, C] weight); tied=True shares the token
embedding's weight as GPT-2 does. Attention is F.scaled_dot_product_attention(is_causal=True)
where the PyTorch has it (2.x), else explicit masking (softmax of masked_fill(-inf) scores), so
that the same module also runs on Debian's PyTorch 1.13. Initialisation is nanoGPT's: normal
0.02 for Linear and Embedding weights, 0.02 / sqrt(2 * layers) for the residual projections,
zero biases.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, sdpa):
        super().__init__()
        self.n_head, self.n_embd, self.sdpa = n_head, n_embd, sdpa
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        if not sdpa:
            self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size,
                                                                                          block_size),
                                 persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, sdpa):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, sdpa)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, tied=False, sdpa=None):
        super().__init__()
        sdpa = HAVE_SDPA if sdpa is None else sdpa
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size, sdpa) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        if tied:
            self.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        T = idx.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # [B, T, V] scores


def export_onnx(model, path, seq_len, opset=None):
    """Writes `model` (in train(): no dropout or BatchNorm, so it only names the mode) as ONNX
    with a dynamic batch: the dynamo exporter with optimize=False on PyTorch 2.x (every
    parameter keeps its module's name), the legacy one on 1.x. Input 'idx' [N, T] int64,
    output 'logits' [N, T, V]."""
    import warnings
    model = model.train()
    x = torch.zeros(2, seq_len, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if int(torch.__version__.split(".")[0]) >= 2:
            torch.onnx.export(model, (x,), path, input_names=["idx"], output_names=["logits"],
                              dynamic_shapes=({0: torch.export.Dim("batch")},), optimize=False,
                              opset_version=opset or 23, dynamo=True)
        else:
            torch.onnx.export(model, x, path, input_names=["idx"], output_names=["logits"],
                              dynamic_axes={"idx": {0: "N"}, "logits": {0: "N"}}, opset_version=opset or 17,
                              training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
