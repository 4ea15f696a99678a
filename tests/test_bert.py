"""Chapter 12: BERT matched to transformers.BertModel, MLM masking, parameter counts."""

import dataclasses

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


# --- gaps found by mutation testing (mutmut) -----------------------------------------

WIDE = dataclasses.replace(
    SMALL, vocab_size=400, hidden_size=64, num_hidden_layers=1, intermediate_size=256
)


def test_initialisation_is_berts():
    """BERT's initialisation (Devlin et al.'s code; transformers' ``initializer_range``):
    every matrix and embedding N(0, 0.02), every bias 0, layer norms at gain 1, bias 0;
    the MLM head's transform likewise and its output bias 0."""
    std = transformers.BertConfig().initializer_range
    torch.manual_seed(0)
    model = bert.MaskedLM(WIDE)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert torch.equal(p, torch.zeros_like(p)), name
        elif "norm" in name:
            assert torch.equal(p, torch.ones_like(p)), name
        else:  # n draws: the sample std is off by about std / sqrt(2 n); allow 6 of those
            n = p.numel()
            assert abs(p.std().item() - std) < 6 * std / (2 * n) ** 0.5, (name, p.std().item())
            assert abs(p.mean().item()) < 6 * std / n**0.5, name


def test_input_of_exactly_the_maximum_length_is_read():
    model = bert.BertEncoder(SMALL).eval()
    ids = torch.randint(60, (2, SMALL.max_position_embeddings))
    h, pooled = model(ids)
    assert h.shape == (2, 24, 32) and pooled.shape == (2, 32)


def test_dropout_acts_in_training_only():
    """Dropout on the embeddings (12.3) and in the classifier, in train mode only."""
    cfg = dataclasses.replace(SMALL, dropout=0.5)
    torch.manual_seed(0)
    model = bert.BertEncoder(cfg)
    ids = torch.randint(60, (4, 20))
    x = model.embed(ids)  # train mode: about half the entries zeroed, the rest doubled
    zeros = (x == 0).float().mean().item()
    assert 0.4 < zeros < 0.6, zeros
    model.eval()
    clean = model.embed(ids)
    assert (clean == 0).sum() == 0
    kept = x != 0
    torch.testing.assert_close(x[kept], 2 * clean[kept])
    clf = bert.Classifier(model, 3, dropout=0.5)
    clf.eval()
    with torch.no_grad():
        ref = clf(ids)
        clf.train()
        model.eval()  # only the classifier's own dropout is on
        assert not torch.allclose(clf(ids), ref)


def test_classifier_matches_bert_for_sequence_classification():
    torch.manual_seed(0)
    hf = transformers.BertForSequenceClassification(_hf_config_labels(SMALL, 3)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.05 * torch.randn_like(p))
    clf = bert.Classifier(bert.BertEncoder(SMALL), 3)
    bert.load_hf_bert(
        clf.encoder, {k: v for k, v in hf.state_dict().items() if "classifier" not in k}
    )
    with torch.no_grad():
        clf.out.weight.copy_(hf.classifier.weight)
        clf.out.bias.copy_(hf.classifier.bias)
    clf.eval()
    ids = torch.randint(60, (3, 11))
    types = (torch.arange(11) >= 5).long().expand(3, 11)
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[2, 7:] = 0
    with torch.no_grad():
        ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
        torch.testing.assert_close(clf(ids, types, mask), ref, atol=1e-5, rtol=0)
    # the default dropout is BERT's fine-tuning dropout
    assert clf.dropout.p == transformers.BertConfig().hidden_dropout_prob


def _hf_config_labels(cfg, n):
    c = hf_config(cfg)
    c.num_labels = n
    return c


def test_mean_pool_of_one_token_and_of_no_token():
    h = torch.randn(3, 4, 5)
    mask = torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0], [0, 1, 1, 0]])
    pooled = bert.mean_pool(h, mask)
    torch.testing.assert_close(pooled[0], h[0, 0])  # one real token: itself
    torch.testing.assert_close(pooled[1], torch.zeros(5))  # all padding: zeros, not NaN
    torch.testing.assert_close(pooled[2], h[2, 1:3].mean(0))


