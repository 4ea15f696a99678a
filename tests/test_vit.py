"""course_lib.vit against Hugging Face's ViTModel, and its teaching forms against each other."""

import pytest
import torch
from transformers import ViTConfig, ViTForImageClassification, ViTModel

from course_lib import vit
from course_lib.config import TransformerConfig

D, LAYERS, HEADS, FF, IMG, P = 16, 2, 2, 32, 8, 2
#: ViT's trunk: pre-norm, GELU, the original code's layer-norm epsilon
CFG = TransformerConfig(
    d_model=D, num_heads=HEADS, num_layers=LAYERS, d_ff=FF, activation="gelu", eps=1e-6
)


def copy_from_hf(model: vit.ViT, hf: ViTModel) -> None:
    """Copy a ViTModel's weights into ``model`` (head left as it is)."""
    s = hf.state_dict()
    with torch.no_grad():
        model.cls_token.copy_(s["embeddings.cls_token"])
        model.pos_embed.copy_(s["embeddings.position_embeddings"])
        model.patch_embed.proj.weight.copy_(s["embeddings.patch_embeddings.projection.weight"])
        model.patch_embed.proj.bias.copy_(s["embeddings.patch_embeddings.projection.bias"])
        for i, block in enumerate(model.blocks):
            p = f"layers.{i}."
            attn = block.self_attn
            attn.in_proj_weight.copy_(
                torch.cat([s[p + f"attention.{n}_proj.weight"] for n in "qkv"])
            )
            attn.in_proj_bias.copy_(torch.cat([s[p + f"attention.{n}_proj.bias"] for n in "qkv"]))
            attn.out_proj.weight.copy_(s[p + "attention.o_proj.weight"])
            attn.out_proj.bias.copy_(s[p + "attention.o_proj.bias"])
            for ours, theirs in (("norm1", "layernorm_before"), ("norm2", "layernorm_after")):
                getattr(block, ours).weight.copy_(s[p + theirs + ".weight"])
                getattr(block, ours).bias.copy_(s[p + theirs + ".bias"])
            block.ff.linear1.weight.copy_(s[p + "mlp.fc1.weight"])
            block.ff.linear1.bias.copy_(s[p + "mlp.fc1.bias"])
            block.ff.linear2.weight.copy_(s[p + "mlp.fc2.weight"])
            block.ff.linear2.bias.copy_(s[p + "mlp.fc2.bias"])
        model.norm.weight.copy_(s["layernorm.weight"])
        model.norm.bias.copy_(s["layernorm.bias"])


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    config = ViTConfig(
        hidden_size=D,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=FF,
        image_size=IMG,
        patch_size=P,
        num_channels=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    hf = ViTModel(config, add_pooling_layer=False).double().eval()
    with torch.no_grad():  # every weight random and large (no zero CLS token, bias or unit
        for param in hf.parameters():  # norm gain), so that every part of a block shows
            param.normal_(std=0.5)
    model = vit.ViT(CFG.replace(eps=config.layer_norm_eps), IMG, P, 10)
    model = model.double().eval()
    copy_from_hf(model, hf)
    return model, hf


def test_logits_match_hugging_face_classifier():
    """The classifier reads the CLS token (position 0), as ViTForImageClassification does:
    logits to 1e-10 in float64 with every weight, the head's included, copied."""
    torch.manual_seed(1)
    config = ViTConfig(
        hidden_size=D, num_hidden_layers=1, num_attention_heads=HEADS, intermediate_size=FF,
        image_size=IMG, patch_size=P, num_channels=1, num_labels=5,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    hf = ViTForImageClassification(config).double().eval()
    with torch.no_grad():
        for param in hf.parameters():
            param.normal_(std=0.5)
    model = vit.ViT(CFG.replace(num_layers=1, eps=config.layer_norm_eps), IMG, P, 5).double()
    copy_from_hf(model, hf.vit)
    with torch.no_grad():
        model.head.weight.copy_(hf.classifier.weight)
        model.head.bias.copy_(hf.classifier.bias)
        images = torch.rand(3, 1, IMG, IMG, dtype=torch.float64)
        torch.testing.assert_close(
            model.eval()(images), hf(pixel_values=images).logits, atol=1e-10, rtol=0
        )


def test_rollout_of_no_layers_is_the_identity_per_image():
    """With no layer, nothing mixes the tokens: R = I for every image, [B, T, T]."""
    rollout = vit.attention_rollout(torch.rand(0, 3, 2, 5, 5))
    assert torch.equal(rollout, torch.eye(5).expand(3, 5, 5)), "attention_rollout: no layers"


def test_image_errors_name_the_function_and_the_channels():
    embed = vit.PatchEmbedding(3, D, P)
    with pytest.raises(
        ValueError, match=r"^PatchEmbedding: images must be \[B, C=3, height, width\]"
    ):
        embed.forward_linear(torch.rand(1, 1, IMG, IMG))
    with pytest.raises(
        ValueError, match=r"^permute_patches: images must be \[B, C, height, width\]"
    ):
        vit.permute_patches(torch.rand(1, IMG, IMG), torch.arange(16), P)


def test_matches_hugging_face(pair):
    """In float64 to 1e-10: a different non-linearity (tanh-approximated GELU differs from
    GELU by up to about 5e-4) or a misplaced layer norm is far outside that tolerance."""
    model, hf = pair
    hf.config._attn_implementation = "sdpa"  # float64 throughout (eager: float32 softmax)
    images = torch.rand(3, 1, IMG, IMG, dtype=torch.float64)
    with torch.no_grad():
        ref = hf(pixel_values=images).last_hidden_state
        ours = model.features(images)
    assert ours.shape == (3, (IMG // P) ** 2 + 1, D) and ours.dtype == torch.float64
    torch.testing.assert_close(ours, ref, atol=1e-10, rtol=0)


def test_attention_weights_match_hugging_face(pair):
    model, hf = pair
    hf.config._attn_implementation = "eager"  # the eager path returns the weights
    images = torch.rand(2, 1, IMG, IMG, dtype=torch.float64)
    with torch.no_grad():
        ref = torch.stack(hf(pixel_values=images, output_attentions=True).attentions)
    hf.config._attn_implementation = "sdpa"
    ours = model.attention_weights(images)
    assert ours.shape == (LAYERS, 2, HEADS, 17, 17)
    # Hugging Face's eager path takes the softmax in float32, even for a float64 model
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=0)


def test_patch_embedding_conv_equals_linear():
    torch.manual_seed(1)
    embed = vit.PatchEmbedding(3, 5, 4)
    images = torch.randn(2, 3, 8, 12)
    out = embed(images)
    assert out.shape == (2, 6, 5)
    torch.testing.assert_close(embed.forward_linear(images), out, atol=1e-5, rtol=0)


def test_patchify_order():
    images = torch.arange(2 * 4 * 4, dtype=torch.float32).reshape(1, 2, 4, 4)
    patches = vit.patchify(images, 2)
    assert patches.shape == (1, 4, 8)
    # second patch (top right): channel 0 rows 0-1, cols 2-3, then channel 1
    assert patches[0, 1].tolist() == [2, 3, 6, 7, 18, 19, 22, 23]


def test_rollout_and_maps(pair):
    model, _ = pair
    weights = model.attention_weights(torch.rand(2, 1, IMG, IMG, dtype=torch.float64))
    rollout = vit.attention_rollout(weights)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 17, dtype=torch.float64))
    # one layer, no residual: rollout is that layer's head average
    one = vit.attention_rollout(weights[:1], residual=0.0)
    torch.testing.assert_close(one, weights[0].mean(1))
    maps = vit.cls_attention_map(weights, IMG // P)
    assert maps.shape == (2, 4, 4)
    torch.testing.assert_close(maps.sum((-1, -2)), torch.ones(2, dtype=torch.float64))
    last = vit.cls_attention_map(weights, IMG // P, rollout=False)
    expected = weights[-1].mean(1)[:, 0, 1:]
    torch.testing.assert_close(last.flatten(1), expected / expected.sum(-1, keepdim=True))


def test_patch_shuffle():
    """permute_patches moves whole patches; with the positions moved alike, a ViT's output
    does not change (the encoder treats the patches as a set), and without, it does."""
    torch.manual_seed(2)
    images = torch.rand(3, 2, 8, 8)
    perm = torch.randperm(16)
    shuffled = vit.permute_patches(images, perm, 2)
    assert torch.equal(vit.patchify(shuffled, 2), vit.patchify(images, 2)[:, perm])
    assert torch.equal(vit.permute_patches(shuffled, perm.argsort(), 2), images)
    model = vit.ViT(CFG, IMG, P, 10).double().eval()
    with torch.no_grad():  # positions large enough to matter
        model.pos_embed.normal_(std=1.0)
    x = torch.rand(3, 1, IMG, IMG, dtype=torch.float64)
    moved = vit.with_permuted_positions(model, perm)
    with torch.no_grad():
        torch.testing.assert_close(
            moved(vit.permute_patches(x, perm, P)), model(x), atol=1e-10, rtol=0
        )
        assert (model(vit.permute_patches(x, perm, P)) - model(x)).abs().max() > 1e-3
        assert torch.equal(moved.pos_embed[0, 0], model.pos_embed[0, 0])  # CLS position stays
        assert torch.equal(moved.pos_embed[0, 1:], model.pos_embed[0, 1:][perm])
        assert moved.pos_embed.data_ptr() != model.pos_embed.data_ptr()  # a copy: model kept
    with pytest.raises(ValueError, match=r"^permute_patches: perm must hold each of 0 .. 15 once"):
        vit.permute_patches(images, torch.zeros(16, dtype=torch.long), 2)
    with pytest.raises(
        ValueError,
        match=r"^with_permuted_positions: perm must be an integer tensor \[N_p=16\], got \[4\]",
    ):
        vit.with_permuted_positions(model, torch.arange(4))


def test_errors():
    model = vit.ViT(CFG.replace(num_layers=1), IMG, P, 10)
    with pytest.raises(ValueError, match=r"images must be \[B, C, 8, 8\]"):
        model(torch.rand(2, 1, 6, 6))
    with pytest.raises(
        ValueError, match=r"^PatchEmbedding: images must be \[B, C=1, height, width\]"
    ):
        model(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        vit.patchify(torch.rand(1, 1, 7, 8), 2)
    with pytest.raises(ValueError, match="multiple of patch_size"):
        vit.ViT(CFG, 10, 3, 10)
    with pytest.raises(ValueError, match="patch_size must be a positive int, got 0"):
        vit.ViT(CFG, 8, 0, 10)
    with pytest.raises(
        ValueError, match=r"patchify: images must be \[B, C, height, width\], got \[8, 8\]"
    ):
        vit.patchify(torch.rand(8, 8), 4)
    with pytest.raises(ValueError, match=r"\[num_layers, B, h, T, T\]"):
        vit.attention_rollout(torch.rand(2, 3, 17, 17))


# --- gaps found by mutation testing (mutmut) -----------------------------------------


def test_patchify_non_square_and_single_pixel_patches():
    """Against an independent loop over the grid, on a non-square image (height != width)."""
    images = torch.randn(2, 3, 4, 6)
    patches = vit.patchify(images, 2)
    expected = torch.stack(
        [images[:, :, r : r + 2, c : c + 2].flatten(1) for r in (0, 2) for c in (0, 2, 4)], 1
    )
    assert torch.equal(patches, expected)
    # P = 1: every pixel its own patch, its C channels its features
    assert torch.equal(vit.patchify(images, 1), images.flatten(2).transpose(1, 2))


def test_input_checks():
    with pytest.raises(
        ValueError, match=r"^patchify: images must be \[B, C, height, width\], got list"
    ):
        vit.patchify([[1.0]], 2)
    with pytest.raises(
        ValueError, match="^patchify: image size 8x7 is not a multiple of the patch size 2"
    ):
        vit.patchify(torch.rand(1, 1, 8, 7), 2)
    for bad in (0, 2.0):
        with pytest.raises(ValueError, match="patchify: patch_size must be a positive int"):
            vit.patchify(torch.rand(1, 1, 4, 4), bad)
    with pytest.raises(ValueError, match="ViT: patch_size must be a positive int, got 2.0"):
        vit.ViT(CFG, 8, 2.0, 10)
    with pytest.raises(ValueError, match="must be positive, got 0, 4, 2"):
        vit.PatchEmbedding(0, 4, 2)
    with pytest.raises(ValueError, match="must be positive, got 1, 4, 0"):
        vit.PatchEmbedding(1, 4, 0)
    with pytest.raises(ValueError, match="must be positive, got 1, 0, 2"):
        vit.PatchEmbedding(1, 0, 2)
    with pytest.raises(TypeError, match=r"^ViT: the first argument is a course_lib.config"):
        vit.ViT({"d_model": 16}, 8, 2, 10)
    with pytest.raises(ValueError, match=r"num_classes \(0\) must be >= 1"):
        vit.ViT(CFG, 8, 2, 0)
    with pytest.raises(ValueError, match=r"images must be \[B, C, 8, 8\], got \[1, 8, 8\]"):
        vit.ViT(CFG, 8, 2, 10)(torch.rand(1, 8, 8))
    with pytest.raises(ValueError, match=r"images must be \[B, C, 8, 8\], got \[1, 1, 8, 6\]"):
        vit.ViT(CFG, 8, 2, 10)(torch.rand(1, 1, 8, 6))
    with pytest.raises(ValueError, match=r"\[num_layers, B, h, T, T\], got \[1, 2, 3, 17, 16\]"):
        vit.attention_rollout(torch.rand(1, 2, 3, 17, 16))
    for bad in (-0.1, 1.1):
        with pytest.raises(ValueError, match=r"residual must be in \[0, 1\]"):
            vit.attention_rollout(torch.rand(1, 2, 3, 5, 5), residual=bad)
    with pytest.raises(ValueError, match=r"T=17, T=17\], got \[1, 2, 3, 10, 10\]"):
        vit.cls_attention_map(torch.rand(1, 2, 3, 10, 10), 4)
    with pytest.raises(ValueError, match=r"got \[1, 2, 3, 17\]"):
        vit.cls_attention_map(torch.rand(1, 2, 3, 17), 4)
    with pytest.raises(
        ValueError, match=r"^permute_patches: perm must be an integer tensor \[N_p=4\], got \[4\]"
    ):
        vit.permute_patches(torch.rand(1, 1, 4, 4), torch.arange(4.0), 2)
    with pytest.raises(ValueError, match=r"perm must be an integer tensor \[N_p=4\], got list"):
        vit.permute_patches(torch.rand(1, 1, 4, 4), [0, 1, 2, 3], 2)
    with pytest.raises(
        TypeError, match="^with_permuted_positions: model must be a ViT, got Linear"
    ):
        vit.with_permuted_positions(torch.nn.Linear(2, 2), torch.arange(4))


def test_smallest_valid_sizes_are_accepted():
    embed = vit.PatchEmbedding(1, 1, 1)
    assert embed(torch.rand(2, 1, 3, 3)).shape == (2, 9, 1)
    model = vit.ViT(CFG, 4, 1, 1).eval()
    assert model(torch.rand(2, 1, 4, 4)).shape == (2, 1)


def test_rollout_chains_the_layers_with_the_residual():
    """Eq. (13.5) written out for two layers: R = A_2' A_1' with A' = r I + (1 - r) mean_h A."""
    torch.manual_seed(3)
    w = torch.rand(2, 3, 4, 5, 5, dtype=torch.float64).softmax(-1)
    eye = torch.eye(5, dtype=torch.float64)
    for r in (0.5, 0.2, 1.0):
        a1 = r * eye + (1 - r) * w[0].mean(1)
        a2 = r * eye + (1 - r) * w[1].mean(1)
        expected = torch.einsum("bij,bjk->bik", a2, a1)
        got = vit.attention_rollout(w) if r == 0.5 else vit.attention_rollout(w, residual=r)
        torch.testing.assert_close(got, expected)
    assert torch.equal(vit.attention_rollout(w, residual=1.0), eye.expand(3, 5, 5))


def test_cls_attention_map_uses_the_rollout_by_default():
    torch.manual_seed(4)
    w = torch.rand(2, 3, 2, 10, 10, dtype=torch.float64).softmax(-1)
    a = 0.5 * torch.eye(10, dtype=torch.float64) + 0.5 * w.mean(2)  # [L, B, T, T]
    cls_row = (a[1] @ a[0])[:, 0, 1:]
    expected = (cls_row / cls_row.sum(-1, keepdim=True)).reshape(3, 3, 3)
    torch.testing.assert_close(vit.cls_attention_map(w, 3), expected)


def test_init_dropout_and_a_permutation_of_a_non_square_image():
    torch.manual_seed(5)
    model = vit.ViT(CFG.replace(dropout=0.5), 8, 2, 10)
    # ViT's initialisation (Dosovitskiy et al.'s code): a zero CLS token, positions N(0, 0.02)
    assert torch.equal(model.cls_token, torch.zeros(1, 1, D))
    n = model.pos_embed.numel()
    assert abs(model.pos_embed.std().item() - 0.02) < 6 * 0.02 / (2 * n) ** 0.5
    # dropout on the embedded tokens z_0 in training: the features change from call to call
    x = torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        model.blocks = torch.nn.ModuleList()  # no block: only the embedding's dropout is left
        z = model.features(x)
        model.eval()
        assert torch.equal(model.features(x), model.features(x))
        assert not torch.allclose(z, model.features(x))
    # a non-square image (4 x 6 patches): patch k of the result is patch perm[k]
    images = torch.rand(2, 3, 8, 12)
    perm = torch.randperm(6)
    shuffled = vit.permute_patches(images, perm, 4)
    assert torch.equal(vit.patchify(shuffled, 4), vit.patchify(images, 4)[:, perm])


def test_rollout_stays_on_the_weights_device():
    """On the meta device (no data): the identity is made there too."""
    weights = torch.rand(2, 1, 2, 5, 5, device="meta")
    assert vit.attention_rollout(weights).device.type == "meta"
    assert vit.cls_attention_map(torch.rand(2, 1, 2, 5, 5, device="meta"), 2).device.type == "meta"


def test_error_messages_name_the_function():
    embed = vit.PatchEmbedding(1, 4, 4)
    with pytest.raises(
        ValueError, match=r"^PatchEmbedding: images must be \[B, C=1, height, width\]"
    ):
        embed.forward_linear(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match=r"^PatchEmbedding: image size 8x6 is not a multiple"):
        embed.forward_linear(torch.rand(2, 1, 8, 6))
    with pytest.raises(
        ValueError, match=r"^permute_patches: images must be \[B, C, height, width\]"
    ):
        vit.permute_patches(torch.rand(4, 4), torch.arange(4), 2)
    with pytest.raises(
        ValueError, match=r"^cls_attention_map: .*T=5, T=5\], got \[1, 2, 3, 4, 5\]"
    ):
        vit.cls_attention_map(torch.rand(1, 2, 3, 4, 5), 2, rollout=False)


def test_cls_attention_map_of_the_last_layer():
    """rollout=False: the CLS row of the last of three layers, averaged over the heads."""
    torch.manual_seed(6)
    w = torch.rand(3, 2, 4, 5, 5, dtype=torch.float64).softmax(-1)
    row = w[2, :, :, 0, 1:].mean(1)  # [B, N_p]: layer 3, heads averaged, CLS row, patches
    expected = (row / row.sum(-1, keepdim=True)).reshape(2, 2, 2)
    torch.testing.assert_close(vit.cls_attention_map(w, 2, rollout=False), expected)


def test_rollout_of_no_layer_is_the_identity():
    """Zero layers: nothing mixes the tokens, each flows from itself only, per image."""
    weights = torch.rand(0, 3, 2, 5, 5)
    torch.testing.assert_close(vit.attention_rollout(weights), torch.eye(5).expand(3, 5, 5))


def test_logits_match_vit_for_image_classification(pair):
    """The class scores read the CLS token, as ViTForImageClassification's classifier does."""
    from transformers import ViTForImageClassification

    model, hf = pair
    config = hf.config.__class__.from_dict(hf.config.to_dict() | {"num_labels": 10})
    clf = ViTForImageClassification(config).double().eval()
    clf.vit.load_state_dict(hf.state_dict())
    with torch.no_grad():
        clf.classifier.weight.copy_(torch.randn_like(clf.classifier.weight))
        clf.classifier.bias.copy_(torch.randn_like(clf.classifier.bias))
        model.head.weight.copy_(clf.classifier.weight)
        model.head.bias.copy_(clf.classifier.bias)
        images = torch.rand(3, 1, IMG, IMG, dtype=torch.float64)
        ref = clf(pixel_values=images).logits
        torch.testing.assert_close(model(images), ref, atol=1e-10, rtol=0)
