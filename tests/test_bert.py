"""Chapter 12: BERT matched to transformers.BertModel, MLM masking, parameter counts."""

import pytest
import torch
import transformers

from course_lib import bert

SMALL = bert.BertConfig(
    vocab_size=60,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=24,
    type_vocab_size=2,
    dropout=0.0,
)


def hf_config(cfg, cls=transformers.BertConfig):
    return cls(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size,
        layer_norm_eps=cfg.layer_norm_eps,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    )


def test_encoder_matches_bert_model():
    torch.manual_seed(0)
    hf = transformers.BertModel(hf_config(SMALL)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ours = bert.load_hf_bert(bert.BertEncoder(SMALL), hf.state_dict()).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(60, (3, 20), generator=g)
    types = (torch.arange(20) >= 9).long().expand(3, 20)
    mask = torch.ones(3, 20, dtype=torch.long)
    mask[1, 15:] = 0  # padding
    with torch.no_grad():
        out = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
        h, pooled = ours(ids, types, mask)
    real = mask.bool()
    diff = (h - out.last_hidden_state)[real].abs().max()
    assert diff < 1e-5, diff
    assert (pooled - out.pooler_output).abs().max() < 1e-5
    with torch.no_grad():  # segments matter: changing them changes the output
        h2, _ = ours(ids, torch.zeros_like(types), mask)
    assert (h2 - h).abs().max() > 1e-3


def test_mlm_head_is_tied_and_matches():
    torch.manual_seed(0)
    hf = transformers.BertForMaskedLM(hf_config(SMALL)).eval()
    ours = bert.MaskedLM(SMALL).eval()
    bert.load_hf_bert(
        ours.encoder,
        {k: v for k, v in hf.state_dict().items() if "cls." not in k}
        | {
            "bert.pooler.dense.weight": torch.zeros(32, 32),
            "bert.pooler.dense.bias": torch.zeros(32),
        },
    )
    sd = hf.state_dict()
    with torch.no_grad():
        ours.transform.weight.copy_(sd["cls.predictions.transform.dense.weight"])
        ours.transform.bias.copy_(sd["cls.predictions.transform.dense.bias"])
        ours.norm.weight.copy_(sd["cls.predictions.transform.LayerNorm.weight"])
        ours.norm.bias.copy_(sd["cls.predictions.transform.LayerNorm.bias"])
        ours.bias.copy_(sd["cls.predictions.bias"])
        ids = torch.randint(60, (2, 10))
        assert torch.allclose(ours(ids), hf(input_ids=ids).logits, atol=1e-5)
    # tied: the read-out has no matrix of its own
    n_head = sum(p.numel() for n, p in ours.named_parameters() if not n.startswith("encoder."))
    assert n_head == 32 * 32 + 32 + 2 * 32 + 60
    vocab_by_width = [n for n, p in ours.named_parameters() if p.shape == (60, 32)]
    assert vocab_by_width == ["encoder.tok.weight"]  # a copy would be a second [V, D] matrix
    # ... and the head reads the embedding's Parameter itself, E in (12.3): autograd finds
    # it in the head's graph (it raises for a tensor the graph does not use, such as a
    # copy), and d sum(E g + b) / dE puts sum_t g_t in every row
    h = torch.randn(2, 3, 32)
    (grad,) = torch.autograd.grad(ours.head(h).sum(), ours.encoder.tok.weight)
    with torch.no_grad():
        g = ours.norm(torch.nn.functional.gelu(ours.transform(h)))
    assert torch.allclose(grad, g.sum((0, 1)).expand(60, 32), atol=1e-5)


def test_masking_statistics():
    g = torch.Generator().manual_seed(0)
    n, vocab, mask_id, special = 1_000_000, 1000, 3, (0, 1, 2, 3)
    ids = torch.randint(4, vocab, (n,), generator=g)
    ids[::100] = 1  # some special tokens, never selected
    inputs, labels = bert.mask_tokens(
        ids, vocab_size=vocab, mask_id=mask_id, special_ids=special, generator=g
    )
    sel = labels != -100
    eligible = ~torch.isin(ids, torch.tensor(special))
    assert not sel[~eligible].any()
    assert torch.equal(labels[sel], ids[sel])
    assert torch.equal(inputs[~sel], ids[~sel])
    frac = sel.sum().item() / eligible.sum().item()
    assert abs(frac - 0.15) < 0.002, frac
    k = sel.sum().item()
    masked = (inputs[sel] == mask_id).sum().item() / k
    same = (inputs[sel] == ids[sel]).sum().item() / k
    random = 1 - masked - same
    assert abs(masked - 0.8) < 0.005, masked
    assert abs(same - 0.1) < 0.005 + 1 / vocab, same  # a random draw may hit the same id
    assert abs(random - 0.1) < 0.005 + 1 / vocab, random


def count_meta(factory):
    with torch.device("meta"):
        return sum(p.numel() for p in factory().parameters())


@pytest.mark.parametrize(
    "name, cfg, hf, exact, paper",
    [
        (
            "bert-base",
            bert.BERT_BASE,
            lambda: transformers.BertModel(transformers.BertConfig()),
            109_482_240,
            110e6,  # Devlin et al. (2019)
        ),
        (
            "xlm-r large",
            bert.XLMR_LARGE,
            lambda: transformers.XLMRobertaModel(
                transformers.XLMRobertaConfig(
                    vocab_size=250002,
                    hidden_size=1024,
                    num_hidden_layers=24,
                    num_attention_heads=16,
                    intermediate_size=4096,
                    max_position_embeddings=514,
                    type_vocab_size=1,
                )
            ),
            559_890_432,
            550e6,  # Conneau et al. (2020): the released configuration is 1.8% larger
        ),
    ],
)
def test_parameter_counts(name, cfg, hf, exact, paper):
    n = bert.encoder_parameters(cfg)
    assert n == count_meta(hf) == exact
    assert n == count_meta(lambda: bert.BertEncoder(cfg))
    assert abs(n - paper) / paper < 0.02, (name, n)  # the papers round: 110M, 550M


def test_gpt1_count_and_block_equality():
    n = bert.encoder_parameters(bert.GPT1, pooler=False, embedding_norm=False)
    assert n == count_meta(lambda: transformers.OpenAIGPTModel(transformers.OpenAIGPTConfig()))
    assert abs(n - 117e6) / 117e6 < 0.01
    # one encoder block (BERT) and one decoder-only block (GPT-2), same width: same count
    bert_layer = count_meta(
        lambda: transformers.models.bert.modeling_bert.BertLayer(transformers.BertConfig())
    )
    gpt2_block = count_meta(
        lambda: transformers.models.gpt2.modeling_gpt2.GPT2Block(
            transformers.GPT2Config(n_embd=768)
        )
    )
    assert bert_layer == gpt2_block == bert.block_parameters(768, 3072)


def test_mlm_loss_only_at_selected_positions():
    torch.manual_seed(0)
    model = bert.MaskedLM(SMALL).eval()
    ids = torch.randint(4, 60, (4, 12))
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    labels[1, 7] = ids[1, 7]
    with torch.no_grad():
        full = torch.nn.functional.cross_entropy(
            model(ids).flatten(0, 1), labels.flatten(), ignore_index=-100
        )
        assert torch.allclose(bert.mlm_loss(model, (ids, labels)), full, atol=1e-6)


def test_too_long_input_names_the_limit():
    model = bert.BertEncoder(SMALL)
    with pytest.raises(ValueError, match="has 30 tokens but max_position_embeddings=24"):
        model(torch.zeros(1, 30, dtype=torch.long))


def test_mean_pool_ignores_padding():
    h = torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    pooled = bert.mean_pool(h, mask)
    torch.testing.assert_close(pooled[0], h[0, :2].mean(0))
    torch.testing.assert_close(pooled[1], h[1].mean(0))
    with pytest.raises(ValueError, match=r"pass one \[B, T\] mask"):
        bert.mean_pool(h, mask[:, :3])


def test_linear_probe_matches_sklearn_logistic_regression():
    from sklearn.linear_model import LogisticRegression

    g = torch.Generator().manual_seed(0)
    centres = 1.5 * torch.randn(3, 8, generator=g)
    y = torch.randint(3, (600,), generator=g)
    x = centres[y] + torch.randn(600, 8, generator=g)
    torch.manual_seed(0)
    ours = bert.linear_probe(x[:400], y[:400], x[400:], y[400:])
    sk = LogisticRegression(max_iter=1000).fit(x[:400].numpy(), y[:400].numpy())
    theirs = sk.score(x[400:].numpy(), y[400:].numpy())
    assert 0.6 < theirs and abs(ours - theirs) <= 0.02  # 200 test points: 0.02 is 4 of them
    with pytest.raises(ValueError, match=r"mean_pool the hidden states first"):
        bert.linear_probe(torch.randn(4, 2, 3), y[:4], x[:4], y[:4])