def test_mask_tokens_extreme_probabilities():
    ids = torch.arange(40).reshape(4, 10)
    special = (0, 1)
    inputs, labels = bert.mask_tokens(ids, vocab_size=40, mask_id=1, special_ids=special, prob=0.0)
    assert torch.equal(inputs, ids) and (labels == -100).all()
    inputs, labels = bert.mask_tokens(ids, vocab_size=40, mask_id=1, special_ids=special, prob=1.0)
    eligible = ~torch.isin(ids, torch.tensor(special))
    assert torch.equal(labels[eligible], ids[eligible])  # every ordinary token selected
    assert (labels[~eligible] == -100).all()
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"prob must be in \[0, 1\]"):
            bert.mask_tokens(ids, vocab_size=40, mask_id=1, prob=bad)


def test_mask_tokens_random_ids_are_drawn_from_the_vocabulary():
    g = torch.Generator().manual_seed(0)
    ids = torch.full((200_000,), 7)
    inputs, labels = bert.mask_tokens(ids, vocab_size=5, mask_id=3, generator=g)
    swapped = inputs[(labels != -100) & (inputs != 3)]
    counts = torch.bincount(swapped, minlength=8)
    # stays (10%) are 7; random ids (10%) are uniform over 0..4: 3 also from a draw
    assert counts[5:7].sum() == 0 and counts[[0, 1, 2, 4]].min() > 0
    assert abs(counts[7] / counts.sum() - 0.1 / (0.1 + 0.1 * 4 / 5)) < 0.02


def test_mask_tokens_keeps_the_device():
    """On the meta device (no data), every tensor made inside must follow ``ids``."""
    import torch.fx.experimental._config as fx_config

    ids = torch.zeros(2, 5, dtype=torch.long, device="meta")
    with fx_config.patch(meta_nonzero_assume_all_nonzero=True):  # boolean indexing on meta
        inputs, labels = bert.mask_tokens(ids, vocab_size=10, mask_id=3, special_ids=(0,))
    assert inputs.device.type == labels.device.type == "meta"


def test_encoder_keeps_the_device(monkeypatch):
    """On the meta device the positions are made there too (meta accepts a CPU index, a
    GPU would not: so the positions' device is recorded)."""
    made = []
    real = torch.arange

    def arange(*a, **k):
        out = real(*a, **k)
        made.append(out.device.type)
        return out

    model = bert.BertEncoder(SMALL).to("meta")
    monkeypatch.setattr(torch, "arange", arange)
    h, pooled = model(torch.zeros(2, 5, dtype=torch.long, device="meta"))
    assert h.device.type == pooled.device.type == "meta"
    assert made and set(made) == {"meta"}


def test_linear_probe_standardises_each_feature_and_keeps_the_dtype():
    """Standardised with the training mean and std of each feature, the probe cannot tell
    features rescaled by 1e-3 .. 1e3 and shifted from the originals (a global mean or
    std, or no standardisation of small features, drops the accuracy to 0.35 - 0.9)."""
    g = torch.Generator().manual_seed(0)
    centres = 1.5 * torch.randn(3, 8, generator=g)
    y = torch.randint(3, (600,), generator=g)
    x = centres[y] + torch.randn(600, 8, generator=g)
    moved = x * torch.logspace(-3, 3, 8) + 50.0

    def probe(features):
        torch.manual_seed(0)
        return bert.linear_probe(features[:400], y[:400], features[400:], y[400:])

    base = probe(x)
    assert base > 0.9
    assert abs(probe(moved) - base) <= 1 / 200  # one test point of 200, at most (rounding)
    assert abs(probe(moved.double()) - base) <= 1 / 200  # float64 features: a float64 probe


def test_linear_probe_defaults(monkeypatch):
    """300 full-batch AdamW steps, learning rate 0.01, weight decay 0.01 (the defaults)."""
    made, steps = [], []

    class Recording(torch.optim.AdamW):
        def __init__(self, params, lr, **kw):
            made.append((lr, kw))
            super().__init__(params, lr, **kw)

        def step(self, closure=None):
            steps.append(1)
            return super().step(closure)

    monkeypatch.setattr(torch.optim, "AdamW", Recording)
    x, y = torch.randn(20, 3), torch.arange(20) % 2
    bert.linear_probe(x, y, x, y)
    assert made == [(0.01, {"weight_decay": 0.01})] and len(steps) == 300
    bert.linear_probe(x, y, x, y, steps=7, lr=0.5, weight_decay=0.0)
    assert made[1] == (0.5, {"weight_decay": 0.0}) and len(steps) == 307
    with pytest.raises(ValueError, match="test_x must be"):
        bert.linear_probe(x, y, x, y[:5])


def test_mask_tokens_thresholds(monkeypatch):
    """Selected iff the first draw u < prob; then [MASK] iff the second draw r < 0.8, a
    random id iff 0.8 <= r < 0.9, kept iff r >= 0.9 (draws fixed at the boundaries)."""
    f32 = torch.float32
    u = torch.tensor([0.15, 0.1, 0.1, 0.1, 0.1, 0.0, 0.9], dtype=f32)
    r = torch.tensor([0.0, 0.8, 0.9, 0.7999, 0.8999, 0.95, 0.0], dtype=f32)
    draws = iter([u, r])
    monkeypatch.setattr(torch, "rand", lambda *a, **k: next(draws))
    ids = torch.tensor([10, 11, 12, 13, 14, 15, 16])
    inputs, labels = bert.mask_tokens(ids, vocab_size=5, mask_id=99, prob=0.15)
    # u == 0.15 is not below prob: not selected; the last has u = 0.9: not selected
    assert labels.tolist() == [-100, 11, 12, 13, 14, 15, -100]
    assert inputs[[0, 6]].tolist() == [10, 16]
    assert inputs[1] < 5 and inputs[4] < 5  # 0.8 <= r < 0.9: a random id
    assert inputs[[2, 5]].tolist() == [12, 15]  # r >= 0.9: kept
    assert inputs[3] == 99  # r < 0.8: [MASK]


def test_mask_tokens_uses_only_its_generator():
    """The same generator state gives the same masking whatever the global seed."""
    ids = torch.randint(4, 100, (50, 40), generator=torch.Generator().manual_seed(1))
    outs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        g = torch.Generator().manual_seed(7)
        outs.append(bert.mask_tokens(ids, vocab_size=100, mask_id=3, generator=g))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert not torch.equal(outs[0][0], ids)


def test_mlm_head_with_every_weight_perturbed():
    """As test_mlm_head_is_tied_and_matches, with no zero bias or unit gain left."""
    torch.manual_seed(1)
    hf = transformers.BertForMaskedLM(hf_config(SMALL)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(0.1 * torch.randn_like(p))
    ours = bert.MaskedLM(SMALL).eval()
    sd = hf.state_dict()
    bert.load_hf_bert(
        ours.encoder,
        {k: v for k, v in sd.items() if "cls." not in k}
        | {
            "bert.pooler.dense.weight": torch.zeros(32, 32),
            "bert.pooler.dense.bias": torch.zeros(32),
        },
    )
    with torch.no_grad():
        ours.transform.weight.copy_(sd["cls.predictions.transform.dense.weight"])
        ours.transform.bias.copy_(sd["cls.predictions.transform.dense.bias"])
        ours.norm.weight.copy_(sd["cls.predictions.transform.LayerNorm.weight"])
        ours.norm.bias.copy_(sd["cls.predictions.transform.LayerNorm.bias"])
        ours.bias.copy_(sd["cls.predictions.bias"])
        assert ours.bias.abs().min() > 0
        ids = torch.randint(60, (2, 10))
        types = (torch.arange(10) >= 4).long().expand(2, 10)
        mask = torch.ones(2, 10, dtype=torch.long)
        mask[1, 6:] = 0
        ref = hf(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
        got = ours(ids, types, mask)
        torch.testing.assert_close(got[mask.bool()], ref[mask.bool()], atol=1e-5, rtol=0)


def test_mask_tokens_special_ids_beyond_the_dtype():
    """Ids stored in a small integer dtype (int32, int16) keep it, random ids included (they
    were int64, which indexing into the ids refused); a special id that dtype cannot
    hold matches nothing (it used to be cast to the ids' dtype, which overflowed)."""
    ids = torch.arange(10, dtype=torch.int16)
    inputs, labels = bert.mask_tokens(
        ids, vocab_size=10, mask_id=3, special_ids=(0, 40_000), prob=1.0
    )
    assert labels.dtype == inputs.dtype == torch.int16
    assert labels[0] == -100 and (labels[1:] == ids[1:]).all()
    big = torch.arange(4, 1000, dtype=torch.int32).repeat(20)
    inputs, _ = bert.mask_tokens(big, vocab_size=1000, mask_id=3, prob=1.0)
    assert inputs.dtype == torch.int32 and ((inputs != 3) & (inputs != big)).any()


def test_mask_tokens_draws_on_the_device_of_ids(monkeypatch):
    """Every tensor mask_tokens makes (the draws, the set of special ids) is made on
    ``ids``' device, here meta; on a GPU a CPU tensor there would fail or be slow."""
    import torch.fx.experimental._config as fx_config

    made = []
    for name in ("rand", "randint", "tensor"):
        real = getattr(torch, name)

        def wrapped(*a, _real=real, **k):
            out = _real(*a, **k)
            made.append(out.device.type)
            return out

        monkeypatch.setattr(torch, name, wrapped)
    ids = torch.zeros(2, 5, dtype=torch.long, device="meta")
    with fx_config.patch(meta_nonzero_assume_all_nonzero=True):  # boolean indexing on meta
        bert.mask_tokens(ids, vocab_size=10, mask_id=3, special_ids=(0,))
    assert made == ["meta"] * 4  # u, the special ids, r, the random ids


def test_mlm_loss_reads_out_the_selected_positions_only():
    """The [V, D] read-out runs on the selected positions only (the docstring's cost claim),
    and a label id that happens to be 100 counts like any other (vocabulary of 128)."""
    cfg = dataclasses.replace(SMALL, vocab_size=128)
    torch.manual_seed(0)
    model = bert.MaskedLM(cfg).eval()
    ids = torch.randint(128, (2, 6))
    labels = torch.full_like(ids, -100)
    labels[0, 1], labels[1, 4], labels[1, 5] = 100, 7, 100
    shapes = []
    head = model.head
    model.head = lambda h: (shapes.append(tuple(h.shape)), head(h))[1]
    with torch.no_grad():
        loss = bert.mlm_loss(model, (ids, labels))
        model.head = head
        logits = model(ids)
    assert shapes == [(3, 32)]
    picked = [(0, 1), (1, 4), (1, 5)]
    ref = torch.stack(
        [torch.nn.functional.cross_entropy(logits[b, t], labels[b, t]) for b, t in picked]
    )
    torch.testing.assert_close(loss, ref.mean())


def test_linear_probe_trains_one_linear_layer_on_the_features_device(monkeypatch):
    """The layer is D -> C (C = largest label + 1) on the features' device and dtype: on
    meta (no data) the accuracy cannot be read, but the parameters handed to AdamW say
    where and what the layer is."""
    given = []

    class Recording(torch.optim.AdamW):
        def __init__(self, params, lr, **kw):
            params = list(params)
            given.extend((tuple(p.shape), p.device.type, p.dtype) for p in params)
            super().__init__(params, lr, **kw)

    monkeypatch.setattr(torch.optim, "AdamW", Recording)
    x = torch.zeros(12, 5, dtype=torch.float64, device="meta")
    y = torch.tensor([0, 1, 3] * 4)  # the labels stay on the CPU: their max is read
    with pytest.raises(RuntimeError, match="meta"):  # .item() on meta: no data to read
        bert.linear_probe(x, y, x, y, steps=1)
    w, b = ("meta", torch.float64), ("meta", torch.float64)
    assert given == [((4, 5), *w), ((4,), *b)]
    with pytest.raises(ValueError, match=r"^linear_probe: train_x must be \[N, D\] with train_y"):
        bert.linear_probe(torch.zeros(4, 2), torch.zeros(3), torch.zeros(4, 2), torch.zeros(4))


def test_last_block_at_positions_equals_the_full_block():
    """``positions``: the last block's output at those positions only is the full
    encoder's there, with padding too; so are the gradients of a loss read there."""
    torch.manual_seed(0)
    model = bert.BertEncoder(SMALL)
    ids = torch.randint(4, 60, (3, 10))
    pad = torch.ones(3, 10, dtype=torch.bool)
    pad[1, 6:] = False
    positions = torch.tensor([[0, 4, 9], [2, 3, 5], [1, 1, 8]])
    full, pooled = model(ids, attention_mask=pad)
    part, pooled_part = model(ids, attention_mask=pad, positions=positions)
    torch.testing.assert_close(part, full[torch.arange(3)[:, None], positions])
    params = [p for n, p in model.named_parameters() if not n.startswith("pooler.")]
    g_full = torch.autograd.grad(full[torch.arange(3)[:, None], positions].square().sum(), params)
    g_part = torch.autograd.grad(part.square().sum(), params)
    for a, b in zip(g_full, g_part, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    cls_only, pooled_cls = model(ids, attention_mask=pad, positions=torch.zeros(3, 1).long())
    torch.testing.assert_close(pooled_cls, pooled)
    torch.testing.assert_close(cls_only[:, 0], full[:, 0])


def test_mlm_loss_and_gradients_equal_the_full_computation():
    """The loss at the selected positions, the last block run there only, equals the loss of
    every position's logits with the others ignored; so do its gradients (rows with no
    selected position and rows with many included)."""
    torch.manual_seed(1)
    model = bert.MaskedLM(SMALL)
    ids = torch.randint(4, 60, (5, 12))
    labels = torch.full_like(ids, -100)
    sel = torch.rand(5, 12) < 0.3
    sel[2] = False
    sel[3, :9] = True
    labels[sel] = ids[sel]
    params = [p for n, p in model.named_parameters() if not n.startswith("encoder.pooler.")]
    loss = bert.mlm_loss(model, (ids, labels))
    g = torch.autograd.grad(loss, params)
    full = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), labels.flatten())
    g_full = torch.autograd.grad(full, params)
    torch.testing.assert_close(loss, full)
    for a, b in zip(g, g_full, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_last_block_at_a_boolean_selection_with_padding():
    torch.manual_seed(2)
    model = bert.BertEncoder(SMALL)
    ids = torch.randint(4, 60, (3, 9))
    pad = torch.ones(3, 9, dtype=torch.bool)
    pad[2, 5:] = False
    sel = torch.rand(3, 9) < 0.4
    sel[0, 0] = True
    full, _ = model(ids, attention_mask=pad)
    part, pooled = model(ids, attention_mask=pad, positions=sel)
    assert pooled is None
    torch.testing.assert_close(part, full[sel])


def test_last_block_rows_drop_attention_weights_in_training_only(monkeypatch):
    """The last block's attention at the read rows (_attend_rows) passes the attention's
    dropout rate to the fused kernel in train mode, and 0 in eval mode."""
    seen = []
    real = bert.F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(kwargs.get("dropout_p"))
        return real(*args, **kwargs)

    monkeypatch.setattr(bert.F, "scaled_dot_product_attention", spy)
    model = bert.BertEncoder(dataclasses.replace(SMALL, dropout=0.25))
    ids = torch.randint(4, 60, (2, 7))
    sel = torch.zeros(2, 7, dtype=torch.bool)
    sel[:, 3] = True
    model.train()
    model(ids, positions=sel)
    model.eval()
    model(ids, positions=sel)
    # per call: block 1 (MultiHeadAttention's fused path), then block 2 at the rows
    assert seen == [0.25, 0.25, 0.0, 0.0], "_attend_rows: dropout_p must follow the mode"


def test_classifier_runs_the_last_block_at_cls_only(monkeypatch):
    """Classifier reads [CLS] only, so it asks the encoder for position 0 alone ([B, 1]
    zeros): the same pooled vector as the full last block, without the other rows."""
    seen = []
    real = bert.BertEncoder.forward

    def spy(self, *args, positions=None, **kwargs):
        seen.append(positions)
        return real(self, *args, positions=positions, **kwargs)

    monkeypatch.setattr(bert.BertEncoder, "forward", spy)
    torch.manual_seed(0)
    clf = bert.Classifier(bert.BertEncoder(SMALL), 3).eval()
    ids = torch.randint(4, 60, (2, 7))
    with torch.no_grad():
        logits = clf(ids)
        _, pooled = clf.encoder(ids)
    assert seen[0] is not None and torch.equal(seen[0], torch.zeros(2, 1, dtype=ids.dtype))
    torch.testing.assert_close(logits, clf.out(pooled))
